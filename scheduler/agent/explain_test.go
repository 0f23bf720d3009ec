package agent

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
)

// slowExplainer blocks every write until release is closed (or the write's
// context ends), like a Nomad that answers slowly, and tracks how many
// writes are in flight at once.
type slowExplainer struct {
	*fakeExec
	release  chan struct{}
	inflight atomic.Int32
	maxIn    atomic.Int32
	started  atomic.Int32
}

func (s *slowExplainer) WriteExplanation(ctx context.Context, x agentapi.Explanation) error {
	s.started.Add(1)
	n := s.inflight.Add(1)
	defer s.inflight.Add(-1)
	for {
		m := s.maxIn.Load()
		if n <= m || s.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.fakeExec.WriteExplanation(ctx, x)
}

// With many queued jobs and explanation writes that do not return, the
// leader still completes its cycles and admits; writes run at most
// explainConcurrency at a time, and all are written once Nomad answers.
func TestExplanationWritesDoNotBlockCycles(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-1", 8, 1, "gpu")
	const jobs = 300
	for i := 0; i < jobs; i++ {
		n.submit(fmt.Sprintf("j%03d", i), tier("normal"), gpuGroup("g", 1, 1))
	}
	ex := &fakeExec{n: n, agent: "a1"}
	slow := &slowExplainer{fakeExec: ex, release: make(chan struct{})}
	opts := fakeOptions(t, n, ex, clk.Now)
	opts.Explainer = slow
	var admittedCycle atomic.Bool
	opts.onCycle = func(r cycleResult) {
		if r.Leader && len(r.Report.Admitted) > 0 {
			admittedCycle.Store(true)
		}
	}
	a := runTestAgent(t, opts)

	waitFor(t, "a leader cycle that admitted, with writes still blocked", admittedCycle.Load)
	waitFor(t, "writes started", func() bool { return slow.started.Load() > 0 })
	waitCycles(t, 3, a)
	if got := slow.maxIn.Load(); got > explainConcurrency {
		t.Fatalf("%d explanation writes in flight at once, want at most %d", got, explainConcurrency)
	}
	if got := slow.started.Load(); got > explainConcurrency {
		t.Fatalf("%d writes started while %d were blocked", got, explainConcurrency)
	}

	close(slow.release)
	waitFor(t, "every job explained", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return len(n.explained) == jobs
	})
	if got := slow.maxIn.Load(); got > explainConcurrency {
		t.Fatalf("%d explanation writes in flight at once, want at most %d", got, explainConcurrency)
	}
	// Unchanged explanations are not written again.
	before := slow.started.Load()
	waitCycles(t, 3, a)
	if after := slow.started.Load(); after != before {
		t.Errorf("%d writes of unchanged explanations", after-before)
	}
}

// Changed explanations are written before never-written ones, each group
// in queue order, and at most the per-cycle limit.
func TestExplainOrder(t *testing.T) {
	mk := func(job string, pos int) agentapi.Explanation {
		e := agentapi.Explanation{}
		e.Namespace, e.Job, e.State, e.Position = "default", job, agentapi.StateWaiting, pos
		return e
	}
	v := &view{explain: map[string]agentapi.Explanation{}}
	for i, j := range []string{"a", "b", "c", "d"} {
		e := mk(j, i+1)
		v.explain["default/"+j] = e
		v.queue.Jobs = append(v.queue.Jobs, e.Entry)
	}
	written := map[string]string{
		"default/a": digest(v.explain["default/a"]), // unchanged
		"default/d": "old",                          // changed
	}
	got := explainOrder(v, written, map[string]string{}, 10)
	var ids []string
	for _, it := range got {
		ids = append(ids, it.id)
	}
	if want := "[default/d default/b default/c]"; fmt.Sprint(ids) != want {
		t.Errorf("order %v, want %s", ids, want)
	}
	if got := explainOrder(v, written, map[string]string{}, 2); len(got) != 2 {
		t.Errorf("limit 2 gave %d items", len(got))
	}
	busy := map[string]string{"default/b": digest(v.explain["default/b"])}
	if got := explainOrder(v, written, busy, 10); len(got) != 2 {
		t.Errorf("an explanation being written as it is was queued again: %d items", len(got))
	}
}
