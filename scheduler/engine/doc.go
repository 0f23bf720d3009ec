// Package engine runs the scheduling cycle: snapshot and clock in, plan
// out. The live service (scheduler/agent via scheduler/nomad) and the
// simulator (scheduler/sim) share it. It reads no clock: `now` is an
// argument, so the simulator replays months in seconds and tests are
// exact.
//
// Engine.Decide runs one cycle (cycle.go), a short pipeline of steps in a
// fixed order, each a type that owns its state and caches:
//
//	accruer    accrue.go      charge fair-share usage, expire old stops
//	           withdraw.go    withdraw stops whose preemptor no longer
//	                          waits, within their grace (Plan.Withdrawals)
//	walltimes  walltime.go    learn run times of finished jobs (policy
//	                          walltime block), estimate missing walltimes
//	endPace    endpace.go     learn how fast running work ends on its own
//	                          (a top-tier preemption weighs the chance
//	                          that an end frees room first)
//	           cycle.go       build the capacity (placement.State)
//	holdings   held.go        hold GPUs of admissions under way and of
//	                          preemptors' and moved jobs' bindings
//	cutter     cuts.go        GPUs of ended preemptors that cut the pool,
//	                          kept for jobs as narrow as their victims
//	judger     victims.go     judge running gangs: victims and cost,
//	           idle.go        idleness (reclaims, Plan.Running),
//	           gangwatch.go   gangs missing members (Plan.Requeues)
//	orderer    queue.go       score and order the queue, lay it out
//	hrCycle    headroom*.go   headroom kept free for some tiers
//	then per job, in queue order (decide.go): held back (parked,
//	deferred, over quota, kept out of a headroom), else
//	placer     admit.go       placed on free GPUs,
//	preempter  preempting.go  else preempting (victim rules: preempt;
//	           victimsearch.go victims of its shape first),
//	defragger  defrag.go      or waiting for jobs moved out of its way,
//	placer     reserve.go     else reserving GPUs running work frees
//	                          (or it may preempt), for the first
//	                          blocked jobs and every reserve tier's
//	                          (on the headroom's idle budget),
//	placer     gather.go      else gathering a gang's nodes as they free
//	then, once the whole queue is decided:
//	defragger  defrag.go      moving small jobs out of the way of the
//	                          jobs left waiting, on GPUs none took
//	explainer  reasons.go     why each job waits, the plan's queue
//
// The cycle (cycle.go) holds what the steps share: the snapshot, the
// placement state (one transaction per decision), the plan, the running
// gangs as victims (preempt.Victim) and which are claimed, the GPUs per
// project (shared.go), and the engine's memory as the cycle sees it
// (changes.go: usage, the preemption budget, admissions and stops the
// snapshot does not show yet, bindings), whose changes Decide applies
// once the cycle is done, so no step reads another's half-made state.
// The rule between steps: a step's fields are read and written only in
// its own files, which declare no methods on the cycle; the cycle and
// the other steps call its methods (scripts/check-imports.sh, run by make
// check, enforces it). Which gangs may be victims, at what cost, and the
// minimal victim search are scheduler/preempt's.
//
// Other files: engine.go (Engine, options, memory), plan.go (the plan's
// types), entry.go and facts.go (a queued job, the policy's answers per
// tier and project), radix.go (queue sort), scratch.go (memory reused
// between cycles), memory.go (Memory, WithMemory).
//
// TestGoldenPlans pins the decisions (testdata/plans.golden) and checks
// that engines with and without explanations decide the same;
// BenchmarkDecide measures a cycle.
package engine
