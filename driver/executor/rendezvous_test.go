package executor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/auth"
	"github.com/impact-sched/nomad-impact/gang"
	"github.com/impact-sched/nomad-impact/internal/authtest"
)

// A member reaches an authenticated rendezvous over mutual TLS with the
// CA and client certificate of its spec, presenting the identity file,
// which it reads again on every request (Nomad renews it).
func TestRendezvousClientTLSAndIdentityFile(t *testing.T) {
	n := authtest.New(t)
	dir := t.TempDir()
	certs := authtest.WriteCerts(t, dir)
	tlsCfg, err := auth.ServerTLS(certs.ServerCert, certs.ServerKey, certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	ids, acl := n.Verifiers(t)
	srv, err := gang.StartServerWith("127.0.0.1:0", gang.RegistryConfig{},
		gang.ServerOptions{Auth: &gang.NomadAuth{Identities: ids, ACL: acl}, TLS: tlsCfg}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	idFile := filepath.Join(dir, "secrets", "nomad_impact.jwt")
	if err := os.MkdirAll(filepath.Dir(idFile), 0o700); err != nil {
		t.Fatal(err)
	}
	writeID := func(exp time.Time) {
		tok := n.Sign(t, authtest.Claims{Namespace: "ml", JobID: "train", AllocID: "a", Task: "t", Audience: []string{"impact"}, Expiry: exp})
		if err := os.WriteFile(idFile, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	spec := &GangSpec{URL: srv.URL, CACert: certs.CA, ClientCert: certs.ClientCert, ClientKey: certs.ClientKey, IdentityFile: idFile}
	join := gang.JoinRequest{Size: 2, Namespace: "ml", JobID: "train", AllocID: "a", Task: "t", NodeID: "n", Addr: "10.0.0.1", Port: 1}
	ctx := context.Background()
	c, err := rendezvousClient(spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Join(ctx, "ml:train", "a.t", join); err == nil || !strings.Contains(err.Error(), "no file "+idFile) {
		t.Fatalf("join before Nomad wrote the identity: %v", err)
	}
	writeID(time.Now().Add(time.Hour))
	if _, err := c.Join(ctx, "ml:train", "a.t", join); err != nil {
		t.Fatalf("join over mTLS with the identity: %v", err)
	}
	writeID(time.Now().Add(-time.Minute)) // the file is read again: expired now
	var apiErr *gang.APIError
	if _, err := c.Heartbeat(ctx, "ml:train", "a.t"); !errors.As(err, &apiErr) || apiErr.Code != 401 || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("heartbeat with the expired file: %v", err)
	}
	writeID(time.Now().Add(time.Hour)) // renewed
	if _, err := c.Heartbeat(ctx, "ml:train", "a.t"); err != nil {
		t.Fatalf("heartbeat with the renewed identity: %v", err)
	}
	// Without the client certificate the server does not talk to it.
	noCert, err := rendezvousClient(&GangSpec{URL: srv.URL, CACert: certs.CA, IdentityFile: idFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noCert.Heartbeat(ctx, "ml:train", "a.t"); err == nil || errors.As(err, &apiErr) {
		t.Fatalf("without a client certificate: %v", err)
	}
}

// A running member whose identity the server refuses (it expired while
// Nomad could not renew it) keeps running, says so, and heartbeats again
// with the renewed file; the env copy of the identity never stays in the
// spec file.
func TestRefusedIdentityKeepsTaskRunning(t *testing.T) {
	t.Parallel()
	n := authtest.New(t)
	ids, acl := n.Verifiers(t)
	srv, err := gang.StartServerWith("127.0.0.1:0", gang.RegistryConfig{}, gang.ServerOptions{Auth: &gang.NomadAuth{Identities: ids, ACL: acl}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	spec, state := gangSpec(t, srv.URL, 0, 1, `echo started > started; i=0; while [ ! -f finish ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done; echo done`)
	idFile := filepath.Join(t.TempDir(), "nomad_impact.jwt")
	writeID := func(exp time.Time) {
		tok := n.Sign(t, authtest.Claims{Namespace: "default", JobID: "train", AllocID: "alloc0", Task: "t", Audience: []string{"impact"}, Expiry: exp})
		if err := os.WriteFile(idFile, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeID(time.Now().Add(time.Hour))
	spec.Gang.IdentityFile, spec.Gang.IdentityToken = idFile, "env-identity-secret"
	p := launch(t, spec, state)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 15s; events:\n%s", what, events(t, p))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("task started", func() bool { return fileExists(filepath.Join(spec.Dir, "started")) })
	if b, _ := os.ReadFile(filepath.Join(state, SpecFile)); strings.Contains(string(b), "env-identity-secret") {
		t.Fatalf("the spec file keeps the identity: %s", b)
	}
	writeID(time.Now().Add(-time.Minute))
	waitFor("refusal reported", func() bool {
		return strings.Contains(events(t, p), "refused this member's workload identity, task keeps running")
	})
	if p.Exited() {
		t.Fatalf("the task was stopped over a refused identity: %s", events(t, p))
	}
	writeID(time.Now().Add(time.Hour))
	time.Sleep(500 * time.Millisecond) // a few heartbeats with the renewed identity
	if err := os.WriteFile(filepath.Join(spec.Dir, "finish"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if ex := wait(t, p, 20*time.Second); ex.ExitCode != 0 || ex.Stopped {
		t.Fatalf("exit: %+v\n%s", ex, events(t, p))
	}
	if st, _, err := srv.Registry.Get("default:train"); err != nil || st.State != gang.StateDone {
		t.Errorf("gang after a clean exit: %+v %v", st, err)
	}
}
