package gang

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/internal/authtest"
)

// tokenCred presents a fixed credential.
type tokenCred string

func (c tokenCred) Token() (string, error) { return string(c), nil }
func (c tokenCred) Where() string          { return "a test token" }

// authServer is a rendezvous server with NomadAuth against the fake Nomad,
// which knows an operator of namespace ml, a viewer, and a token of
// namespace other.
func authServer(t *testing.T) (*Server, *authtest.Nomad) {
	t.Helper()
	n := authtest.New(t)
	n.AddToken("ops-ml", authtest.Token{Name: "ops", Caps: map[string][]string{"ml": {"read-job", "submit-job"}}})
	n.AddToken("viewer-ml", authtest.Token{Name: "viewer", Caps: map[string][]string{"ml": {"read-job"}}})
	n.AddToken("ops-other", authtest.Token{Name: "other", Caps: map[string][]string{"other": {"read-job", "submit-job"}}})
	ids, acl := n.Verifiers(t)
	srv, err := StartServerWith("127.0.0.1:0", RegistryConfig{}, ServerOptions{Auth: &NomadAuth{Identities: ids, ACL: acl}}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv, n
}

func mlJoin(alloc string, i int) JoinRequest {
	return JoinRequest{Size: 2, Namespace: "ml", JobID: "train", AllocID: alloc, AllocIndex: i, Task: "w",
		NodeID: "n1", Addr: "10.0.0.1", Port: 29500 + i}
}

func identityOf(t *testing.T, n *authtest.Nomad, ns, job, alloc, task string, exp time.Time) string {
	return n.Sign(t, authtest.Claims{Namespace: ns, JobID: job, AllocID: alloc, Task: task, Audience: []string{"impact"}, Expiry: exp})
}

func apiCode(err error) int {
	var e *APIError
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// Every member operation needs the member's own workload identity; the
// refusals say what is missing or wrong.
func TestGangAuthMembers(t *testing.T) {
	srv, n := authServer(t)
	ctx := context.Background()
	hour := time.Now().Add(time.Hour)
	a1 := identityOf(t, n, "ml", "train", "a1", "w", hour)
	a2 := identityOf(t, n, "ml", "train", "a2", "w", hour)
	client := func(cred Credential) *Client {
		c, err := NewClient(srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cred != nil {
			c.WithCredential(cred)
		}
		return c
	}
	wrongBody := mlJoin("a1", 0)
	wrongBody.JobID = "other-job"
	for _, tc := range []struct {
		name   string
		cred   Credential
		gang   string
		member string
		join   JoinRequest
		code   int
		want   string
	}{
		{"no credential", IdentityCredential{File: "/nonexistent/nomad_impact.jwt"}, "ml:train", "a1.w", mlJoin("a1", 0), 401,
			`missing workload identity: member a1.w of gang ml:train needs the task's Nomad workload identity`},
		{"ACL token instead of an identity", tokenCred("ops-ml"), "ml:train", "a1.w", mlJoin("a1", 0), 401, "not an ACL token"},
		{"forged member: another allocation's identity", tokenCred(a2), "ml:train", "a1.w", mlJoin("a1", 0), 403,
			"may act only as member a2.w, not a1.w"},
		{"body names another allocation", tokenCred(a2), "ml:train", "a2.w", mlJoin("a1", 0), 403, `alloc_id "a1"`},
		{"body names another job", tokenCred(a1), "ml:train", "a1.w", wrongBody, 403, `job_id "other-job"`},
		{"gang of another job", tokenCred(a1), "ml:victim", "a1.w", mlJoin("a1", 0), 403, "not of its job"},
		{"gang of another namespace", tokenCred(a1), "prod:train", "a1.w", mlJoin("a1", 0), 403, "not of its job"},
		{"expired identity", tokenCred(identityOf(t, n, "ml", "train", "a1", "w", time.Now().Add(-time.Minute))), "ml:train", "a1.w", mlJoin("a1", 0), 401, "expired at"},
		{"identity for another audience", tokenCred(n.Sign(t, authtest.Claims{Namespace: "ml", JobID: "train", AllocID: "a1", Task: "w",
			Audience: []string{"nomadproject.io"}, Expiry: hour})), "ml:train", "a1.w", mlJoin("a1", 0), 401, `accepts only "impact"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client(tc.cred).Join(ctx, tc.gang, tc.member, tc.join)
			if apiCode(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("join: got %v, want HTTP %d containing %q", err, tc.code, tc.want)
			}
		})
	}
	if got := srv.Registry.List(); len(got) != 0 {
		t.Fatalf("refused joins left gangs behind: %+v", got)
	}
	// The missing-identity error tells the user exactly what to add.
	_, err := client(IdentityCredential{File: "/nonexistent/nomad_impact.jwt", Label: "NOMAD_TOKEN_impact"}).Join(ctx, "ml:train", "a1.w", mlJoin("a1", 0))
	for _, want := range []string{`identity { name = "impact" aud = ["impact"] file = true ttl = "1h" }`, "no file /nonexistent/nomad_impact.jwt, no NOMAD_TOKEN_impact"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing identity: %v, want it to contain %q", err, want)
		}
	}

	// The real members join, heartbeat, read their status and exit.
	m1, m2 := client(tokenCred(a1)), client(tokenCred(a2))
	if _, err := m1.Join(ctx, "ml:train", "a1.w", mlJoin("a1", 0)); err != nil {
		t.Fatalf("valid join: %v", err)
	}
	if st, err := m2.Join(ctx, "ml:train", "a2.w", mlJoin("a2", 1)); err != nil || st.State != StateReady {
		t.Fatalf("second member: %v %+v", err, st)
	}
	if _, err := m1.Heartbeat(ctx, "ml:train", "a1.w"); err != nil {
		t.Fatalf("own heartbeat: %v", err)
	}
	if _, err := m1.GetMember(ctx, "ml:train", "a1.w", 0, 0); err != nil {
		t.Fatalf("own status: %v", err)
	}
	// A member cannot heartbeat, exit or leave for another one.
	for op, call := range map[string]func() error{
		"heartbeat": func() error { _, err := m2.Heartbeat(ctx, "ml:train", "a1.w"); return err },
		"exit":      func() error { _, err := m2.Exit(ctx, "ml:train", "a1.w", ExitRequest{ExitCode: 1}); return err },
		"leave":     func() error { _, err := m2.Leave(ctx, "ml:train", "a1.w"); return err },
		"get":       func() error { _, err := m2.GetMember(ctx, "ml:train", "a1.w", 0, 0); return err },
	} {
		if err := call(); apiCode(err) != http.StatusForbidden || !strings.Contains(err.Error(), "may act only as member a2.w") {
			t.Errorf("%s as another member: %v", op, err)
		}
		if err := func() error { _, err := client(nil).Heartbeat(ctx, "ml:train", "a1.w"); return err }(); apiCode(err) != http.StatusUnauthorized {
			t.Errorf("%s without credential: %v", op, err)
		}
	}
	if st, _, _ := srv.Registry.Get("ml:train"); st.State != StateReady {
		t.Fatalf("refused requests changed the gang: %s %s", st.State, st.Reason)
	}
	if _, err := m1.Exit(ctx, "ml:train", "a1.w", ExitRequest{}); err != nil {
		t.Fatalf("own exit: %v", err)
	}
}

// Stop needs an ACL token that may submit jobs in the gang's namespace;
// reading and listing need read-job (or the job's own identity).
func TestGangAuthOperators(t *testing.T) {
	srv, n := authServer(t)
	ctx := context.Background()
	hour := time.Now().Add(time.Hour)
	a1 := identityOf(t, n, "ml", "train", "a1", "w", hour)
	o1 := identityOf(t, n, "other", "job", "o1", "w", hour)
	c := func(tok string) *Client {
		cl, _ := NewClient(srv.URL, nil)
		if tok != "" {
			cl.WithCredential(tokenCred(tok))
		}
		return cl
	}
	if _, err := c(a1).Join(ctx, "ml:train", "a1.w", mlJoin("a1", 0)); err != nil {
		t.Fatal(err)
	}
	oj := JoinRequest{Size: 2, Namespace: "other", JobID: "job", AllocID: "o1", Task: "w", NodeID: "n", Addr: "10.0.0.2", Port: 1}
	if _, err := c(o1).Join(ctx, "other:job", "o1.w", oj); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tok  string
		code int
		want string
	}{
		{"", 401, "missing Nomad ACL token: stopping gang ml:train needs a token that may submit-job in namespace ml"},
		{"bogus", 401, "ACL token not found"},
		{a1, 403, "a workload identity acts only for its own member"},
		{"viewer-ml", 403, `may not submit-job in namespace "ml"`},
		{"ops-other", 403, `may not submit-job in namespace "ml"`},
	} {
		if _, err := c(tc.tok).Stop(ctx, "ml:train", "mine now"); apiCode(err) != tc.code || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("stop with %q: %v, want %d %q", tc.tok, err, tc.code, tc.want)
		}
	}
	if st, _, _ := srv.Registry.Get("ml:train"); st.State != StateForming {
		t.Fatalf("a refused stop changed the gang: %s", st.State)
	}
	if st, err := c("ops-ml").Stop(ctx, "ml:train", "operator"); err != nil || st.State != StateStopping {
		t.Fatalf("operator stop: %v %+v", err, st)
	}

	// Reading one gang: read-job in its namespace, or its job's identity.
	for tok, code := range map[string]int{"": 401, "bogus": 401, "ops-other": 403, o1: 403, "viewer-ml": 0, a1: 0} {
		if _, err := c(tok).Get(ctx, "ml:train", 0, 0); apiCode(err) != code {
			t.Errorf("get ml:train with %q: %v, want %d", tok, err, code)
		}
	}
	// The list shows the namespaces the token may read.
	list := func(tok string) ([]string, int) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+PathPrefix, nil)
		if tok != "" {
			req.Header.Set("X-Nomad-Token", tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var sts []Status
		_ = decodeJSON(resp, &sts)
		var ids []string
		for _, s := range sts {
			ids = append(ids, s.ID)
		}
		return ids, resp.StatusCode
	}
	for tok, want := range map[string]string{"viewer-ml": "ml:train", "ops-other": "other:job", o1: "other:job", a1: "ml:train"} {
		if ids, code := list(tok); code != 200 || strings.Join(ids, ",") != want {
			t.Errorf("list with %q: %d %v, want %s", tok, code, ids, want)
		}
	}
	if _, code := list(""); code != 401 {
		t.Errorf("list without a token: %d", code)
	}
}

// The identity file is read on every request, so the identity Nomad
// renews is the one presented.
func TestIdentityCredentialFollowsTheFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "nomad_impact.jwt")
	c := IdentityCredential{File: f, Env: "from-env", Label: "NOMAD_TOKEN_impact"}
	if tok, err := c.Token(); err != nil || tok != "from-env" {
		t.Fatalf("no file: %q %v", tok, err)
	}
	for _, v := range []string{"first", "renewed"} {
		if err := os.WriteFile(f, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if tok, err := c.Token(); err != nil || tok != v {
			t.Fatalf("file %q: got %q %v", v, tok, err)
		}
	}
}

func decodeJSON(resp *http.Response, v any) error { return json.NewDecoder(resp.Body).Decode(v) }
