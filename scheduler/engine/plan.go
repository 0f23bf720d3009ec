package engine

import (
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
	"github.com/impact-sched/nomad-impact/scheduler/preempt"
)

// Plan is the outcome of one cycle: what to start, what to stop, and why
// every waiting job waits. Only the adapter (or the simulator) acts on it.
type Plan struct {
	// Now is the instant the plan was decided for.
	Now time.Time `json:"now"`
	// SnapshotVersion is the version of the snapshot decided on.
	SnapshotVersion uint64 `json:"snapshot_version"`
	// Admissions: jobs to start now, with every group fully placed.
	Admissions []Admission `json:"admissions"`
	// Preemptions: whole gangs to checkpoint and stop. The preemptor is not
	// admitted in the same plan: it keeps a reservation on the GPUs being
	// freed and is admitted by a later cycle once they are free.
	Preemptions []Preemption `json:"preemptions"`
	// Requeues: running gangs missing a member for longer than the
	// policy's gangs missing_member_grace, to checkpoint, stop and park
	// whole, like a preemption without a preemptor (Preemptor is empty;
	// Reason says which members are missing and why).
	Requeues []Preemption `json:"requeues,omitempty"`
	// Withdrawals: preemptions under way, still within their grace,
	// whose preemptor no longer waits (withdraw.go): their victims keep
	// running. Carried out before the Preemptions.
	Withdrawals []Withdrawal `json:"withdrawals,omitempty"`
	// Explanations of every queued job (admitted ones included), by job ID.
	Explanations map[string]*Explanation `json:"explanations"`
	// Queue is the queued job IDs in decision order (highest score first).
	Queue []string `json:"queue"`
	// Headroom of every pool with a policy headroom block, after the
	// plan's admissions (headroom.go).
	Headroom []HeadroomStatus `json:"headroom,omitempty"`
	// Reclaims: hung jobs stopped on their tier's requeue idle action
	// (queued again, or stopped for good past max_requeues).
	Reclaims []Reclaim `json:"reclaims,omitempty"`
	// Running is the utilisation view of every running managed job, by
	// job ID (filled only with explanations on).
	Running []RunningJob `json:"running,omitempty"`
	// CostsWeighed: some job's preemption or move got as far as weighing
	// what stopping its victims costs (the cheapest candidate per GPU
	// against its gain, then the victims found and the lost-work budget).
	// Only then can a victim's cost matter to the plan: with it false,
	// a running gang's new checkpoint (which lowers that cost) or a
	// preemption leaving the budget's hour would leave the next plan as
	// this one, all else equal. The simulator skips such cycles. Not sent
	// on the wire: it says how the plan was reached, not what it is.
	CostsWeighed bool `json:"-"`
	// CutGPUsKept is how many GPUs of preemptors that cut the pool and
	// have ended this cycle kept for jobs no wider than those preemptors'
	// victims (cuts.go). From the next cycle on any job may take them, so
	// that plan may differ from this one though nothing else changed:
	// the simulator does not skip it.
	CutGPUsKept int `json:"cut_gpus_kept,omitempty"`
}

// Admission starts one job: every group with GPUs is fully placed.
type Admission struct {
	JobID string `json:"job_id"`
	// ModifyIndex is the job's ModifyIndex in the snapshot (for the
	// adapter's EnforceIndex re-register).
	ModifyIndex uint64 `json:"modify_index"`
	// Pool is the node pool to move the job to.
	Pool string `json:"pool"`
	// Groups in the job's group order.
	Groups []GroupPlacement `json:"groups"`
	// Score the job was admitted with.
	Score policy.Score `json:"score"`
	// Backfilled is true when the job started ahead of a blocked job with a
	// reservation (it ends before the reservation is needed or is
	// preemptible).
	Backfilled bool `json:"backfilled,omitempty"`
	// Warnings: tasks that will not see all their GPUs (blockWarnings);
	// the adapter logs them.
	Warnings []string `json:"warnings,omitempty"`
}

// GroupPlacement places every allocation of one task group.
type GroupPlacement struct {
	Group  string           `json:"group"`
	Allocs []AllocPlacement `json:"allocs"`
}

