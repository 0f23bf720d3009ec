package nomad

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// TestRealNomadMinimalACL runs the fidelity scenario on a real dev agent
// with ACLs enabled, through a token holding only the minimal policy
// shipped in example/acl: every step the adapter takes must be allowed.
// Skipped without a nomad binary on PATH.
func TestRealNomadMinimalACL(t *testing.T) {
	bin, err := exec.LookPath("nomad")
	if err != nil {
		t.Skip("no nomad binary on PATH")
	}
	_, file, _, _ := runtime.Caller(0)
	rules, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "example", "acl", "impact-scheduler.policy.hcl"))
	if err != nil {
		t.Skipf("no example ACL policy: %v", err)
	}
	agent := startDevAgentWith(t, bin, agentDir(t), "acl {\n  enabled = true\n}\n")
	admin, err := api.NewClient(&api.Config{Address: agent.addr})
	if err != nil {
		t.Fatal(err)
	}
	boot, _, err := admin.ACLTokens().Bootstrap(nil)
	if err != nil {
		t.Fatalf("acl bootstrap: %v", err)
	}
	admin.SetSecretID(boot.SecretID)
	agent.token = boot.SecretID
	if _, err := admin.ACLPolicies().Upsert(&api.ACLPolicy{Name: "impact-scheduler", Rules: string(rules)}, nil); err != nil {
		t.Fatalf("apply example/acl policy: %v", err)
	}
	tok, _, err := admin.ACLTokens().Create(&api.ACLToken{Name: "impact", Type: "client", Policies: []string{"impact-scheduler"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(Config{Address: agent.addr, Token: tok.SecretID}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	obs, _ := runScenario(t, c)
	want, _ := runScenario(t, fakeClient(t))
	for i := range max(len(obs), len(want)) {
		var got, w string
		if i < len(obs) {
			got = obs[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if got != w {
			t.Errorf("with the minimal ACL token: %s\n  (without ACLs on the fake: %s)", got, w)
		} else {
			t.Logf("with the minimal ACL token: %s", got)
		}
	}
	// Without a token nothing works: the test is not vacuous.
	anon, _ := NewClient(Config{Address: agent.addr}, testLogger(t))
	if _, _, err := anon.api.Jobs().List(nil); err == nil {
		t.Error("anonymous list succeeded: ACLs not enforced")
	}
}
