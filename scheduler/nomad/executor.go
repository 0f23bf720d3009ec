package nomad

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// ExecutorConfig tunes the executor.
type ExecutorConfig struct {
	// ParkingPool is where managed jobs wait (default "impact-queue").
	ParkingPool string
	// AdmitDeadline: an admitted job whose allocations are not all running
	// by then is parked again (default 5m).
	AdmitDeadline time.Duration
	// PollInterval while waiting for a preempted job's tasks to exit (1s).
	PollInterval time.Duration
	// Snapshot, when set, gives the executor the model: Apply waits for
	// admitted jobs' allocations to show there (PlacementWait).
	Snapshot func() *cluster.Snapshot
	// BlockedGrace: an admitted job that Nomad still cannot place this
	// long after the admission (a blocked evaluation) is rolled back at
	// once with Nomad's reason, instead of at AdmitDeadline (default 30s;
	// negative: wait for the deadline).
	BlockedGrace time.Duration
	// PlacementWait: after its admissions, Apply waits up to this long (in
	// all, not per job) for the model (Snapshot) to show their
	// allocations, so that the next cycle sees the GPUs taken (the engine
	// also holds them for its admission TTL) (default 2s; negative: do not
	// wait). Needs Snapshot.
	PlacementWait time.Duration
	// Clock (default time.Now).
	Clock func() time.Time
	// PageURL, when set, gives the agent's page of a job (by its key), for
	// the link in the job's description (describe.go).
	PageURL func(jobKey string) string
	// OnPreemptionOutcome, when set, is called once per finished
	// preemption with its outcome (OutcomeCompleted, OutcomeRequeued,
	// OutcomeStopped, OutcomeWithdrawn), for metrics. It must not block.
	OnPreemptionOutcome func(outcome string)
}

// Executor carries out the engine's plans on Nomad.
type Executor struct {
	c   *Client
	st  *StateStore
	cfg ExecutorConfig
	log hclog.Logger

	mu   sync.Mutex
	busy map[string]bool // jobs with an action under way
	// underway: preemptions being carried out (ordered here or resumed
	// from a previous leader's intent), by victim job.
	underway map[string]*Intent
	// deferred: a stop of a plan that found the job's stop (preemption,
	// requeue or reclaim) or admission under way, by job; runPreemption
	// carries it out once that stop ends, endAdmission once that
	// admission ends (nextDeferred).
	deferred map[string]deferredStop
	pending  map[string]*Intent // admissions waiting to be fully running
	outcomes *bounded[string]   // last rollback/conflict/preemption note per job
	// outcomeCounts counts finished preemptions by outcome.
	outcomeCounts map[string]uint64
	wg            sync.WaitGroup

	// pinMismatches counts nodes where Nomad allocated other GPUs than the
	// admission pinned (checkPins).
	pinMismatches atomic.Uint64
}

// PinMismatches is how many times, since the start, Nomad allocated an
// admitted job other GPUs on a node than the plan pinned there (metric
// impact_gpu_pin_mismatch_total).
func (x *Executor) PinMismatches() uint64 { return x.pinMismatches.Load() }

