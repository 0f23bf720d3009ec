package engine

import (
	"fmt"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/internal/buffer"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
	"github.com/impact-sched/nomad-impact/scheduler/preempt"
)

type cycle struct {
	e *Engine
	// ch: what the cycle changes in the engine's memory (changes.go).
	ch   changes
	pol  *policy.Policy
	snap *cluster.Snapshot
	now  time.Time
	st   *placement.State
	plan *Plan

	// projectGPUs: GPUs held per project index (queueCache.project), for
	// quotas (addProjectGPUs).
	projectGPUs []int
	// claimed: holders already chosen as victims (or stopping ones counted
	// for a preemptor) in this cycle.
	claimed []bool
	victims []preempt.Victim
	exps    []Explanation
	// explain: build the plan's explanations and queue (see
	// WithoutExplanations); scratch stands in for them when not.
	explain bool
	scratch Explanation
	// acc is the accrue step (accrue.go).
	acc accruer
	// holds is the step that holds GPUs for earlier decisions (held.go).
	holds holdings
	// judge is the judge-running-gangs step (victims.go, idle.go,
	// gangwatch.go).
	judge judger
	// order is the order-the-queue step (queue.go, layout.go).
	order orderer
	// why is the explain step (reasons.go).
	why explainer
	// place is the place-and-reserve step (admit.go, reserve.go).
	place placer
	// pre is the preempt step (preempting.go, victimsearch.go).
	pre preempter
	// defrag is the defragment step (defrag.go).
	defrag defragger
	// hr is the headroom state (headroom.go); nil without headroom blocks.
	hr *hrCycle
	// pendingByJob indexes pending admissions by job (pendingJob).
	pendingByJob map[*cluster.Job]pendingAdmission
	// inflightAllocs: the snapshot's allocations with a stop in flight
	// (indexInflight).
	inflightAllocs map[*cluster.Alloc]struct{}
	// tierSlots: tier's recent answers.
	tierSlots [4]tierSlot
}

// boundSlot is GPUs of one node bound to job owner.
type boundSlot struct {
	owner string
	sl    placement.Slot
}

type tierSlot struct {
	name string
	t    *policy.Tier
}

// tierPool keys what the cycle works out once per tier and pool.
type tierPool struct{ tier, pool string }

func newCycle(e *Engine, snap *cluster.Snapshot, now time.Time) *cycle {
	c := &cycle{
		e:    e,
		pol:  e.pol,
		snap: snap,
		now:  now,
		plan: &Plan{
			Now:             now,
			SnapshotVersion: snap.Version(),
			Explanations:    map[string]*Explanation{},
		},
		explain: !e.opts.noExplain,
	}
	c.acc.c, c.holds.c, c.judge.c, c.order.c = c, c, c, c
	c.why.c, c.place.c, c.pre.c, c.defrag.c = c, c, c, c
	c.place.poolMax = map[string][3]int{}
	return c
}

func (c *cycle) run() {
	c.acc.expireInflight()
	c.indexInflight()
	var stopping func(*cluster.Alloc) bool
	if len(c.inflightAllocs) > 0 {
		stopping = c.stopOrdered
	}
	// The queue cache and the placement state are built from the same
	// snapshot by disjoint code (the queue cache and the placement cache
	// are separate, the snapshot is immutable).
	newState := func() { c.st = placement.New(c.snap, stopping, c.e.cache) }
	// The placement state is the longer of the two on a new engine too
	// (BenchmarkDecide: 3.8 against 3.1 ms at the median) since the queue
	// cache's entries are laid out in shared arrays.
	c.sideBySide(newState, c.order.refreshQueue)
	// Judging the running gangs (victims, idle, the gang watch) and
	// ordering the queue read the same state and write disjoint parts of
	// the cycle. The spec facts both need are worked out before
	// (managedFacts; the queue's came with refreshQueue), so neither fills
	// a shared cache.
	c.claimed = buffer.Zeroed(&c.e.scratch.claimed, len(c.st.Holders()))
	facts := c.judge.managedFacts()
	c.acc.accrue(c.st.Holders(), facts)
	c.holds.holdPending()
	c.holds.holdBindings()
	var lay *queueLayout
	order := func() {
		queue := c.order.buildQueue()
		c.headroomBegin(queue, facts)
		lay = c.order.layOut(queue, c.e.queue.oneArray)
	}
	judge := func() {
		c.judge.assessHolders(facts)
		c.judge.watchGangs()
	}
	// Judging a running gang costs about twice ordering a queued job.
	if c.e.queue.queuedLen > 2*len(c.st.Holders()) {
		c.sideBySide(order, judge)
	} else {
		c.sideBySide(judge, order)
	}
	decideAll := func() {
		for i := range lay.len() {
			q := lay.at(i)
			if !c.explain && c.onlyWaits(q) {
				continue
			}
			c.decide(q, i+1)
		}
	}
	// The plan's queue and its index of explanations depend only on the
	// order, not on the decisions: they are written beside them, once the
	// rest of the queue is laid out.
	beside := func() {
		lay.fillRest()
		if c.explain {
			c.indexExplanations(lay)
		}
	}
	if c.explain {
		c.exps = make([]Explanation, lay.len())
	}
	if c.twoCores() {
		c.sideBySide(decideAll, beside)
	} else {
		beside()
		decideAll()
	}
	c.st.Commit()
	c.plan.Headroom = c.headroomStatus()
	if c.e.logger.IsDebug() {
		c.e.logger.Debug("cycle decided", "snapshot", c.snap.Version(), "queued", lay.len(),
			"admitted", len(c.plan.Admissions), "preempted", len(c.plan.Preemptions),
			"reservations", c.place.count(), "free_gpus", c.st.FreeGPUs(""))
	}
}

