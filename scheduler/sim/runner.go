package sim

import (
	"fmt"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

type runner struct {
	hungRunning int // runs hung and not yet stopped (IdleModel)
	opts        Options
	sched       Scheduler
	st          *State
	heap        eventHeap
	seq         uint64
	now         int64
	real        int // submit, finish and release events in the heap
	dirty       bool
	next        int64 // time of the pending cycle event, -1 if none
	last        int64 // time of the last cycle, -1 before the first
	acc         accounting
	lat         []float64 // decision latencies, ms
	issued      int       // preemptions asked for
	withdrawn   int       // preemptions withdrawn within their grace
	calls       int       // scheduler calls, skipped ones included
	unsch       []string  // jobs that can never fit the cluster
	wall        time.Time
}

// newRunner builds the run's model: every node, with the engine's model of
// it, and every job (the engine's model of a job is built when it is
// submitted: submit).
func newRunner(jobs []trace.Job, sched Scheduler, opts Options) (*runner, error) {
	r := &runner{opts: opts, sched: sched, next: -1, last: -1, wall: time.Now()}
	st := &State{Model: opts.Model, running: make(map[int]*Job),
		jobByID: make(map[string]*Job, len(jobs)), nodeByID: make(map[string]*Node, len(opts.Cluster.Nodes))}
	for i, spec := range opts.Cluster.Nodes {
		n := &Node{NodeSpec: spec, Index: i, Owner: make([]int32, spec.GPUs), Free: spec.GPUs, IslandFree: make([]int, spec.Islands)}
		n.Cluster = clusterNode(n)
		st.nodeByID[n.Cluster.ID] = n
		for g := range n.Owner {
			n.Owner[g] = -1
		}
		for k := range n.IslandFree {
			n.IslandFree[k] = spec.GPUs / spec.Islands
		}
		st.Nodes = append(st.Nodes, n)
	}
	st.refreshFree()
	nodeGPUs := opts.Cluster.MaxNodeGPUs()
	capacity := opts.Cluster.GPUs()
	wideNodes := 0
	for _, n := range opts.Cluster.Nodes {
		if n.GPUs == nodeGPUs {
			wideNodes++
		}
	}
	for i := range jobs {
		j := &Job{Job: jobs[i], Index: i, Start: -1, FirstStart: -1, Finish: -1, hangAt: -1, FreeAtSubmit: -1, WidestFreeAtSubmit: -1}
		if st.jobByID[j.ID] != nil {
			return nil, fmt.Errorf("job ID %q is given twice (jobs %d and %d of the trace)", j.ID, st.jobByID[j.ID].Index, i)
		}
		j.TierRank = tierRank(j.Tier)
		j.count, j.each = GangFor(j.GPUs, nodeGPUs)
		count := j.count
		st.Jobs = append(st.Jobs, j)
		st.jobByID[j.ID] = j
		// Checked before building the ledger's members: a bad row asking
		// for a billion GPUs must not allocate a member per node's worth.
		if j.GPUs > capacity || j.TotalGPUs() > capacity || (count > 1 && count > wideNodes) {
			r.unsch = append(r.unsch, j.ID)
			continue
		}
		j.Allocs = make([]Alloc, count)
		for m := range j.Allocs {
			j.Allocs[m].Node = -1
		}
		r.push(event{t: j.Submit, kind: evSubmit, job: i})
	}
	r.st = st
	first, lastSub := int64(0), int64(0)
	if len(jobs) > 0 {
		first, lastSub = jobs[0].Submit, jobs[len(jobs)-1].Submit
	}
	if opts.WindowStart == 0 && opts.WindowEnd == 0 {
		r.opts.WindowStart, r.opts.WindowEnd = first, lastSub
	}
	r.acc.init(r, first)
	return r, nil
}

func tierRank(t string) int {
	for i, n := range trace.Tiers {
		if n == t {
			return i
		}
	}
	return len(trace.Tiers) - 1
}

func (r *runner) push(e event) {
	r.seq++
	e.seq = r.seq
	if e.kind != evCycle {
		r.real++
	}
	r.heap.push(e)
}

// requestCycle makes sure a cycle runs at t or earlier.
func (r *runner) requestCycle(t int64) {
	if r.next >= 0 && r.next <= t {
		return
	}
	r.next = t
	r.push(event{t: t, kind: evCycle})
}

// nextTick is the timer's first tick after now: the timer runs at
// multiples of the interval whatever the events, as a ticker does.
func (r *runner) nextTick() int64 {
	iv := r.opts.Model.Interval
	return (r.now/iv + 1) * iv
}

func (r *runner) loop() error {
	n := 0
	for len(r.heap) > 0 {
		e := r.heap.pop()
		if e.kind != evCycle {
			r.real--
		}
		if r.opts.MaxSimTime > 0 && e.t > r.opts.MaxSimTime {
			break
		}
		r.acc.advance(e.t)
		r.now = e.t
		switch e.kind {
		case evSubmit:
			r.submit(r.st.Jobs[e.job])
		case evFinish:
			j := r.st.Jobs[e.job]
			if j.epoch != e.epoch || (j.State != Running && j.State != Stopping) {
				continue
			}
			if j.hangAt >= 0 {
				r.killHung(j)
				continue
			}
			r.finish(j)
		case evHang:
			j := r.st.Jobs[e.job]
			if j.epoch != e.epoch || j.hangAt != e.t || (j.State != Running && j.State != Stopping) {
				continue
			}
			r.hang(j)
		case evRelease:
			j := r.st.Jobs[e.job]
			if j.epoch != e.epoch || j.State != Stopping || e.t != j.StopAt {
				continue // finished, or its stop withdrawn (and maybe ordered again since)
			}
			r.release(j)
		case evCycle:
			if e.t != r.next {
				continue // superseded by an earlier request
			}
			r.next = -1
			if err := r.cycle(); err != nil {
				return err
			}
		}
		n++
		if r.opts.Progress != nil && n%2048 == 0 && time.Since(r.wall) >= r.opts.ProgressEvery {
			r.wall = time.Now()
			r.opts.Progress(r.progress())
		}
	}
	r.acc.finishSeries(r.now)
	return nil
}

func (r *runner) progress() Progress {
	return Progress{Policy: r.sched.Name(), Now: r.now, Done: r.acc.done, Total: len(r.st.Jobs) - len(r.unsch),
		Queue: len(r.st.Queue()), WindowEnd: r.opts.WindowEnd}
}

// markDirty asks for the decision an event triggers: Debounce after it,
// or earlier if one is already due (a burst joins the first event's
// decision).
func (r *runner) markDirty() {
	r.dirty = true
	r.requestCycle(r.now + r.opts.Model.Debounce)
}

func (r *runner) submit(j *Job) {
	j.State = Pending
	j.queuedAt = r.now
	if r.opts.FreeAtSubmit {
		r.st.refreshFree()
		j.FreeAtSubmit, j.WidestFreeAtSubmit = r.st.FreeGPUs, r.st.MaxNodeFree
	}
	j.Cluster = clusterJob(&j.Job, j.count, j.each, r.opts.Model)
	r.st.pending = append(r.st.Queue(), j) // submit order: always the tail
	r.st.changes = append(r.st.changes, Change{Kind: Submitted, Job: j, Model: j.Cluster, At: r.now})
	r.acc.demand(j, +1)
	r.markDirty()
}

func (r *runner) cycle() error {
	st := r.st
	st.refreshFree()
	if len(st.Queue()) == 0 && r.hungRunning == 0 {
		r.last = r.now
		r.dirty = false
		return nil
	}
	t0 := time.Now()
	plan, err := r.sched.Schedule(st, r.now)
	if plan != nil {
		r.lat = append(r.lat, float64(time.Since(t0).Nanoseconds())/1e6)
	}
	r.calls++
	r.last = r.now
	r.dirty = false
	st.changes = st.changes[:0]
	if err != nil {
		return fmt.Errorf("t=%d: schedule: %w", r.now, err)
	}
	acted := false
	if plan != nil {
		if acted, err = r.apply(plan); err != nil {
			return fmt.Errorf("t=%d: %w", r.now, err)
		}
	}
	st.refreshFree()
	// Come back while jobs wait, even without events, unless nothing can
	// ever change: no events left and this cycle did nothing.
	// A hung run keeps the timer going too: the scheduler may reclaim it.
	if (len(st.Queue()) > 0 || r.hungRunning > 0) && (r.real > 0 || acted) {
		r.requestCycle(r.nextTick())
	}
	return nil
}

// place puts j's next unplaced member on the node and GPUs ap names.
func (r *runner) place(j *Job, ap engine.AllocPlacement) error {
	if j.State != Pending && j.State != Partial {
		return fmt.Errorf("job %s: placed while %s", j.ID, j.State)
	}
	member := j.Placed
	n := r.st.nodeByID[ap.NodeID]
	if n == nil {
		return fmt.Errorf("job %s: unknown node %q", j.ID, ap.NodeID)
	}
	if len(ap.GPUs) != j.MemberGPUs() {
		return fmt.Errorf("job %s member %d: given %d GPUs, needs %d", j.ID, member, len(ap.GPUs), j.MemberGPUs())
	}
	gpus := make([]int, len(ap.GPUs))
	for k, id := range ap.GPUs {
		g := gpuIndex(n, id)
		if g < 0 {
			return fmt.Errorf("job %s: node %s has no GPU %q", j.ID, n.Name, id)
		}
		if n.Owner[g] >= 0 {
			return fmt.Errorf("job %s: GPU %d of node %s is held by job %s", j.ID, g, n.Name, r.st.Jobs[n.Owner[g]].ID)
		}
		for _, h := range gpus[:k] {
			if h == g {
				return fmt.Errorf("job %s: GPU %d of node %s given twice", j.ID, g, n.Name)
			}
		}
		gpus[k] = g
	}
	for _, g := range gpus {
		n.Owner[g] = int32(j.Index)
		n.IslandFree[n.IslandOf(g)]--
	}
	n.Free -= len(gpus)
	j.Allocs[member] = Alloc{Node: n.Index, GPUs: gpus}
	j.Placed++
	r.acc.hold(j, len(gpus))
	if j.Placed < j.Count() {
		if j.State == Pending {
			j.partialAt = r.now
		}
		j.State = Partial
		r.acc.addPartial(len(gpus))
		return nil
	}
	if j.State == Partial {
		r.acc.addPartial(-(j.TotalGPUs() - len(gpus)))
	}
	j.State = Running
	j.Start = r.now
	if j.FirstStart < 0 {
		j.FirstStart = r.now
	}
	j.epoch++
	j.running()
	j.Run = r.runAllocs(j)
	r.startRun(j)
	r.st.pendingDirty = true
	r.st.running[j.Index] = j
	r.st.changes = append(r.st.changes, Change{Kind: Started, Job: j, Model: j.Cluster, At: r.now, Allocs: j.Run})
	r.push(event{t: j.ExpectedEnd(r.opts.Model), kind: evFinish, job: j.Index, epoch: j.epoch})
	return nil
}

// stop asks the running job s names to stop after s.Grace: a preemption,
// or the reclaim of a hung job by the scheduler's idle policy (counted
// apart; see IdleModel).
func (r *runner) stop(s engine.Stop, reclaim bool) error {
	j := r.st.jobByID[s.JobID]
	if j == nil {
		return fmt.Errorf("unknown job %q", s.JobID)
	}
	if j.State != Running {
		return fmt.Errorf("job %s: stopped while %s", j.ID, j.State)
	}
	if reclaim {
		j.reclaiming = true
	} else {
		r.issued++
	}
	j.State = Stopping
	j.StopAt = r.now + int64(s.Grace/time.Second)
	j.stopProgress = s.Progress
	// A hung run does not answer its signal; any other saves on it when
	// the model says jobs do and the grace is long enough, then exits
	// (with the requeue code, live), which ends its stop early.
	save := r.opts.Model.SaveOnSignal
	hung := j.hangAt >= 0 && r.now >= j.hangAt
	j.signalSave = !reclaim && !hung && save > 0 && int64(s.Grace/time.Second) >= save
	j.signalAt, j.signalProgress = r.now, s.ProgressOnSignal
	if j.signalSave {
		j.StopAt = r.now + save
	}
	r.st.changes = append(r.st.changes, Change{Kind: StopRequested, Job: j, Model: j.Cluster, At: r.now})
	if j.ExpectedEnd(r.opts.Model) <= j.StopAt {
		return nil // it finishes inside its grace period: the finish event ends it
	}
	r.push(event{t: j.StopAt, kind: evRelease, job: j.Index, epoch: j.epoch})
	return nil
}

// withdraw cancels the preemption of the job w names within its grace:
// it runs on as if never stopped (its release event is ignored).
func (r *runner) withdraw(w engine.Withdrawal) error {
	j := r.st.jobByID[w.JobID]
	if j == nil {
		return fmt.Errorf("unknown job %q", w.JobID)
	}
	if j.State != Stopping || j.reclaiming || r.now >= j.StopAt {
		return fmt.Errorf("job %s: stop withdrawn while %s (stop at %d, now %d)", j.ID, j.State, j.StopAt, r.now)
	}
	j.State = Running
	j.StopAt = -1
	j.signalSave = false
	r.withdrawn++
	r.st.changes = append(r.st.changes, Change{Kind: StopWithdrawn, Job: j, Model: j.Cluster, At: r.now})
	return nil
}

// freeGPUs gives back every GPU of j.
func (r *runner) freeGPUs(j *Job) {
	for m := range j.Allocs {
		a := &j.Allocs[m]
		if a.Node < 0 {
			continue
		}
		n := r.st.Nodes[a.Node]
		for _, g := range a.GPUs {
			n.Owner[g] = -1
			n.IslandFree[n.IslandOf(g)]++
		}
		n.Free += len(a.GPUs)
		r.acc.hold(j, -len(a.GPUs))
		a.Node, a.GPUs = -1, nil
	}
	j.Placed = 0
	j.Run = nil
	delete(r.st.running, j.Index)
}

func (r *runner) finish(j *Job) {
	g := int64(j.TotalGPUs())
	run := r.now - j.Start
	useful := j.Duration - j.Saved
	r.acc.work(j, useful*g, (run-useful)*g)
	j.Saved = j.Duration
	j.State = Done
	j.Finish = r.now
	held := j.Run
	r.freeGPUs(j)
	r.acc.demand(j, -1)
	r.acc.done++
	r.acc.end = r.now
	r.st.changes = append(r.st.changes, Change{Kind: Finished, Job: j, Model: j.Cluster, At: r.now, Allocs: held})
	j.Cluster = nil // the engine's model of a job leaves with it
	r.markDirty()
}

func (r *runner) release(j *Job) { r.requeue(j, false) }

// killHung ends a hung run at its walltime estimate: killed and requeued
// from its last checkpoint before the hang (see IdleModel).
func (r *runner) killHung(j *Job) { r.requeue(j, true) }

// requeue stops the current run (a preemption or reclaim at the end of its
// grace, or a hung run killed) and queues the job again with the work its
// checkpoints saved, submitted anew now (Job.queued).
func (r *runner) requeue(j *Job, killed bool) {
	m := r.opts.Model
	g := int64(j.TotalGPUs())
	var gain int64
	if m.CheckpointInterval > 0 {
		gain = j.progressAt(r.now, m) / m.CheckpointInterval * m.CheckpointInterval
	}
	signalSaved := !killed && j.signalSave
	if signalSaved {
		gain = max(gain, j.progressAt(j.signalAt, m))
	}
	run := r.now - j.Start
	r.acc.work(j, gain*g, (run-gain)*g)
	j.Saved += gain
	j.Restarts++
	switch {
	case killed:
		r.acc.hangKills++
	case j.reclaiming:
		r.acc.reclaims++
	default:
		j.Preempted++
		r.acc.preemptions++
	}
	r.endRun(j)
	j.reclaiming = false
	held := j.Run
	r.freeGPUs(j)
	progress := j.Cluster.Spec.Progress // a hung run killed: no stop says more
	switch {
	case signalSaved:
		progress = j.signalProgress
	case !killed:
		progress = j.stopProgress
	}
	j.signalSave = false
	j.queued(r.now, progress)
	j.Start = -1
	j.State = Pending
	j.queuedAt = r.now
	j.epoch++
	r.st.enqueue(j)
	r.st.changes = append(r.st.changes, Change{Kind: Requeued, Job: j, Model: j.Cluster, At: r.now, Allocs: held})
	r.markDirty()
}
