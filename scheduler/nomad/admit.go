package nomad

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// admit re-registers a parked job into its target pool, pinned to the
// plan's nodes and GPUs, enforcing the JobModifyIndex the plan was decided
// on. The intent is written first; any failure that leaves the job parked
// deletes it again.
func (x *Executor) admit(ctx context.Context, a engine.Admission) error {
	if a.Pool == "" {
		// The engine resolves the pool (impact_pool, else its default,
		// else the placed nodes' pool); the executor never guesses one.
		return fmt.Errorf("admit %s: the plan names no target pool", a.JobID)
	}
	in := x.admitIntent(a)
	if err := x.st.PutIntent(ctx, in); err != nil {
		return fmt.Errorf("admit %s: record intent: %w", a.JobID, err)
	}
	job, err := x.parkedJob(ctx, a)
	if err == nil {
		err = x.pinJob(job, a)
		if err != nil {
			err = fmt.Errorf("admit %s: %w", a.JobID, err)
		}
	}
	if err != nil {
		_ = x.st.DeleteIntent(ctx, a.JobID)
		return err
	}
	describe(job, admittedStatus(in.PinnedGPUs), x.cfg.Clock(), x.page(a.JobID))
	index, err := x.register(ctx, job, a, in)
	if err != nil {
		return err
	}
	x.admitted(ctx, a, in, index)
	return nil
}

// admitIntent is the intent of an admission as decided: its pins, GPUs
// and deadline.
func (x *Executor) admitIntent(a engine.Admission) *Intent {
	pins := map[string][]string{}
	for _, g := range a.Groups {
		pins[g.Group] = g.Nodes()
	}
	return &Intent{
		Kind: IntentAdmit, JobID: a.JobID, Phase: PhaseDecided, FromIndex: a.ModifyIndex,
		Pool: a.Pool, Pins: pins, PinnedGPUs: plannedGPUs(a), Deadline: x.cfg.Clock().Add(x.cfg.AdmitDeadline), Created: x.cfg.Clock(),
	}
}

// parkedJob reads the job to admit and checks it is still the parked job
// the plan was decided on (ErrConflict if not; ErrGone when it was
// purged).
func (x *Executor) parkedJob(ctx context.Context, a engine.Admission) (*api.Job, error) {
	ns, id := splitJobKey(a.JobID)
	job, _, err := x.c.api.Jobs().Info(id, x.c.qns(ctx, ns))
	if isNotFound(err) {
		return nil, fmt.Errorf("admit %s: %w", a.JobID, ErrGone)
	}
	if err != nil {
		return nil, fmt.Errorf("admit %s: read job: %w", a.JobID, err)
	}
	if derefU(job.JobModifyIndex) != a.ModifyIndex || deref(job.NodePool) != x.cfg.ParkingPool || derefB(job.Stop) {
		return nil, fmt.Errorf("admit %s: job changed since the plan (modify index %d, plan %d, pool %q): %w",
			a.JobID, derefU(job.JobModifyIndex), a.ModifyIndex, deref(job.NodePool), ErrConflict)
	}
	return job, nil
}

// register re-registers the pinned job with EnforceIndex and returns its
// new JobModifyIndex. A lost answer is settled by reading the job back
// (registerOutcome).
func (x *Executor) register(ctx context.Context, job *api.Job, a engine.Admission, in *Intent) (uint64, error) {
	ns, _ := splitJobKey(a.JobID)
	resp, _, err := x.c.api.Jobs().EnforceRegister(job, a.ModifyIndex, x.c.wns(ctx, ns))
	if err == nil {
		return resp.JobModifyIndex, nil
	}
	if isEnforceConflict(err) {
		_ = x.st.DeleteIntent(ctx, a.JobID)
		return 0, fmt.Errorf("admit %s: %s: %w", a.JobID, strings.TrimSpace(err.Error()), ErrConflict)
	}
	return x.registerOutcome(ctx, a, in, err)
}