// AllocPlacement is one allocation: a node and the GPU instance IDs it gets.
//
// The adapter pins each device block to the union of its Blocks' GPUs
// over the group's allocations (Nomad applies a device constraint to every
// allocation of a group alike), so where several allocations of a group
// share a node, which of them gets which of those GPUs is Nomad's choice;
// placement keeps such unions exact (every GPU planned is the group's
// there, and an NVLink ask stays in one island). See package placement.
type AllocPlacement struct {
	NodeID string   `json:"node_id"`
	GPUs   []string `json:"gpus"`
	// Islands is the NVLink island of each GPU, in GPUs order.
	Islands []int `json:"islands,omitempty"`
	// Blocks are the GPUs of each GPU device block of the allocation's
	// tasks (cluster.TaskGroup.Devices order); empty for groups that do
	// not list their blocks (simulated jobs).
	Blocks []BlockPlacement `json:"blocks,omitempty"`
}

// BlockPlacement is the GPUs one device block gets.
type BlockPlacement struct {
	// Task and Index name the block (Index: its position among the
	// task's device blocks).
	Task  string   `json:"task"`
	Index int      `json:"index"`
	GPUs  []string `json:"gpus"`
}

// Nodes returns the distinct node IDs of a group placement, in order of
// first use.
func (g GroupPlacement) Nodes() []string {
	var out []string
	seen := map[string]bool{}
	for _, a := range g.Allocs {
		if !seen[a.NodeID] {
			seen[a.NodeID] = true
			out = append(out, a.NodeID)
		}
	}
	return out
}

// Stop is what every stop the engine orders carries, whatever orders it
// (a preemption, a whole-gang requeue, a reclaim of a hung job): the job,
// its allocations and GPUs, and how to stop it. Preemption and Reclaim
// embed it (their JSON is flat, as before).
type Stop struct {
	// JobID of the job stopped.
	JobID string `json:"job_id"`
	// Allocs are its allocation IDs (all of them).
	Allocs []string `json:"allocs"`
	// GPUs freed.
	GPUs int `json:"gpus"`
	// Grace between the checkpoint signal and the stop.
	Grace time.Duration `json:"grace"`
	// CheckpointSignal to send first ("" sends none).
	CheckpointSignal string `json:"checkpoint_signal,omitempty"`
	// RequeueExitCode is the job's "checkpointed, requeue me" exit code
	// (jobspec.Spec.RequeueCode). How its tasks end decides the outcome:
	// all exited 0 -> the work is done (never run again); a task exited
	// with this code -> requeued at once; still running at the end of the
	// grace -> stopped and requeued.
	RequeueExitCode int `json:"requeue_exit_code,omitempty"`
	// Progress is the work the job will have saved when it is queued
	// again if its tasks are still running at the end of the grace: what
	// its earlier runs saved (impact_progress) and, for a preemption, this
	// run up to its last expected checkpoint (impact_checkpoint_interval,
	// or the checkpoint the model knows). ProgressOnSignal is the same
	// when a task exits with RequeueExitCode: it saved its work at the
	// signal, so a preemption's run counts up to the decision. The
	// adapter writes the one the outcome says into the parked job's
	// impact_progress (scheduler/nomad/park.go), and the engine then
	// expects the job to need its walltime less it (jobspec.Spec.Left),
	// as the simulator does with the same numbers. A gang requeued for a
	// lost member adds its checkpoints up to the loss, both ways: a
	// broken gang stalls at the loss, and what its survivors save at the
	// signal is not known to be newer than their last checkpoint. A
	// reclaim carries the earlier runs' work only: a hung run is not
	// known to have progressed. Both 0: nothing saved is known, and the
	// parked job's meta is left as it is.
	Progress         time.Duration `json:"progress,omitempty"`
	ProgressOnSignal time.Duration `json:"progress_on_signal,omitempty"`
}

// stopOf is the stop of a job by its contract (grace, checkpoint signal,
// requeue code, the work its earlier runs saved), without its
// allocations: the one place a stop's fields are read from the job's
// spec.
func stopOf(j *cluster.Job, gpus int) Stop {
	return Stop{JobID: j.ID, GPUs: gpus, Grace: j.Spec.Grace, CheckpointSignal: j.Spec.CheckpointSignal, RequeueExitCode: j.Spec.RequeueCode(),
		Progress: j.Spec.Progress, ProgressOnSignal: j.Spec.Progress}
}

