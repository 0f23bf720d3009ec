package agent

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

type staticView struct {
	health  agentapi.Health
	queue   agentapi.Queue
	explain map[string]agentapi.Explanation // key ns/job
}

func (s *staticView) Health() agentapi.Health { return s.health }
func (s *staticView) Queue() agentapi.Queue   { return s.queue }
func (s *staticView) Explain(ns, job string) (agentapi.Explanation, bool) {
	if ns == "" {
		ns = "default"
	}
	e, ok := s.explain[ns+"/"+job]
	return e, ok
}

func sampleView() *staticView {
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	a := agentapi.Entry{Namespace: "default", Job: "train-a", Position: 1, State: agentapi.StateWaiting,
		Tier: "high", Project: "olmo", GPUs: 8, Allocations: 2, Score: 12.5,
		Since: now.Add(-90 * time.Second), WaitSeconds: 90, Reason: "waiting for 8 GPUs on one island"}
	b := agentapi.Entry{Namespace: "default", Job: "eval/b", State: agentapi.StateRunning, Tier: "normal", GPUs: 1, Allocations: 1, Since: now}
	return &staticView{
		health: agentapi.Health{Status: agentapi.StatusOK, Name: "a1", Leader: true, Cycles: 3},
		queue:  agentapi.Queue{GeneratedAt: now, Leader: true, Jobs: []agentapi.Entry{a, b}},
		explain: map[string]agentapi.Explanation{
			"default/train-a": {Entry: a, GeneratedAt: now, Leader: true, Decision: "wait",
				Engine: &engine.Explanation{JobID: "default/train-a", Position: 1, Status: engine.StatusWaiting,
					Score: policy.Score{Total: 12.5, Tier: 10, FairShare: 2, Age: 0.5}}},
			"default/eval/b": {Entry: b, GeneratedAt: now, Leader: true, Decision: "admit", Nodes: map[string][]string{"g": {"n1"}},
				Engine: &engine.Explanation{JobID: "default/eval/b", Status: engine.StatusAdmitted,
					Placement: []engine.GroupPlacement{{Group: "g", Allocs: []engine.AllocPlacement{{NodeID: "n1", GPUs: []string{"GPU-a", "GPU-b"}, Islands: []int{0, 1}}}}}}},
		},
	}
}

func newTestServer(t *testing.T, v ViewSource, opts HandlerOptions) (*httptest.Server, *agentapi.Client) {
	t.Helper()
	srv := httptest.NewServer(NewHandler(v, opts, hclog.NewNullLogger()))
	t.Cleanup(srv.Close)
	c, err := agentapi.NewClient(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	return srv, c
}

func TestHTTPQueueAndExplain(t *testing.T) {
	v := sampleView()
	_, c := newTestServer(t, v, HandlerOptions{})
	ctx := context.Background()
	q, err := c.Queue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Jobs) != 2 || q.Jobs[0].Job != "train-a" || q.Jobs[0].Score != 12.5 || !q.Leader {
		t.Errorf("queue round trip: %+v", q)
	}
	e, err := c.Explain(ctx, "", "eval/b")
	if err != nil {
		t.Fatalf("explain of a job ID with a slash: %v", err)
	}
	if e.Decision != "admit" || e.Nodes["g"][0] != "n1" || e.Engine == nil || e.Engine.Placement[0].Allocs[0].Islands[1] != 1 {
		t.Errorf("explain: %+v", e)
	}
	if e, err := c.Explain(ctx, "", "train-a"); err != nil || e.Terms()[1].Name != "fair_share" || e.Terms()[1].Value != 2 {
		t.Errorf("explain terms: %v %+v", err, e.Terms())
	}
	_, err = c.Explain(ctx, "other", "train-a")
	if !agentapi.IsNotFound(err) || !strings.Contains(err.Error(), "namespace other") {
		t.Errorf("unknown job in namespace: want 404 naming it, got %v", err)
	}
}

func TestHTTPHealthCodes(t *testing.T) {
	v := sampleView()
	srv, c := newTestServer(t, v, HandlerOptions{})
	resp, err := http.Get(srv.URL + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("healthy: status %d", resp.StatusCode)
	}
	v.health = agentapi.Health{Status: agentapi.StatusDegraded, Problems: []string{"nomad unreachable"}}
	resp, err = http.Get(srv.URL + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("degraded: status %d, want 503 so a Consul check fails", resp.StatusCode)
	}
	h, err := c.Health(context.Background())
	if err != nil || h.Problems[0] != "nomad unreachable" {
		t.Errorf("client must decode a degraded body: %+v %v", h, err)
	}
}

func TestHTTPErrors(t *testing.T) {
	gang := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "gang:"+r.URL.Path)
	})
	srv, _ := newTestServer(t, sampleView(), HandlerOptions{Gang: gang, Metrics: http.NotFoundHandler()})
	cases := []struct {
		method, path string
		code         int
		body         string
	}{
		{"POST", "/v1/queue", 405, "use GET"},
		{"GET", "/v1/explain/", 400, "want /v1/explain/<job>"},
		{"GET", "/v1/explain/nope", 404, "not managed"},
		{"GET", "/v1/nothing", 404, "no such endpoint"},
		{"GET", "/v1/gang/default:train-a", 200, "gang:/v1/gang/default:train-a"},
		{"DELETE", "/metrics", 405, "use GET"},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.body) {
			t.Errorf("%s %s: %d %q, want %d containing %q", tc.method, tc.path, resp.StatusCode, b, tc.code, tc.body)
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(tc.path, "/v1/gang") && ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q, want application/json (errors too)", tc.method, tc.path, ct)
		}
		if tc.code == 405 && resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s %s: 405 without Allow: GET, HEAD", tc.method, tc.path)
		}
	}
}

// Every endpoint answers with its content type; HEAD works like GET
// without a body (monitoring probes use it).
func TestHTTPContentTypes(t *testing.T) {
	m, err := NewMetrics()
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := newTestServer(t, sampleView(), HandlerOptions{Metrics: m.Handler()})
	for _, tc := range []struct{ method, path, ctype string }{
		{"GET", "/v1/health", "application/json"},
		{"GET", "/v1/queue", "application/json"},
		{"GET", "/v1/explain/train-a", "application/json"},
		{"GET", "/v1/explain/eval%2Fb", "application/json"},
		{"HEAD", "/v1/queue", "application/json"},
		{"HEAD", "/v1/health", "application/json"},
		{"GET", "/metrics", "text/plain"},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), tc.ctype) {
			t.Errorf("%s %s: %d %q, want 200 %s", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), tc.ctype)
		}
		if tc.method == "HEAD" && len(b) != 0 {
			t.Errorf("HEAD %s: %d bytes of body", tc.path, len(b))
		}
	}
}
