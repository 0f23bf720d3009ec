package nomad

import (
	"context"
	"errors"
	"fmt"
)

// Recover finishes or undoes what a previous leader left half-done. Call
// it when this agent becomes leader, before applying plans:
//   - an admission recorded but not registered is dropped (the job is
//     still parked and the next plan decides again);
//   - an admission registered (the job carries our pins) is adopted, and
//     its deadline watched;
//   - a preemption is carried on from its last phase to the end.
func (x *Executor) Recover(ctx context.Context) error {
	intents, err := x.st.Intents(ctx)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, in := range intents {
		switch in.Kind {
		case IntentAdmit:
			if err := x.recoverAdmit(ctx, in); err != nil {
				errs = append(errs, err)
			}
		case IntentPreempt:
			if !x.claim(in.JobID) {
				continue
			}
			x.log.Info("resuming preemption left by a previous leader", "job", in.JobID, "phase", in.Phase)
			x.runPreemption(ctx, in, "resumed preemption")
		}
	}
	return errors.Join(errs...)
}

func (x *Executor) recoverAdmit(ctx context.Context, in *Intent) error {
	ns, id := splitJobKey(in.JobID)
	job, _, err := x.c.api.Jobs().Info(id, x.c.qns(ctx, ns))
	if err != nil {
		if isNotFound(err) {
			return x.st.DeleteIntent(ctx, in.JobID)
		}
		return fmt.Errorf("recover admission of %s: read job: %w", in.JobID, err)
	}
	registered := pinnedAPI(job) && deref(job.NodePool) != x.cfg.ParkingPool && derefU(job.JobModifyIndex) != in.FromIndex
	if !registered {
		x.log.Info("dropping an admission that never reached Nomad", "job", in.JobID)
		return x.st.DeleteIntent(ctx, in.JobID)
	}
	if in.Phase != PhaseRegistered {
		in.Phase = PhaseRegistered
		in.ToIndex = derefU(job.JobModifyIndex)
		if err := x.st.PutIntent(ctx, in); err != nil {
			return fmt.Errorf("recover admission of %s: %w", in.JobID, err)
		}
	}
	x.log.Info("adopting an admission made by a previous leader", "job", in.JobID, "deadline", in.Deadline)
	x.mu.Lock()
	x.pending[in.JobID] = in
	x.mu.Unlock()
	return nil
}