// sideBySideFrom is the size of a snapshot (jobs plus allocations) from
// which sideBySide uses a second goroutine: below it the hand-off costs
// more than the work it shares.
const sideBySideFrom = 2048

// twoCores: the snapshot is large enough for sideBySide to use a second
// goroutine.
func (c *cycle) twoCores() bool { return c.snap.NumJobs()+c.snap.NumAllocs() >= sideBySideFrom }

// sideBySide runs a and b, which must touch disjoint state, and returns
// when both are done: b on a goroutine of its own when the snapshot is
// large enough for two cores to gain. a runs on the calling goroutine:
// callers pass the longer task first, because the second goroutine
// starts late, and only behind the longer task is that hidden. Measured
// over 100 new-engine cycles of BenchmarkDecide's cluster on the 2-core
// VM: 0.18 ms late at the median, 1.7-3.1 ms at p90. The long waits come
// while the garbage collector marks: the other core runs its idle mark
// worker, which gives way only to goroutines queued on its own core or
// globally, not to one queued on the caller's.
func (c *cycle) sideBySide(a, b func()) {
	if !c.twoCores() {
		a()
		b()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b()
	}()
	a()
	<-done
}

func earliestStart(allocs []*cluster.Alloc) time.Time {
	var t time.Time
	for _, a := range allocs {
		if t.IsZero() || a.Start.Before(t) {
			t = a.Start
		}
	}
	return t
}

func (c *cycle) request(q *queued, allowReserved bool) placement.Request {
	req := placement.Request{Pool: q.pool, AllowReserved: allowReserved, LocalityLabels: c.e.opts.localityLabels, DistinctHosts: q.job.DistinctHosts}
	for gi := range q.job.Groups {
		g := &q.job.Groups[gi]
		topo := g.Spec.Topology
		if topo == policy.TopologyUnset {
			topo = q.job.Spec.Topology
		}
		pg := placement.Group{Name: g.Name, Count: g.Count, GPUs: g.GPUs, Topology: topo,
			DistinctHosts: g.DistinctHosts, Constraints: g.Constraints}
		if len(g.Devices) > 0 {
			pg.Blocks = make([]placement.Block, len(g.Devices))
			for i, d := range g.Devices {
				pg.Blocks[i] = placement.BlockOf(d)
			}
		}
		req.Groups = append(req.Groups, pg)
	}
	return req
}

// decide settles one queued job, in queue order: held back (parked,
// admitted already, deferred, too big, over quota, kept out of a
// headroom), admitted where it fits, else preempting, else moving small
// jobs out of its way (defrag.go), else reserving.
func (c *cycle) decide(q *queued, pos int) {
	exp := c.explanation(q, pos)
	if c.heldBack(q, exp) {
		if exp.Status == StatusParked {
			c.holds.dropSpent(q, exp)
		}
		return
	}
	if give := c.headroomProtect(q); give != nil {
		defer give()
	}
	if back := c.holds.lend(q, exp); back != nil {
		defer back()
	}
	if c.place.tryAdmit(q, exp, pos) {
		return
	}
	exp.Status = StatusWaiting
	if c.pre.tryPreempt(q, exp) || c.defrag.tryDefragment(q, exp) {
		return
	}
	if !c.place.full() {
		c.place.reserve(q, exp)
	}
}

