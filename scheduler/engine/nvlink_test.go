package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// NVLink island choice: a multi-GPU allocation goes into one island when
// the job requires it, prefers one otherwise, and fills the tightest
// island/node that fits (best fit).
func TestNVLinkIslandChoice(t *testing.T) {
	long := t0.Add(-48 * time.Hour)
	busy := mkJob("busy", running())
	cases := []struct {
		name     string
		nodes    []*cluster.Node
		allocs   []*cluster.Alloc
		job      *cluster.Job
		wantNode string
		wantGPUs string // comma-separated GPU IDs; "" = not admitted
		wantWhy  string // substring of the rejection summary when not admitted
	}{
		{
			name:     "nvlink: the island with room, not the fragmented one",
			nodes:    []*cluster.Node{mkNode("n1", 8, 2)},
			allocs:   []*cluster.Alloc{alloc("b1", "busy", "n1", long, 0, 1)},
			job:      mkJob("j", group("main", 1, 4), meta("impact_topology", "nvlink")),
			wantNode: "n1", wantGPUs: "n1-g4,n1-g5,n1-g6,n1-g7",
		},
		{
			name:    "nvlink: 4 free GPUs split over two islands do not place",
			nodes:   []*cluster.Node{mkNode("n1", 8, 2)},
			allocs:  []*cluster.Alloc{alloc("b1", "busy", "n1", long, 0, 1, 4, 5)},
			job:     mkJob("j", group("main", 1, 4), meta("impact_topology", "nvlink")),
			wantWhy: "no 4 free GPUs in one NVLink island",
		},
		{
			name:     "nvlink: another node's whole island is chosen",
			nodes:    []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)},
			allocs:   []*cluster.Alloc{alloc("b1", "busy", "n1", long, 0, 1, 4, 5), alloc("b2", "busy", "n2", long, 0, 1, 2, 3)},
			job:      mkJob("j", group("main", 1, 4), meta("impact_topology", "nvlink")),
			wantNode: "n2", wantGPUs: "n2-g4,n2-g5,n2-g6,n2-g7",
		},
		{
			name:     "topology node: spans islands when no island fits",
			nodes:    []*cluster.Node{mkNode("n1", 8, 2)},
			allocs:   []*cluster.Alloc{alloc("b1", "busy", "n1", long, 0, 1, 4, 5)},
			job:      mkJob("j", group("main", 1, 4), meta("impact_topology", "node")),
			wantNode: "n1", wantGPUs: "n1-g2,n1-g3,n1-g6,n1-g7",
		},
		{
			name:     "unset topology prefers one island",
			nodes:    []*cluster.Node{mkNode("n1", 8, 2)},
			allocs:   []*cluster.Alloc{alloc("b1", "busy", "n1", long, 0)},
			job:      mkJob("j", group("main", 1, 4)),
			wantNode: "n1", wantGPUs: "n1-g4,n1-g5,n1-g6,n1-g7",
		},
		{
			name:     "best fit island: the smallest island that fits",
			nodes:    []*cluster.Node{mkNode("n1", 8, 2)},
			allocs:   []*cluster.Alloc{alloc("b1", "busy", "n1", long, 0, 1)},
			job:      mkJob("j", group("main", 1, 2), meta("impact_topology", "nvlink")),
			wantNode: "n1", wantGPUs: "n1-g2,n1-g3",
		},
		{
			name:     "best fit node: the node with the fewest free GPUs that fits",
			nodes:    []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)},
			allocs:   []*cluster.Alloc{alloc("b1", "busy", "n2", long, 0, 1, 2, 3, 4, 5)},
			job:      mkJob("j", group("main", 1, 2)),
			wantNode: "n2", wantGPUs: "n2-g6,n2-g7",
		},
		{
			name:     "unhealthy GPU breaks the island",
			nodes:    []*cluster.Node{mkNode("n1", 8, 2, unhealthy(5, 6)), mkNode("n2", 8, 2)},
			allocs:   []*cluster.Alloc{alloc("b1", "busy", "n1", long, 0, 1, 2, 3), alloc("b2", "busy", "n2", long, 0, 1, 2, 4)},
			job:      mkJob("j", group("main", 1, 3), meta("impact_topology", "nvlink")),
			wantNode: "n2", wantGPUs: "n2-g5,n2-g6,n2-g7",
		},
		{
			name:    "nvlink ask larger than any island is parked",
			nodes:   []*cluster.Node{mkNode("n1", 8, 2)},
			job:     mkJob("j", group("main", 1, 6), meta("impact_topology", "nvlink")),
			wantWhy: "largest NVLink island",
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
			if tc.wantGPUs == "" {
				if a != nil {
					t.Fatalf("admitted on %+v, want waiting", a.Groups)
				}
				exp := plan.Explanations["j"]
				text := exp.Reason
				for k := range exp.Rejected {
					text += " | " + k
				}
				if !strings.Contains(text, tc.wantWhy) {
					t.Fatalf("explanation %q, want it to say %q", text, tc.wantWhy)
				}
				return
			}
			if a == nil {
				t.Fatalf("not admitted: %+v", plan.Explanations["j"])
			}
			got := a.Groups[0].Allocs[0]
			if got.NodeID != tc.wantNode || join(got.GPUs) != tc.wantGPUs {
				t.Fatalf("placed on %s %v, want %s %s", got.NodeID, got.GPUs, tc.wantNode, tc.wantGPUs)
			}
		})
	}
}
