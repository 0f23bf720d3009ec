package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// A job with invalid impact meta is listed in the queue (state invalid)
// but is not waiting demand: it cannot run as written, so it is counted
// in impact_queue_invalid_jobs, not in the waiting jobs and GPUs of its
// tier or of the cluster.
func TestInvalidJobsAreNotWaitingDemand(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	good, _ := jobspec.ParseMeta(map[string]string{"impact_tier": "high"}, nil)
	_, bad := jobspec.ParseMeta(map[string]string{"impact_grace": "soon"}, nil)
	jobs := []*cluster.Job{
		{ID: "default/ok", Namespace: "default", Name: "ok", Submit: now.Add(-time.Minute), Spec: good,
			Groups: []cluster.TaskGroup{{Name: "g", Count: 1, GPUs: 4, Spec: good}}},
	}
	for _, id := range []string{"bad1", "bad2"} {
		jobs = append(jobs, &cluster.Job{ID: "default/" + id, Namespace: "default", Name: id, Submit: now.Add(-time.Minute), SpecErr: bad,
			Groups: []cluster.TaskGroup{{Name: "g", Count: 1, GPUs: 4}}})
	}
	// One 4-GPU node, held by an unmanaged job: the valid job waits.
	node := &cluster.Node{ID: "n1", Name: "n1", Pool: "default", Eligible: true, Ready: true}
	var held []string
	for i := range 4 {
		id := fmt.Sprintf("n1-g%d", i)
		node.GPUs = append(node.GPUs, cluster.GPU{ID: id, Index: i, Healthy: true})
		held = append(held, id)
	}
	other := &cluster.Alloc{ID: "x", JobID: "default/other", NodeID: "n1", GPUs: held, Start: now.Add(-time.Hour)}
	snap, err := cluster.Build([]*cluster.Node{node}, jobs, []*cluster.Alloc{other})
	if err != nil {
		t.Fatal(err)
	}
	pol := policy.Default()
	e, err := engine.New(pol)
	if err != nil {
		t.Fatal(err)
	}
	v := buildView(snap, e.Decide(snap, now), nil, now, true, pol)
	if v.stats.InvalidJobs != 2 {
		t.Errorf("invalid jobs = %d, want 2", v.stats.InvalidJobs)
	}
	if c := v.queue.Cluster; c.WaitingJobs != 1 || c.WaitingGPUs != 4 {
		t.Errorf("cluster waiting %d jobs / %d GPUs, want 1 / 4 (the invalid ones are not demand)", c.WaitingJobs, c.WaitingGPUs)
	}
	total := 0
	for _, ts := range v.stats.Tiers {
		total += ts.Jobs
	}
	if total != 1 {
		t.Errorf("waiting jobs by tier %+v, want only the valid one", v.stats.Tiers)
	}
	if len(v.queue.Jobs) != 3 {
		t.Errorf("queue lists %d jobs, want all 3 (the invalid ones shown as invalid)", len(v.queue.Jobs))
	}
	if x := v.explain["default/bad1"]; x.State != "invalid" || VariableItems(x, "")["state"] != "invalid" {
		t.Errorf("bad1: explain state %q, Variable state %q; want invalid in both", x.State, VariableItems(x, "")["state"])
	}
	// Issue 36: an invalid job has no place in the queue (it said "3rd of
	// 1 waiting" on its page); the valid one is first of 1.
	for _, q := range v.queue.Jobs {
		x := v.explain[cluster.JobKey(q.Namespace, q.Job)]
		want := 0
		if q.Job == "ok" {
			want = 1
		}
		if q.Position != want || x.Position != want {
			t.Errorf("%s: queue position %d, explanation's %d, want %d", q.Job, q.Position, x.Position, want)
		}
		if _, ok := VariableItems(x, "")["position"]; ok != (want > 0) {
			t.Errorf("%s: Variable has a position item: %v, want %v", q.Job, ok, want > 0)
		}
	}
}

