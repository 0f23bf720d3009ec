package nomad

import (
	"context"
	"fmt"

	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// Reclaims (engine.Plan.Reclaims) are the utilisation layer's requeue
// action on hung jobs. They run the preemption path (intent, checkpoint
// signal, grace, the outcome contract, park, stop) with no preemptor; a
// job past its tier's max_requeues is deregistered instead of parked, so
// it stays stopped (Nomad shows it dead) and is not queued again. They are
// not recorded as preemptions: they spend no preemption budget and lose no
// work the budget counts (a hung job makes no progress).

// Intent.Idle values.
const (
	IdleRequeue = "requeue"
	IdleStop    = "stop"
)

func (x *Executor) applyReclaims(ctx context.Context, plan *engine.Plan, res *ApplyReport) {
	for _, r := range plan.Reclaims {
		idle := IdleRequeue
		if !r.Requeue {
			idle = IdleStop
		}
		in := x.stopIntent(r.Stop, r.Reason)
		in.Idle = idle
		if x.startStop(ctx, in, "reclaim", res, &res.Reclaimed) {
			x.log.Info("reclaiming hung job", "job", r.JobID, "requeue", r.Requeue, "requeues", r.Requeues, "gpus", r.GPUs,
				"idle_gpu_hours", r.IdleGPUHours, "signal", r.CheckpointSignal, "grace", r.Grace, "reason", r.Reason)
		}
	}
}

// stopForGood deregisters a hung job that used up its requeues, or a gang
// ended failed (Intent.EndFailed), not purged: Nomad keeps it, stopped,
// for people to look at.
func (x *Executor) stopForGood(ctx context.Context, in *Intent) error {
	ns, id := splitJobKey(in.JobID)
	if _, _, err := x.c.api.Jobs().Deregister(id, false, x.c.wns(ctx, ns)); err != nil && !isNotFound(err) {
		return fmt.Errorf("stop %s for good: deregister: %w", in.JobID, err)
	}
	return nil
}

// finishReclaim ends a reclaim once its allocations are stopped.
func (x *Executor) finishReclaim(ctx context.Context, in *Intent) error {
	if err := x.st.DeleteIntent(ctx, in.JobID); err != nil {
		return err
	}
	how := "stopped and queued again"
	if in.Idle == IdleStop {
		how = "stopped and left stopped"
	}
	x.setOutcome(in.JobID, fmt.Sprintf("reclaimed (%s): %s", how, in.Reason))
	x.log.Info("reclaimed hung job", "job", in.JobID, "outcome", how, "gpus", in.GPUs)
	return nil
}
