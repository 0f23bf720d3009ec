package engine_test

import (
	"fmt"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// How the adapter and the simulator drive the core: parse each job's
// impact meta into its Spec (keeping the error), feed nodes, jobs and
// allocations into a Store, and run Decide on snapshots.
func ExampleEngine_Decide() {
	pol, err := policy.LoadBytes([]byte(`tier "normal" { weight = 100 }`), "policy.hcl")
	if err != nil {
		panic(err)
	}
	eng, err := engine.New(pol)
	if err != nil {
		panic(err)
	}
	store := cluster.NewStore()
	node := &cluster.Node{ID: "node-1", Pool: "gpu", Eligible: true, Ready: true}
	for i := range 8 {
		node.GPUs = append(node.GPUs, cluster.GPU{ID: fmt.Sprintf("GPU-%d", i), Index: i, Island: i / 4, Healthy: true})
	}
	_ = store.UpsertNode(node)

	jobMeta := map[string]string{"impact_tier": "normal", "impact_topology": "nvlink"}
	spec, specErr := jobspec.ParseMeta(jobMeta, nil)
	groupSpec, _ := jobspec.ParseGroupMeta(jobMeta, nil, "train")
	_ = store.UpsertJob(&cluster.Job{
		ID: cluster.JobKey("default", "train"), Namespace: "default", Name: "train",
		Submit: time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC), State: cluster.JobQueued,
		Spec: spec, SpecErr: specErr,
		Groups: []cluster.TaskGroup{{Name: "train", Count: 1, GPUs: 4, Spec: groupSpec}},
	})

	plan := eng.Decide(store.Snapshot(), time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
	for _, a := range plan.Admissions {
		fmt.Println(a.JobID, a.Pool, a.Groups[0].Allocs[0].NodeID, a.Groups[0].Allocs[0].GPUs)
	}
	// Output: default/train gpu node-1 [GPU-0 GPU-1 GPU-2 GPU-3]
}