// The queue positions count only the jobs that wait: 1, 2, ... in the
// engine's order, skipping the jobs it admitted that Nomad does not run
// yet (which the engine's positions count) and giving invalid jobs and
// jobs no cycle has considered no place; the summary says the same place.
func TestPlaceWaitingCountsOnlyWaitingJobs(t *testing.T) {
	cases := []struct {
		name string
		in   []agentapi.Entry // engine positions, in sortWaiting's order
		want []int
	}{
		{"invalid parked at the end",
			[]agentapi.Entry{{Job: "a", State: agentapi.StateWaiting, Position: 1}, {Job: "b", State: agentapi.StateWaiting, Position: 2},
				{Job: "c", State: agentapi.StateWaiting, Position: 3}, {Job: "bad", State: agentapi.StateInvalid, Position: 4}},
			[]int{1, 2, 3, 0}},
		{"admitted jobs ahead",
			[]agentapi.Entry{{Job: "a", State: agentapi.StateWaiting, Position: 2}, {Job: "b", State: agentapi.StateWaiting, Position: 5}},
			[]int{1, 2}},
		{"not yet considered",
			[]agentapi.Entry{{Job: "a", State: agentapi.StateWaiting, Position: 1}, {Job: "new", State: agentapi.StateWaiting}},
			[]int{1, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := &view{explain: map[string]agentapi.Explanation{}}
			for i := range tc.in {
				tc.in[i].Namespace = "default"
				tc.in[i].Reason = "needs 8 GPUs, 0 free"
				x := agentapi.Explanation{Entry: tc.in[i]}
				x.Summary = summarize(x)
				tc.in[i].Summary = x.Summary
				v.explain[cluster.JobKey("default", tc.in[i].Job)] = x
			}
			v.placeWaiting(tc.in)
			for i, w := range tc.want {
				x := v.explain[cluster.JobKey("default", tc.in[i].Job)]
				if tc.in[i].Position != w || x.Position != w {
					t.Errorf("%s: position %d (explanation %d), want %d", tc.in[i].Job, tc.in[i].Position, x.Position, w)
				}
				if x.Summary != tc.in[i].Summary || x.Summary != summarize(x) {
					t.Errorf("%s: summary %q (entry %q) does not follow the place", tc.in[i].Job, x.Summary, tc.in[i].Summary)
				}
			}
		})
	}
}

