package nomad

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// CheckDeadlines looks at admissions waiting to run: those whose every
// group has its allocations running (or already complete) are done; those
// past their deadline, or with a failed allocation, are rolled back (the
// job is parked again and its allocations stopped), so a gang never stays
// half-placed. Either way a stop a plan deferred behind the admission
// follows (endAdmission). It returns the jobs rolled back.
func (x *Executor) CheckDeadlines(ctx context.Context) []string {
	x.mu.Lock()
	pend := make([]*Intent, 0, len(x.pending))
	for _, in := range x.pending {
		pend = append(pend, in)
	}
	x.mu.Unlock()
	sort.Slice(pend, func(i, j int) bool { return pend[i].JobID < pend[j].JobID })
	var rolled []string
	for _, in := range pend {
		st, err := x.admissionState(ctx, in)
		if err != nil {
			x.log.Warn("cannot check admission", "job", in.JobID, "error", err)
			continue
		}
		failed := st.failed
		switch {
		case st.done:
			x.checkPins(ctx, in, st.started)
			if err := x.st.DeleteIntent(ctx, in.JobID); err != nil {
				x.log.Warn("cannot delete a finished admission intent", "job", in.JobID, "error", err)
				continue
			}
			x.endAdmission(in.JobID)
		case failed != "" || x.cfg.Clock().After(in.Deadline):
			reason := failed
			if reason == "" {
				reason = fmt.Sprintf("not all allocations running within %v", x.cfg.AdmitDeadline)
			}
			if err := x.rollback(ctx, in, reason); err != nil {
				x.log.Error("rollback failed; will retry", "job", in.JobID, "error", err)
				continue
			}
			rolled = append(rolled, in.JobID)
		}
	}
	return rolled
}

// admissionCheck is how an admitted job stands (admissionState).
type admissionCheck struct {
	// done: nothing left to watch. Either every group has its allocations
	// of the admitted version running or finished (started lists them,
	// for the read-back of their GPUs), or the job is gone, stopped or
	// parked again by someone else (started is empty: nothing to check).
	done    bool
	started []string
	// failed says why the admission failed ("" while it may still start).
	failed string
}

// admissionState says whether every group of an admitted job has its
// allocations of the admitted version running (or finished), or why it
// failed.
func (x *Executor) admissionState(ctx context.Context, in *Intent) (admissionCheck, error) {
	ns, id := splitJobKey(in.JobID)
	job, _, err := x.c.api.Jobs().Info(id, x.c.qns(ctx, ns))
	if err != nil {
		if isNotFound(err) {
			return admissionCheck{done: true}, nil
		}
		return admissionCheck{}, err
	}
	if derefB(job.Stop) || (deref(job.NodePool) == x.cfg.ParkingPool && !pinnedAPI(job)) {
		// Stopped or re-parked by someone else: nothing to watch.
		return admissionCheck{done: true}, nil
	}
	as, _, err := x.c.api.Jobs().Allocations(id, true, x.c.qns(ctx, ns))
	if err != nil {
		return admissionCheck{}, err
	}
	version := derefU(job.Version)
	count := map[string]int{}
	var started []string
	for _, a := range as {
		if a.JobVersion < version {
			continue
		}
		switch a.ClientStatus {
		case "running", "complete":
			count[a.TaskGroup]++
			started = append(started, a.ID)
		case "failed", "lost":
			return admissionCheck{failed: fmt.Sprintf("allocation %s of group %s %s", a.ID, a.TaskGroup, a.ClientStatus)}, nil
		}
	}
	for _, tg := range job.TaskGroups {
		if count[deref(tg.Name)] < derefI(tg.Count) {
			return admissionCheck{failed: x.blockedReason(ctx, in, job)}, nil
		}
	}
	return admissionCheck{done: true, started: started}, nil
}

// blockedReason says why Nomad could not place an admitted job, once it
// has had BlockedGrace to do so: a blocked evaluation of the admitted
// version names the groups and what stopped them. "" while there is
// none (or the grace has not passed: capacity may be freeing up).
func (x *Executor) blockedReason(ctx context.Context, in *Intent, job *api.Job) string {
	if x.cfg.BlockedGrace < 0 || x.cfg.Clock().Sub(in.Created) < x.cfg.BlockedGrace {
		return ""
	}
	ns, id := splitJobKey(in.JobID)
	evals, _, err := x.c.api.Jobs().Evaluations(id, x.c.qns(ctx, ns))
	if err != nil {
		return ""
	}
	for _, e := range evals {
		if e.Status != "blocked" || e.JobModifyIndex < derefU(job.JobModifyIndex) || len(e.FailedTGAllocs) == 0 {
			continue
		}
		groups := make([]string, 0, len(e.FailedTGAllocs))
		for g := range e.FailedTGAllocs {
			groups = append(groups, g)
		}
		sort.Strings(groups)
		var parts []string
		for _, g := range groups {
			parts = append(parts, fmt.Sprintf("group %s: %s", g, describeMetric(e.FailedTGAllocs[g])))
		}
		return "Nomad could not place the admitted job (" + strings.Join(parts, "; ") + ")"
	}
	return ""
}

// describeMetric summarises why Nomad's scheduler rejected nodes.
func describeMetric(m *api.AllocationMetric) string {
	if m == nil {
		return "no placement"
	}
	var why []string
	add := func(kind string, by map[string]int) {
		keys := make([]string, 0, len(by))
		for k := range by {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			why = append(why, fmt.Sprintf("%s %s on %d node(s)", kind, k, by[k]))
		}
	}
	add("constraint", m.ConstraintFiltered)
	add("exhausted", m.DimensionExhausted)
	if len(why) == 0 {
		return fmt.Sprintf("%d of %d node(s) in pool %s evaluated", m.NodesEvaluated, m.NodesInPool, m.NodePool)
	}
	return strings.Join(why, ", ")
}

func (x *Executor) rollback(ctx context.Context, in *Intent, reason string) error {
	x.log.Warn("admission did not fully start; parking the job again", "job", in.JobID, "reason", reason)
	if err := x.park(ctx, in.JobID, "its admission did not start whole ("+firstClause(reason)+"); the scheduler retries it later", 0); err != nil {
		return err
	}
	if err := x.stopAll(ctx, in.JobID); err != nil {
		return err
	}
	if err := x.st.DeleteIntent(ctx, in.JobID); err != nil {
		return err
	}
	x.setOutcome(in.JobID, "admission rolled back: "+reason)
	x.endAdmission(in.JobID)
	return nil
}

// endAdmission forgets the job's admission, which has ended (done or
// rolled back, its intent gone), and carries out in the background the
// stop a plan deferred behind it (startStop), if any, unless nothing of
// the job runs any more (nextDeferred): an admission that ends done
// leaves the gang running, and the engine, which ordered the stop and
// counts it in flight, waits for it (a preemptor for the victim's GPUs);
// one rolled back has parked the job and stopped its allocations, which
// is what the stop would have done. The job is claimed, and the stop
// taken for under way, in the same lock that ends the admission, so a
// stop ordered meanwhile is deferred behind this one (claimStop), not
// started beside it.
func (x *Executor) endAdmission(jobID string) {
	x.mu.Lock()
	delete(x.pending, jobID)
	d, ok := x.deferred[jobID]
	if ok {
		x.busy[jobID] = true
		x.underway[jobID] = d.in
	}
	x.mu.Unlock()
	if !ok {
		return
	}
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		ctx, in, what := x.nextDeferred(jobID, true)
		x.runStops(ctx, jobID, in, what)
	}()
}
