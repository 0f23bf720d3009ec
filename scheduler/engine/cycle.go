package engine

import (
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/internal/buffer"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
	"github.com/impact-sched/nomad-impact/scheduler/preempt"
)

// cycle is one Decide: the shared state its steps read and write (the
// snapshot, the placement state, the plan, the running gangs as judged,
// the memory it changes), and the steps, each a type that owns its own
// state and caches, run in a fixed order by run. A step's fields are its
// own: other code calls its methods and never reads or writes its fields
// (scripts/check-imports.sh enforces it).
type cycle struct {
	e    *Engine
	pol  *policy.Policy
	snap *cluster.Snapshot
	now  time.Time
	plan *Plan
	// explain: build the plan's explanations and queue (see
	// WithoutExplanations).
	explain bool
	// mem: the engine's memory as the cycle sees it, and what the cycle
	// changes in it (changes.go).
	mem cycleMemory
	// st: the cycle's capacity, one transaction per decision (buildState).
	st *placement.State
	// victims: what each running gang (by holder) is as a victim (the
	// judge step); claimed: those already chosen as victims, or stopping
	// ones counted for a preemptor, this cycle (preempter.claim).
	victims []preempt.Victim
	claimed []bool
	// projectGPUs: GPUs held per project index (queueCache.project), for
	// quotas (addProjectGPUs).
	projectGPUs []int
	// tierSlots: tier's recent answers.
	tierSlots [4]tierSlot

	// The steps, in the order run calls them.
	acc    accruer   // accrue.go: usage charged, stops expired
	wall   walltimes // walltime.go: run times learned, walltimes estimated
	pace   endPace   // endpace.go: natural ends learned, their chance to come first
	holds  holdings  // held.go: GPUs held for earlier decisions
	judge  judger    // victims.go, idle.go, gangwatch.go: running gangs
	order  orderer   // queue.go, layout.go: the queue ordered
	hr     *hrCycle  // headroom*.go: nil without headroom blocks
	cuts   cutter    // cuts.go: preemptions that cut the pool, undone
	place  placer    // admit.go, reserve.go: placed, reserved
	pre    preempter // preempting.go, victimsearch.go: preempting
	defrag defragger // defrag.go: moving small jobs out of the way
	why    explainer // reasons.go: explanations
}

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
		mem:     cycleMemory{e: e, snap: snap, now: now},
	}
	c.acc, c.holds, c.judge, c.order = accruer{c}, holdings{c: c}, judger{c: c}, orderer{c: c}
	c.place = placer{c: c, poolMax: map[string][3]int{}}
	c.pre, c.defrag, c.why = preempter{c: c}, defragger{c: c}, explainer{c: c}
	c.cuts = cutter{c: c}
	c.pace = endPace{c: c}
	c.wall = newWalltimes(c)
	return c
}

// Cost. A full pool rejects a job in O(1) from the free-capacity index,
// victim searches per cycle are capped, and the shadow schedule of a
// reservation tries a handful of placements, not one per running gang.
//
// Long queues stay cheap: the queued jobs' static facts (tier, project,
// pool, impact, GPUs) are kept per shard of the snapshot's job table and
// redone only for shards that changed, and the policy's answers per
// distinct tier/project are worked out once; scores are recomputed each
// cycle (they depend on now and usage), laid out in the last cycle's
// order and mended (radix-sorted when much moved, or at once by a new
// engine: scheduler/internal/radix); waiting reasons are formatted once
// per distinct sentence, and a reason with a note appended is memoized
// by the pair of strings (explainer.cat). Without explanations, a job
// that could only wait is settled by its size (onlyWaits) unless deciding
// it would touch the placement state: placements break ties by the
// order of the free-capacity index, which every take and give-back
// changes, so a skipped operation would make the quiet engine decide
// otherwise. Placement keeps the running allocations in gang order
// across cycles and merges in only the changed shards.
//
// A cold cycle (a new engine: a new leader, BenchmarkDecide) reads every
// job, allocation and node of the snapshot once, mostly as cache misses:
// the fields it reads come first in cluster.Job and in a queued entry
// (120 bytes: what every job of a tier and project shares is behind one
// pointer), tier, project and pool names are interned when metadata is
// parsed, and an allocation's node and GPU IDs are its node's own
// strings (cluster.Store.UpsertAlloc). It allocates as little as it can,
// because the collector's work grows with the bytes and objects a cycle
// makes: the queue cache's shards and placement's node statics are
// windows of a few shared arrays, the queue is decided where it lies in
// the cache (one array, no layout copy), and a running gang's victim and
// idle records keep only what most gangs need.