// Each case of a job's explanation: the engine's decision, where the
// agent's actions left the job (history), and what Nomad runs decide its
// state, decision and reason; the engine's explanation is attached
// unchanged (a running job's, the one it was admitted with).
func TestExplainCases(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	spec, _ := jobspec.ParseMeta(map[string]string{"impact_tier": "high"}, nil)
	_, bad := jobspec.ParseMeta(map[string]string{"impact_grace": "soon"}, nil)
	job := func(id string, st cluster.JobState) *cluster.Job {
		return &cluster.Job{ID: "default/" + id, Namespace: "default", Name: id, Submit: now.Add(-time.Minute), State: st, Spec: spec,
			Groups: []cluster.TaskGroup{{Name: "g", Count: 2, GPUs: 1, Spec: spec}}}
	}
	admitted := &engine.Explanation{JobID: "default/old", Status: engine.StatusAdmitted, Score: policy.Score{Total: 7}}
	for _, tc := range []struct {
		name     string
		job      *cluster.Job
		allocs   int // running allocations of the job
		stopping int // how many of them are told to stop
		ex       *engine.Explanation
		hist     jobHistory
		leader   bool
		victim   *engine.Preemption
		state    string
		decision string
		reason   string // a substring
		engine   *engine.Explanation
		position int
	}{
		{name: "waiting", job: job("w", cluster.JobQueued), leader: true,
			ex:    &engine.Explanation{Position: 3, Status: engine.StatusWaiting, Reason: "needs 2 GPUs, 0 free"},
			state: agentapi.StateWaiting, decision: DecisionWait, reason: "needs 2 GPUs", position: 1}, // the only job waiting
		{name: "preempting", job: job("p", cluster.JobQueued), leader: true,
			ex:    &engine.Explanation{Position: 1, Status: engine.StatusPreempting, Reason: "preempting 1 gang(s)"},
			state: agentapi.StateWaiting, decision: DecisionPreempt, reason: "preempting", position: 1},
		{name: "standby's admission", job: job("s", cluster.JobQueued),
			ex:    &engine.Explanation{Position: 1, Status: engine.StatusAdmitted},
			state: agentapi.StateWaiting, decision: DecisionAdmit, reason: "this agent is a standby", position: 1},
		{name: "admission not carried out", job: job("n", cluster.JobQueued), leader: true,
			ex:    &engine.Explanation{Position: 1, Status: engine.StatusAdmitted},
			state: agentapi.StateWaiting, decision: DecisionWait, reason: "not carried out", position: 1},
		{name: "admitted this cycle", job: job("a", cluster.JobQueued), leader: true,
			ex:    &engine.Explanation{Position: 1, Status: engine.StatusAdmitted},
			hist:  jobHistory{Decision: DecisionAdmit, At: now, Nodes: map[string][]string{"g": {"n1"}}},
			state: agentapi.StateAdmitting, decision: DecisionAdmit, reason: "every allocation of the gang placed"},
		{name: "running, admitted by this agent", job: job("old", cluster.JobRunning), allocs: 2, leader: true,
			hist:  jobHistory{Decision: DecisionAdmit, At: now, Nodes: map[string][]string{"g": {"n1"}}, Admitted: admitted},
			state: agentapi.StateRunning, decision: DecisionAdmit, engine: admitted},
		{name: "half started", job: job("h", cluster.JobRunning), allocs: 1, leader: true,
			state: agentapi.StateAdmitting, decision: DecisionAdmit, reason: "1 of 2 allocations running"},
		{name: "admitted again while its earlier run stops", job: job("m", cluster.JobRunning), allocs: 2, stopping: 2, leader: true,
			hist:  jobHistory{Decision: DecisionAdmit, At: now, Nodes: map[string][]string{"g": {"n1"}}, Admitted: admitted},
			state: agentapi.StateAdmitting, decision: DecisionAdmit, reason: "0 of 2 allocations running", engine: admitted},
		{name: "running, being preempted", job: job("v", cluster.JobRunning), allocs: 2, leader: true,
			victim: &engine.Preemption{Stop: engine.Stop{JobID: "default/v"}, Preemptor: "default/urgent", Reason: "room for urgent"},
			state:  agentapi.StateRunning, decision: DecisionPreempted, reason: "room for urgent"},
		{name: "running, preempted by an earlier cycle (in its grace)", job: job("g", cluster.JobRunning), allocs: 2, leader: true,
			hist:  jobHistory{Decision: DecisionPreempted, PreemptedBy: "default/urgent", Reason: "room for urgent"},
			state: agentapi.StateRunning, decision: DecisionPreempted, reason: "room for urgent"},
		{name: "running, its preemption withdrawn", job: job("wd", cluster.JobRunning), allocs: 2, leader: true,
			hist:  jobHistory{Decision: DecisionAdmit, At: now, Nodes: map[string][]string{"g": {"n1"}}, Admitted: admitted, Withdrawn: "preemption withdrawn within its grace: default/urgent, preempted for, no longer waits"},
			state: agentapi.StateRunning, decision: DecisionAdmit, reason: "no longer waits; it runs on", engine: admitted},
		{name: "preempted, one member already stopped (issue 41: not 'admitting')", job: job("s1", cluster.JobRunning), allocs: 1, leader: true,
			hist:  jobHistory{Decision: DecisionPreempted, PreemptedBy: "default/urgent", Reason: "room for urgent"},
			state: agentapi.StateRunning, decision: DecisionPreempted, reason: "room for urgent"},
		{name: "waiting after a preemption", job: job("q", cluster.JobQueued), leader: true,
			ex:    &engine.Explanation{Position: 2, Status: engine.StatusWaiting},
			hist:  jobHistory{Decision: DecisionPreempted, PreemptedBy: "default/urgent", Reason: "room for urgent"},
			state: agentapi.StateWaiting, decision: DecisionWait, reason: "room for urgent", position: 1},
		{name: "bad meta", job: &cluster.Job{ID: "default/b", Namespace: "default", Name: "b", SpecErr: bad,
			Groups: []cluster.TaskGroup{{Name: "g", Count: 1, GPUs: 1}}},
			state: agentapi.StateInvalid, decision: DecisionNone, reason: "impact_* meta is invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := &cluster.Node{ID: "n1", Name: "n1", Pool: "default", Eligible: true, Ready: true,
				GPUs: []cluster.GPU{{ID: "g0", Healthy: true}, {ID: "g1", Index: 1, Healthy: true}}}
			var allocs []*cluster.Alloc
			for i := range tc.allocs {
				allocs = append(allocs, &cluster.Alloc{ID: fmt.Sprint("a", i), JobID: tc.job.ID, Group: "g", NodeID: "n1",
					GPUs: []string{fmt.Sprint("g", i)}, Start: now, Stopping: i < tc.stopping})
			}
			snap, err := cluster.Build([]*cluster.Node{node}, []*cluster.Job{tc.job}, allocs)
			if err != nil {
				t.Fatal(err)
			}
			plan := &engine.Plan{Explanations: map[string]*engine.Explanation{}}
			if tc.ex != nil {
				plan.Explanations[tc.job.ID] = tc.ex
			}
			if tc.victim != nil {
				plan.Preemptions = []engine.Preemption{*tc.victim}
			}
			want := tc.engine
			if want == nil {
				want = tc.ex
			}
			v := buildView(snap, plan, map[string]jobHistory{tc.job.ID: tc.hist}, now, tc.leader, policy.Default())
			e := v.explain[tc.job.ID]
			if e.State != tc.state || e.Decision != tc.decision || !strings.Contains(e.Reason, tc.reason) || e.Position != tc.position {
				t.Errorf("state %s decision %s reason %q position %d; want %s %s %q %d",
					e.State, e.Decision, e.Reason, e.Position, tc.state, tc.decision, tc.reason, tc.position)
			}
			if e.Engine != want {
				t.Errorf("engine explanation %+v, want %+v (unchanged)", e.Engine, want)
			}
			if e.Summary == "" || e.GPUs != 2 && e.State != agentapi.StateInvalid {
				t.Errorf("summary %q GPUs %d", e.Summary, e.GPUs)
			}
		})
	}
}

