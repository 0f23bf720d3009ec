package jobspec

import "time"

// Meta keys of the jobspec contract (README.md, "The jobspec contract";
// example/README.md, "How a job opts in").
const (
	MetaTier             = "impact_tier"
	MetaProject          = "impact_project"
	MetaDeadline         = "impact_deadline"
	MetaPreemptible      = "impact_preemptible"
	MetaGrace            = "impact_grace"
	MetaCheckpointSignal = "impact_checkpoint_signal"
	MetaMinRuntime       = "impact_min_runtime"
	MetaWalltime         = "impact_walltime"
	MetaTopology         = "impact_topology"
	MetaPool             = "impact_pool"
	// MetaCheckpointInterval says how often the job saves its work; the
	// scheduler then counts a victim's work lost from its last expected
	// checkpoint instead of from its start.
	MetaCheckpointInterval = "impact_checkpoint_interval"
	// MetaProgress is the work the job has done and saved, as a duration
	// of its run: the scheduler expects it to need impact_walltime less
	// this from its next start. The executor writes it when it parks a
	// preempted or requeued job (what the run saved, by the preemption's
	// outcome); a user may set it when re-submitting a job that resumes
	// from a checkpoint.
	MetaProgress = "impact_progress"
	// MetaRequeueExitCode is the exit code with which a preempted job's
	// task says "I saved a checkpoint; put me back in the queue" (see
	// DefaultRequeueExitCode and the preemption outcome contract in
	// scheduler/nomad/README.md).
	MetaRequeueExitCode = "impact_requeue_exit_code"
	// MetaOnFailure says what becomes of a running gang that loses a
	// member (a task failed, was OOM-killed or killed, its node was lost):
	// "requeue" (the default: stopped whole with its checkpoint signal and
	// requeued whole, with back-off, up to MetaMaxFailures runs in a row)
	// or "fail" (stopped whole and ended failed at the first loss; the
	// reason is in `impact explain`). It holds whatever the job's restart
	// and reschedule blocks say.
	MetaOnFailure = "impact_on_failure"
	// MetaMaxFailures is how many runs in a row may lose a member before
	// the job ends failed instead of being requeued again (default
	// DefaultMaxFailures). A run that stays whole long enough resets the
	// count (see the agent's gang requeue record).
	MetaMaxFailures = "impact_max_failures"
	// MetaIdle is the key by which a job opts out of idle actions
	// (`impact_idle = "ignore"`): it is still reported, never reclaimed. A
	// tier with allow_opt_out = false disregards it (the policy's call).
	MetaIdle = "impact_idle"

	// MetaPrefix marks a meta key as belonging to this contract; an unknown
	// key with this prefix is an error (most likely a typo that would
	// otherwise be ignored silently).
	MetaPrefix = "impact_"
)

// groupOverridable lists the keys a task group's meta may set to a value
// different from the job's. The others describe the job as a whole (who pays,
// how important, where it runs) and must not differ between groups.
var groupOverridable = map[string]bool{
	MetaTopology:         true,
	MetaGrace:            true,
	MetaCheckpointSignal: true,
}

// Topology says how tightly the GPUs of one allocation must be connected.
type Topology string

const (
	// TopologyUnset means the job did not say; placement treats it like
	// TopologyNode (one island preferred, not required).
	TopologyUnset Topology = ""
	// TopologyNVLink requires every allocation's GPUs to sit in one NVLink
	// island.
	TopologyNVLink Topology = "nvlink"
	// TopologyNode keeps an allocation on one node (always true) and
	// prefers one island.
	TopologyNode Topology = "node"
	// TopologyAny takes any free GPUs of a node, packing islands only to
	// keep fragments small.
	TopologyAny Topology = "any"
)

