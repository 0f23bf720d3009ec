// Package engine runs the scheduling cycle: snapshot -> ordered decisions
// -> plan. It is the one entry point the live service (scheduler/agent via
// scheduler/nomad) and the simulator (scheduler/sim) share.
//
// One Decide(snapshot, now):
//
//  1. Charge fair-share usage for the GPU time allocations used since the
//     previous cycle (decayed with the policy's half-life): the running
//     ones, and those that finished meanwhile (cluster.Store.FinishAlloc).
//  2. Build the cycle's capacity (placement.State) from the snapshot.
//  3. Order the queued jobs by impact score (tier x project weight,
//     fair-share deficit, deadline urgency, age), keeping every term; jobs
//     with bad metadata are parked with the error as the reason.
//  4. For each job in order: place every group all-or-nothing on free GPUs
//     (topology-aware, best fit, honouring the job's distinct_hosts and
//     node constraints, and Nomad's device-group rule: each device block's
//     GPUs from one device group it matches, within its own ${device.ids};
//     a block no device group of the pool can ever hold parks the job with
//     a reason naming group_by). If it does not fit and its tier may
//     preempt, choose the cheapest whole gangs to stop (preemptible, of a
//     tier it may preempt, past min runtime), only if the gain exceeds the
//     cost and the policy's limits allow (the hourly budget of work lost
//     is the preemptor tier's own when the policy gives it one, else the
//     shared one). The victim set is minimal: the search frees room one
//     allocation at a time, cheapest first, so afterwards each victim,
//     costliest first, is spared if the whole job still places without it
//     (a 2x8 preemptor takes a 3x8 gang alone, not the 3x8 and a 2x4);
//     a gang is then placed whole on what its victims free, and the
//     preemption stands only if the admission's own placement takes the
//     job on what its victims free (the search places one allocation at
//     a time and cannot see the rules that bind a group's allocations
//     together); a preemption that stops no gang is never ordered. The GPUs
//     chosen for the preemptor are bound to it: until it is admitted,
//     leaves the queue or the binding expires (the victims' longest grace
//     plus the admission TTL), no other job, its victims included, is
//     admitted onto them, even as backfill. It is admitted by a later
//     cycle, once they are free; if it then waits for no stop and still
//     does not place (a node it preempted on went down), or it is parked,
//     the binding is dropped at once: no GPU is held for a preemptor that
//     cannot use it. A new leader learns preemptions under
//     way from the adapter (Engine.Preempting).
//     Otherwise, with the policy's defragment block on (defrag.go), a job
//     for which its pool has free GPUs enough but not where it could use
//     them may stop small preemptible jobs (at most max_victim_gpus, one
//     allocation, any tier, its own included) that can be placed again at
//     once on GPUs free elsewhere after its own placement: the same
//     minimal cheapest-victim search, gain (over the block's gain horizon)
//     and cost test and budget as a preemption; the mover is bound to
//     what its victims free, and each victim to the GPUs it moves to
//     (Preemption.MovedTo; the binding is kept while it stops and until
//     it is admitted again); while they stop, the mover moves no more. A
//     new leader told of a move (Engine.Preempting: MovedTo and
//     PreemptorGPUs come from the executor's intent) restores both
//     bindings.
//     Otherwise the first blocked jobs (Backfill.Reservations of them) get a
//     reservation on the GPUs they will get when running work ends; a job
//     that does not place on its pool even empty (placement.State.Empty)
//     is parked with each node's reason instead, and holds nothing; later
//     jobs may use reserved GPUs only if they end (by walltime) before the
//     reservation is needed, or are preemptible by the reserving job.
//     With a policy headroom block for the job's pool (headroom.go), a
//     non-preemptible job of a tier that may not use the headroom waits
//     (neither preempting nor reserving) when it would leave fewer than
//     the headroom's GPUs free of such work, and never takes the GPUs the
//     headroom keeps (on the first ceil(size / node GPUs) nodes free of
//     such work: whole nodes, and on the last only what is left of the
//     size), not even those of a gang stopping there; jobs of the headroom's tiers may preempt
//     preemptible work of the pool before its minimum runtime; preemptible
//     work of the other tiers goes to the headroom's nodes first when it
//     fits there (headroom_prefer.go), leaving the rest of the pool to the
//     work the headroom keeps out. A learned headroom is sized from the
//     arrivals of its tiers over a window.
//  5. Return the plan: admissions with node and GPU choices (per
//     allocation its GPU IDs and their islands, and each device block's
//     GPUs: what the adapter pins; a task with several GPU blocks whose
//     driver is not impact-exec gets a warning), preemptions
//     with grace and checkpoint signal, and an explanation per queued job.
//
// Before step 4 every running gang is judged against its tier's idle
// policy from the utilisation samples the adapter fed (ObserveUtilization;
// see idle.go): idle (its GPUs' mean below the threshold for the
// duration), hung (every allocation idle at once). An idle gang on the
// preemptible action becomes a victim for waiting work of its tier or a
// heavier one; a hung gang on the requeue action is stopped (Plan.Reclaims);
// Plan.Running shows every running gang's utilisation and idle time.
//
// Before the queue is decided, the gang watch looks at the running gangs:
// one missing a member (gone without completing, told to stop by someone
// else, on a node that is down or draining, or replaced by Nomad with a
// member of a later generation) for longer than the policy's gangs
// missing_member_grace is put in Plan.Requeues, to be checkpointed,
// stopped and parked whole like a preemption without a preemptor. Only
// GPU groups count (they are what an admission places); members that
// completed on their own (cluster.Job.Completed) are done, not missing; a
// gang whose admission is still under way is left to the adapter's
// admission deadline.
//
// Between cycles the engine remembers (and Memory/WithMemory persist) the
// decayed usage and the preemption budget; it also remembers the
// admissions and preemptions it ordered that the snapshot does not show
// yet, so a cycle that runs before the adapter's actions took effect
// neither admits a job twice, nor double-books its GPUs, nor preempts
// again (an admission's GPUs are held until allocations of it appear; an
// allocation of the job's earlier run, still stopping, is not one of
// them: a moved job restarts before its old allocation ends). A cycle writes none of that memory while it decides: it records
// its changes (changes.go) and Decide applies them once at the end, so
// the steps cannot read each other's half-made state.
//
// Files follow the cycle's responsibilities: cycle.go (the cycle's state
// and the per-job decision), entry.go (what the queue keeps of a
// waiting job), facts.go (the policy's answers per tier and project),
// queue.go and radix.go (ordering),
// layout.go (the ordered queue laid out for deciding),
// accrue.go (charging usage, expiring stops), held.go (GPUs held for
// earlier admissions and for preemptors' bindings), gangwatch.go,
// idle.go, victims.go (who may be preempted, at what cost),
// preempting.go (whether and for whom to preempt, the stops ordered),
// victimsearch.go (the victim search), defrag.go (defragmenting
// preemptions), reserve.go (reservations and
// backfill), headroom.go and headroom_prefer.go, admit.go (an admission's placement and
// warnings), reasons.go (waiting jobs' sentences), changes.go (the
// memory a cycle changes), scratch.go (working memory reused from cycle
// to cycle), plan.go (the plan's types).
//
// Cost is bounded: a full pool rejects a job in O(1) from the free-capacity
// index, victim searches per cycle are capped, and the shadow schedule of a
// reservation tries a handful of placements, not one per running gang.
//
// Long queues stay cheap: the queued jobs' static facts (tier, project,
// pool, impact, GPUs) are kept per shard of the snapshot's job table and
// redone only for shards that changed, and the policy's answers per
// distinct tier/project are worked out once; scores are recomputed each
// cycle (they depend on now and usage), laid out in the last cycle's
// order and mended (radix-sorted when much moved, or at once by a new
// engine: scheduler/internal/radix); waiting reasons are formatted once
// per distinct sentence, and a reason with a note appended is memoized by
// the pair of strings (cat). Without explanations, a job that
// could only wait is settled by its size (onlyWaits) unless deciding it
// would touch the placement state: placements break ties by the order of
// the free-capacity index, which every take and give-back changes, so a
// skipped operation would make the quiet engine decide otherwise. Placement keeps the running
// allocations in gang order across cycles and merges in only the changed
// shards. Work that reads the same state and writes disjoint parts of the
// cycle runs on two goroutines: the queue cache is refreshed while the
// placement state is built; the running gangs are judged while the queue
// is ordered; the plan's queue index, and the fields of each explanation
// the queue alone gives (ID, position, score, tier, project, GPUs), are
// filled while the jobs are decided. Decisions stay sequential, in queue
// order.
//
// A cold cycle (a new engine: a new leader, BenchmarkDecide) reads every
// job, allocation and node of the snapshot once, mostly as cache misses:
// the fields it reads come first in cluster.Job and in a queued entry
// (120 bytes: what every job of a tier and project shares is behind one
// pointer), tier, project and pool names are interned when metadata is
// parsed, and an allocation's node and GPU IDs are its node's own
// strings (cluster.Store.UpsertAlloc). It allocates as little as it can, because
// the collector's work grows with the bytes and objects a cycle makes:
// the queue cache's shards and placement's node statics are windows of a
// few shared arrays, the queue is decided where it lies in the cache
// (one array, no layout copy), and a running gang's victim and idle
// records keep only what most gangs need. TestGoldenPlans
// pins the decisions (testdata/plans.golden), so that a change made for
// speed cannot change a plan, and checks that engines with and without
// explanations decide the same.
//
// The engine reads no clock: `now` is an argument, so the simulator can
// replay months in seconds and tests are exact.
package engine
