package nomad

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// runPreemption carries out a claimed preemption in the background, then
// the stop deferred behind it, if any (nextDeferred), and releases the job.
func (x *Executor) runPreemption(ctx context.Context, in *Intent, what string) {
	x.mu.Lock()
	x.underway[in.JobID] = in
	x.mu.Unlock()
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		x.runStops(ctx, in.JobID, in, what)
	}()
}

// runStops carries out the job's stop in (none when nil), then each stop
// deferred behind it (nextDeferred), until none is left and the job is
// released.
func (x *Executor) runStops(ctx context.Context, jobID string, in *Intent, what string) {
	for in != nil {
		// ctx is the leader's: losing leadership stops the preemption
		// where it is, and its intent lets the next leader finish it.
		err := x.preempt(ctx, in)
		if err != nil {
			x.log.Error(what+" interrupted; the intent stays for recovery", "job", in.JobID, "error", err)
		}
		ctx, in, what = x.nextDeferred(jobID, err == nil)
	}
}

// nextDeferred, once the job's stop or admission under way has ended
// (ended: finished, its intent gone), returns the stop a later plan
// deferred behind it (startStop), recorded and claimed, for runStops to
// carry out; with none left it releases the job and returns a nil intent.
// The plan decided it; this only checks that it still has something to
// do: it is carried out if Nomad runs an allocation of the job
// (wantedRunning), or if that cannot be read, and dropped if not (the
// stop that ended, or the admission's rollback, parked and stopped the
// job, or it is gone: the engine's in-flight stop ends as its allocations
// do). Carried out on a job with nothing left, it would record a second
// preemption of the same stop and replace the note of the one that
// happened. A stop that ended interrupted keeps its intent for recovery,
// and the job can hold one intent only: the deferred stop is then
// dropped (the next leader's engine decides afresh; this one's holds it
// in flight until its TTL, as it does the interrupted stop).
func (x *Executor) nextDeferred(jobID string, ended bool) (context.Context, *Intent, string) {
	for {
		x.mu.Lock()
		d, ok := x.deferred[jobID]
		delete(x.deferred, jobID)
		if !ok {
			x.releaseLocked(jobID)
			x.mu.Unlock()
			return nil, nil, ""
		}
		x.mu.Unlock()
		if !ended {
			x.log.Warn("dropping a "+d.kind+" deferred behind an interrupted stop of the job", "job", jobID, "reason", d.in.Reason)
			continue
		}
		live, err := x.liveAllocs(d.ctx, jobID)
		if err != nil {
			x.log.Warn("cannot tell whether the job still runs; carrying out the "+d.kind+" deferred behind its stop", "job", jobID, "error", err)
		} else if !slices.ContainsFunc(live, wantedRunning) {
			x.log.Debug("dropping a "+d.kind+" deferred behind the job's stop: nothing of the job runs", "job", jobID)
			continue
		}
		if err := x.st.PutIntent(d.ctx, d.in); err != nil {
			x.log.Error("could not record the "+d.kind+" intent deferred behind the job's stop; not carried out", "job", jobID, "error", err)
			continue
		}
		x.mu.Lock()
		x.underway[jobID] = d.in
		x.mu.Unlock()
		x.log.Info("carrying out a "+d.kind+" deferred behind the job's stop: the job still runs", "job", jobID, "reason", d.in.Reason)
		return d.ctx, d.in, d.kind
	}
}

// PreemptionsUnderway lists the preemptions being carried out, by victim:
// its allocations, grace, preemptor and, for a move, where it restarts (a
// new leader's engine is told of them after Recover).
func (x *Executor) PreemptionsUnderway() []engine.Preemption {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]engine.Preemption, 0, len(x.underway))
	for _, in := range x.underway {
		out = append(out, engine.Preemption{Stop: engine.Stop{JobID: in.JobID, Allocs: append([]string(nil), in.Allocs...), GPUs: in.GPUs,
			Grace: in.Grace, CheckpointSignal: in.Signal, RequeueExitCode: in.RequeueExitCode}, Preemptor: in.Preemptor, Reason: in.Reason,
			MovedTo: slices.Clone(in.MovedTo), PreemptorGPUs: slices.Clone(in.PreemptorGPUs)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].JobID < out[j].JobID })
	return out
}

// preempt runs (or resumes, after a leader change) one preemption, from
// the phase its intent records: checkpoint signal (signal), grace and the
// outcome contract (settle: done, or parked), stop, and the record and
// note (finishPreemption; finishReclaim for reclaims). Each phase is
// written to the intent before the next starts.
func (x *Executor) preempt(ctx context.Context, in *Intent) error {
	if in.Phase == PhaseDecided {
		if reason := x.withdrawal(in); reason != "" {
			return x.withdrawn(ctx, in, reason) // before its signal went out
		}
		if err := x.signal(ctx, in); err != nil {
			return err
		}
	}
	if in.Phase == PhaseSignalled {
		done, err := x.settle(ctx, in)
		if err != nil || done {
			return err
		}
	}
	if err := x.stopAll(ctx, in.JobID); err != nil {
		return err
	}
	if in.Idle != "" {
		return x.finishReclaim(ctx, in)
	}
	return x.finishPreemption(ctx, in)
}

