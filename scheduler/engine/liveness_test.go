package engine

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// Liveness as a tested property: no job may hold a pool hostage. A random
// cluster (1-8 nodes of 4 or 8 GPUs, one or two NVLink islands, device
// groups by model, by island or none, two pools) lives through many
// cycles of random jobs (gangs of several groups and counts, every
// topology, distinct_hosts, tiers, preemptibility, durations) and random
// events (completions, member failures, node loss and return, purges).
// The plan of every cycle is carried out the way the adapter does: an
// admission starts its allocations, a stop takes up to two cycles (the
// grace), a stopped gang is queued again. After every cycle:
//
//   - a job parked as "cannot be placed ... even with no other work
//     running" really cannot: placed alone on its empty pool, it is not
//     admitted either;
//   - every job said to be preempting names victims, and each of them is
//     really stopping: no GPU is held for a preemptor without a stop in
//     flight;
//   - a job alone in its empty pool that fits it is admitted at once;
//   - free GPUs do not stay idle beyond one cycle while a waiting job fits
//     them and nothing reserves them: once the plans of two cycles in a
//     row are carried out, no job that waited in both, in cycles without
//     reservations, stops or GPUs kept for narrower jobs (a cut undone,
//     cuts.go), fits what is left free.
//
// The oracle for "fits" is a fresh engine deciding the job alone, so the
// property holds the cycle's memory (holds, bindings, reservations)
// against the placement rules themselves.
func TestPropertyLiveness(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		w := newLiveWorld(rt)
		cycles := rapid.IntRange(5, 40).Draw(rt, "cycles")
		for range cycles {
			w.events(rt)
			snap := w.store.Snapshot()
			plan := w.eng.Decide(snap, w.now)
			if err := ValidatePlan(w.pol, snap, plan); err != nil {
				rt.Fatalf("at %s: invalid plan: %v", w.now.Format(time.TimeOnly), err)
			}
			w.apply(rt, snap, plan)
			w.check(rt, snap, plan)
			w.now = w.now.Add(liveStep)
		}
	})
}

// liveStep is the time between two cycles.
const liveStep = 10 * time.Second

type liveWorld struct {
	pol   *policy.Policy
	eng   *Engine
	store *cluster.Store
	now   time.Time
	seq   int
	// ends: when each running job completes on its own.
	ends map[string]time.Time
	runs map[string]time.Duration
	// stopping: allocations told to stop, and when they end.
	stopping map[string]time.Time
	// idle: jobs that waited, at the last cycle, while the GPUs left free
	// fitted them and nothing reserved them.
	idle map[string]bool
}

func newLiveWorld(rt *rapid.T) *liveWorld {
	pol := policy.Default()
	pol.Preemption.MinRuntime = time.Duration(rapid.IntRange(0, 3).Draw(rt, "minrt")) * liveStep
	pol.Gangs.MissingMemberGrace = time.Duration(rapid.IntRange(0, 3).Draw(rt, "gangGrace")) * liveStep
	pol.Backfill.Reservations = rapid.IntRange(0, 2).Draw(rt, "reservations")
	w := &liveWorld{pol: pol, store: cluster.NewStore(), now: t0,
		ends: map[string]time.Time{}, runs: map[string]time.Duration{}, stopping: map[string]time.Time{}}
	w.eng = mustEngine(rt, pol)
	nodes := rapid.IntRange(1, 8).Draw(rt, "nodes")
	for i := range nodes {
		gpus := rapid.SampledFrom([]int{4, 8}).Draw(rt, "gpus")
		islands := rapid.IntRange(1, 2).Draw(rt, "islands")
		opts := []nodeOpt{}
		if g := rapid.SampledFrom([]string{"", "model", "island"}).Draw(rt, "groupBy"); g != "" {
			opts = append(opts, grouped(g))
		}
		if rapid.IntRange(0, 4).Draw(rt, "otherPool") == 0 {
			opts = append(opts, inPool("other"))
		}
		mustDo(rt, w.store.UpsertNode(mkNode(fmt.Sprintf("n%d", i), gpus, islands, opts...)))
	}
	return w
}

