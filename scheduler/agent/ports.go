package agent

import (
	"context"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/nomad"
)

// The agent reaches Nomad only through these small interfaces. Production
// wires them to scheduler/nomad (see wire.go); tests use fakes or the
// in-process Nomad fake. Keeping them here, in the consumer, means the
// adapter can change shape without the loop noticing.

// Model is the watched model of the cluster: the adapter's watcher applies
// Nomad's event stream (and full resyncs) to it.
type Model interface {
	// Run keeps the model current until ctx ends. It returns only on
	// ctx's end or an unrecoverable error; transient stream errors are
	// retried inside with backoff and shown through Status.
	Run(ctx context.Context) error
	// Snapshot returns the current immutable state.
	Snapshot() *cluster.Snapshot
	// Updated is signalled (coalescing, never blocking the watcher) after
	// the model changed.
	Updated() <-chan struct{}
	// Status says how current the model is.
	Status() ModelStatus
}

// ModelStatus is the watcher's health.
type ModelStatus struct {
	// Index is the Nomad raft index the model is current to.
	Index uint64
	// Synced is false until the first full sync and during a resync.
	Synced bool
	// Err is the last watch error, nil once the stream recovered.
	Err error
	// Counters of the watcher, for metrics (zero when unknown).
	EventsApplied, Resyncs, Reconnects uint64
	// ApplyLatency is how long applying the last event batch took.
	ApplyLatency time.Duration
}

// Executor acts on a plan: admissions and preemptions exactly as planned,
// with EnforceIndex on every job write, the checkpoint signal and grace
// before a stop, and rollback of admissions that do not fully start by
// their deadline. Apply must return promptly: long waits (grace periods,
// admission deadlines) continue in the background, bounded by ctx, and
// must be idempotent across cycles and leaders (a job already admitted or
// already being preempted is not acted on twice).
type Executor interface {
	Apply(ctx context.Context, plan *engine.Plan, snap *cluster.Snapshot) (nomad.ApplyReport, error)
}

// Recoverer is an Executor that must finish or undo what a previous
// leader left half-done (admission and preemption intents) before it acts
// on new plans. The agent calls Recover on becoming leader and does not act
// until it succeeded.
type Recoverer interface {
	Recover(ctx context.Context) error
}

// UnderwayReporter is an Executor that can list the preemptions it is
// carrying out (after Recover: also those a previous leader started), so
// that a new leader's engine waits for them instead of choosing more
// victims (engine.Engine.Preempting).
type UnderwayReporter interface {
	PreemptionsUnderway() []engine.Preemption
}

// Waiter is an Executor with actions running in the background
// (preemptions waiting out a grace period); the agent waits for them, for
// a bounded time, on shutdown.
type Waiter interface {
	Wait()
}

// Explainer persists a job's explanation: the Variable
// nomad/jobs/<job>/impact, which `nomad var get` and the job's tasks read.
type Explainer interface {
	WriteExplanation(ctx context.Context, e agentapi.Explanation) error
}

// ExplanationJanitor is an Explainer that can delete explanations: of one
// job that left for good (jobID is namespace/job), and of every job keep
// says is gone (once per leadership term, for jobs that left while no
// agent led). It deletes only what the agent wrote.
type ExplanationJanitor interface {
	ForgetExplanation(ctx context.Context, jobID string) error
	SweepExplanations(ctx context.Context, keep func(jobID string) bool) (deleted int, err error)
}

// Elector is leader election among agents (Nomad's Variables lock).
type Elector interface {
	// Campaign blocks until this agent holds the lock or ctx ends. The
	// returned channel is closed when leadership is lost (the lock could
	// not be renewed, or ctx ended).
	Campaign(ctx context.Context) (lost <-chan struct{}, err error)
	// Resign releases the lock if held, so a standby takes over at once
	// instead of after the lock's TTL.
	Resign(ctx context.Context) error
}

// HolderReporter is an Elector that can say who holds the lock, so a
// standby can report the leader and notice when there is none.
type HolderReporter interface {
	Holder(ctx context.Context) (string, error)
}