// registerOutcome settles a register that failed with an error that may
// or may not mean it happened, by reading the job back (a few times: the
// error may be a passing one). Registered: its new JobModifyIndex. Not
// registered: the intent goes and the error is returned. Unknown: the job
// is watched as if admitted, so that a gang that did get placed is still
// held to the deadline (and rolled back) and not left half-placed;
// CheckDeadlines settles it (a job still parked needs nothing).
func (x *Executor) registerOutcome(ctx context.Context, a engine.Admission, in *Intent, regErr error) (uint64, error) {
	ns, id := splitJobKey(a.JobID)
	var cur *api.Job
	var err error
	for attempt := range 3 {
		if cur, _, err = x.c.api.Jobs().Info(id, x.c.qns(ctx, ns)); err == nil || ctx.Err() != nil {
			break
		}
		_ = sleepCtx(ctx, time.Duration(attempt+1)*100*time.Millisecond)
	}
	if err != nil {
		x.mu.Lock()
		x.pending[a.JobID] = in
		x.mu.Unlock()
		return 0, fmt.Errorf("admit %s: register: %w (outcome unknown, reading the job back failed: %v; watching it until the admission deadline)", a.JobID, regErr, err)
	}
	if derefU(cur.JobModifyIndex) == a.ModifyIndex {
		_ = x.st.DeleteIntent(ctx, a.JobID)
		return 0, fmt.Errorf("admit %s: register: %w", a.JobID, regErr)
	}
	return derefU(cur.JobModifyIndex), nil
}

// admitted records a registered admission: the intent's phase, and the
// job watched until its gang runs (CheckDeadlines).
func (x *Executor) admitted(ctx context.Context, a engine.Admission, in *Intent, index uint64) {
	in.Phase = PhaseRegistered
	in.ToIndex = index
	if err := x.st.PutIntent(ctx, in); err != nil {
		// The job is admitted; the intent (phase decided) is still there,
		// and Recover adopts a registered job, so only log.
		x.log.Warn("admitted, but the intent update failed", "job", a.JobID, "error", err)
	}
	x.mu.Lock()
	x.pending[a.JobID] = in
	x.outcomes.del(a.JobID)
	x.mu.Unlock()
	x.log.Info("admitted", "job", a.JobID, "pool", a.Pool, "pins", in.Pins, "gpus", in.PinnedGPUs, "modify_index", index)
	for _, w := range a.Warnings {
		x.log.Warn("admitted a task that will not see all its GPUs", "job", a.JobID, "warning", w)
	}
}

// plannedGPUs is the plan's GPUs of an admission by node (each group's
// union there, all groups together), as the intent records them for the
// read-back (checkPins).
func plannedGPUs(a engine.Admission) map[string][]string {
	out := map[string][]string{}
	for _, g := range a.Groups {
		for _, ap := range g.Allocs {
			out[ap.NodeID] = append(out[ap.NodeID], ap.GPUs...)
		}
	}
	for n, ids := range out {
		slices.Sort(ids)
		out[n] = slices.Compact(ids)
	}
	return out
}

// awaitPlacement waits, PlacementWait at most in all, until the model
// shows the allocations of the admitted jobs: until then their GPUs look
// free to the model.
func (x *Executor) awaitPlacement(ctx context.Context, admitted []engine.Admission) {
	if x.cfg.Snapshot == nil || x.cfg.PlacementWait < 0 || len(admitted) == 0 {
		return
	}
	deadline := time.Now().Add(x.cfg.PlacementWait)
	for {
		snap := x.cfg.Snapshot()
		waiting := 0
		for _, a := range admitted {
			want := 0
			for _, g := range a.Groups {
				want += len(g.Allocs)
			}
			if len(snap.JobAllocs(a.JobID)) < want {
				waiting++
			}
		}
		if waiting == 0 {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			x.log.Debug("admitted jobs' allocations not all in the model yet", "waiting", waiting)
			return
		}
		_ = sleepCtx(ctx, 2*time.Millisecond)
	}
}
