package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runAgentCmd(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runAgent(context.Background(), args, func(k string) string { return env[k] }, &out, &errb)
	return code, out.String(), errb.String()
}

func TestAgentCheckPrintsEffectiveConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.hcl"), []byte("default_tier = \"normal\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "impact.hcl")
	if err := os.WriteFile(cfg, []byte("policy = \"policy.hcl\"\nnomad {\n  address = \"http://nomad.example:4646\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runAgentCmd(t, map[string]string{"NOMAD_TOKEN": "secret-token"},
		"-config", cfg, "-check", "-http-listen", "127.0.0.1:9999", "-default-pool", "gpu")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"Configuration is valid",
		"nomad.address              http://nomad.example:4646",
		"impact.hcl:3)",
		"nomad.token                <redacted>",
		"(env NOMAD_TOKEN)",
		"http.listen                127.0.0.1:9999",
		"(flag -http-listen)",
		"default_pool               gpu",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("-check output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "secret-token") {
		t.Error("-check printed the token")
	}
}

func TestAgentConfigErrors(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "bad.hcl")
	if err := os.WriteFile(cfg, []byte("policy = \"p.hcl\"\ncycle {\n  interval = \"often\"\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runAgentCmd(t, nil, "-config", cfg)
	if code != 1 || !strings.Contains(errs, "bad.hcl:3: cycle.interval:") {
		t.Errorf("bad file: exit %d, %q", code, errs)
	}
	code, _, errs = runAgentCmd(t, nil, "-log-level", "loud", "-policy", "p.hcl")
	if code != 1 || !strings.Contains(errs, "flag -log-level: log_level:") {
		t.Errorf("bad flag value: exit %d, %q", code, errs)
	}
	code, _, errs = runAgentCmd(t, nil, "-config", cfg+".missing")
	if code != 1 || !strings.Contains(errs, "reading config") {
		t.Errorf("missing file: exit %d, %q", code, errs)
	}
	code, _, errs = runAgentCmd(t, nil, "-policy", filepath.Join(dir, "nope.hcl"))
	if code != 1 || !strings.Contains(errs, "policy") {
		t.Errorf("missing policy: exit %d, %q", code, errs)
	}
	// Issue 36: a config naming a missing policy file is told with the
	// config's other problems, and names the config file and line.
	two := filepath.Join(dir, "two.hcl")
	if err := os.WriteFile(two, []byte("policy = \"missing-policy.hcl\"\nlog_level = \"loud\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runAgentCmd(t, nil, "-config", two, "-check")
	if code != 1 || !strings.Contains(errs, two+":2: log_level:") ||
		!strings.Contains(errs, two+":1: policy: read policy file: open "+filepath.Join(dir, "missing-policy.hcl")+": no such file or directory") {
		t.Errorf("missing policy and a bad setting: exit %d, %q", code, errs)
	}
	code, out, _ := runAgentCmd(t, nil, "-h")
	if code != 0 || !strings.Contains(out, "Usage: impact agent") || !strings.Contains(out, "NOMAD_ADDR") {
		t.Errorf("-h: exit %d, %q", code, out)
	}
}
