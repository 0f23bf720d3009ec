package main

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/gang"
	"github.com/impact-sched/nomad-impact/internal/authtest"
)

// Flags take their defaults from the task env, and bad usage exits 2
// saying what is missing.
func TestGangJoinFlags(t *testing.T) {
	t.Parallel()
	env := map[string]string{"NOMAD_ALLOC_DIR": "/a/alloc", "IMPACT_RENDEZVOUS_ADDR": "http://10.0.0.9:4680", "IMPACT_NODE_ID": "n-1"}
	var stderr bytes.Buffer
	o, code := parseGangJoinFlags(nil, env, &stderr)
	if code >= 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if o.Out != "/a/alloc/impact/gang.env" || o.Addr != "http://10.0.0.9:4680" || o.NodeID != "n-1" || o.MasterPort != 29500 || o.Identity != "impact" {
		t.Errorf("defaults: %+v", o)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, map[string]string{"NOMAD_ALLOC_DIR": "/a"}, "no rendezvous endpoint"},
		{[]string{"-addr", "http://x:1"}, map[string]string{}, "no -out and no NOMAD_ALLOC_DIR"},
		{[]string{"-addr", "x:1", "-out", "/f"}, nil, "want http(s)://host:port"},
		{[]string{"-addr", "http://x:1", "-out", "/f", "-timeout", "0s"}, nil, "-timeout must be positive"},
		{[]string{"-addr", "http://x:1", "-out", "/f", "extra"}, nil, `unexpected argument "extra"`},
	} {
		stderr.Reset()
		if _, code := parseGangJoinFlags(tc.args, tc.env, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// The binary's subcommand: refused identity exits 1 with the reason on
// stderr; -h exits 0.
func TestGangJoinBinary(t *testing.T) {
	t.Parallel()
	srv := identityServer(t)
	allocDir := t.TempDir()
	env := map[string]string{"NOMAD_NAMESPACE": "ml", "NOMAD_JOB_ID": "train", "NOMAD_ALLOC_ID": "a0",
		"NOMAD_TASK_NAME": "gang", "NOMAD_SECRETS_DIR": filepath.Join(allocDir, "secrets"), "NOMAD_ALLOC_DIR": allocDir}
	cmd := exec.Command(binary, "gang-join", "-addr", srv.URL, "-size", "2")
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "missing workload identity") {
		t.Errorf("gang-join without identity: %v, stderr %q; want exit 1 naming the missing identity", err, stderr.String())
	}
	if out, err := exec.Command(binary, "gang-join", "-h").CombinedOutput(); err != nil || !strings.Contains(string(out), "usage: impact-exec gang-join") {
		t.Errorf("gang-join -h: %v\n%s", err, out)
	}
}

// identityServer is a rendezvous server authenticating members with
// workload identities signed by a fake Nomad, as the impact agent does.
func identityServer(t *testing.T) *gang.Server {
	t.Helper()
	n := authtest.New(t)
	ids, acl := n.Verifiers(t)
	srv, err := gang.StartServerWith("127.0.0.1:0", gang.RegistryConfig{}, gang.ServerOptions{Auth: &gang.NomadAuth{Identities: ids, ACL: acl}}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}