// events draws what happens before a cycle: arrivals, ends, failures.
func (w *liveWorld) events(rt *rapid.T) {
	snap := w.store.Snapshot()
	// Stops and runs that are over.
	for id, end := range w.stopping {
		if !end.After(w.now) {
			w.finish(id)
		}
	}
	for id, end := range w.ends {
		if j, ok := snap.Job(id); ok && j.State == cluster.JobRunning && !end.After(w.now) {
			w.purge(snap, id) // completed: Nomad's job is dead and leaves the model
		}
	}
	w.requeueStopped()
	snap = w.store.Snapshot()
	for range rapid.IntRange(0, 2).Draw(rt, "arrivals") {
		w.submit(rt)
	}
	switch rapid.IntRange(0, 9).Draw(rt, "event") {
	case 0: // a member fails
		if allocs := liveAllocs(snap, w.stopping); len(allocs) > 0 {
			a := rapid.SampledFrom(allocs).Draw(rt, "failed")
			w.finish(a.ID)
			w.rollbackUnseen(snap, a)
		}
	case 1: // a node is lost: its allocations with it
		nodes := snap.Nodes()
		n := *rapid.SampledFrom(nodes).Draw(rt, "lost")
		n.Ready = !n.Ready
		mustDo(rt, w.store.UpsertNode(&n))
		if !n.Ready {
			for _, a := range snap.Allocs() {
				if a.NodeID == n.ID {
					w.finish(a.ID)
					w.rollbackUnseen(snap, a)
				}
			}
		}
	case 2: // a user purges a job, queued or running
		if jobs := snap.Jobs(); len(jobs) > 0 {
			w.purge(snap, rapid.SampledFrom(jobs).Draw(rt, "purged").ID)
		}
	}
}

