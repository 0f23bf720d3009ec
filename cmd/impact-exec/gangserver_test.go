package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/internal/authtest"
)

// The built `impact-exec gang-server`, run against a stand-in for Nomad's
// JWKS and ACL endpoints, refuses every unauthenticated or wrongly scoped
// request with a status and message naming what is missing, and serves
// the member whose identity it is.
func TestGangServerAuthBinary(t *testing.T) {
	t.Parallel()
	n := authtest.New(t)
	n.AddToken("ops-ml", authtest.Token{Name: "ops", Caps: map[string][]string{"ml": {"read-job", "submit-job"}}})
	n.AddToken("viewer-ml", authtest.Token{Name: "viewer", Caps: map[string][]string{"ml": {"read-job"}}})
	n.AddToken("ops-other", authtest.Token{Name: "other", Caps: map[string][]string{"other": {"read-job", "submit-job"}}})
	addr := freeAddr(t)
	cmd := exec.Command(binary, "gang-server", "-nomad-addr", n.URL(), "-listen", addr)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	base := "http://" + addr + "/v1/gang/"
	call := func(method, path, token, body string) (int, string) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, _ := call(http.MethodGet, "", "", ""); code == http.StatusUnauthorized {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gang-server not serving:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	hour := time.Now().Add(time.Hour)
	id := func(alloc string, exp time.Time) string {
		return n.Sign(t, authtest.Claims{Namespace: "ml", JobID: "train", AllocID: alloc, Task: "w", Audience: []string{"impact"}, Expiry: exp})
	}
	a1, a2, expired := id("a1", hour), id("a2", hour), id("a1", time.Now().Add(-time.Minute))
	joinBody := func(alloc string, i int) string {
		return fmt.Sprintf(`{"size":2,"namespace":"ml","job_id":"train","alloc_id":%q,"alloc_index":%d,"task":"w","node_id":"n1","addr":"10.0.0.1","port":%d}`, alloc, i, 29500+i)
	}
	for _, step := range []struct {
		what                string
		method, path, token string
		body                string
		code                int
		want                string
	}{
		{"stop without a token", "PUT", "ml:train/stop", "", `{"reason":"mine now"}`, 401, "missing Nomad ACL token"},
		{"stop with a read-only token", "PUT", "ml:train/stop", "viewer-ml", `{"reason":"mine now"}`, 403, `may not submit-job in namespace \"ml\"`},
		{"stop with another namespace's token", "PUT", "ml:train/stop", "ops-other", `{"reason":"mine now"}`, 403, `may not submit-job in namespace \"ml\"`},
		{"stop with a bogus token", "PUT", "ml:train/stop", "bogus", `{}`, 401, "ACL token not found"},
		{"join without an identity", "PUT", "ml:train/members/a1.w", "", joinBody("a1", 0), 401, `needs the task's Nomad workload identity (Authorization: Bearer), which impact-exec presents when the task has identity { name = \"impact\" aud = [\"impact\"] file = true ttl = \"1h\" }`},
		{"forged member: a2's identity as a1", "PUT", "ml:train/members/a1.w", a2, joinBody("a1", 0), 403, "may act only as member a2.w, not a1.w"},
		{"join with an expired identity", "PUT", "ml:train/members/a1.w", expired, joinBody("a1", 0), 401, "expired at"},
		{"join with an ACL token", "PUT", "ml:train/members/a1.w", "ops-ml", joinBody("a1", 0), 401, "not an ACL token"},
		{"valid join", "PUT", "ml:train/members/a1.w", a1, joinBody("a1", 0), 200, `"state":"forming"`},
		{"heartbeat without an identity", "PUT", "ml:train/members/a1.w/heartbeat", "", "", 401, "missing workload identity"},
		{"heartbeat for another member", "PUT", "ml:train/members/a1.w/heartbeat", a2, "", 403, "may act only as member a2.w"},
		{"valid heartbeat", "PUT", "ml:train/members/a1.w/heartbeat", a1, "", 200, `"member":"a1.w"`},
		{"exit without an identity", "PUT", "ml:train/members/a1.w/exit", "", `{"exit_code":1}`, 401, "missing workload identity"},
		{"exit for another member", "PUT", "ml:train/members/a1.w/exit", a2, `{"exit_code":1}`, 403, "may act only as member a2.w"},
		{"leave for another member", "DELETE", "ml:train/members/a1.w", a2, "", 403, "may act only as member a2.w"},
		{"read without a token", "GET", "ml:train", "", "", 401, "missing credential"},
		{"read with another namespace's token", "GET", "ml:train", "ops-other", "", 403, `may not read-job in namespace \"ml\"`},
		{"read with read-job", "GET", "ml:train", "viewer-ml", "", 200, `"arrived":1`},
		{"list with another namespace's token", "GET", "", "ops-other", "", 200, "[]"},
		{"operator stop", "PUT", "ml:train/stop", "ops-ml", `{"reason":"operator"}`, 200, `"state":"stopping"`},
		{"own exit", "PUT", "ml:train/members/a1.w/exit", a1, `{"stopped":true}`, 200, `"state":"stopped"`},
	} {
		code, body := call(step.method, step.path, step.token, step.body)
		if code != step.code || !strings.Contains(body, step.want) {
			t.Errorf("%s: HTTP %d %s\n  want %d containing %s", step.what, code, strings.TrimSpace(body), step.code, step.want)
		}
	}
}

// -dev is unauthenticated, so it refuses a non-loopback address unless
// told otherwise, and the authenticated mode needs Nomad's address.
func TestGangServerRefusesUnsafeSetups(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-dev", "-listen", "0.0.0.0:0"}, `-dev serves without authentication, so it listens on loopback only; "0.0.0.0:0" is not a loopback address`},
		{[]string{"-listen", "127.0.0.1:0"}, "set -nomad-addr (or NOMAD_ADDR)"},
		{[]string{"-dev-remote", "-nomad-addr", "http://127.0.0.1:1"}, "-dev-remote only applies with -dev"},
		{[]string{"-dev", "-tls-cert", "x"}, "-tls-cert and -tls-key must be set together"},
	} {
		cmd := exec.Command(binary, append([]string{"gang-server"}, tc.args...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"} // no NOMAD_ADDR
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("gang-server %v: %v %s\n  want exit 2 with %q", tc.args, err, out, tc.want)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