// addRun adds to a preemption's stop what the victim's run of allocs has
// saved by now (runSaved): to its last checkpoint, and to now for a
// stop whose tasks checkpoint on the signal.
func (s *Stop) addRun(allocs []*cluster.Alloc, interval time.Duration, now time.Time) {
	ckpt, run := runSaved(allocs, interval, now)
	s.Progress += ckpt
	s.ProgressOnSignal += run
}

// runSaved is what the run of allocs has saved by at: its progress to its
// last expected checkpoint (preempt.LastCheckpoint, the earliest of its
// members'), and its whole run to at. A gang makes progress only once
// every member runs, so the run counts from its latest start; a
// replacement Nomad placed for a lost member is not of the run.
func runSaved(allocs []*cluster.Alloc, interval time.Duration, at time.Time) (toCheckpoint, toAt time.Duration) {
	var start time.Time
	for _, a := range allocs {
		if !a.Replacement && a.Start.After(start) {
			start = a.Start
		}
	}
	if start.IsZero() || !at.After(start) {
		return 0, 0
	}
	ckpt := at
	for _, a := range allocs {
		if c := preempt.LastCheckpoint(a, interval, at); !a.Replacement && c.Before(ckpt) {
			ckpt = c
		}
	}
	if ckpt.After(start) {
		toCheckpoint = ckpt.Sub(start)
	}
	return toCheckpoint, at.Sub(start)
}

// Preemption stops one whole gang (every allocation of the victim job).
type Preemption struct {
	Stop
	// Update marks a requeue that replaces a running job its user
	// re-submitted (Nomad's destructive update through the queue), rather
	// than an incomplete gang.
	Update bool `json:"update,omitempty"`
	// Replacements, for a requeue of a gang that lost a member, are the
	// allocations Nomad placed on its own to replace one (also in Allocs):
	// the adapter stops them at once, before the checkpoint signal, so
	// that a member never runs twice (the replacement beside the orphaned
	// one it replaces, or from scratch beside peers that are gone).
	Replacements []string `json:"replacements,omitempty"`
	// EndFailed, for a requeue of a gang that lost a member, ends the job
	// failed instead of parking it (impact_on_failure = "fail", or its
	// runs in a row that lost a member reached impact_max_failures): it is
	// stopped whole the same way and then deregistered, with Reason.
	EndFailed bool `json:"end_failed,omitempty"`
	// OnLoan: the victim ran on loan on the nodes of a headroom its
	// preemptor's tier uses (policy.Headroom.LoanGrace), so it was chosen
	// before other work and its Grace is the loan's where that is shorter
	// than its impact_grace.
	OnLoan bool `json:"on_loan,omitempty"`
	// TakenBack: the victim started less than the take_back of a
	// headroom its preemptor's tier uses, or had less work unsaved than
	// its take_back_unsaved (policy.Headroom.TakeBack, TakeBackUnsaved),
	// so it was chosen before other work and stops at once (Grace 0).
	TakenBack bool `json:"taken_back,omitempty"`
	// Preemptor is the job the GPUs are freed for.
	Preemptor string `json:"preemptor"`
	// Reason, for people and the job's explain.
	Reason string `json:"reason"`
	// Cost is the victim's impact x (work lost + restart) in impact GPU-hours.
	Cost float64 `json:"cost"`
	// LostGPUHours is the work thrown away since the last checkpoint.
	LostGPUHours float64 `json:"lost_gpu_hours"`
	// Idle: the victim was chosen as an idle job (its tier's preemptible
	// idle action); IdleGPUHours is what it had held idle and
	// ReclaimedGPUHours its GPUs x the rest of its impact_walltime (0 when
	// unknown).
	Idle              bool    `json:"idle,omitempty"`
	IdleGPUHours      float64 `json:"idle_gpu_hours,omitempty"`
	ReclaimedGPUHours float64 `json:"reclaimed_gpu_hours,omitempty"`
	// MovedTo, for a defragmenting preemption (policy defragment block),
	// is where the victim restarts: GPUs free now, bound to it until it is
	// admitted again (or the binding expires after its grace and the
	// admission TTL). The adapter stops it as any victim; the engine
	// admits it there once it is queued again.
	MovedTo []AllocPlacement `json:"moved_to,omitempty"`
	// PreemptorGPUs, for a defragmenting preemption, is what is bound to
	// the job it makes room for (the GPUs its victims free and the free
	// ones beside; every victim of the move names the same), so that a
	// new leader keeps them for it (Engine.Preempting).
	PreemptorGPUs []AllocPlacement `json:"preemptor_gpus,omitempty"`
}

