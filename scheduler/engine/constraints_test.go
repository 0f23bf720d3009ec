package engine

import (
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

func distinctGroup(j *cluster.Job) *cluster.Job {
	for i := range j.Groups {
		j.Groups[i].DistinctHosts = true
	}
	return j
}

func distinctJob(j *cluster.Job) *cluster.Job { j.DistinctHosts = true; return j }

func constrained(j *cluster.Job, cs ...cluster.Constraint) *cluster.Job {
	for i := range j.Groups {
		j.Groups[i].Constraints = append(j.Groups[i].Constraints, cs...)
	}
	return j
}

func withClass(class string) nodeOpt { return func(n *cluster.Node) { n.Class = class } }

func withAttr(k, v string) nodeOpt {
	return func(n *cluster.Node) {
		if n.Attributes == nil {
			n.Attributes = map[string]string{}
		}
		n.Attributes[k] = v
	}
}

// A job's own constraints (distinct_hosts, node class / meta / attribute
// equality) are honoured, so that Nomad can place what the engine admits;
// a job no node can take waits, and its explanation says why.
func TestJobConstraints(t *testing.T) {
	long := t0.Add(-48 * time.Hour)
	busy := mkJob("busy", running(), meta("impact_tier", "critical"))
	cases := []struct {
		name      string
		nodes     []*cluster.Node
		allocs    []*cluster.Alloc
		jobs      []*cluster.Job
		wantNodes string // nodes of job "j"; "" = not admitted
		wantWhy   string // a rejection reason of "j" when not admitted
	}{
		{
			name:      "without distinct_hosts two allocations pack on one node",
			nodes:     []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)},
			jobs:      []*cluster.Job{mkJob("j", group("w", 2, 4))},
			wantNodes: "n1",
		},
		{
			name:      "group distinct_hosts: one allocation per node",
			nodes:     []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)},
			jobs:      []*cluster.Job{distinctGroup(mkJob("j", group("w", 2, 4)))},
			wantNodes: "n1,n2",
		},
		{
			name:   "group distinct_hosts waits rather than doubling up",
			nodes:  []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)},
			allocs: []*cluster.Alloc{alloc("b1", "busy", "n2", long, 0, 1, 2, 3, 4, 5, 6, 7)},
			jobs:   []*cluster.Job{busy, distinctGroup(mkJob("j", group("w", 2, 4)))},
		},
		{
			name:      "job distinct_hosts spans groups",
			nodes:     []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)},
			jobs:      []*cluster.Job{distinctJob(mkJob("j", group("a", 1, 2), group("b", 1, 2)))},
			wantNodes: "n1,n2",
		},
		{
			name:      "node class equality",
			nodes:     []*cluster.Node{mkNode("n1", 8, 2, withClass("cpu")), mkNode("n2", 8, 2, withClass("h100"))},
			jobs:      []*cluster.Job{constrained(mkJob("j", group("w", 1, 4)), cluster.Constraint{Target: "${node.class}", Operand: "=", Value: "h100"})},
			wantNodes: "n2",
		},
		{
			name:  "meta inequality and attribute equality",
			nodes: []*cluster.Node{mkNode("n1", 8, 2, label("rack", "r1"), withAttr("cpu.arch", "amd64")), mkNode("n2", 8, 2, label("rack", "r2"), withAttr("cpu.arch", "arm64")), mkNode("n3", 8, 2, label("rack", "r2"), withAttr("cpu.arch", "amd64"))},
			jobs: []*cluster.Job{constrained(mkJob("j", group("w", 1, 4)),
				cluster.Constraint{Target: "${meta.rack}", Operand: "!=", Value: "r1"},
				cluster.Constraint{Target: "${attr.cpu.arch}", Operand: "=", Value: "amd64"})},
			wantNodes: "n3",
		},
		{
			name:    "no node meets the constraint",
			nodes:   []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)},
			jobs:    []*cluster.Job{constrained(mkJob("j", group("w", 1, 4)), cluster.Constraint{Target: "${attr.cpu.arch}", Operand: "=", Value: "arm64"})},
			wantWhy: `does not meet the constraints of group "w"`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol := policy.Default()
			snap := mustSnap(t, tc.nodes, tc.jobs, tc.allocs)
			plan := mustEngine(t, pol).Decide(snap, t0)
			if err := ValidatePlan(pol, snap, plan); err != nil {
				t.Fatalf("invalid plan: %v", err)
			}
			a := admission(plan, "j")
			exp := plan.Explanations["j"]
			if tc.wantNodes == "" {
				if a != nil {
					t.Fatalf("admitted on %s, want it waiting", join(nodesOf(a)))
				}
				if tc.wantWhy != "" && exp.Rejected[tc.wantWhy] == 0 {
					t.Fatalf("rejections %v, want %q", exp.Rejected, tc.wantWhy)
				}
				return
			}
			if a == nil {
				t.Fatalf("not admitted: %+v", exp)
			}
			if got := join(nodesOf(a)); got != tc.wantNodes {
				t.Fatalf("admitted on %s, want %s", got, tc.wantNodes)
			}
		})
	}
}

// Preemption for a distinct-hosts gang frees one node per allocation, and
// never a node the constraints rule out.
func TestPreemptionHonoursConstraints(t *testing.T) {
	h := t0.Add(-2 * time.Hour)
	scav := func(id string) *cluster.Job { return mkJob(id, running(), meta("impact_tier", "scavenger")) }
	nodes := []*cluster.Node{mkNode("n1", 8, 2, withClass("h100")), mkNode("n2", 8, 2, withClass("h100")), mkNode("n3", 8, 2, withClass("a100"))}
	allocs := []*cluster.Alloc{
		alloc("a1", "s1", "n1", h, 0, 1, 2, 3, 4, 5, 6, 7),
		alloc("a2", "s2", "n2", h, 0, 1, 2, 3, 4, 5, 6, 7),
		alloc("a3", "s3", "n3", h, 0, 1, 2, 3, 4, 5, 6, 7),
	}
	// s3 is the cheapest victim (checkpointed lately), but its node is
	// of the wrong class; the gang needs two nodes of its own.
	allocs[2].LastCheckpoint = t0.Add(-time.Minute)
	crit := constrained(distinctGroup(mkJob("c", group("w", 2, 2), meta("impact_tier", "critical"))),
		cluster.Constraint{Target: "${node.class}", Operand: "=", Value: "h100"})
	pol := policy.Default()
	snap := mustSnap(t, nodes, []*cluster.Job{scav("s1"), scav("s2"), scav("s3"), crit}, allocs)
	plan := mustEngine(t, pol).Decide(snap, t0)
	if err := ValidatePlan(pol, snap, plan); err != nil {
		t.Fatalf("invalid plan: %v", err)
	}
	if got := join(preemptedIDs(plan)); got != "s1,s2" {
		t.Fatalf("preempted %q, want s1,s2 (one h100 node per allocation); %+v", got, plan.Explanations["c"])
	}
}
