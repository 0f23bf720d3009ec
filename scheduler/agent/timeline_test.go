package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
)

// Issue 39: the decision history survives a restart and a failover. A
// job waits, then is admitted by a1; a1 stops; a2 starts afresh later
// and leads: the job's history still begins with what a1 saw.
func TestHistorySurvivesFailover(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-1", 8, 1, "gpu")
	pol := testPolicy(t)
	a1 := startAgent(t, n, clk, "a1", pol)
	waitFor(t, "a1 leads", a1.a.IsLeader)
	n.submit("first", tier("high"), gpuGroup("w", 1, 4))
	waitFor(t, "admitted", func() bool { return n.registerCount("default/first") == 1 })
	var before []agentapi.Event
	waitFor(t, "a1's history shows the admission, saved", func() bool {
		e, ok := a1.a.Explain("default", "first")
		if !ok || len(e.History) < 1 {
			return false
		}
		before = e.History
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.state != nil && len(n.state.Timeline["default/first"]) >= 1
	})
	a1.stop()
	clk.Advance(time.Hour)
	a2 := startAgent(t, n, clk, "a2", pol)
	waitFor(t, "a2 leads", a2.a.IsLeader)
	waitCycles(t, 2, a2.a)
	e, _ := a2.a.Explain("default", "first")
	if len(e.History) < len(before) || !e.History[0].At.Equal(before[0].At) || e.History[0].State != before[0].State {
		t.Fatalf("a2's history %+v, want it to start with a1's %+v", e.History, before)
	}
}

// The saved timeline is bounded in bytes, keeping the jobs with the
// newest events.
func TestTimelineEncodingIsBounded(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tl := map[string][]agentapi.Event{}
	for i := range 100 {
		id := "default/j" + strings.Repeat("x", 3) + string(rune('A'+i%26)) + string(rune('a'+i/26))
		tl[id] = []agentapi.Event{{At: t0.Add(time.Duration(i) * time.Minute), State: "waiting", Summary: strings.Repeat("s", 100)}}
	}
	enc := encodeTimeline(tl, 2000)
	size := 0
	for id, v := range enc {
		size += len(id) + len(v)
	}
	if size > 2000 || len(enc) == 0 {
		t.Fatalf("encoded %d jobs in %d bytes, want some within 2000", len(enc), size)
	}
	newest := "default/jxxx" + string(rune('A'+99%26)) + string(rune('a'+99/26))
	if _, ok := enc[newest]; !ok {
		t.Errorf("the job with the newest event was dropped")
	}
	if got := decodeTimeline(enc); len(got) != len(enc) || got[newest][0].Summary != tl[newest][0].Summary {
		t.Errorf("round trip lost events")
	}
}
