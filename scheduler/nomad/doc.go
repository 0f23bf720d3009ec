// Package nomad is the impact scheduler's adapter to HashiCorp Nomad, and
// the only package of the project that imports github.com/hashicorp/nomad/api.
// It watches Nomad (event stream + resync) into the core's cluster model,
// acts on the engine's plans (admit by re-registering a parked job pinned to
// its nodes and GPUs, preempt by checkpoint signal, grace, re-park and
// stop), keeps explanations in the jobs' Nomad Variables, elects a leader
// through a Variables lock and keeps durable state (fair-share usage,
// intents, preemption records) in Variables. README.md in this directory is
// the reference: the API the agent uses, a gang's life, the pins, the
// preemption outcome contract, and what operators see in Nomad (measured).
//
// # Layout
//
//	client.go      Config, Client, node pools     watcher.go   Watcher: Run, backoff, stats
//	stream.go      the event stream, batches      resync.go    full resync, reset probe
//	wire.go        the Nomad fields decoded       slim.go      payloads trimmed before decoding
//	mirror.go      ModifyIndex-guarded copy of Nomad objects, flushed into cluster.Store
//	translate.go   Nomad job, group, allocation, node -> the model
//	members.go     how a gang's members ended, replacements, Job.Dead
//	executor.go    Executor: Apply, claims       report.go    ApplyReport, skip reasons
//	admit.go       admitting under EnforceIndex   pins.go      the admission's node and GPU pins
//	deadlines.go   admissions done, late, failed, unplaceable -> rollback
//	readback.go    the GPUs Nomad allocated vs. the pins
//	preempt.go     preemptions and whole-gang requeues; outcome.go how a victim ended
//	reclaim.go     reclaims of hung jobs          park.go      parking again, stopping allocations
//	describe.go    the status written in ui.description
//	recover.go     a new leader finishing or dropping the last leader's intents
//	state.go       durable state in Variables     intents.go   intents, written before acting
//	statecheck.go  Drift, RestorePreemptions      history.go   the decision history
//	explain.go     the explanation Variable nomad/jobs/<job>/impact
//	elector.go     leader election (Variables lock); lease.go the leader's lease beside it
//	gone.go        ErrGone/SkipGone               devicestats.go GPU utilisation
//	bounded.go     a size-bounded map (outcome notes)
//
// # Rules
//
//   - The executor carries out what the plan decided (pool, nodes, GPUs per
//     device block, victims, grace, signal, requeue code); it refuses an
//     admission that names no pool or no GPUs per device block rather than
//     choosing itself.
//   - Intent before action: an intent Variable is written before a job is
//     changed and removed after, so a new leader's Recover can finish it.
//   - A job is re-registered only with EnforceRegister on the JobModifyIndex
//     read; the mirror never lets an older ModifyIndex overwrite a newer one.
//   - Parking removes exactly the admission's constraints, never the user's;
//     the explanation Variable is never written over one the agent did not write.
//   - Nomad behaviour a rule relies on is pinned by a test against a real
//     Nomad (TestFidelity*, e2e/scheduler TestParkingCandidates); the
//     in-process fake (scheduler/internal/nomadfake) is held to it.
package nomad