// TestExplainCarriesTheRun: a parked job registered again with the work
// it saved (impact_progress) shows its walltime and that work, in the
// queue and in its explanation, waiting and once running again; a job
// whose meta is bad shows none.
func TestExplainCarriesTheRun(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	spec, err := jobspec.ParseMeta(map[string]string{"impact_tier": "high", "impact_walltime": "6h", "impact_progress": "4h"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, bad := jobspec.ParseMeta(map[string]string{"impact_walltime": "6h", "impact_progress": "soon"}, nil)
	node := &cluster.Node{ID: "n1", Name: "n1", Pool: "default", Eligible: true, Ready: true,
		GPUs: []cluster.GPU{{ID: "g0", Healthy: true}}}
	for _, tc := range []struct {
		name        string
		state       cluster.JobState
		allocs      int
		specErr     error
		wall, saved float64
	}{
		{"waiting", cluster.JobQueued, 0, nil, 6 * 3600, 4 * 3600},
		{"running again", cluster.JobRunning, 1, nil, 6 * 3600, 4 * 3600},
		{"bad meta", cluster.JobQueued, 0, bad, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &cluster.Job{ID: "default/r", Namespace: "default", Name: "r", Submit: now.Add(-time.Minute), State: tc.state,
				Groups: []cluster.TaskGroup{{Name: "g", Count: 1, GPUs: 1}}}
			if tc.specErr != nil {
				j.SpecErr = tc.specErr
			} else {
				j.Spec, j.Groups[0].Spec = spec, spec
			}
			var allocs []*cluster.Alloc
			for i := range tc.allocs {
				allocs = append(allocs, &cluster.Alloc{ID: fmt.Sprint("a", i), JobID: j.ID, Group: "g", NodeID: "n1", GPUs: []string{"g0"}, Start: now})
			}
			snap, err := cluster.Build([]*cluster.Node{node}, []*cluster.Job{j}, allocs)
			if err != nil {
				t.Fatal(err)
			}
			v := buildView(snap, &engine.Plan{Explanations: map[string]*engine.Explanation{}}, nil, now, true, policy.Default())
			e := v.explain[j.ID]
			if e.WalltimeSeconds != tc.wall || e.ProgressSeconds != tc.saved {
				t.Errorf("explanation: walltime %vs saved %vs, want %vs and %vs", e.WalltimeSeconds, e.ProgressSeconds, tc.wall, tc.saved)
			}
			if len(v.queue.Jobs) != 1 || v.queue.Jobs[0].WalltimeSeconds != tc.wall || v.queue.Jobs[0].ProgressSeconds != tc.saved {
				t.Errorf("queue entries %+v, want one with walltime %vs and %vs saved", v.queue.Jobs, tc.wall, tc.saved)
			}
		})
	}
}
