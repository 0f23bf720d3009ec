package agent

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// view is what one cycle produced for people: the queue, each job's
// explanation, and the layer statistics. It is immutable once stored.
type view struct {
	queue   agentapi.Queue
	explain map[string]agentapi.Explanation // by cluster job ID (namespace/job)
	stats   ClusterStats
}

// Decisions shown in explanations.
const (
	DecisionAdmit     = "admit"     // admitted by this cycle (or earlier, for running jobs)
	DecisionPreempt   = "preempt"   // waiting while victims are stopped for it
	DecisionPreempted = "preempted" // stopped to make room, requeued
	DecisionRequeued  = "requeued"  // a running gang missing a member, stopped and requeued whole
	DecisionWait      = "wait"      // waiting for its turn or for capacity
	DecisionNone      = "none"      // cannot be scheduled as written
	DecisionReclaimed = "reclaimed" // hung: stopped by its tier's idle requeue action
	DecisionFailed    = "failed"    // a gang that lost a member, stopped whole and ended failed (not requeued)
)

// viewInput is what one cycle's view is built from.
type viewInput struct {
	snap   *cluster.Snapshot
	plan   *engine.Plan // nil before the first decision (tests)
	hist   map[string]jobHistory
	now    time.Time
	leader bool
	pol    *policy.Policy
	// The plan's actions by job ID.
	victims  map[string]engine.Preemption // preemptions and requeues
	running  map[string]*engine.RunningJob
	reclaims map[string]*engine.Reclaim
}

func buildView(snap *cluster.Snapshot, plan *engine.Plan, hist map[string]jobHistory, now time.Time, leader bool, pol *policy.Policy) *view {
	in := indexPlan(viewInput{snap: snap, plan: plan, hist: hist, now: now, leader: leader, pol: pol})
	v := &view{explain: map[string]agentapi.Explanation{}, stats: layerStats(snap)}
	var waiting, others []agentapi.Entry
	for _, j := range snap.Jobs() {
		e := in.explain(j)
		v.explain[j.ID] = e
		if e.State != agentapi.StateWaiting && e.State != agentapi.StateInvalid {
			others = append(others, e.Entry)
			continue
		}
		waiting = append(waiting, e.Entry)
		v.countWaiting(e.Entry)
	}
	sortWaiting(waiting)
	v.placeWaiting(waiting)
	v.queue.Jobs = append(waiting, others...)
	if v.queue.Jobs == nil {
		v.queue.Jobs = []agentapi.Entry{}
	}
	v.queue.GeneratedAt = now
	v.queue.Leader = leader
	v.queue.Cluster.HealthyGPUs = v.stats.HealthyGPUs
	v.queue.Cluster.AllocatedGPUs = v.stats.AllocatedGPUs
	return v
}

// indexPlan fills in's per-job maps from its plan.
func indexPlan(in viewInput) viewInput {
	in.victims = map[string]engine.Preemption{}
	in.running = map[string]*engine.RunningJob{}
	in.reclaims = map[string]*engine.Reclaim{}
	if in.plan == nil {
		return in
	}
	for _, p := range in.plan.Preemptions {
		in.victims[p.JobID] = p
	}
	for _, p := range in.plan.Requeues {
		in.victims[p.JobID] = p
	}
	for i := range in.plan.Running {
		in.running[in.plan.Running[i].JobID] = &in.plan.Running[i]
	}
	for i := range in.plan.Reclaims {
		in.reclaims[in.plan.Reclaims[i].JobID] = &in.plan.Reclaims[i]
	}
	return in
}

// layerStats counts the GPUs of the snapshot: in all, healthy on ready
// nodes, and allocated.
func layerStats(snap *cluster.Snapshot) ClusterStats {
	st := ClusterStats{Tiers: map[string]TierStats{}}
	for _, n := range snap.Nodes() {
		for _, g := range n.GPUs {
			st.TotalGPUs++
			if g.Healthy && n.Ready {
				st.HealthyGPUs++
			}
		}
	}
	for _, a := range snap.Allocs() {
		st.AllocatedGPUs += len(a.GPUs)
	}
	return st
}

// countWaiting adds a listed job to the demand statistics: an invalid job
// is listed in the queue but is not demand (it cannot run as written;
// impact_queue_invalid_jobs counts it).
func (v *view) countWaiting(e agentapi.Entry) {
	if e.State == agentapi.StateInvalid {
		v.stats.InvalidJobs++
		return
	}
	ts := v.stats.Tiers[tierKey(e.Tier)]
	ts.Jobs++
	ts.GPUs += e.GPUs
	if w := time.Duration(e.WaitSeconds * float64(time.Second)); w > ts.MaxWait {
		ts.MaxWait = w
	}
	v.stats.Tiers[tierKey(e.Tier)] = ts
	v.queue.Cluster.WaitingJobs++
	v.queue.Cluster.WaitingGPUs += e.GPUs
}