// signal sends the checkpoint signal (if the plan names one) to the
// victim's running allocations and moves the intent to PhaseSignalled. A
// failed signal is only logged: the grace and the stop still follow.
// Replacements Nomad placed for a gang's lost member are stopped first,
// without signal or grace: they hold no work of the gang's, and must not
// run beside the members they replace.
func (x *Executor) signal(ctx context.Context, in *Intent) error {
	if err := x.stopReplacements(ctx, in); err != nil {
		return err
	}
	if in.Signal != "" {
		ns, _ := splitJobKey(in.JobID)
		live, err := x.liveAllocs(ctx, in.JobID)
		if err != nil {
			return err
		}
		for _, a := range live {
			if a.ClientStatus != "running" || slices.Contains(in.Replacements, a.ID) {
				continue
			}
			if err := x.c.api.Allocations().Signal(&api.Allocation{ID: a.ID}, x.c.qns(ctx, ns), "", in.Signal); err != nil {
				x.log.Warn("checkpoint signal failed", "job", in.JobID, "alloc", a.ID, "signal", in.Signal, "error", err)
			}
		}
	}
	in.Phase = PhaseSignalled
	in.SignalledAt = x.cfg.Clock()
	if err := x.st.PutIntent(ctx, in); err != nil {
		return fmt.Errorf("preempt %s: update intent: %w", in.JobID, err)
	}
	return nil
}

// awaitGrace waits until the victim's allocations have ended or the
// plan's grace after the signal has passed (no wait without a signal).
func (x *Executor) awaitGrace(ctx context.Context, in *Intent) error {
	if in.Signal == "" || in.Grace <= 0 {
		return nil
	}
	deadline := in.SignalledAt.Add(in.Grace)
	for x.cfg.Clock().Before(deadline) {
		if x.withdrawal(in) != "" {
			return nil
		}
		if out, err := x.victimOutcome(ctx, in); err == nil && out.ended {
			return nil
		}
		wait := min(x.cfg.PollInterval, deadline.Sub(x.cfg.Clock()))
		if err := sleepCtx(ctx, max(wait, time.Millisecond)); err != nil {
			return err
		}
	}
	return nil
}

// settle applies the outcome contract (README.md) once the grace is
// over: every task exited 0 -> the work is done, the job is neither parked
// nor stopped and Nomad marks it complete (done is true: nothing follows).
// Anything else is requeued: the job is parked (or, for a reclaim past its
// requeues, deregistered) and the intent moves to PhaseParked.
func (x *Executor) settle(ctx context.Context, in *Intent) (done bool, err error) {
	if err := x.awaitGrace(ctx, in); err != nil {
		return false, err
	}
	out, err := x.victimOutcome(ctx, in)
	if err != nil {
		return false, fmt.Errorf("preempt %s: %w", in.JobID, err)
	}
	if reason := x.withdrawal(in); reason != "" {
		if !out.ended && !out.requeued {
			return true, x.withdrawn(ctx, in, reason)
		}
		x.log.Info("preemption withdrawn too late: a task of the job has already ended; carrying it out", "job", in.JobID, "for", in.Preemptor)
	}
	if out.done {
		return true, x.finishedInGrace(ctx, in)
	}
	in.outcome = OutcomeStopped
	if out.requeued {
		in.outcome = OutcomeRequeued
	}
	if in.Idle == IdleStop || in.EndFailed {
		err = x.stopForGood(ctx, in)
	} else {
		err = x.park(ctx, in.JobID, parkReason(in), in.savedProgress())
	}
	if err != nil {
		return false, err
	}
	in.Phase = PhaseParked
	if err := x.st.PutIntent(ctx, in); err != nil {
		return false, fmt.Errorf("preempt %s: update intent: %w", in.JobID, err)
	}
	return false, nil
}

// finishedInGrace ends a preemption (or requeue) whose victim completed
// on its own: the intent goes, no preemption is recorded.
func (x *Executor) finishedInGrace(ctx context.Context, in *Intent) error {
	if err := x.st.DeleteIntent(ctx, in.JobID); err != nil {
		return err
	}
	if in.Preemptor == "" {
		x.setOutcome(in.JobID, "finished before its requeue (every task exited 0): complete, not requeued")
		return nil
	}
	x.countOutcome(OutcomeCompleted)
	x.setOutcome(in.JobID, fmt.Sprintf("finished during its preemption grace (every task exited 0): complete, not requeued (preempted for %s)", in.Preemptor))
	x.log.Info("preempted job finished within its grace; not requeued", "job", in.JobID, "for", in.Preemptor)
	return nil
}

