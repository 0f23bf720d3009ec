package engine

import (
	"strings"
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// groupFacts gives a node grouped by grouped(groupBy) the device group
// attributes impact-gpu reports: island and island_size only on a group
// that lies in one island.
func groupFacts(n *cluster.Node) {
	seen := map[string]bool{}
	for _, g := range n.GPUs {
		if seen[g.Group] {
			continue
		}
		seen[g.Group] = true
		dg := cluster.DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: g.Group, Attributes: map[string]cluster.Attribute{
			"group_by": {Kind: cluster.AttrString, Str: n.GroupBy},
		}}
		islands, size := map[int]bool{}, 0
		for _, h := range n.GPUs {
			if h.Group == g.Group {
				islands[h.Island] = true
			}
			if h.Island == g.Island {
				size++
			}
		}
		if len(islands) == 1 {
			dg.Attributes["island"] = cluster.Attribute{Kind: cluster.AttrInt, Int: int64(g.Island)}
			dg.Attributes["island_size"] = cluster.Attribute{Kind: cluster.AttrInt, Int: int64(size)}
		}
		n.DeviceGroups = append(n.DeviceGroups, dg)
	}
}

// distributedTraining is example/jobs/distributed-training.nomad.hcl as
// the model reads it: 2 members of 4 NVLink GPUs on distinct hosts in
// pool "gpu", the device block keeping its GPUs in one island with
// ${device.attr.island_size} >= 4.
func distributedTraining() *cluster.Job {
	j := withBlocks(mkJob("llm-pretrain", group("workers", 2, 4), meta("impact_topology", "nvlink", "impact_pool", "gpu")), ExecDriver, 4)
	g := &j.Groups[0]
	g.DistinctHosts = true
	g.Devices[0].Task = "trainer"
	g.Devices[0].Constraints = cluster.DeviceConstraints{cluster.NewDeviceConstraint("${device.attr.island_size}", ">=", "4")}
	return j
}

// The example's device constraint under impact-gpu's default group_by
// "model" matches no device group (island_size is absent where a group
// spans islands): the job is parked, the reason naming the block, the
// constraint and the attribute, instead of admitted for Nomad to refuse
// ("missing devices") again and again. Under group_by "island" it is
// admitted, each member's GPUs in one island.
func TestExampleDeviceConstraintUnderGroupBy(t *testing.T) {
	for _, groupBy := range []string{"model", "island"} {
		t.Run(groupBy, func(t *testing.T) {
			nodes := []*cluster.Node{
				mkNode("n1", 8, 2, grouped(groupBy), groupFacts),
				mkNode("n2", 8, 2, grouped(groupBy), groupFacts),
			}
			plan := mustEngine(t, nil).Decide(mustSnap(t, nodes, []*cluster.Job{distributedTraining()}, nil), t0)
			adm := admission(plan, "llm-pretrain")
			ex := plan.Explanations["llm-pretrain"]
			if groupBy == "model" {
				want := `group "workers" task "trainer" device "nvidia/gpu": constraint ${device.attr.island_size} >= 4 matches no device group of pool "gpu" (island_size is set only where a group lies in one island: impact-gpu group_by = "island")`
				if adm != nil || ex.Status != StatusParked || ex.Reason != want {
					t.Fatalf("admitted %v, %s: %q\nwant parked: %q", adm != nil, ex.Status, ex.Reason, want)
				}
				return
			}
			if adm == nil {
				t.Fatalf("not admitted: %s %q", ex.Status, ex.Reason)
			}
			nodesUsed := map[string]bool{}
			for _, ap := range adm.Groups[0].Allocs {
				nodesUsed[ap.NodeID] = true
				if len(ap.Blocks) != 1 || len(ap.Blocks[0].GPUs) != 4 || ap.Islands[0] != ap.Islands[3] {
					t.Fatalf("member %+v: want one block of 4 GPUs in one island", ap)
				}
			}
			if len(nodesUsed) != 2 {
				t.Fatalf("members on %d nodes, want 2 (distinct_hosts)", len(nodesUsed))
			}
		})
	}
}

