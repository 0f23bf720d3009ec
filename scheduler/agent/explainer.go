package agent

import (
	"context"
	"sort"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// Bounds on explanation writes. Each write is one HTTP round trip to
// Nomad; after a leader change every job's Variable is rewritten, so with
// thousands of queued jobs writing them inline would hold up the cycle (and
// admissions) for minutes. Writes therefore run in the background, at most
// explainConcurrency at a time, and each cycle queues at most
// explainPerCycle of them; the rest are queued by later cycles.
const (
	explainConcurrency = 8
	explainPerCycle    = 512
)

// explainWriter keeps the leader's explanation Variables in step with its
// views, in the background: each cycle hands it the new view (write),
// and up to explainConcurrency writers write what changed, most important
// first, and delete the Variables of jobs that left for good; once per
// term it sweeps the Variables of jobs that left while no agent (or an
// earlier leader) wrote. Its writers run between the cycle and Nomad, so
// it has its own lock.
type explainWriter struct {
	out     Explainer
	log     hclog.Logger
	metrics *Metrics
	// current returns the newest view (the sweep asks it which jobs exist).
	current func() *view

	mu sync.Mutex
	// written is the digest of each job's Variable as written this term.
	written map[string]string
	// queue is what is left to write, most important first; busy the jobs
	// being written now (job ID -> digest); workers the writers of term
	// still running.
	queue   []explainItem
	busy    map[string]string
	workers int
	term    uint64
	wg      sync.WaitGroup
	swept   bool // this term's sweep started
}

// explainItem is one explanation waiting to be written, or (forget) one
// job's Variable to delete because the job left for good.
type explainItem struct {
	id     string
	e      agentapi.Explanation
	digest string
	forget bool
}

// digestGone marks a forget item in busy.
const digestGone = "gone"

func newExplainWriter(out Explainer, current func() *view, m *Metrics, log hclog.Logger) *explainWriter {
	return &explainWriter{out: out, current: current, metrics: m, log: log,
		written: map[string]string{}, busy: map[string]string{}}
}

// newTerm starts a leadership term: what the previous leader wrote may
// differ, so every Variable is written again.
func (w *explainWriter) newTerm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.written = map[string]string{}
	w.resetLocked()
}

// endTerm drops the pending writes of the ending term; its writers stop
// with the term's context and record nothing.
func (w *explainWriter) endTerm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.resetLocked()
}

func (w *explainWriter) resetLocked() {
	w.term++
	w.queue = nil
	w.workers = 0
	w.busy = map[string]string{}
	w.swept = false
}

// wait returns once every writer has ended (they end with the term's
// context).
func (w *explainWriter) wait() { w.wg.Wait() }

// write hands the explanations of v that changed to background writers
// and returns at once: the cycle's duration does not depend on how many
// jobs there are or how slow Nomad answers. Each call replaces the
// pending list with its own (newer explanations, current order); a job is
// never written by two writers at once, so an older copy cannot land
// after a newer one. ctx is the term's.
//
// A job this term wrote that left the model (completed, stopped, purged)
// has its Variable deleted, first; once per term, the explanations of
// jobs that left before are swept.
func (w *explainWriter) write(ctx context.Context, v *view) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var gone []explainItem
	for id := range w.written {
		if _, ok := v.explain[id]; !ok && w.busy[id] != digestGone {
			gone = append(gone, explainItem{id: id, digest: digestGone, forget: true})
		}
	}
	sort.Slice(gone, func(i, k int) bool { return gone[i].id < gone[k].id })
	w.queue = append(gone, explainOrder(v, w.written, w.busy, explainPerCycle)...)
	if j, ok := w.out.(ExplanationJanitor); ok && !w.swept {
		w.swept = true
		w.wg.Add(1)
		go w.sweep(ctx, j)
	}
	for w.workers < explainConcurrency && w.workers < len(w.queue) {
		w.workers++
		w.wg.Add(1)
		go w.worker(ctx, w.term)
	}
}