// finishPreemption ends a preemption (or whole-gang requeue) once its
// victim is parked and stopped: the preemption record (with a preemptor),
// the intent deleted, the outcome counted and noted.
func (x *Executor) finishPreemption(ctx context.Context, in *Intent) error {
	if in.Preemptor != "" {
		if err := x.st.RecordPreemption(ctx, PreemptionRecord{
			JobID: in.JobID, Preemptor: in.Preemptor, At: x.cfg.Clock(), GPUs: in.GPUs,
			LostGPUHours: in.LostGPUH, Reason: in.Reason,
		}); err != nil {
			x.log.Warn("could not record the preemption", "job", in.JobID, "error", err)
		}
	}
	if err := x.st.DeleteIntent(ctx, in.JobID); err != nil {
		return err
	}
	how := "stopped at the end of its grace and requeued"
	switch in.outcome {
	case OutcomeRequeued:
		how = fmt.Sprintf("exited with its requeue code %d and was requeued", requeueCode(in))
		if in.Preemptor != "" && in.Signal != "" {
			// The estimate in the reason was made before the signal;
			// the job says it saved its work on it.
			how += " (it saved a checkpoint on the signal: the work lost is what ran since then, not the estimate below)"
		}
	case "":
		// Resumed after the park: how the tasks ended is not known.
		how = "requeued"
		in.outcome = OutcomeStopped
	}
	if in.EndFailed {
		x.setOutcome(in.JobID, fmt.Sprintf("ended failed (%s; deregistered, not requeued): %s", strings.TrimSuffix(how, " and was requeued"), in.Reason))
		x.log.Warn("incomplete gang ended failed", "job", in.JobID, "outcome", in.outcome, "reason", in.Reason)
		return nil
	}
	if in.Preemptor == "" {
		x.setOutcome(in.JobID, fmt.Sprintf("requeued whole (%s): %s", how, in.Reason))
		x.log.Info("incomplete gang requeued whole", "job", in.JobID, "outcome", in.outcome)
		return nil
	}
	x.countOutcome(in.outcome)
	x.setOutcome(in.JobID, fmt.Sprintf("preempted for %s, %s: %s", in.Preemptor, how, in.Reason))
	x.log.Info("preempted", "job", in.JobID, "for", in.Preemptor, "gpus", in.GPUs, "outcome", in.outcome)
	return nil
}

// stopReplacements stops the replacements a requeue names that still
// run (stopping one twice, or one already gone, is harmless).
func (x *Executor) stopReplacements(ctx context.Context, in *Intent) error {
	if len(in.Replacements) == 0 {
		return nil
	}
	ns, _ := splitJobKey(in.JobID)
	var errs []error
	for _, id := range in.Replacements {
		if _, err := x.c.api.Allocations().Stop(&api.Allocation{ID: id}, x.c.qns(ctx, ns)); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("stop replacement %s of %s: %w", id, in.JobID, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	x.log.Info("stopped Nomad's replacements of a lost member before requeuing the gang", "job", in.JobID, "allocs", in.Replacements)
	return nil
}

// requeueCode is the victim's requeue exit code as the plan gave it; an
// intent recorded without one (by an older agent) gets the policy default,
// as the engine would have given it.
func requeueCode(in *Intent) int {
	if in.RequeueExitCode != 0 {
		return in.RequeueExitCode
	}
	return jobspec.DefaultRequeueExitCode
}

// applyWithdrawals marks the preemptions the plan withdraws (its
// preemptor no longer waits: engine.Withdrawal). The background run of
// each (preempt) notices it: before the signal it ends at once; during
// the grace it stops waiting and, with every task of the victim still
// running, ends with the job running on (withdrawn). Past the grace, or
// once a task has ended (it may have exited to be requeued), the
// preemption goes on: too late to withdraw. Only a preemption for that
// preemptor: a whole-gang requeue, a reclaim or a move is never
// withdrawn.
func (x *Executor) applyWithdrawals(ws []engine.Withdrawal, res *ApplyReport) {
	for _, w := range ws {
		x.mu.Lock()
		in := x.underway[w.JobID]
		ok := in != nil && in.Preemptor != "" && in.Preemptor == w.Preemptor && in.Idle == "" && len(in.MovedTo) == 0
		if ok && in.withdraw == "" {
			in.withdraw = w.Reason
		}
		x.mu.Unlock()
		if !ok {
			res.Skipped[w.JobID] = SkipNotUnderway
			continue
		}
		res.Withdrawing = append(res.Withdrawing, w.JobID)
	}
}

// withdrawal is why the preemption in was withdrawn ("" while it was not).
func (x *Executor) withdrawal(in *Intent) string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return in.withdraw
}

// withdrawn ends a preemption the engine withdrew while the victim's
// tasks all still run: the intent goes, nothing is parked or stopped, no
// preemption is recorded, and the job's note says so.
func (x *Executor) withdrawn(ctx context.Context, in *Intent, reason string) error {
	if err := x.st.DeleteIntent(ctx, in.JobID); err != nil {
		return err
	}
	x.countOutcome(OutcomeWithdrawn)
	x.setOutcome(in.JobID, fmt.Sprintf("%s; it runs on, neither stopped nor requeued (preempted: %s)", reason, in.Reason))
	x.log.Info("preemption withdrawn; the job runs on", "job", in.JobID, "for", in.Preemptor, "reason", reason)
	return nil
}