// placeWaiting numbers the waiting jobs (sorted by sortWaiting) 1, 2, ...
// in the engine's order, so that a job's place counts only the jobs that
// wait with it ("2nd of 3 waiting"): the engine's position also counts the
// jobs it admitted that Nomad does not run yet, and the invalid ones it
// parks at the end. An invalid job, or one no cycle has considered, has no
// place. Each job's explanation (place and summary) follows.
func (v *view) placeWaiting(waiting []agentapi.Entry) {
	n := 0
	for i := range waiting {
		w := &waiting[i]
		pos := 0
		if w.State == agentapi.StateWaiting && w.Position > 0 {
			n++
			pos = n
		}
		if pos == w.Position {
			continue
		}
		id := cluster.JobKey(w.Namespace, w.Job)
		e := v.explain[id]
		e.Position = pos
		e.Summary = summarize(e)
		v.explain[id] = e
		*w = e.Entry
	}
}

// sortWaiting orders waiting jobs by decision order, jobs without a
// position (invalid) after them, ties by ID.
func sortWaiting(waiting []agentapi.Entry) {
	sort.SliceStable(waiting, func(i, k int) bool {
		pi, pk := waiting[i].Position, waiting[k].Position
		if (pi == 0) != (pk == 0) {
			return pi != 0
		}
		if pi != pk {
			return pi < pk
		}
		return waiting[i].Namespace+"/"+waiting[i].Job < waiting[k].Namespace+"/"+waiting[k].Job
	})
}

// explain is one job's explanation: what the job asks, the engine's
// decision about it, and where the agent's actions left it.
func (in viewInput) explain(j *cluster.Job) agentapi.Explanation {
	var ex *engine.Explanation
	if in.plan != nil {
		ex = in.plan.Explanations[j.ID]
	}
	h := in.hist[j.ID]
	e := jobExplanation(j, in.pol, in.now, in.leader)
	withEngine(&e, ex)
	switch {
	case j.State == cluster.JobRunning:
		in.explainRunning(&e, j, ex, h)
	case ex != nil && ex.Status == engine.StatusAdmitted:
		explainAdmitted(&e, h, in.leader)
	case j.SpecErr != nil || len(e.Errors) > 0 || (ex != nil && ex.Status == engine.StatusParked):
		e.State, e.Decision = agentapi.StateInvalid, DecisionNone
		if e.Reason == "" && j.SpecErr != nil {
			e.Reason = "impact_* meta is invalid: fix the job and re-submit it"
		}
	default:
		explainWaiting(&e, h)
	}
	if e.State == agentapi.StateWaiting || e.State == agentapi.StateInvalid {
		if w := in.now.Sub(j.Submit); w > 0 {
			e.WaitSeconds = w.Seconds()
		}
	}
	if r, ok := in.running[j.ID]; ok && e.State == agentapi.StateRunning {
		withUtilization(&e, r)
	}
	if r, ok := in.reclaims[j.ID]; ok && e.State == agentapi.StateRunning {
		e.Decision, e.Reason = DecisionReclaimed, r.Reason
		if len(e.Nodes) == 0 {
			e.Nodes = h.Nodes
		}
	}
	e.Summary = summarize(e)
	return e
}

// jobExplanation starts a job's explanation from the job itself: what it
// asks, and its tier, project and meta errors as the policy reads them
// (the engine's explanation, when there is one, has the final word).
func jobExplanation(j *cluster.Job, pol *policy.Policy, now time.Time, leader bool) agentapi.Explanation {
	e := agentapi.Explanation{GeneratedAt: now, Leader: leader}
	e.Namespace, e.Job, e.Since, e.GPUs = j.Namespace, j.Name, j.Submit, j.GPUs()
	for _, g := range j.Groups {
		e.Allocations += g.Count
	}
	if j.SpecErr != nil {
		// Every problem at once, an unknown tier among them.
		e.Errors = metaErrors(pol.SpecError(j.Spec, j.SpecErr))
		return e
	}
	if t := pol.TierOf(j.Spec); t != nil {
		e.Tier = t.Name
	}
	e.WalltimeSeconds, e.ProgressSeconds = j.Spec.Walltime.Seconds(), j.Spec.Progress.Seconds()
	e.Project = pol.ProjectName(j.Spec)
	if err := pol.CheckSpec(j.Spec); err != nil {
		e.Errors = metaErrors(err)
	}
	return e
}

// withEngine attaches the engine's explanation and takes the row's
// position, tier, project, score and reason from it (the nodes that
// rejected the job stay in the engine's explanation: the CLI, the page
// and the Variable list them from there).
func withEngine(e *agentapi.Explanation, ex *engine.Explanation) {
	if ex == nil {
		return
	}
	e.Engine = ex
	e.Position = ex.Position
	if ex.Tier != "" {
		e.Tier = ex.Tier
	}
	if ex.Project != "" {
		e.Project = ex.Project
	}
	e.Score = ex.Score.Total
	e.Reason = ex.Reason
}