// The same job without the constraint is admitted under group_by "model"
// (the pins keep each member in one island); with it, on a pool of one
// node of each group_by, only the "island" node can hold a member, and
// the job, needing two hosts, never fits the empty pool: parked so, the
// node whose groups fail the constraint counted. Nodes the model has no
// group facts of may meet the constraint.
func TestDeviceConstraintPoolsAndFacts(t *testing.T) {
	j := distributedTraining()
	j.Groups[0].Devices[0].Constraints = nil
	nodes := []*cluster.Node{mkNode("n1", 8, 2, grouped("model"), groupFacts), mkNode("n2", 8, 2, grouped("model"), groupFacts)}
	if plan := mustEngine(t, nil).Decide(mustSnap(t, nodes, []*cluster.Job{j}, nil), t0); admission(plan, "llm-pretrain") == nil {
		t.Fatalf("unconstrained job not admitted: %+v", plan.Explanations["llm-pretrain"])
	}

	mixed := []*cluster.Node{mkNode("n1", 8, 2, grouped("model"), groupFacts), mkNode("n2", 8, 2, grouped("island"), groupFacts)}
	plan := mustEngine(t, nil).Decide(mustSnap(t, mixed, []*cluster.Job{distributedTraining()}, nil), t0)
	ex := plan.Explanations["llm-pretrain"]
	if admission(plan, "llm-pretrain") != nil || ex.Status != StatusParked ||
		!strings.Contains(ex.Reason, "even with no other work running") ||
		!strings.Contains(ex.Reason, "device block of 4 GPUs: no device group of the node meets its constraints (${device.attr.island_size} >= 4) (1 node(s))") {
		t.Fatalf("mixed pool: %s %q; want parked as never fitting, the node whose groups fail the constraint named", ex.Status, ex.Reason)
	}

	bare := []*cluster.Node{mkNode("n1", 8, 2, grouped("model")), mkNode("n2", 8, 2, grouped("model"))}
	plan = mustEngine(t, nil).Decide(mustSnap(t, bare, []*cluster.Job{distributedTraining()}, nil), t0)
	if admission(plan, "llm-pretrain") == nil {
		t.Fatalf("nodes without group facts: %+v; want admitted (the model cannot tell)", plan.Explanations["llm-pretrain"])
	}
}

// A parked constrained job holds nothing: a job behind it is admitted in
// the same cycle, and the explanation of a block whose constraints each
// hold somewhere but never together says so.
func TestDeviceConstraintParkedJobHoldsNothing(t *testing.T) {
	nodes := []*cluster.Node{mkNode("n1", 8, 2, grouped("model"), groupFacts)}
	stuck := distributedTraining()
	stuck.Groups[0].Count, stuck.Groups[0].DistinctHosts = 1, false
	stuck.Groups[0].Devices[0].Constraints = append(stuck.Groups[0].Devices[0].Constraints[:0:0],
		cluster.NewDeviceConstraint("${device.attr.group_by}", "=", "island"),
		cluster.NewDeviceConstraint("${device.vendor}", "=", "nvidia"))
	next := withBlocks(mkJob("next", group("main", 1, 8), meta("impact_pool", "gpu")), ExecDriver, 8)
	next.Submit = stuck.Submit.Add(1)
	plan := mustEngine(t, nil).Decide(mustSnap(t, nodes, []*cluster.Job{stuck, next}, nil), t0)
	if admission(plan, "next") == nil {
		t.Fatalf("next not admitted: %+v", plan.Explanations["next"])
	}
	ex := plan.Explanations["llm-pretrain"]
	if ex.Status != StatusParked || !strings.Contains(ex.Reason, `constraint ${device.attr.group_by} = island matches no device group of pool "gpu" (its device groups have group_by model)`) {
		t.Fatalf("%s %q", ex.Status, ex.Reason)
	}

	both := distributedTraining()
	both.Groups[0].Count, both.Groups[0].DistinctHosts = 1, false
	both.Groups[0].Devices[0].Constraints = cluster.DeviceConstraints{
		cluster.NewDeviceConstraint("${device.attr.group_by}", "=", "model"),
		cluster.NewDeviceConstraint("${device.attr.island_size}", ">=", "4")}
	mixed := []*cluster.Node{mkNode("n1", 8, 2, grouped("model"), groupFacts), mkNode("n2", 8, 2, grouped("island"), groupFacts)}
	plan = mustEngine(t, nil).Decide(mustSnap(t, mixed, []*cluster.Job{both}, nil), t0)
	ex = plan.Explanations["llm-pretrain"]
	if ex.Status != StatusParked || !strings.Contains(ex.Reason, "each met by some device group of pool \"gpu\", together match none") {
		t.Fatalf("%s %q", ex.Status, ex.Reason)
	}
}