// LeaseReporter is an Elector that can say whether the leader is alive
// (renews its lease), so a standby's health says so.
type LeaseReporter interface {
	LeaseStatus() nomad.LeaseStatus
}

// StateStore is durable scheduler state in Nomad Variables, so that a new
// leader resumes where the last one stopped.
type StateStore interface {
	// LoadState returns the saved state; ok is false when none exists yet.
	LoadState(ctx context.Context) (s DurableState, ok bool, err error)
	// SaveState writes the state (check-and-set is the store's business).
	SaveState(ctx context.Context, s DurableState) error
}

// DurableState is what survives a leader change.
type DurableState struct {
	// Usage is the decayed fair-share usage per project in GPU-hours,
	// valued at UsageAt.
	Usage   map[string]float64 `json:"usage"`
	UsageAt time.Time          `json:"usage_at"`
	// Preemptions are recent preemption records (job ID -> record), the
	// ones the executor wrote (nomad.StateStore.RecordPreemption).
	Preemptions map[string]nomad.PreemptionRecord `json:"preemptions,omitempty"`
	// Requeues counts, per job, the requeues of its tier's idle action,
	// so a new leader requeues a hung job at most max_requeues times in all.
	Requeues map[string]int `json:"requeues,omitempty"`
	// GangRequeues are, per job, its runs in a row that lost a member
	// (requeued whole), for the back-off and impact_max_failures.
	GangRequeues map[string]nomad.GangRequeue `json:"gang_requeues,omitempty"`
	// Timeline is each job's decision history (bounded, the jobs with the
	// newest events first), so it survives a restart and a failover.
	Timeline map[string][]agentapi.Event `json:"timeline,omitempty"`
	// Leader names the agent that saved it.
	Leader string `json:"leader"`
}

// PoolManager creates the parking node pool at start-up.
type PoolManager interface {
	EnsureNodePool(ctx context.Context, name, description string) error
}

// PoolChecker is a PoolManager that can say whether the pool still
// exists, so the agent notices a parking pool deleted under it
// (nomad_reconcile.go).
type PoolChecker interface {
	NodePoolExists(ctx context.Context, name string) (bool, error)
}

// StateChecker is a StateStore that can say which of the Variables it
// wrote Nomad no longer holds as written (deleted, or overwritten by
// someone else), so the leader writes them again (nomad_reconcile.go).
type StateChecker interface {
	StateDrift(ctx context.Context) ([]nomad.VariableDrift, error)
	// RewriteAll makes the next SaveState write every Variable, changed
	// since its last save or not.
	RewriteAll()
	// NewTerm forgets what earlier terms wrote (another leader may have
	// written since) and rewrites everything at the next save.
	NewTerm()
	// RestorePreemptions writes the agent's preemption records back,
	// merged with the ones Nomad holds.
	RestorePreemptions(ctx context.Context, recs []nomad.PreemptionRecord) error
}

// LeaseRepairReporter is an Elector that writes its lease again when it
// was deleted under the leader, and counts it.
type LeaseRepairReporter interface {
	LeaseRepairs() uint64
}

// UtilizationSource reads the device stats of client nodes: the fourth
// layer of the pyramid, whether allocated GPUs are actually busy. Optional:
// without one the utilisation metrics are absent.
type UtilizationSource interface {
	// GPUStats reads the stats of the GPUs on the given nodes. Nodes it
	// could not read are returned in failed with why; that is never fatal
	// (a slow client must not stop the others from being read).
	GPUStats(ctx context.Context, nodeIDs []string) (gpus []GPUStat, failed map[string]error)
}

// GPUStat is one GPU's latest device stats. Negative values are unknown
// (the plugin sent none, e.g. for a MIG instance), never a made-up zero.
type GPUStat struct {
	NodeID   string
	DeviceID string
	// Utilization is the GPU's busy time in percent.
	Utilization float64
	// MemoryUsedMiB and MemoryTotalMiB are its framebuffer.
	MemoryUsedMiB, MemoryTotalMiB float64
}
