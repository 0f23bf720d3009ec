package agent

import (
	"fmt"
	"testing"
	"time"

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
	good, _ := policy.ParseMeta(map[string]string{"impact_tier": "high"}, nil)
	_, bad := policy.ParseMeta(map[string]string{"impact_grace": "soon"}, nil)
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
}