// Spec is the impact contract of a job (or of one of its task groups), as
// written in its `impact_*` meta. Zero values mean "not given"; what a
// missing value resolves to is decided by the Policy (DefaultTier,
// DefaultProject, the tier's preemptibility, Preemption.MinRuntime), never
// here.
type Spec struct {
	// Tier names a tier of the policy file; "" means the policy's default.
	Tier string
	// Project is charged for the job's GPU-hours; "" means the policy's
	// default project.
	Project string
	// Deadline, when not zero, raises urgency as it nears.
	Deadline time.Time
	// Preemptible is the job's own answer when PreemptibleSet; otherwise
	// the tier's default applies.
	Preemptible    bool
	PreemptibleSet bool
	// Grace is the time between the checkpoint signal and the stop.
	Grace time.Duration
	// CheckpointSignal is sent to the allocations before a preemption
	// ("" sends none).
	CheckpointSignal string
	// MinRuntime: not preempted before it has run this long.
	MinRuntime time.Duration
	// Walltime is the expected run time; 0 means unknown (the job then
	// cannot be proven to end before a reservation).
	Walltime time.Duration
	// Topology of each allocation's GPU set.
	Topology Topology
	// Pool is the node pool to run in once admitted; "" means the
	// scheduler's default pool.
	Pool string
	// CheckpointInterval is how often the job saves its work (0: unknown;
	// work lost to a preemption then counts from the allocation's start).
	CheckpointInterval time.Duration
	// Progress is the work the job has saved from earlier runs
	// (impact_progress; 0: none known). Left subtracts it from Walltime.
	Progress time.Duration
	// RequeueExitCode is the exit code meaning "checkpointed, requeue me"
	// (0: not given; RequeueCode resolves it to DefaultRequeueExitCode).
	RequeueExitCode int
	// IdleIgnore is the job's opt-out of idle actions (impact_idle =
	// "ignore"); whether it holds is the tier's call (Policy.IdleIgnored).
	IdleIgnore bool
	// FailOnLoss: impact_on_failure = "fail": a gang that loses a member
	// ends failed rather than being requeued.
	FailOnLoss bool
	// MaxFailures is impact_max_failures (0: not given; MaxFailedRuns
	// resolves it to DefaultMaxFailures).
	MaxFailures int
}

// Left is the run time the job is expected to need from its next start:
// its walltime less the work its earlier runs saved (Progress). 0 means
// unknown: no walltime, or progress at or past it (the job has outrun
// the walltime it gave, so what is left cannot be told). The restart
// cost of reloading a checkpoint is not known here and not added.
//
// Orders and reservations read Left, not Walltime: a 6h job parked after
// 5h with its work saved needs an hour, and is ordered, backfilled and
// expected to end as a one-hour job.
func (s Spec) Left() time.Duration {
	if s.Walltime <= s.Progress {
		return 0
	}
	return s.Walltime - s.Progress
}

// DefaultMaxFailures is how many runs in a row of a job that sets no
// impact_max_failures may lose a member before it ends failed: enough to
// ride out a few lost nodes (each requeue after the first waits a
// doubling back-off, 30s up to 30m, so ten take about three hours), few
// enough that a job whose member crashes every time it starts stops
// taking GPUs.
const DefaultMaxFailures = 10

// MaxFailedRuns is the job's impact_max_failures, else DefaultMaxFailures;
// 1 with impact_on_failure = "fail".
func (s Spec) MaxFailedRuns() int {
	switch {
	case s.FailOnLoss:
		return 1
	case s.MaxFailures > 0:
		return s.MaxFailures
	}
	return DefaultMaxFailures
}

// DefaultRequeueExitCode is the requeue exit code of jobs that set no
// impact_requeue_exit_code: 75, EX_TEMPFAIL in sysexits.h ("temporary
// failure; the user is invited to retry"), which is what a preempted
// trainer means, is not used by shells or runtimes for anything else
// (unlike 1, 2, 126-128+n, 137 or 143), and is what several training
// launchers already exit with to ask a batch scheduler for a requeue.
const DefaultRequeueExitCode = 75

// RequeueCode is the job's requeue exit code: its impact_requeue_exit_code,
// else DefaultRequeueExitCode.
func (s Spec) RequeueCode() int {
	if s.RequeueExitCode != 0 {
		return s.RequeueExitCode
	}
	return DefaultRequeueExitCode
}