// onlyWaits reports, for an engine without explanations, that deciding q
// could only leave it waiting and change nothing: it needs more GPUs than
// are free (reserved ones too) in all pools, no GPU is bound to it, every
// reservation is taken, no headroom keeps it out (see below), and it may
// not preempt: its tier may preempt no one (and no job is idle), or no
// preemption may be ordered or waited for any more this cycle. GPUs bound
// to other preemptors are theirs alone, and only a job that may preempt
// waits for gangs already stopping (tryPreempt), so neither matters to
// it. A long queue behind a full cluster is then settled without a look
// at each job beyond its size (its explanation is not kept anyway). The
// one thing decide would still note, an expired deferral, is noted here.
func (c *cycle) onlyWaits(q *queued) bool {
	if c.holds.lent(q) || !c.place.full() {
		return false
	}
	if c.headroomKeepsOut(q) {
		// headroomProtect would take the headroom's free GPUs and give
		// them back, which reorders placement's buckets of nodes by free
		// GPUs: later placements break ties by that order, so skipping it
		// would decide otherwise than an engine with explanations.
		return false
	}
	if c.pre.mayTryPreempting(q) {
		if c.pre.unclaimedStoppingGPUs() != 0 {
			return false // it may wait for those
		}
		if !c.pre.spent() {
			return false
		}
	}
	if q.gpus <= c.st.FreeGPUs("")+c.st.ReservedFreeGPUs("") {
		return false
	}
	if d, ok := c.e.deferred[q.id]; ok && !c.now.Before(d.until) {
		c.ch.deferralsOver = append(c.ch.deferralsOver, q.id)
	}
	return true
}

// explanation is the job's explanation in the plan, or a scratch one
// when the plan carries none.
func (c *cycle) explanation(q *queued, pos int) *Explanation {
	if !c.explain {
		// Decisions never read what explanations say: a scratch one
		// takes what is written.
		c.scratch = Explanation{}
		return &c.scratch
	}
	// indexExplanations writes what the queue alone says, on the
	// other goroutine: decide writes only the other fields.
	return &c.exps[pos-1]
}

// indexExplanations writes into c.exps what the queue says of each job
// (ID, position, score, tier, project, GPUs) and fills the plan's Queue
// and Explanations (pointers into c.exps) in queue order. It reads only
// the queue and writes only fields decide never reads nor writes, so it
// runs while the jobs are decided, off the decisions' path.
func (c *cycle) indexExplanations(lay *queueLayout) {
	n := lay.len()
	for i := range n {
		q, exp := lay.filled(i), &c.exps[i]
		exp.JobID, exp.Position, exp.GPUs = q.id, i+1, q.gpus
		if !q.parked {
			exp.Score, exp.Tier, exp.Project = c.order.scoreOf(q), q.f.tier, q.f.project
		}
	}
	c.plan.Queue = make([]string, n)
	c.plan.Explanations = make(map[string]*Explanation, n)
	for i := range n {
		id := c.exps[i].JobID
		c.plan.Queue[i] = id
		c.plan.Explanations[id] = &c.exps[i]
	}
}

// heldBack settles a job that may not be placed this cycle whatever is
// free: parked, admitted by an earlier cycle, deferred, larger than any
// node set of its pool, over its project's quota, or kept out by a
// headroom.
func (c *cycle) heldBack(q *queued, exp *Explanation) bool {
	if q.parked {
		exp.Status, exp.Reason = StatusParked, q.parkedReason(c.pol)
		return true
	}
	if p, ok := c.pendingJob(q.job); ok {
		exp.Status, exp.Reason = StatusAdmitted, "admitted; waiting for its allocations to start"
		exp.Placement, exp.Warnings = p.groups, p.warnings
		return true
	}
	if d, ok := c.e.deferred[q.id]; ok {
		if c.now.Before(d.until) {
			exp.Status = StatusWaiting
			if c.explain {
				exp.Reason = fmt.Sprintf("held back until %s: %s", d.until.UTC().Format(time.RFC3339), d.why)
			}
			return true
		}
		c.ch.deferralsOver = append(c.ch.deferralsOver, q.id)
	}
	if why := c.place.tooBig(q); why != "" {
		exp.Status, exp.Reason = StatusParked, why
		return true
	}
	if held := c.projectGPUsOf(q.f.proj); q.f.quota > 0 && held+q.gpus > q.f.quota {
		exp.Status = StatusWaiting
		if c.explain {
			exp.Reason = fmt.Sprintf("project %q quota: holds %d of %d GPUs, job needs %d", q.f.project, held, q.f.quota, q.gpus)
		}
		return true
	}
	if why := c.headroomBlocks(q); why != "" {
		exp.Status, exp.Reason = StatusWaiting, why
		return true
	}
	return false
}
