package agent

import (
	"errors"
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
)

func buildView(snap *cluster.Snapshot, plan *engine.Plan, hist map[string]jobHistory, now time.Time, leader bool, pol *policy.Policy) *view {
	v := &view{explain: map[string]agentapi.Explanation{}, stats: ClusterStats{Tiers: map[string]TierStats{}}}
	for _, n := range snap.Nodes() {
		for _, g := range n.GPUs {
			v.stats.TotalGPUs++
			if g.Healthy && n.Ready {
				v.stats.HealthyGPUs++
			}
		}
	}
	for _, a := range snap.Allocs() {
		v.stats.AllocatedGPUs += len(a.GPUs)
	}

	victims := map[string]engine.Preemption{}
	running := map[string]*engine.RunningJob{}
	reclaims := map[string]*engine.Reclaim{}
	if plan != nil {
		for _, p := range plan.Preemptions {
			victims[p.JobID] = p
		}
		for _, p := range plan.Requeues {
			victims[p.JobID] = p
		}
		for i := range plan.Running {
			running[plan.Running[i].JobID] = &plan.Running[i]
		}
		for i := range plan.Reclaims {
			reclaims[plan.Reclaims[i].JobID] = &plan.Reclaims[i]
		}
	}
	var waiting, others []agentapi.Entry
	for _, j := range snap.Jobs() {
		var ex *engine.Explanation
		if plan != nil {
			ex = plan.Explanations[j.ID]
		}
		e := explainJob(j, ex, snap, hist[j.ID], victims, now, leader, pol)
		if r, ok := running[j.ID]; ok && e.State == agentapi.StateRunning {
			withUtilization(&e, r)
		}
		if r, ok := reclaims[j.ID]; ok && e.State == agentapi.StateRunning {
			e.Decision = DecisionReclaimed
			e.Reason = r.Reason
			if len(e.Nodes) == 0 {
				e.Nodes = hist[j.ID].Nodes
			}
		}
		if running[j.ID] != nil || reclaims[j.ID] != nil {
			e.Summary = summarize(e)
		}
		v.explain[j.ID] = e
		if e.State == agentapi.StateWaiting || e.State == agentapi.StateInvalid {
			waiting = append(waiting, e.Entry)
			if e.State == agentapi.StateInvalid {
				// Listed in the queue, but not demand: it cannot run as
				// written (impact_queue_invalid_jobs counts it).
				v.stats.InvalidJobs++
				continue
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
		} else {
			others = append(others, e.Entry)
		}
	}
	// Waiting jobs in decision order; jobs without a position (invalid)
	// after them; then admitted and running jobs by ID.
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

func explainJob(j *cluster.Job, ex *engine.Explanation, snap *cluster.Snapshot, h jobHistory,
	victims map[string]engine.Preemption, now time.Time, leader bool, pol *policy.Policy) agentapi.Explanation {
	e := agentapi.Explanation{GeneratedAt: now, Leader: leader}
	e.Namespace = j.Namespace
	e.Job = j.Name
	e.Since = j.Submit
	e.GPUs = j.GPUs()
	for _, g := range j.Groups {
		e.Allocations += g.Count
	}
	if j.SpecErr == nil {
		if t := pol.TierOf(j.Spec); t != nil {
			e.Tier = t.Name
		}
		e.Project = pol.ProjectName(j.Spec)
		if err := pol.CheckSpec(j.Spec); err != nil {
			e.Errors = metaErrors(err)
		}
	} else {
		e.Errors = metaErrors(j.SpecErr)
	}
	if ex != nil {
		e.Position = ex.Position
		if ex.Tier != "" {
			e.Tier = ex.Tier
		}
		if ex.Project != "" {
			e.Project = ex.Project
		}
		e.Score = ex.Score.Total
		e.Terms = scoreTerms(ex.Score)
		e.Reason = ex.Reason
		if len(ex.Rejected) > 0 {
			e.Reason = strings.TrimSpace(e.Reason + " " + rejectedSummary(ex.Rejected))
		}
		e.Victims = append([]string(nil), ex.Victims...)
	}

	switch {
	case j.State == cluster.JobRunning:
		running := len(snap.JobAllocs(j.ID))
		e.State = agentapi.StateRunning
		if running < e.Allocations {
			e.State = agentapi.StateAdmitting
			e.Reason = fmt.Sprintf("admitted; %d of %d allocations running", running, e.Allocations)
		}
		e.Position = 0
		e.Decision = DecisionAdmit
		if h.Decision == DecisionAdmit {
			e.Since = h.At
			e.Nodes = h.Nodes
			e.Placement, e.Warnings = placedAllocs(h.Placement), h.Warnings
			if ex == nil {
				e.Score = h.Score.Total
				e.Terms = scoreTerms(h.Score)
			}
		} else {
			// Admitted before this agent led: where it runs is what
			// Nomad says, so its Variable still follows its state.
			e.Nodes = allocNodes(snap, j.ID)
		}
		if p, ok := victims[j.ID]; ok {
			e.Decision = DecisionPreempted
			if p.Preemptor == "" {
				e.Decision = DecisionRequeued
			}
			e.PreemptedBy = p.Preemptor
			e.Reason = p.Reason
		}
	case ex != nil && ex.Status == engine.StatusAdmitted && !leader:
		// A standby decides but does not act: the job still waits.
		e.State = agentapi.StateWaiting
		e.Decision = DecisionAdmit
		e.Reason = "fits now; the leader admits it (this agent is a standby)"
	case ex != nil && ex.Status == engine.StatusAdmitted && h.Decision != DecisionAdmit:
		// Planned by this cycle but not carried out (EnforceIndex
		// conflict, failure): still parked, decided again next cycle.
		e.State = agentapi.StateWaiting
		e.Decision = DecisionWait
		e.Reason = "admission planned but not carried out this cycle (job changed or Nomad refused); re-deciding"
	case ex != nil && ex.Status == engine.StatusAdmitted:
		e.State = agentapi.StateAdmitting
		e.Position = 0
		e.Decision = DecisionAdmit
		if e.Reason == "" {
			e.Reason = "admitted: every allocation of the gang placed"
		}
		if h.Decision == DecisionAdmit {
			e.Nodes = h.Nodes
			e.Placement, e.Warnings = placedAllocs(h.Placement), h.Warnings
		} else if ex != nil {
			e.Placement, e.Warnings = placedAllocs(ex.Placement), ex.Warnings
		}
	case j.SpecErr != nil || len(e.Errors) > 0 || (ex != nil && ex.Status == engine.StatusParked):
		e.State = agentapi.StateInvalid
		e.Decision = DecisionNone
		if e.Reason == "" && j.SpecErr != nil {
			e.Reason = "impact_* meta is invalid: fix the job and re-submit it"
		}
	default:
		e.State = agentapi.StateWaiting
		e.Decision = DecisionWait
		if ex != nil && ex.Status == engine.StatusPreempting {
			e.Decision = DecisionPreempt
		}
		if h.Decision == DecisionPreempted || h.Decision == DecisionRequeued {
			e.PreemptedBy = h.PreemptedBy
			if e.Reason == "" {
				e.Reason = h.Reason
			}
		}
		if h.Decision == DecisionReclaimed {
			e.Reason = strings.TrimSpace("requeued by its tier's idle action (" + h.Reason + "); " + e.Reason)
		}
		if ex == nil && e.Reason == "" {
			e.Reason = "not yet considered by a cycle"
		}
	}
	if e.State == agentapi.StateWaiting || e.State == agentapi.StateInvalid {
		if w := now.Sub(j.Submit); w > 0 {
			e.WaitSeconds = w.Seconds()
		}
	}
	e.Summary = summarize(e)
	return e
}

func scoreTerms(s policy.Score) []agentapi.Term {
	return []agentapi.Term{
		{Name: "tier", Value: s.Tier, Detail: "tier weight x project weight"},
		{Name: "fair_share", Value: s.FairShare, Detail: "project's entitled minus used share of GPU-hours"},
		{Name: "deadline", Value: s.Deadline, Detail: "urgency as impact_deadline nears"},
		{Name: "age", Value: s.Age, Detail: "time waited, so nothing starves"},
	}
}

func rejectedSummary(r map[string]int) string {
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d node(s)", k, r[k])
	}
	return "(" + strings.Join(parts, "; ") + ")"
}

// metaErrors lists every error of a (possibly joined) meta error.
func metaErrors(err error) []string {
	var multi interface{ Unwrap() []error }
	if errors.As(err, &multi) {
		var out []string
		for _, e := range multi.Unwrap() {
			out = append(out, e.Error())
		}
		return out
	}
	return []string{err.Error()}
}

// placedAllocs lists a plan's allocations for explain, group by group.
func placedAllocs(groups []engine.GroupPlacement) []agentapi.PlacedAlloc {
	var out []agentapi.PlacedAlloc
	for _, g := range groups {
		for _, ap := range g.Allocs {
			pa := agentapi.PlacedAlloc{Group: g.Group, Node: ap.NodeID, GPUs: ap.GPUs, Islands: ap.Islands}
			for _, b := range ap.Blocks {
				pa.Blocks = append(pa.Blocks, agentapi.PlacedBlock{Task: b.Task, Index: b.Index, GPUs: b.GPUs})
			}
			out = append(out, pa)
		}
	}
	return out
}
