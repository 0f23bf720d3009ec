// Package nomad is the impact scheduler's adapter to HashiCorp Nomad, and
// the only package of the project that imports github.com/hashicorp/nomad/api.
// It watches Nomad (event stream + resync) into the core's cluster model,
// acts on the engine's plans (admit by re-registering a parked job pinned to
// its nodes, preempt by checkpoint signal, grace, re-park and stop), keeps
// explanations in the jobs' Nomad Variables, elects a leader through a
// Variables lock and keeps durable state (fair-share usage, intents,
// preemption records) in Variables. How it acts on Nomad is told below
// ("Consistency", "Preemption outcome contract", "What operators see in
// Nomad").
//
// # Layout
//
// One responsibility per file. The executor only carries out what the
// plan decided (pool, nodes, GPUs per device block, victims, grace,
// signal, requeue code); it refuses an admission that names no pool or
// does not say which device block gets which GPUs, rather than choosing
// itself.
//
//	client.go       Config (built by the agent from its nomad block), Client, node pool creation
//	watcher.go      Watcher: config, stats, Run (connect, resync when needed, consume, back off)
//	stream.go       the event stream: open, watchdog, de-duplicating batches, applying events
//	resync.go       full resync (list nodes, jobs, allocations; drop what vanished), reset probe
//	wire.go         the few Nomad fields decoded; slim.go trims payloads before decoding
//	mirror.go       the watcher's ModifyIndex-guarded copy of Nomad objects, flushed into cluster.Store
//	translate.go    Nomad job, group, allocation and node -> the model (device blocks, topology)
//	members.go      how a gang's members ended, replacements by name, runs Nomad ended (Job.Dead)
//	executor.go     Executor: config, Apply (starts stops, admits), claims, shared helpers
//	report.go       ApplyReport and the skip reasons
//	admit.go        admitting: intent, EnforceIndex register, a lost answer, waiting for the model
//	pins.go         the admission's node and GPU pins, and removing exactly those (parking)
//	deadlines.go    watching admissions: done, late, failed or unplaceable -> rollback
//	readback.go     reading back the GPUs Nomad allocated and counting mismatches
//	preempt.go      preempting (and whole-gang requeues): replacements stopped, signal, grace, settle, finish
//	outcome.go      how a victim's tasks ended (the outcome contract) and its counters
//	reclaim.go      reclaims of hung jobs (the preemption path, no preemptor)
//	park.go         parking a job again and stopping its allocations
//	describe.go     the status the executor writes in a job's ui.description when it re-registers it
//	recover.go      a new leader finishing or dropping the last leader's intents
//	state.go        durable state in Variables: the store, usage, requeues (idle, and gangs' runs
//	                that lost a member), preemption records
//	intents.go      intents: what the executor is about to do, written before it acts
//	explain.go      the explanation Variable (nomad/jobs/<job>/impact)
//	elector.go      leader election through a Variables lock
//	lease.go        the leader's lease beside the lock: a standby takes a crashed leader's lock over
//	                after 10s (Nomad alone frees it 2 x TTL + lock delay after the last renewal);
//	                a lease deleted under the leader is written again (recreateLease)
//	history.go      the decision history (job timelines) saved with the durable state
//	statecheck.go   the durable-state Variables compared with what the store last wrote
//	                (Drift), and the preemption records written back (RestorePreemptions)
//	gone.go         ErrGone/SkipGone: a job purged between the decision and the action
//	devicestats.go  GPU utilisation from the clients' device stats
//	bounded.go      a size-bounded map (outcome notes)
//
// # API for the agent
//
//	c, err := nomad.NewClient(cfg, logger)         // validates; does not connect (cfg: the agent
//	                                               // config's nomad block, NOMAD_* and flags merged)
//	err = c.EnsureNodePool(ctx, "impact-queue", "parking pool: jobs wait here until admitted")
//	ok, err := c.NodePoolExists(ctx, "impact-queue")   // the agent's reconciliation
//
//	w := nomad.NewWatcher(c, nomad.WatcherConfig{ParkingPool: "impact-queue"}, logger)
//	go w.Run(ctx)            // event stream + resync, until ctx ends; never gives up
//	<-w.Ready()              // first full resync done
//	snap := w.Snapshot()     // *cluster.Snapshot for engine.Decide
//	<-w.Changes()            // coalesced "the model changed" signal (debounce it)
//	w.Stats()                // LastIndex, EventsApplied, Resyncs, Reconnects, Connected, LastEventAt, NodeErrors
//
//	st := nomad.NewStateStore(c, nomad.StateConfig{}, logger)  // Variables under impact/state/
//	usage, at, err := st.LoadUsage(ctx); err = st.SaveUsage(ctx, values, at)
//	recs, err := st.Preemptions(ctx, since)                    // preemption records (the executor writes them)
//	intents, err := st.Intents(ctx)                            // admissions/preemptions under way
//	drift, err := st.Drift(ctx)        // durable-state Variables deleted or overwritten since written
//	err = st.RestorePreemptions(ctx, recs); st.ForgetWritten()  // repair; a new term
//
//	x := nomad.NewExecutor(c, st, nomad.ExecutorConfig{ParkingPool: "impact-queue",
//		AdmitDeadline: 5 * time.Minute, Snapshot: w.Snapshot}, logger)
//	err = x.Recover(ctx)            // on becoming leader: finish or drop what the last leader left
//	res := x.Apply(ctx, plan)       // *engine.Plan; ApplyReport{Admitted, Preempted, Requeued, Reclaimed, Skipped, Failed}
//	rolled := x.CheckDeadlines(ctx) // every cycle: done admissions forgotten; late, failed or (after
//	                                // BlockedGrace) unplaceable ones parked again, Nomad's reason logged
//	x.Wait()                        // on shutdown: wait for background preemptions
//
//	ew := nomad.NewExplainWriter(c, logger)
//	err = ew.WriteItems(ctx, jobID, items, at) // Variable nomad/jobs/<job>/impact, only when changed; never over a user's
//	items, err := ew.Read(ctx, jobID); err = ew.Forget(ctx, jobID) // Forget deletes only what it wrote
//	n, err := ew.Sweep(ctx, keep)              // deletes its explanations of jobs keep says are gone
//
//	elcfg := nomad.ElectorConfig{HolderID: name, TTL: 15 * time.Second} // Validate(): Nomad wants 10s..24h
//	el := nomad.NewElector(c, elcfg, logger)
//	err = el.Run(ctx, func(leaderCtx context.Context) { ... }) // runs while leading; leaderCtx ends on loss
//	el.IsLeader(); holder, err := el.Holder(ctx)
//
// Job IDs in the model and in plans are cluster.JobKey(namespace, id).
// A job is managed when it is in the parking pool (waiting: JobQueued) or
// carries the executor's pin constraint (admitted: JobRunning).
//
// # A gang's life never ends silently
//
// Whatever a job's restart and reschedule blocks say, the scheduler, not
// Nomad, decides what becomes of a gang that loses a member. With the
// example's `restart { attempts = 0 mode = "fail" }` and `reschedule {
// attempts = 0 }` a failed member fails its allocation, nothing replaces
// it, and once every member has ended Nomad marks the job dead. The model
// keeps such an admitted job (running, no allocations, cluster.Job.Dead,
// and Job.Ended saying how its members ended: "allocation 1a2b3c4d
// (train.workers[0]) of group workers failed: task trainer exited 137")
// until the engine's gang watch has requeued it whole or ended it failed;
// a dead job whose members all completed is done and leaves the model. A
// resync reads the dead jobs whose summary counts a failed or lost
// allocation (the many completed ones cost nothing).
//
// Nomad also places replacements on its own: at once for a lost member
// (linked, PreviousAllocation) and later from a blocked evaluation, e.g.
// when a lost client comes back inside the grace: those have no
// PreviousAllocation (seen on a real 2.0.5 cluster) and start beside the
// orphaned member still running there. The model flags a live allocation
// as a replacement (cluster.Alloc.Replacement) when it is linked to a
// member of the current registration, or takes the name
// ("<job>.<group>[<index>]") of one that ended without completing or of
// an older one still meant to run. The gang watch requeues a gang with a
// replacement at once; the executor stops the replacements first, without
// signal or grace, then stops the rest with the checkpoint signal. The
// executor's rewrite on admission: NodePool = the plan's pool (the engine
// resolves impact_pool and the default pool; an admission without one is
// refused); per placed group a constraint
// ${node.unique.id} set_contains_any <nodes>, distinct_hosts when every
// allocation has a node of its own, and inside each GPU device block of
// the group's tasks a constraint pinning the exact GPUs the plan gave that
// block: LTarget the comma-separated instance IDs, Operand
// set_contains_any, RTarget ${device.ids} (ownDevicePin). Nomad evaluates
// a ${device.ids} constraint the same from either side (the device group
// must hold one of the IDs, and each instance it gives must be one), so
// it allocates exactly those instances; the mirrored form (users write
// ${device.ids} on the left) is what lets parking remove exactly the
// admission's constraints and keep the user's own, including their own
// ${device.ids} constraints (which the model honours: the block may only
// get those instances). Parking removes exactly these.
//
// # GPU pins: the hard cases
//
//   - Several allocations of one group on one node: a device constraint
//     applies to every allocation of the group alike, so each block is
//     pinned to the union of its GPUs over the group's allocations (IDs are
//     unique across nodes, so one list serves all nodes). Nomad then
//     splits that union among the allocations as it likes; the total is
//     exact. Placement keeps it exact for NVLink asks too: a group asking
//     impact_topology = "nvlink" whose allocations share a node where a
//     device group spans islands (group_by "model") puts them in one
//     island there, so any split stays NVLink-connected.
//   - Several device blocks in one task (or several tasks with GPUs):
//     each block gets its own disjoint GPUs, each from one device group it
//     matches; the plan's AllocPlacement.Blocks names them. impact-exec
//     shows the task all of them; other drivers only the last block's in
//     CUDA_VISIBLE_DEVICES (the engine warns, in the explanation and the
//     log).
//   - MIG instances are instances of their own device groups ("<model>
//     MIG <profile>"); a block gets whole GPUs or instances of one
//     profile, never a mix, and is pinned by MIG UUID like any instance.
//   - A job's own device constraints and affinities stay. Its
//     ${device.ids} set_contains_any lists are honoured by the model (the
//     block's instances). Its constraints on the device group
//     (${device.attr.<name>}, ${device.model}, ${device.vendor},
//     ${device.type}) are read too and judged as Nomad judges them
//     against each device group of a node (cluster.DeviceConstraint:
//     typed values, units, =, !=, orderings, is_set, is_not_set, regexp,
//     set_contains*, plain numeric version/semver), from the groups'
//     attributes the node reports (cluster.Node.DeviceGroups): a block
//     takes GPUs only of a group meeting them, and a job whose block no
//     device group of its pool meets is parked saying which constraint
//     and attribute (e.g. island_size under group_by "model"). What the
//     model cannot judge (a pre-release version, an unknown operator, a
//     node without group facts) counts as a match; other constraints on
//     ${device.ids} are not read. A plan breaking what the model does not
//     read fails in Nomad and is rolled back with Nomad's reason, as for
//     node constraints the model does not read. Affinities only score
//     among what the pins allow.
//
// Once an admission's allocations all run (or completed), the executor
// reads back the GPUs Nomad allocated to exactly those allocations (each
// one's AllocatedResources, which outlive a stop or completion) and
// compares them per node with what it pinned; a difference is counted
// (PinMismatches, metric impact_gpu_pin_mismatch_total) and logged naming
// the job, the node and both GPU lists. A job stopped, purged or parked
// again by someone else before CheckDeadlines saw its gang running is not
// checked.
//
// nomadfake (scheduler/internal/nomadfake) is the in-process fake of Nomad's
// HTTP API the tests use; TestFidelityFakeVersusRealNomad runs the same
// scenario on it and on a real dev agent and compares.
//
// # Consistency
//
// Nomad writes the stream as NDJSON lines of events, several lines per
// index at times (a registration's Job and Evaluation events), resumes a
// stream AT the index asked for, and answers an index beyond its latest
// with its latest event (all checked on a real 2.0.6 agent). The watcher
// applies lines in order, skips lines below its last index and, at the
// last index, the events it already applied there, so a reconnect neither
// loses nor repeats an event. Every object also carries Nomad's
// ModifyIndex and an older version never overwrites a newer one, and an
// object missing from a resync's lists is not brought back by a replayed
// older event, so the replay that follows a resync is harmless. It resyncs
// (lists nodes, jobs and allocations, replacing the model) at start, after
// an outage longer than ResyncAfter (Nomad's event buffer may no longer
// hold the gap), when Nomad's indexes went backwards (probe after a
// reconnect, or a resumed stream starting below its index: a restarted
// agent that lost its state), after undecodable data, and every
// ResyncInterval as a safety net.
//
// A terminal allocation leaves the model through cluster.Store.FinishAlloc
// with its end (the tasks' FinishedAt, else its ModifyTime), so the engine
// charges fair-share usage for GPU time that fell between two cycles.
// Nomad reports no checkpoints: an allocation's LastCheckpoint stays zero,
// and a victim's work lost counts from its start unless the job declares
// impact_checkpoint_interval (every preemption's reason says which). From
// its start it is an upper bound, and the reason says so: a job that
// saves a checkpoint on its signal loses only the work since (issue 35
// saw 0.47 GPU-hours reported lost where nothing was); when it then exits
// with its requeue code the executor's note says the estimate does not
// hold.
//
// # Preemption outcome contract
//
// How a preempted job ends is decided by how its tasks end, not by the
// fact that it was preempted. The executor sends the checkpoint signal
// (impact_checkpoint_signal, if any), then waits up to impact_grace for
// the victim's allocations to end, and looks at how they ended before it
// parks anything:
//   - every allocation completed on its own (Nomad's client status
//     "complete" with desired status "run": every task exited 0): the
//     work is done. The job is neither parked nor stopped; Nomad marks it
//     complete and it is never run again. This holds whether or not the
//     checkpoint signal was sent (a job that finished just before, or
//     during, its grace). No preemption is recorded: no work was lost.
//   - a task exited with the job's requeue exit code
//     (impact_requeue_exit_code, default 75 = EX_TEMPFAIL; see
//     jobspec.DefaultRequeueExitCode): the job saved its checkpoint and asks
//     to go back to the queue. It is parked and its allocations stopped at
//     once, without waiting for the rest of the grace (Nomad's restart
//     policy would otherwise restart the task in place). The exit code
//     decides, whatever the allocation's status after it: running again
//     under Nomad's default restart policy, failed under `restart {
//     attempts = 0 }` (checked against a real agent by
//     TestFidelityOutcomesAndPurge).
//   - anything else (tasks still running at the end of the grace, a task
//     that failed, no signal configured): its allocations are stopped and
//     the job is parked: requeued with its identity and history.
//
// Trainers that checkpoint on the signal and want to resume later must
// therefore exit with the requeue code, not 0. The executor logs the
// outcome with the job and counts it (Executor.PreemptionOutcomes;
// ExecutorConfig.OnPreemptionOutcome feeds the agent's
// impact_preemption_outcomes_total{outcome}).
//
// Reclaims (engine.Plan.Reclaims, a tier's requeue idle action on a hung
// job) follow the same path and contract with no preemptor (reclaim.go):
// the job is parked to be queued again, or, past the tier's max_requeues,
// deregistered (not purged: Nomad shows it stopped) so it stays stopped;
// the reason is in the executor's log. They are not recorded as
// preemptions and spend no preemption budget.
//
// The executor records an intent in a Variable before it changes a job and
// removes it once the change is complete, so a leader that dies between
// deciding and acting leaves an intent that the next leader's Recover
// completes (preemptions) or checks and either adopts or drops
// (admissions): nothing is admitted twice and no job is left half-placed.
//
// # What operators see in Nomad: parking, measured
//
// Measured on a real Nomad 2.0.6 (one server+client, a batch job of
// count 2 in the parking pool; numbers are of that run; the safety-relevant
// ones are asserted by e2e/scheduler TestParkingCandidates, and what the
// UI shows by TestOperatorUI), and read in Nomad's UI source
// (ui/app/models/job.js, aggregateAllocStatus):
//
//   - Parking pool (what the scheduler does). `nomad job run` exits 2
//     ("failed to place 2 allocations ... No nodes were eligible for
//     evaluation"; -detach exits 0). One job version, two evaluations (the
//     register, complete, and a blocked one that stays). `nomad job status`:
//     "Status = pending", Queued 2, a "Placement Failure" section. The UI
//     calls a batch job Failed when all its expected allocations are
//     unplaced: a red "Failed" in the jobs list and a red "Placement
//     Failures" box on the job's page; a service job in the pool has an
//     active deployment and shows "Deploying". `nomad system gc` keeps it
//     (pending is not collectable). An unchanged resubmission creates no
//     version, one evaluation, and replaces the blocked one.
//   - What an admission costs (e2e/scheduler TestEvaluationsPerAdmission,
//     Nomad 2.0.5, asserted exactly): 2 versions and 3 evaluations per
//     admitted job, a gang's one admission included: the user's register,
//     the parking pool's blocked evaluation (Nomad re-runs that same one on
//     every capacity change while the job waits, so waiting adds none),
//     and the admission's register, which places the job and makes Nomad
//     cancel the blocked one. Plain Nomad: 1 version, and 1 evaluation for
//     a job that fits at once, 2 for one that waits. None of the three is
//     avoidable here: every register of a job that is neither periodic
//     nor parameterized makes an evaluation, the admission changes the job
//     (pool, pins), and the blocked evaluation is what keeps a parked
//     batch job "pending" rather than "dead" and collectable (Nomad's
//     getJobStatus: pending only with a non-terminal evaluation or
//     allocation).
//   - Scaling parked groups to 0 until admitted (the "suspend" pattern).
//     Rejected: it is not safe. A batch job scaled to 0 is "dead" (no
//     allocations, evaluations terminal), and dead batch jobs are
//     garbage-collected: `nomad system gc` purged it with its versions, so
//     the user's counts were gone (the periodic GC does the same once its
//     submit time is older than job_gc_threshold, 4h by default, and the
//     scale resets that time). A service job cannot be scaled at all
//     while parked: HTTP 400 "job scaling blocked due to active
//     deployment". Each scale is a new job version and evaluation and moves
//     JobModifyIndex and the Submit Date (the wait and the age term would
//     restart); the user's own resubmission restores the counts (a new
//     version, "Failed" again until scaled again). The watcher drops dead
//     jobs without live allocations from the model (unless an admitted
//     run ended with a member failed or lost: it is requeued, see above). And what it buys is
//     "Scaled Down" in the UI and "Status = dead" with a Purge button,
//     which does not say queued either.
//   - A job-level `ui { description, link }`. Written by the user in the
//     jobspec it costs nothing (same one version, two evaluations as
//     without) and puts a button on the job's page in Nomad's UI that opens
//     the agent's page of the job (/ui/job/<namespace>/<job>: place in the
//     queue, state, the reason in one sentence and in full, score terms,
//     placement, history). Added by the agent to a job it would not
//     otherwise re-register (a first park, an invalid job) it costs a job
//     version and an evaluation per job, moves JobModifyIndex (a user's
//     `nomad job run -check-index` then fails), and the user's next
//     resubmission drops it again; not taken for those.
//   - The executor does re-register a job at every admission and every
//     park after a preemption, a requeue or a rolled-back admission. Each
//     of those registrations also writes the description (describe.go):
//     "**impact scheduler:** admitted: started whole on N node(s) ...",
//     or "back in the queue (not complete): preempted for <job> with its
//     checkpoint signal" (requeued whole: <why>; its admission did not
//     start whole: <why>), when, and a link to the agent's page, in front
//     of the user's own description, which stays below a rule. It costs
//     nothing extra: the same registration. Nomad's UI can draw a
//     preempted batch job as a green "Complete" (it fills the job's slots
//     with the complete allocations of any version); the description
//     above the badge says it is queued.
//
// So the scheduler keeps the parking pool: Nomad's UI still says "Failed"
// for a queued batch job, its description and link (documented for
// jobspecs in example/README.md) say what that means and lead to the
// agent's page, which says queued and why.
//
// The explanation Variable stays at nomad/jobs/<job>/impact. The one path
// the job's Variables tab lists for the job, nomad/jobs/<job>, is the
// user's: Nomad gives it to every task of the job, tasks template it, and
// a rewrite there re-renders those templates (a restart, with the default
// change_mode) on every change of the job's place in the queue. Writing
// it only when absent does not help: the user's later write would then
// land on the scheduler's Variable, or the scheduler's next write on
// theirs. The Variable is written only when what it says changes (state
// in `impact queue`'s words, position, summary, reason, score rounded to
// whole points), never over a Variable the agent did not write (items
// carry written_by; writes check-and-set), and deleted when the job
// leaves the queue for good; the agent's page is the way in for people.
package nomad
