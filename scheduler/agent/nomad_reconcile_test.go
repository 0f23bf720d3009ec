package agent

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/internal/nomadfake"
)

// do sends a request to the fake Nomad and fails the test on an answer
// other than 200.
func (c *fakeCluster) do(method, path string) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.fake.URL()+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		c.t.Fatalf("%s %s: HTTP %d %s", method, path, resp.StatusCode, b)
	}
}

func (c *fakeCluster) poolExists(name string) bool {
	resp, err := http.Get(c.fake.URL() + "/v1/node/pool/" + name)
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

func problemWith(h agentapi.Health, part string) string {
	for _, p := range h.Problems {
		if strings.Contains(p, part) {
			return p
		}
	}
	return ""
}

// Issue 39: what the agent keeps in Nomad is reconciled like its Consul
// registration. Deleted under a running leader, the parking pool, the
// durable-state Variables and the lease are written again; a repair that
// fails shows in /v1/health and impact_nomad_state_in_sync until it
// succeeds (with back-off), and each repair is counted by what; a node
// in the parking pool, which the agent cannot repair, is reported.
func TestFakeNomadOutsideStateRepaired(t *testing.T) {
	c := newFakeCluster(t, 1, 1, 4)
	s := c.start("a1")
	a := s.svc.Agent
	eventuallyT(t, 10*time.Second, "a1 leads", func() (bool, string) { return a.IsLeader(), "" })
	repairs := func(what string) float64 {
		v, _ := metricValue(scrape(t, a), fmt.Sprintf(`impact_nomad_state_repairs_total{what=%q}`, what))
		return v
	}

	// The parking pool, deleted while the queue is empty. The first two
	// attempts to create it again are refused: health and the gauge say
	// so meanwhile.
	c.fake.FailNext(http.MethodPut, "/v1/node/pools", http.StatusForbidden, "Permission denied")
	c.fake.FailNext(http.MethodPut, "/v1/node/pools", http.StatusForbidden, "Permission denied")
	c.do(http.MethodDelete, "/v1/node/pool/impact-queue")
	eventuallyT(t, 10*time.Second, "the failed repair in health and the gauge", func() (bool, string) {
		h := a.Health()
		in, _ := metricValue(scrape(t, a), "impact_nomad_state_in_sync")
		p := problemWith(h, `parking pool "impact-queue" was deleted; creating it again failed (retrying)`)
		return p != "" && strings.Contains(p, "403") && h.Status == agentapi.StatusDegraded && in == 0, fmt.Sprintf("%+v in_sync=%v", h, in)
	})
	eventuallyT(t, 10*time.Second, "the parking pool created again", func() (bool, string) {
		h := a.Health()
		return c.poolExists("impact-queue") && repairs("parking_pool") == 1 && h.Status == agentapi.StatusOK, fmt.Sprintf("%+v", h)
	})
	if in, _ := metricValue(scrape(t, a), "impact_nomad_state_in_sync"); in != 1 {
		t.Errorf("impact_nomad_state_in_sync %v after the repair; want 1", in)
	}
	// Jobs are queued and admitted through it again.
	c.submit("j1", map[string]string{"impact_tier": "normal"}, 1, 1)
	eventuallyT(t, 10*time.Second, "j1 runs", func() (bool, string) { return c.running("j1") == 1, c.pool("j1") })

	// The durable state: usage and the timeline deleted, written again.
	eventuallyT(t, 10*time.Second, "the timeline saved", func() (bool, string) {
		return c.fake.Variable("impact/state/timeline") != nil && c.fake.Variable("impact/state/usage") != nil, ""
	})
	c.do(http.MethodDelete, "/v1/var/impact/state/usage")
	c.do(http.MethodDelete, "/v1/var/impact/state/timeline")
	eventuallyT(t, 10*time.Second, "usage and timeline written again", func() (bool, string) {
		return c.fake.Variable("impact/state/timeline") != nil && c.fake.Variable("impact/state/usage") != nil &&
			repairs("usage") == 1 && repairs("timeline") == 1, scrape(t, a)
	})
	if tl := c.fake.Variable("impact/state/timeline"); !strings.Contains(fmt.Sprint(tl), "j1") {
		t.Errorf("timeline written again without j1: %v", tl)
	}

	// The lease: written again by the leader, which keeps leading.
	c.do(http.MethodDelete, "/v1/var/impact/leader/lease")
	eventuallyT(t, 10*time.Second, "the lease written again", func() (bool, string) {
		l := c.fake.Variable("impact/leader/lease")
		return l != nil && l["holder"] == "a1" && repairs("lease") == 1, fmt.Sprint(l)
	})
	if !a.IsLeader() {
		t.Error("a1 no longer leads after its lease was deleted")
	}

	// A node in the parking pool is reported, not moved.
	n, err := nomadfake.TopologyNode("stray", "stray", "impact-queue", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	c.fake.UpsertNode(n)
	eventuallyT(t, 10*time.Second, "the stray node reported", func() (bool, string) {
		h := a.Health()
		return problemWith(h, `node(s) stray are in the parking pool "impact-queue"`) != "", fmt.Sprintf("%+v", h)
	})
}
