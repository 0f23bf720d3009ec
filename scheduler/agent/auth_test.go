package agent

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/auth"
	"github.com/impact-sched/nomad-impact/internal/authtest"
	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
)

// twoNamespaceView holds jobs of namespaces ml and prod.
func twoNamespaceView() *staticView {
	now := time.Now()
	ml := agentapi.Entry{Namespace: "ml", Job: "train", Position: 1, State: agentapi.StateWaiting, Since: now}
	prod := agentapi.Entry{Namespace: "prod", Job: "serve", Position: 2, State: agentapi.StateWaiting, Since: now}
	return &staticView{
		health: agentapi.Health{Status: agentapi.StatusOK, Name: "a1", Leader: true},
		queue:  agentapi.Queue{GeneratedAt: now, Leader: true, Jobs: []agentapi.Entry{ml, prod}},
		explain: map[string]agentapi.Explanation{
			"ml/train":   {Entry: ml, GeneratedAt: now},
			"prod/serve": {Entry: prod, GeneratedAt: now},
		},
	}
}

func aclFake(t *testing.T) *authtest.Nomad {
	n := authtest.New(t)
	n.AddToken("ml-reader", authtest.Token{Name: "ml", Caps: map[string][]string{"ml": {"read-job"}}})
	n.AddToken("operator", authtest.Token{Name: "op", Management: true})
	n.AddToken("nothing", authtest.Token{Name: "none"})
	return n
}

func apiAuthFor(t *testing.T, n *authtest.Nomad, read string, metricsToken bool) *NomadAPIAuth {
	t.Helper()
	acl, err := auth.NewACLChecker(auth.ACLConfig{Address: n.URL()})
	if err != nil {
		t.Fatal(err)
	}
	return &NomadAPIAuth{ACL: acl, Read: read, MetricsToken: metricsToken}
}

func queueJobs(q agentapi.Queue) string {
	var ids []string
	for _, e := range q.Jobs {
		ids = append(ids, e.Namespace+"/"+e.Job)
	}
	sort.Strings(ids)
	return strings.Join(ids, ",")
}

func statusCode(err error) int {
	if se, ok := err.(*agentapi.StatusError); ok {
		return se.Code
	}
	return 0
}

// With Nomad ACLs, reads need a token and show the namespaces it may
// read-job in; /v1/health stays open.
func TestReadEndpointsFilterByNamespace(t *testing.T) {
	n := aclFake(t)
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("impact_up 1\n")) })
	srv, _ := newTestServer(t, twoNamespaceView(), HandlerOptions{Auth: apiAuthFor(t, n, ReadAuto, true), Metrics: metrics})
	ctx := context.Background()
	client := func(tok string) *agentapi.Client {
		c, err := agentapi.NewClient(srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c.WithToken(tok)
	}
	for _, tc := range []struct {
		tok  string
		code int
		want string
	}{
		{"", 401, ""}, {"bogus", 401, ""},
		{"nothing", 200, ""}, {"ml-reader", 200, "ml/train"}, {"operator", 200, "ml/train,prod/serve"},
	} {
		q, err := client(tc.tok).Queue(ctx)
		if tc.code != 200 {
			if statusCode(err) != tc.code {
				t.Errorf("queue with %q: %v, want %d", tc.tok, err, tc.code)
			}
			continue
		}
		if err != nil || queueJobs(q) != tc.want {
			t.Errorf("queue with %q: %v %q, want %q", tc.tok, err, queueJobs(q), tc.want)
		}
	}
	if _, err := client("").Queue(ctx); err == nil || !strings.Contains(err.Error(), "missing Nomad ACL token") {
		t.Errorf("no token: %v", err)
	}
	for _, tc := range []struct {
		tok, ns, job string
		code         int
	}{
		{"", "ml", "train", 401},
		{"ml-reader", "ml", "train", 200},
		{"ml-reader", "prod", "serve", 403},
		{"ml-reader", "prod", "nonexistent", 403}, // no probing other namespaces for job names
		{"operator", "prod", "serve", 200},
	} {
		_, err := client(tc.tok).Explain(ctx, tc.ns, tc.job)
		if got := statusCode(err); (tc.code == 200 && err != nil) || (tc.code != 200 && got != tc.code) {
			t.Errorf("explain %s/%s with %q: %v, want %d", tc.ns, tc.job, tc.tok, err, tc.code)
		}
	}
	if _, err := client("ml-reader").Explain(ctx, "prod", "serve"); err == nil || !strings.Contains(err.Error(), `may not read-job in namespace "prod"`) {
		t.Errorf("explain of another namespace: %v", err)
	}
	if h, err := client("").Health(ctx); err != nil || h.Status != agentapi.StatusOK {
		t.Errorf("health without a token: %v %+v", err, h)
	}
	for tok, code := range map[string]int{"": 401, "bogus": 401, "nothing": 200} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("metrics = token, with %q: %d, want %d", tok, resp.StatusCode, code)
		}
	}
}