// NewExecutor builds an executor.
func NewExecutor(c *Client, st *StateStore, cfg ExecutorConfig, logger hclog.Logger) *Executor {
	if cfg.ParkingPool == "" {
		cfg.ParkingPool = "impact-queue"
	}
	if cfg.AdmitDeadline <= 0 {
		cfg.AdmitDeadline = 5 * time.Minute
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.PlacementWait == 0 {
		cfg.PlacementWait = 2 * time.Second
	}
	if cfg.BlockedGrace == 0 {
		cfg.BlockedGrace = 30 * time.Second
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Executor{
		c: c, st: st, cfg: cfg, log: logger.Named("executor"),
		busy: map[string]bool{}, pending: map[string]*Intent{}, underway: map[string]*Intent{}, deferred: map[string]deferredStop{}, outcomes: newBounded[string](maxOutcomes),
	}
}

func (x *Executor) claim(jobID string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.busy[jobID] || x.pending[jobID] != nil {
		return false
	}
	x.busy[jobID] = true
	return true
}

// deferredStop is a stop of a plan deferred behind the job's stop or
// admission under way (startStop), with the context of the Apply that
// ordered it and what it is (preemption, requeue, reclaim).
type deferredStop struct {
	ctx  context.Context
	in   *Intent
	kind string
}

// claimStop claims the job for a stop (claimed), or, when the job's stop
// or admission is under way and no other stop waits behind it, defers
// this one behind it (deferred). Both are decided under one lock with
// the end of what is under way (nextDeferred for a stop, endAdmission for
// an admission), so a stop is either deferred before that one lets the
// job go, and then seen by it, or finds the job free.
func (x *Executor) claimStop(ctx context.Context, in *Intent, kind string) (claimed, deferred bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.underway[in.JobID] != nil || x.pending[in.JobID] != nil {
		if _, ok := x.deferred[in.JobID]; ok {
			return false, false
		}
		x.deferred[in.JobID] = deferredStop{ctx: ctx, in: in, kind: kind}
		return false, true
	}
	if x.busy[in.JobID] {
		return false, false
	}
	x.busy[in.JobID] = true
	return true, false
}

func (x *Executor) release(jobID string) {
	x.mu.Lock()
	x.releaseLocked(jobID)
	x.mu.Unlock()
}

// releaseLocked is release with x.mu held.
func (x *Executor) releaseLocked(jobID string) {
	delete(x.busy, jobID)
	delete(x.underway, jobID)
}

func (x *Executor) setOutcome(jobID, s string) {
	x.mu.Lock()
	x.outcomes.set(jobID, s)
	x.mu.Unlock()
}

// Wait blocks until background preemptions end.
func (x *Executor) Wait() { x.wg.Wait() }

// Apply carries out a plan: admissions now, preemptions in the background
// (signal, grace, re-park, stop). An action already under way for a job is
// not started twice.
func (x *Executor) Apply(ctx context.Context, plan *engine.Plan) ApplyReport {
	res := ApplyReport{Skipped: map[string]string{}, Failed: map[string]error{}}
	if plan == nil {
		return res
	}
	x.applyWithdrawals(plan.Withdrawals, &res)
	for _, p := range plan.Preemptions {
		in := x.stopIntent(p.Stop, p.Reason)
		in.Preemptor, in.LostGPUH, in.MovedTo, in.PreemptorGPUs = p.Preemptor, p.LostGPUHours, p.MovedTo, p.PreemptorGPUs
		x.startStop(ctx, in, "preemption", &res, &res.Preempted)
	}
	for _, r := range plan.Requeues {
		in := x.stopIntent(r.Stop, r.Reason)
		in.Replacements, in.EndFailed = r.Replacements, r.EndFailed
		x.startStop(ctx, in, "requeue", &res, &res.Requeued)
	}
	x.applyReclaims(ctx, plan, &res)
	x.applyAdmissions(ctx, plan.Admissions, &res)
	return res
}

// stopIntent is the intent of one stop of a plan (a preemption, a
// whole-gang requeue or a reclaim), with what every kind of stop carries;
// the caller adds what its kind adds.
func (x *Executor) stopIntent(s engine.Stop, reason string) *Intent {
	return &Intent{
		Kind: IntentPreempt, JobID: s.JobID, Phase: PhaseDecided, Allocs: s.Allocs,
		Signal: s.CheckpointSignal, Grace: s.Grace, Reason: reason, GPUs: s.GPUs,
		RequeueExitCode: s.RequeueExitCode, Progress: s.Progress, ProgressOnSignal: s.ProgressOnSignal,
		Created: x.cfg.Clock(),
	}
}

// startStop starts one stop of a plan (a preemption, a whole-gang requeue
// or a reclaim): it claims the job, records the intent and carries it out
// in the background, adding the job to started. A job with a stop already
// deferred, or an admission being registered, is skipped (SkipUnderway);
// an intent that cannot be recorded fails the action (nothing was done).
//
// A job whose stop is under way is skipped too, but the stop is not lost:
// it is deferred (SkipDeferred) until that one ends, and then carried out
// if the job still runs an allocation (nextDeferred). The stop under way
// can end with the job complete and left alone ("done", settle) while
// Nomad places another allocation of it, such as the replacement of a
// gang member lost with its node, after the outcome was read; the engine
// decides to stop that allocation (a whole-gang requeue, or a preemption)
// and counts the stop in flight until its TTL, 15 minutes past the grace.
// Dropped, nobody would stop that allocation, and a preemptor waiting for
// its GPUs would wait that long. Apply cannot report such a stop as not
// carried out instead: the agent would then have the engine forget the
// job's stops, the one under way included, and the engine would take
// GPUs still being freed for busy (engine.Engine.Forget).
//
// A stop of a job whose admission still waits for its gang to run
// (pending, until CheckDeadlines sees every allocation running) is
// deferred behind it the same way. The engine sees an admitted job's
// allocations as Nomad places them, a member its client has not started
// yet (an image still pulling) among them, and may choose the job as a
// victim (past its min runtime, young for a headroom's tiers, or idle).
// Once the admission ends (endAdmission) the stop is carried out if the
// gang runs on (done), and dropped if the rollback parked the job and
// stopped its allocations. Skipped and dropped instead, it was lost as
// above: the gang ran on and the preemptor waited out the TTL.
func (x *Executor) startStop(ctx context.Context, in *Intent, kind string, res *ApplyReport, started *[]string) bool {
	switch claimed, deferred := x.claimStop(ctx, in, kind); {
	case deferred:
		res.Skipped[in.JobID] = SkipDeferred
		return false
	case !claimed:
		res.Skipped[in.JobID] = SkipUnderway
		return false
	}
	if err := x.st.PutIntent(ctx, in); err != nil {
		x.release(in.JobID)
		res.Failed[in.JobID] = fmt.Errorf("record %s intent: %w", kind, err)
		return false
	}
	*started = append(*started, in.JobID)
	x.runPreemption(ctx, in, kind)
	return true
}

// applyAdmissions admits the plan's jobs one by one, then waits for the
// model to show their allocations (awaitPlacement).
func (x *Executor) applyAdmissions(ctx context.Context, admissions []engine.Admission, res *ApplyReport) {
	var admitted []engine.Admission
	for _, a := range admissions {
		if !x.claim(a.JobID) {
			res.Skipped[a.JobID] = SkipUnderway
			continue
		}
		err := x.admit(ctx, a)
		x.release(a.JobID)
		switch {
		case err == nil:
			res.Admitted = append(res.Admitted, a.JobID)
			admitted = append(admitted, a)
		case errors.Is(err, ErrConflict):
			res.Skipped[a.JobID] = SkipConflict
			x.setOutcome(a.JobID, err.Error())
		case errors.Is(err, ErrGone):
			res.Skipped[a.JobID] = SkipGone
		default:
			res.Failed[a.JobID] = err
		}
	}
	x.awaitPlacement(ctx, admitted)
}

// maxOutcomes bounds the outcome notes an executor keeps: one per job that
// was ever rolled back, in conflict or preempted would otherwise grow for
// as long as the agent runs.
const maxOutcomes = 10000

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func derefU(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}

func derefI(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func derefB(p *bool) bool { return p != nil && *p }