func liveAllocs(snap *cluster.Snapshot, stopping map[string]time.Time) []*cluster.Alloc {
	var out []*cluster.Alloc
	for _, a := range snap.Allocs() {
		if _, ok := stopping[a.ID]; !ok {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b *cluster.Alloc) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func (w *liveWorld) finish(allocID string) {
	w.store.FinishAlloc(allocID, w.now)
	delete(w.stopping, allocID)
}

// rollbackUnseen: an allocation that ended before any cycle saw it
// belongs to an admission the adapter rolls back (its deadline watch sees
// the gang fail to start): the job is parked again and the engine told to
// forget the admission, as the agent does.
func (w *liveWorld) rollbackUnseen(snap *cluster.Snapshot, a *cluster.Alloc) {
	if a.Start.Before(w.now.Add(-liveStep)) {
		return // seen by a cycle: the gang watch's business
	}
	for _, o := range snap.JobAllocs(a.JobID) {
		w.finish(o.ID)
	}
	if j, ok := snap.Job(a.JobID); ok {
		cp := *j
		cp.State = cluster.JobQueued
		_ = w.store.UpsertJob(&cp)
	}
	delete(w.ends, a.JobID)
	w.eng.Forget(a.JobID)
}

func (w *liveWorld) purge(snap *cluster.Snapshot, jobID string) {
	for _, a := range snap.JobAllocs(jobID) {
		w.finish(a.ID)
	}
	w.store.DeleteJob(jobID)
	delete(w.ends, jobID)
}

// requeueStopped queues again every running job whose allocations are all
// gone (its stops ended), as the executor parks a stopped gang.
func (w *liveWorld) requeueStopped() {
	snap := w.store.Snapshot()
	for _, j := range snap.Jobs() {
		if j.State == cluster.JobRunning && len(snap.JobAllocs(j.ID)) == 0 {
			cp := *j
			cp.State, cp.Submit = cluster.JobQueued, w.now
			_ = w.store.UpsertJob(&cp)
			delete(w.ends, j.ID)
		}
	}
}

// submit queues a random job.
func (w *liveWorld) submit(rt *rapid.T) {
	w.seq++
	id := fmt.Sprintf("j%02d", w.seq)
	kv := []string{
		"impact_tier", rapid.SampledFrom([]string{"critical", "high", "normal", "scavenger"}).Draw(rt, "tier"),
		"impact_pool", rapid.SampledFrom([]string{"gpu", "gpu", "gpu", "other"}).Draw(rt, "pool"),
	}
	if p := rapid.SampledFrom([]string{"", "true", "false"}).Draw(rt, "preemptible"); p != "" {
		kv = append(kv, "impact_preemptible", p)
	}
	if tp := rapid.SampledFrom([]string{"", "nvlink", "node", "any"}).Draw(rt, "topology"); tp != "" {
		kv = append(kv, "impact_topology", tp)
	}
	run := time.Duration(rapid.IntRange(1, 20).Draw(rt, "run")) * liveStep
	if rapid.Bool().Draw(rt, "walltime") {
		kv = append(kv, "impact_walltime", run.String())
	}
	opts := []jobOpt{meta(kv...), submitted(w.now)}
	for g := range rapid.IntRange(1, 2).Draw(rt, "groups") {
		opts = append(opts, group(fmt.Sprintf("g%d", g), rapid.IntRange(1, 3).Draw(rt, "count"),
			rapid.SampledFrom([]int{1, 2, 3, 4, 8}).Draw(rt, "per")))
	}
	j := mkJob(id, opts...)
	j.DistinctHosts = rapid.IntRange(0, 3).Draw(rt, "distinct") == 0
	for gi := range j.Groups {
		j.Groups[gi].DistinctHosts = rapid.IntRange(0, 3).Draw(rt, "groupDistinct") == 0
	}
	mustDo(rt, w.store.UpsertJob(j))
	w.runs[id] = run
}

// apply carries the plan out as the adapter would: stops take up to two
// cycles, admissions start at once.
func (w *liveWorld) apply(rt *rapid.T, snap *cluster.Snapshot, plan *Plan) {
	stops := append(slices.Clip(plan.Preemptions), plan.Requeues...)
	for _, r := range plan.Reclaims {
		stops = append(stops, Preemption{Stop: r.Stop})
	}
	for i, p := range stops {
		for _, id := range p.Allocs {
			a, ok := snap.Alloc(id)
			if !ok {
				rt.Fatalf("plan stops allocation %s of %s, which is not in the snapshot", id, p.JobID)
			}
			if _, already := w.stopping[id]; already {
				continue
			}
			cp := *a
			cp.Stopping = true
			mustDo(rt, w.store.UpsertAlloc(&cp))
			w.stopping[id] = w.now.Add(time.Duration(rapid.IntRange(0, 2).Draw(rt, fmt.Sprintf("grace%d", i))) * liveStep)
		}
	}
	for _, adm := range plan.Admissions {
		j, ok := snap.Job(adm.JobID)
		if !ok {
			rt.Fatalf("plan admits %s, which is not in the snapshot", adm.JobID)
		}
		cp := *j
		cp.State = cluster.JobRunning
		mustDo(rt, w.store.UpsertJob(&cp))
		for _, g := range adm.Groups {
			for i, al := range g.Allocs {
				mustDo(rt, w.store.UpsertAlloc(&cluster.Alloc{ID: fmt.Sprintf("%s/%s/%d@%d", adm.JobID, g.Group, i, w.now.Unix()),
					JobID: adm.JobID, Group: g.Group, NodeID: al.NodeID, GPUs: slices.Clone(al.GPUs), Start: w.now}))
			}
		}
		w.ends[adm.JobID] = w.now.Add(w.runs[adm.JobID])
	}
}

// check holds the plan of one cycle (decided on snap, already carried
// out) against the properties of TestPropertyLiveness.
func (w *liveWorld) check(rt *rapid.T, snap *cluster.Snapshot, plan *Plan) {
	after := w.store.Snapshot()
	stoppingIn := map[string]bool{} // pools with an allocation stopping
	stoppingJob := map[string]bool{}
	for _, a := range after.Allocs() {
		if _, ok := w.stopping[a.ID]; ok {
			stoppingJob[a.JobID] = true
			if n, ok := after.Node(a.NodeID); ok {
				stoppingIn[n.Pool] = true
			}
		}
	}
	// Some job reserves GPUs or waits for stops, or GPUs of an ended
	// preemptor that cut the pool are kept this cycle for narrower jobs
	// (cuts.go: for one cycle, then anyone's).
	holding := plan.CutGPUsKept > 0
	for _, ex := range plan.Explanations {
		if ex.Status == StatusReserved || ex.Status == StatusPreempting {
			holding = true
		}
	}
	at := w.now.Format(time.TimeOnly)
	idleNow := map[string]bool{}
	defer func() { w.idle = idleNow }()
	for _, id := range plan.Queue {
		ex := plan.Explanations[id]
		j, _ := snap.Job(id)
		pool := j.Spec.Pool
		fitsEmpty := func() bool { return w.fitsAlone(rt, snap, j, true) }
		switch ex.Status {
		case StatusPreempting:
			if len(ex.Victims) == 0 {
				rt.Fatalf("at %s: %s is preempting no gang (%q)", at, id, ex.Reason)
			}
			for _, v := range ex.Victims {
				if !stoppingJob[v] {
					rt.Fatalf("at %s: %s says it stops %s, which is not stopping (%q)", at, id, v, ex.Reason)
				}
			}
			if !stoppingIn[pool] {
				rt.Fatalf("at %s: %s holds GPUs for a preemption with no stop in flight in pool %q", at, id, pool)
			}
		case StatusParked:
			if j.SpecErr == nil && strings.Contains(ex.Reason, "even with no other work running") && fitsEmpty() {
				rt.Fatalf("at %s: %s is parked as never fitting (%q) but fits its empty pool alone", at, id, ex.Reason)
			}
		case StatusWaiting:
			if w.aloneInEmptyPool(snap, j) && fitsEmpty() {
				rt.Fatalf("at %s: %s is alone in its empty pool and fits it, but waits (%q)", at, id, ex.Reason)
			}
			if !holding && !stoppingIn[pool] && w.fitsAlone(rt, after, j, false) {
				idleNow[id] = true
				if !w.idle[id] {
					continue // one cycle: a spent binding of a job later in the queue goes at its turn
				}
				rt.Fatalf("at %s: %s waits (%q) for a second cycle while the GPUs left free fit it and nothing reserves them\n%s\npending=%v bindings=%v inflight=%v deferred=%v", at, id, ex.Reason, describe(after, plan), w.eng.pending, w.eng.bindings, w.eng.inflight, w.eng.deferred)
			}
		}
	}
}

// aloneInEmptyPool: no allocation on the job's pool and no other queued
// job for it.
func (w *liveWorld) aloneInEmptyPool(snap *cluster.Snapshot, j *cluster.Job) bool {
	for _, a := range snap.Allocs() {
		if n, ok := snap.Node(a.NodeID); ok && n.Pool == j.Spec.Pool {
			return false
		}
	}
	for _, o := range snap.Jobs() {
		if o.ID != j.ID && o.State == cluster.JobQueued && o.Spec.Pool == j.Spec.Pool {
			return false
		}
	}
	return true
}

// fitsAlone: does a fresh engine admit the job as the only queued job, on
// the snapshot's nodes, with its running allocations (empty: without
// them)?
func (w *liveWorld) fitsAlone(rt *rapid.T, snap *cluster.Snapshot, j *cluster.Job, empty bool) bool {
	var jobs []*cluster.Job
	var allocs []*cluster.Alloc
	if !empty {
		for _, o := range snap.Jobs() {
			if o.State == cluster.JobRunning && o.ID != j.ID {
				jobs = append(jobs, o)
			}
		}
		allocs = snap.Allocs()
		allocs = slices.DeleteFunc(slices.Clone(allocs), func(a *cluster.Alloc) bool { return a.JobID == j.ID })
	}
	cp := *j
	cp.State = cluster.JobQueued
	one := mustSnap(rt, snap.Nodes(), append(jobs, &cp), allocs)
	plan := mustEngine(rt, w.pol).Decide(one, w.now)
	return admission(plan, j.ID) != nil
}

// describe writes a world and a plan for a failure message.
func describe(snap *cluster.Snapshot, plan *Plan) string {
	var b strings.Builder
	for _, n := range snap.Nodes() {
		fmt.Fprintf(&b, "node %s pool=%s ready=%v gpus=%d\n", n.ID, n.Pool, n.Ready, len(n.GPUs))
	}
	for _, a := range snap.Allocs() {
		fmt.Fprintf(&b, "alloc %s node=%s gpus=%v stopping=%v\n", a.ID, a.NodeID, a.GPUs, a.Stopping)
	}
	for _, j := range snap.Jobs() {
		fmt.Fprintf(&b, "job %s %s distinct=%v", j.ID, j.State, j.DistinctHosts)
		for _, g := range j.Groups {
			fmt.Fprintf(&b, " %s:%dx%d distinct=%v", g.Name, g.Count, g.GPUs, g.DistinctHosts)
		}
		b.WriteString("\n")
	}
	for _, id := range plan.Queue {
		ex := plan.Explanations[id]
		fmt.Fprintf(&b, "plan %s %s: %s\n", id, ex.Status, ex.Reason)
	}
	for _, a := range plan.Admissions {
		fmt.Fprintf(&b, "admitted %s %v\n", a.JobID, a.Groups)
	}
	return b.String()
}