// explainOrder returns the explanations that need writing, most important
// first: jobs whose written Variable is out of date before jobs never
// written this term (a changed decision matters more than a first copy),
// each in queue order (waiting jobs by position, then the others). Only
// what the Variable holds counts as a change (not the wait time), so a
// stable queue costs no writes. At most limit items are returned.
func explainOrder(v *view, written, busy map[string]string, limit int) []explainItem {
	var changed, fresh []explainItem
	seen := make(map[string]bool, len(v.explain))
	add := func(id string) {
		if seen[id] {
			return
		}
		seen[id] = true
		it, ok := itemFor(v, id, written, busy)
		switch {
		case !ok:
		case written[id] != "":
			changed = append(changed, it)
		default:
			fresh = append(fresh, it)
		}
	}
	for _, q := range v.queue.Jobs {
		add(cluster.JobKey(q.Namespace, q.Job))
	}
	// Jobs the queue does not list (none today), in a stable order.
	rest := make([]string, 0)
	for id := range v.explain {
		if !seen[id] {
			rest = append(rest, id)
		}
	}
	sort.Strings(rest)
	for _, id := range rest {
		add(id)
	}
	out := append(changed, fresh...)
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// itemFor is the write a job's explanation needs, if any.
func itemFor(v *view, id string, written, busy map[string]string) (explainItem, bool) {
	e, ok := v.explain[id]
	if !ok {
		return explainItem{}, false
	}
	if (e.State == agentapi.StateRunning || e.State == agentapi.StateAdmitting) && len(e.Nodes) == 0 {
		// Admitted before this agent led and no allocation placed yet:
		// the previous leader's Variable says more (score, placement)
		// than this agent knows. Once allocations run, their nodes are
		// known and it is rewritten.
		return explainItem{}, false
	}
	d := digest(e)
	if written[id] == d {
		return explainItem{}, false
	}
	if b, ok := busy[id]; ok && b == d {
		return explainItem{}, false // being written as it is
	}
	return explainItem{id: id, e: e, digest: d}, true
}

// next takes the first pending item whose job is not being written now,
// marking it busy; false when none is left, the term ended or ctx ended
// (the worker then ends).
func (w *explainWriter) next(ctx context.Context, term uint64) (explainItem, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.term != term {
		return explainItem{}, false
	}
	if ctx.Err() == nil {
		for i, it := range w.queue {
			if _, busy := w.busy[it.id]; busy {
				continue
			}
			w.queue = append(w.queue[:i:i], w.queue[i+1:]...)
			w.busy[it.id] = it.digest
			return it, true
		}
	}
	w.workers--
	return explainItem{}, false
}

// worker writes pending explanations until none is left, the term ends,
// or ctx ends.
func (w *explainWriter) worker(ctx context.Context, term uint64) {
	defer w.wg.Done()
	for {
		it, ok := w.next(ctx, term)
		if !ok {
			return
		}
		var err error
		if it.forget {
			if j, ok := w.out.(ExplanationJanitor); ok {
				err = j.ForgetExplanation(ctx, it.id)
			}
		} else {
			err = w.out.WriteExplanation(ctx, it.e)
		}
		w.done(it, term, err)
		if err != nil && ctx.Err() == nil {
			w.log.Warn("writing explanation", "job", it.id, "error", err)
			w.metrics.RecordActionError("explain")
		}
	}
}

// done records the outcome of one item (nothing if its term ended).
func (w *explainWriter) done(it explainItem, term uint64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.term != term {
		return
	}
	delete(w.busy, it.id)
	switch {
	case err != nil:
	case it.forget:
		delete(w.written, it.id)
	default:
		w.written[it.id] = it.digest
	}
}

// sweep deletes, once per term, the explanations of jobs that are no
// longer managed; it asks the newest view at each Variable.
func (w *explainWriter) sweep(ctx context.Context, j ExplanationJanitor) {
	defer w.wg.Done()
	n, err := j.SweepExplanations(ctx, func(id string) bool {
		_, ok := w.current().explain[id]
		return ok
	})
	switch {
	case err != nil && ctx.Err() == nil:
		w.log.Warn("sweeping explanations of jobs that left", "deleted", n, "error", err)
		w.metrics.RecordActionError("explain")
	case n > 0:
		w.log.Info("deleted explanations of jobs that left", "count", n)
	}
}