// Status of a queued job after a cycle.
type Status string

const (
	// StatusAdmitted: in Plan.Admissions.
	StatusAdmitted Status = "admitted"
	// StatusWaiting: valid, waiting for capacity or its turn.
	StatusWaiting Status = "waiting"
	// StatusPreempting: victims are being stopped for it.
	StatusPreempting Status = "preempting"
	// StatusReserved: holds a reservation (head of the queue, blocked),
	// or GPUs gathered for some of its allocations (Gathered).
	StatusReserved Status = "reserved"
	// StatusParked: cannot be scheduled as written (bad metadata, unknown
	// tier, a group larger than any node); only a change of the job helps.
	StatusParked Status = "parked"
)

// Explanation says where a queued job stands and why.
type Explanation struct {
	JobID string `json:"job_id"`
	// Position in the queue, 1-based, in decision order.
	Position int    `json:"position"`
	Status   Status `json:"status"`
	// Score with each term.
	Score policy.Score `json:"score"`
	// Tier and Project resolved by the policy.
	Tier    string `json:"tier"`
	Project string `json:"project"`
	// GPUs the job asks for in total.
	GPUs int `json:"gpus"`
	// Reason in one sentence (for an admitted job empty, but that it
	// backfilled ahead of a reservation or runs on loan).
	Reason string `json:"reason,omitempty"`
	// OnLoan, for an admitted job: it was placed on the nodes of a
	// headroom that lends them (policy.Headroom.LoanGrace), whose tiers
	// may stop it after the loan's grace; the reason says which.
	OnLoan bool `json:"on_loan,omitempty"`
	// Rejected summarises why nodes could not take the job: reason ->
	// number of nodes. Filled for jobs placement was attempted for.
	Rejected map[string]int `json:"rejected,omitempty"`
	// ReservedUntil is when the reservation's GPUs are expected free (zero
	// when none or unknown).
	ReservedUntil time.Time `json:"reserved_until,omitzero"`
	// ReservedUntilEstimated: ReservedUntil rests on the learned walltime
	// of running work that declares none (policy walltime block).
	ReservedUntilEstimated bool `json:"reserved_until_estimated,omitempty"`
	// ReservedPreempts: ReservedUntil counts running work on the reserved
	// GPUs that the job may preempt as freed once it may preempt it (not
	// when that work ends): by then the job preempts what is left there,
	// as far as the policy's preemption limits allow.
	ReservedPreempts bool `json:"reserved_preempts,omitempty"`
	// Gathered, for a reserved job gathering its nodes (the policy's
	// backfill gather) rather than holding a reservation, is how many of
	// its allocations' GPUs it holds now (at least one).
	Gathered int `json:"gathered,omitempty"`
	// CouldPreempt is a gang the job may preempt once its min runtime has
	// passed, at CouldPreemptFrom (empty when none: the job is not
	// preempting, and nothing it may preempt is protected by its min
	// runtime only). The reason says the same in words.
	CouldPreempt     string    `json:"could_preempt,omitempty"`
	CouldPreemptFrom time.Time `json:"could_preempt_from,omitzero"`
	// Victims are the jobs being preempted for it.
	Victims []string `json:"victims,omitempty"`
	// Placement is where an admitted job's allocations go, per group, with
	// the GPU IDs and islands each gets (set while it is admitted and its
	// allocations are not all in the model yet).
	Placement []GroupPlacement `json:"placement,omitempty"`
	// Warnings about an admitted job: a task with several GPU device
	// blocks whose driver does not give it all of their GPUs.
	Warnings []string `json:"warnings,omitempty"`
}