// run is the cycle: its steps in their fixed order. Steps that read the
// same state and write disjoint parts of the cycle run side by side on a
// large snapshot (sideBySide); the decisions stay in queue order.
func (c *cycle) run() {
	c.acc.expireInflight()
	c.withdrawStops()
	// The placement state is the longer of the two on a new engine too
	// (BenchmarkDecide: 3.8 against 3.1 ms at the median).
	c.sideBySide(c.buildState, c.order.refreshQueue)
	facts := c.judge.managedFacts()
	c.acc.accrue(c.st.Holders(), facts)
	c.wall.begin(facts)
	c.pace.learn()
	c.holds.holdPending()
	c.holds.holdBindings()
	c.cuts.begin()
	var lay *queueLayout
	order := func() { lay = c.order.run(facts) }
	judge := func() { c.judge.run(facts) }
	// Judging a running gang costs about twice ordering a queued job.
	if c.e.queue.queuedLen > 2*len(c.st.Holders()) {
		c.sideBySide(order, judge)
	} else {
		c.sideBySide(judge, order)
	}
	c.why.begin(lay.len())
	// The plan's queue and explanations' index depend only on the order,
	// not on the decisions: they are written beside them.
	beside := func() { lay.fillRest(); c.why.indexExplanations(lay) }
	if c.twoCores() {
		c.sideBySide(func() { c.decideAll(lay) }, beside)
	} else {
		beside()
		c.decideAll(lay)
	}
	c.st.Commit()
	c.plan.Headroom = c.hr.status(c.place.idleReserved())
	c.plan.CutGPUsKept = c.cuts.keptGPUs()
	if c.e.logger.IsDebug() {
		c.e.logger.Debug("cycle decided", "snapshot", c.snap.Version(), "queued", lay.len(),
			"admitted", len(c.plan.Admissions), "preempted", len(c.plan.Preemptions),
			"reservations", c.place.count(), "free_gpus", c.st.FreeGPUs(""))
	}
}

// buildState builds the cycle's capacity (placement.State) from the
// snapshot, the stops in flight counted as stopping. It runs beside the
// queue cache's refresh: both read the immutable snapshot and write
// disjoint caches.
func (c *cycle) buildState() {
	c.mem.indexInflight()
	var stopping func(*cluster.Alloc) bool
	if len(c.mem.inflightAllocs) > 0 {
		stopping = c.mem.stopOrdered
	}
	c.st = placement.New(c.snap, stopping, c.e.cache)
	c.claimed = buffer.Zeroed(&c.e.scratch.claimed, len(c.st.Holders()))
}

// decideAll decides the laid-out queue in order, then the moves left for
// last (decide.go). Each job that still waits for GPUs once decided
// (neither admitted, now or by an earlier cycle, nor preempting) is
// counted ahead of the jobs behind it (endPace.waits): they get GPUs that
// free only after it.
func (c *cycle) decideAll(lay *queueLayout) {
	c.cuts.prepare(lay)
	for i := range lay.len() {
		q := lay.at(i)
		if !c.explain && c.onlyWaits(q, i+1) {
			if _, pending := c.mem.pendingJob(q.job); !pending {
				c.pace.waits(q)
			}
			continue
		}
		if s := c.decide(q, i+1); s != StatusAdmitted && s != StatusPreempting {
			c.pace.waits(q)
		}
	}
	c.defrag.moveLast(lay)
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
