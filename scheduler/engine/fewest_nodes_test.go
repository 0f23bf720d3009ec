package engine

import (
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// Multi-node gangs go on the fewest nodes, then on nodes sharing a switch,
// then a rack.
func TestFewestNodes(t *testing.T) {
	long := t0.Add(-48 * time.Hour)
	busy := mkJob("busy", running())
	sw := func(rack, sw string) []nodeOpt { return []nodeOpt{label("rack", rack), label("switch", sw)} }
	cases := []struct {
		name      string
		nodes     []*cluster.Node
		allocs    []*cluster.Alloc
		job       *cluster.Job
		wantNodes string
	}{
		{
			name: "packs 4x2 GPUs on the one node with room rather than four fragments",
			nodes: []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2), mkNode("n3", 8, 2),
				mkNode("n4", 8, 2), mkNode("n5", 8, 2)},
			allocs: []*cluster.Alloc{
				alloc("b2", "busy", "n2", long, 0, 1, 2, 3, 4, 5), alloc("b3", "busy", "n3", long, 0, 1, 2, 3, 4, 5),
				alloc("b4", "busy", "n4", long, 0, 1, 2, 3, 4, 5), alloc("b5", "busy", "n5", long, 0, 1, 2, 3, 4, 5)},
			job:       mkJob("j", group("w", 4, 2)),
			wantNodes: "n1",
		},
		{
			name: "two nodes behind one switch",
			nodes: []*cluster.Node{mkNode("n1", 8, 2, sw("a", "s1")...), mkNode("n2", 8, 2, sw("a", "s2")...),
				mkNode("n3", 8, 2, sw("b", "s3")...), mkNode("n4", 8, 2, sw("b", "s3")...)},
			job:       mkJob("j", group("w", 2, 8)),
			wantNodes: "n3,n4",
		},
		{
			name: "no shared switch: two nodes in one rack",
			nodes: []*cluster.Node{mkNode("n1", 8, 2, sw("a", "s1")...), mkNode("n2", 8, 2, sw("b", "s2")...),
				mkNode("n3", 8, 2, sw("c", "s3")...), mkNode("n4", 8, 2, sw("b", "s4")...)},
			job:       mkJob("j", group("w", 2, 8)),
			wantNodes: "n2,n4",
		},
		{
			name: "fewest nodes beats locality",
			nodes: []*cluster.Node{mkNode("n1", 8, 2, sw("a", "s1")...), mkNode("n2", 8, 2, sw("b", "s2")...),
				mkNode("n3", 8, 2, sw("c", "s3")...), mkNode("n4", 8, 2, sw("c", "s3")...),
				mkNode("n5", 8, 2, sw("c", "s3")...), mkNode("n6", 8, 2, sw("c", "s3")...)},
			allocs: []*cluster.Alloc{
				alloc("b3", "busy", "n3", long, 0, 1, 2, 3), alloc("b4", "busy", "n4", long, 0, 1, 2, 3),
				alloc("b5", "busy", "n5", long, 0, 1, 2, 3), alloc("b6", "busy", "n6", long, 0, 1, 2, 3)},
			job:       mkJob("j", group("w", 4, 4)),
			wantNodes: "n1,n2",
		},
		{
			name:  "best fit on the last node",
			nodes: []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2), mkNode("n3", 8, 2)},
			allocs: []*cluster.Alloc{
				alloc("b2", "busy", "n2", long, 0, 1, 2, 3, 4, 5)},
			job:       mkJob("j", group("w", 5, 2)),
			wantNodes: "n1,n2",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			snap := mustSnap(t, tc.nodes, []*cluster.Job{busy, tc.job}, tc.allocs)
			plan := mustEngine(t, nil).Decide(snap, t0)
			if err := ValidatePlan(policy.Default(), snap, plan); err != nil {
				t.Fatalf("invalid plan: %v", err)
			}
			a := admission(plan, "j")
			if a == nil {
				t.Fatalf("not admitted: %+v", plan.Explanations["j"])
			}
			if got := join(nodesOf(a)); got != tc.wantNodes {
				t.Fatalf("gang on %s, want %s (%+v)", got, tc.wantNodes, a.Groups)
			}
		})
	}
}