// explainRunning explains a job Nomad runs (some or all allocations).
func (in viewInput) explainRunning(e *agentapi.Explanation, j *cluster.Job, ex *engine.Explanation, h jobHistory) {
	running := 0
	for _, a := range in.snap.JobAllocs(j.ID) {
		// One told to stop is not running for the job: an earlier run's,
		// still stopping, when the job was admitted again (a job moved
		// by a defragmenting preemption restarts before its old
		// allocation has ended), or a member someone stopped.
		if !a.Stopping {
			running++
		}
	}
	e.State, e.Position, e.Decision = agentapi.StateRunning, 0, DecisionAdmit
	if running < e.Allocations {
		e.State = agentapi.StateAdmitting
		e.Reason = fmt.Sprintf("admitted; %d of %d allocations running", running, e.Allocations)
	}
	if h.Decision == DecisionAdmit {
		e.Since, e.Nodes = h.At, h.Nodes
		if ex == nil && h.Admitted != nil {
			// The engine explains queued jobs only: a running job
			// keeps the explanation it was admitted with.
			e.Engine, e.Score = h.Admitted, h.Admitted.Score.Total
		}
	} else {
		// Admitted before this agent led: where it runs is what Nomad
		// says, so its Variable still follows its state.
		e.Nodes = allocNodes(in.snap, j.ID)
	}
	if p, ok := in.victims[j.ID]; ok {
		e.Decision = DecisionPreempted
		if p.Preemptor == "" {
			e.Decision = DecisionRequeued
		}
		e.PreemptedBy, e.Reason = p.Preemptor, p.Reason
	} else if h.Decision == DecisionPreempted || h.Decision == DecisionRequeued {
		// Preempted (or requeued) by an earlier cycle and still running:
		// in its grace, or stopping. Said so until it is parked, not
		// only in the cycle that decided it.
		e.Decision, e.PreemptedBy, e.Reason = h.Decision, h.PreemptedBy, h.Reason
	} else if h.Withdrawn != "" && e.State == agentapi.StateRunning {
		e.Reason = h.Withdrawn + "; it runs on"
	}
	if e.State == agentapi.StateAdmitting && e.Decision != DecisionAdmit {
		// Members gone because the job is being stopped: it runs until
		// it is parked, it is not being started.
		e.State = agentapi.StateRunning
	}
}

// explainAdmitted explains a job the engine admitted this cycle that Nomad
// does not run yet.
func explainAdmitted(e *agentapi.Explanation, h jobHistory, leader bool) {
	switch {
	case !leader:
		// A standby decides but does not act: the job still waits.
		e.State, e.Decision = agentapi.StateWaiting, DecisionAdmit
		e.Reason = "fits now; the leader admits it (this agent is a standby)"
	case h.Decision != DecisionAdmit:
		// Planned by this cycle but not carried out (EnforceIndex
		// conflict, failure): still parked, decided again next cycle.
		e.State, e.Decision = agentapi.StateWaiting, DecisionWait
		e.Reason = "admission planned but not carried out this cycle (job changed or Nomad refused); re-deciding"
	default:
		e.State, e.Position, e.Decision = agentapi.StateAdmitting, 0, DecisionAdmit
		if e.Reason == "" {
			e.Reason = "admitted: every allocation of the gang placed"
		}
		e.Nodes = h.Nodes
	}
}

// explainWaiting explains a valid job that waits in the parking pool.
func explainWaiting(e *agentapi.Explanation, h jobHistory) {
	e.State, e.Decision = agentapi.StateWaiting, DecisionWait
	if e.Engine != nil && e.Engine.Status == engine.StatusPreempting {
		e.Decision = DecisionPreempt
	}
	switch h.Decision {
	case DecisionPreempted:
		e.PreemptedBy = h.PreemptedBy
		if e.Reason == "" {
			e.Reason = h.Reason
		}
	case DecisionRequeued:
		if strings.HasPrefix(h.Reason, "re-submitted by its user") {
			break // a user's update waits like any new version
		}
		// Said so while it waits, with why, not only in the cycle that
		// decided it.
		e.Decision = DecisionRequeued
		e.Reason = strings.TrimSuffix("requeued whole ("+h.Reason+"); "+e.Reason, "; ")
	case DecisionReclaimed:
		e.Reason = strings.TrimSpace("requeued by its tier's idle action (" + h.Reason + "); " + e.Reason)
	}
	if e.Engine == nil && e.Reason == "" {
		e.Reason = "not yet considered by a cycle"
	}
}

// allocNodes lists the nodes of a job's live allocations per group, in
// the order first seen.
func allocNodes(snap *cluster.Snapshot, jobID string) map[string][]string {
	var out map[string][]string
	seen := map[string]bool{}
	for _, a := range snap.JobAllocs(jobID) {
		if k := a.Group + "\x00" + a.NodeID; !seen[k] {
			seen[k] = true
			if out == nil {
				out = map[string][]string{}
			}
			out[a.Group] = append(out[a.Group], a.NodeID)
		}
	}
	return out
}

func tierKey(t string) string {
	if t == "" {
		return "none"
	}
	return t
}

// metaErrors lists every error of a (possibly joined, possibly nested)
// meta error, one line each.
func metaErrors(err error) []string {
	if multi, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range multi.Unwrap() {
			out = append(out, metaErrors(e)...)
		}
		return out
	}
	return []string{err.Error()}
}
