package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
)

// recordingJanitor records every write, delete and sweep; writes of the
// jobs in fail fail.
type recordingJanitor struct {
	mu      sync.Mutex
	writes  []string
	forgets []string
	sweeps  int
	fail    map[string]bool
}

func (r *recordingJanitor) WriteExplanation(_ context.Context, e agentapi.Explanation) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := e.Namespace + "/" + e.Job
	r.writes = append(r.writes, id)
	if r.fail[id] {
		return errors.New("nomad said 500")
	}
	return nil
}

func (r *recordingJanitor) ForgetExplanation(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgets = append(r.forgets, id)
	return nil
}

func (r *recordingJanitor) SweepExplanations(context.Context, func(string) bool) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sweeps++
	return 0, nil
}

// take returns and clears what was recorded.
func (r *recordingJanitor) take() (writes, forgets []string, sweeps int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	writes, forgets, sweeps = r.writes, r.forgets, r.sweeps
	r.writes, r.forgets, r.sweeps = nil, nil, 0
	slices.Sort(writes)
	slices.Sort(forgets)
	return writes, forgets, sweeps
}

// idle reports whether nothing is pending or being written.
func (w *explainWriter) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue) == 0 && len(w.busy) == 0 && w.workers == 0
}

// viewOf is a view of waiting jobs with the given reasons.
func viewOf(reasons map[string]string) *view {
	v := &view{explain: map[string]agentapi.Explanation{}}
	for _, job := range slices.Sorted(func(yield func(string) bool) {
		for k := range reasons {
			if !yield(k) {
				return
			}
		}
	}) {
		e := agentapi.Explanation{Decision: DecisionWait}
		e.Namespace, e.Job, e.State, e.Reason = "default", job, agentapi.StateWaiting, reasons[job]
		v.explain["default/"+job] = e
		v.queue.Jobs = append(v.queue.Jobs, e.Entry)
	}
	return v
}

// Across cycles and terms the writer writes what changed and only that,
// deletes the Variable of a job that left, sweeps once per term, retries
// a failed write, and rewrites everything in a new term.
func TestExplainWriterScenario(t *testing.T) {
	out := &recordingJanitor{fail: map[string]bool{}}
	var cur *view
	m, err := NewMetrics()
	if err != nil {
		t.Fatal(err)
	}
	w := newExplainWriter(out, func() *view { return cur }, m, hclog.NewNullLogger())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.newTerm()
	steps := []struct {
		name         string
		newTerm      bool
		reasons      map[string]string
		fail         string
		writes, gone string
		sweeps       int
	}{
		{name: "first cycle of a term", reasons: map[string]string{"a": "needs 4 GPUs", "b": "needs 8 GPUs"},
			writes: "[default/a default/b]", gone: "[]", sweeps: 1},
		{name: "nothing changed", reasons: map[string]string{"a": "needs 4 GPUs", "b": "needs 8 GPUs"}, writes: "[]", gone: "[]"},
		{name: "a left, b changed and fails", reasons: map[string]string{"b": "needs 8 GPUs, 2 free"}, fail: "default/b",
			writes: "[default/b]", gone: "[default/a]"},
		{name: "b retried", reasons: map[string]string{"b": "needs 8 GPUs, 2 free"}, writes: "[default/b]", gone: "[]"},
		{name: "steady", reasons: map[string]string{"b": "needs 8 GPUs, 2 free"}, writes: "[]", gone: "[]"},
		{name: "a new term rewrites and sweeps", newTerm: true, reasons: map[string]string{"b": "needs 8 GPUs, 2 free"},
			writes: "[default/b]", gone: "[]", sweeps: 1},
	}
	for _, s := range steps {
		if s.newTerm {
			w.endTerm()
			w.wait()
			w.newTerm()
		}
		out.mu.Lock()
		out.fail = map[string]bool{s.fail: true}
		out.mu.Unlock()
		cur = viewOf(s.reasons)
		w.write(ctx, cur)
		waitFor(t, s.name+": writes done", w.idle)
		writes, forgets, sweeps := out.take()
		if fmt.Sprint(writes) != s.writes || fmt.Sprint(forgets) != s.gone || sweeps != s.sweeps {
			t.Fatalf("%s: wrote %v, deleted %v, swept %d; want %s, %s, %d", s.name, writes, forgets, sweeps, s.writes, s.gone, s.sweeps)
		}
	}
	cancel()
	w.wait()
}

// Writes pending when a term ends are dropped, not written by the next.
func TestExplainWriterEndTermDropsPending(t *testing.T) {
	out := &recordingJanitor{}
	m, err := NewMetrics()
	if err != nil {
		t.Fatal(err)
	}
	v := viewOf(map[string]string{"a": "x"})
	w := newExplainWriter(out, func() *view { return v }, m, hclog.NewNullLogger())
	w.newTerm()
	w.mu.Lock()
	w.queue = explainOrder(v, w.written, w.busy, explainPerCycle)
	w.mu.Unlock()
	w.endTerm()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w.wg.Add(1)
	w.worker(ctx, w.term-1) // a writer of the ended term
	if writes, _, _ := out.take(); len(writes) != 0 {
		t.Errorf("a writer of an ended term wrote %v", writes)
	}
}
