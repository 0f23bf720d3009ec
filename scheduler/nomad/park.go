package nomad

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/jobspec"
)

// park re-registers the job into the parking pool without pins, retrying
// when a concurrent update moves the JobModifyIndex, and says why in its
// description (describe.go). With progress (the work the job has saved,
// Intent.savedProgress) it writes it, in whole seconds cut down, as the
// job's impact_progress, which the engine subtracts from its walltime
// (jobspec.Spec.Left); under a second leaves the meta as it is. A job
// already parked (e.g. re-submitted by its user) is left alone.
func (x *Executor) park(ctx context.Context, jobID, why string, progress time.Duration) error {
	ns, id := splitJobKey(jobID)
	progress = progress.Truncate(time.Second) // never more than it saved
	for attempt := 0; attempt < 5; attempt++ {
		job, _, err := x.c.api.Jobs().Info(id, x.c.qns(ctx, ns))
		if err != nil {
			if isNotFound(err) {
				return nil
			}
			return fmt.Errorf("park %s: read job: %w", jobID, err)
		}
		if derefB(job.Stop) {
			return nil
		}
		if deref(job.NodePool) == x.cfg.ParkingPool && !pinnedAPI(job) {
			return nil
		}
		idx := derefU(job.JobModifyIndex)
		x.unpin(job)
		if progress > 0 {
			setProgress(job, progress)
		}
		describe(job, parkedStatus(why, progress, metaWalltime(job)), x.cfg.Clock(), x.page(jobID))
		_, _, err = x.c.api.Jobs().EnforceRegister(job, idx, x.c.wns(ctx, ns))
		if err == nil {
			return nil
		}
		if !isEnforceConflict(err) {
			return fmt.Errorf("park %s: register: %w", jobID, err)
		}
		x.log.Info("job changed while parking it; re-reading", "job", jobID)
	}
	return fmt.Errorf("park %s: %w (5 attempts)", jobID, ErrConflict)
}

// setProgress writes the work the job has saved into its meta.
func setProgress(job *api.Job, progress time.Duration) {
	if job.Meta == nil {
		job.Meta = map[string]string{}
	}
	job.Meta[jobspec.MetaProgress] = progress.String()
}

// metaWalltime is the job's impact_walltime, 0 when it has none or it does
// not parse (the engine reports bad meta; a description need not).
func metaWalltime(job *api.Job) time.Duration {
	d, err := jobspec.ParseDuration(job.Meta[jobspec.MetaWalltime])
	if err != nil {
		return 0
	}
	return d
}

// savedProgress is the work the stopped job has saved, by its outcome: a
// task that exited with the requeue code saved its work at the signal
// (ProgressOnSignal); otherwise only its checkpoints up to the decision
// count (Progress).
func (in *Intent) savedProgress() time.Duration {
	if in.outcome == OutcomeRequeued {
		return in.ProgressOnSignal
	}
	return in.Progress
}

// liveAllocs lists the job's allocations that are not terminal.
func (x *Executor) liveAllocs(ctx context.Context, jobID string) ([]*api.AllocationListStub, error) {
	ns, id := splitJobKey(jobID)
	as, _, err := x.c.api.Jobs().Allocations(id, true, x.c.qns(ctx, ns))
	if err != nil {
		if isNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("list allocations of %s: %w", jobID, err)
	}
	var out []*api.AllocationListStub
	for _, a := range as {
		if !terminalStatus(a.ClientStatus) {
			out = append(out, a)
		}
	}
	return out, nil
}

// stopAll stops the job's live allocations (re-registering a batch job
// does not stop its running allocations).
func (x *Executor) stopAll(ctx context.Context, jobID string) error {
	ns, _ := splitJobKey(jobID)
	live, err := x.liveAllocs(ctx, jobID)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range live {
		if a.DesiredStatus != "run" {
			continue
		}
		if _, err := x.c.api.Allocations().Stop(&api.Allocation{ID: a.ID}, x.c.qns(ctx, ns)); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("stop allocation %s of %s: %w", a.ID, jobID, err))
		}
	}
	return errors.Join(errs...)
}