// auth.read = "auto" is open while Nomad has ACLs disabled; "token" is not.
func TestReadAuthModes(t *testing.T) {
	n := aclFake(t)
	n.SetACL(false)
	ctx := context.Background()
	for mode, code := range map[string]int{ReadAuto: 200, ReadOpen: 200, ReadToken: 401} {
		_, c := newTestServer(t, twoNamespaceView(), HandlerOptions{Auth: apiAuthFor(t, n, mode, false)})
		q, err := c.Queue(ctx)
		if code == 200 && (err != nil || len(q.Jobs) != 2) {
			t.Errorf("%s with ACLs disabled: %v %d jobs", mode, err, len(q.Jobs))
		}
		if code != 200 && statusCode(err) != code {
			t.Errorf("%s with ACLs disabled: %v, want %d", mode, err, code)
		}
	}
	// Open: ACLs on, no token, everything visible.
	n.SetACL(true)
	_, c := newTestServer(t, twoNamespaceView(), HandlerOptions{Auth: apiAuthFor(t, n, ReadOpen, false)})
	if q, err := c.Queue(ctx); err != nil || len(q.Jobs) != 2 {
		t.Errorf("open with ACLs on: %v %+v", err, q)
	}
}

// The pages show what the browser's token may read: without one they ask
// for it (401 with a login form), /ui/login keeps it in an HttpOnly
// cookie, and other namespaces' jobs are left out or refused.
func TestUIPagesNeedAToken(t *testing.T) {
	n := aclFake(t)
	srv, _ := newTestServer(t, twoNamespaceView(), HandlerOptions{Auth: apiAuthFor(t, n, ReadAuto, false)})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string, cookie *http.Cookie) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b := new(strings.Builder)
		_, _ = io.Copy(b, resp.Body)
		return resp.StatusCode, b.String()
	}
	if code, body := get("/ui/", nil); code != 401 || !strings.Contains(body, `action="/ui/login"`) || strings.Contains(body, "train") {
		t.Fatalf("queue page without a token: %d\n%s", code, body)
	}
	resp, err := noRedirect.PostForm(srv.URL+"/ui/login", url.Values{"token": {"ml-reader"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == uiTokenCookie {
			cookie = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("login: %d, cookie %+v", resp.StatusCode, cookie)
	}
	code, body := get("/ui/", cookie)
	if code != 200 || !strings.Contains(body, "train") || strings.Contains(body, "serve") {
		t.Errorf("queue page with the ml token: %d, want ml/train only\n%s", code, body)
	}
	if code, _ := get("/ui/job/ml/train", cookie); code != 200 {
		t.Errorf("job page of ml with the ml token: %d", code)
	}
	if code, body := get("/ui/job/prod/serve", cookie); code != 403 || !strings.Contains(body, `may not read-job in namespace &#34;prod&#34;`) {
		t.Errorf("job page of prod with the ml token: %d\n%s", code, body)
	}
	if code, _ := get("/ui/", &http.Cookie{Name: uiTokenCookie, Value: "bogus"}); code != 401 {
		t.Errorf("queue page with a bogus cookie: %d", code)
	}
}
