package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// A blocked gang of two whole-node allocations, with no reservation left
// for it, gathers the one node that is free now (as Nomad would place one
// of its allocations there), so a non-preemptible job behind it does not
// take that node, nor does work the gang may preempt; a job
// ahead of it takes what it needs first; a single allocation gathers
// nothing; and once both nodes are free the gang starts.
func TestGatherHoldsFreeNodesForABlockedGang(t *testing.T) {
	early, later := t0.Add(-5*time.Hour), t0.Add(-10*time.Minute)
	gang := mkJob("gang", group("w", 2, 8), submitted(early))
	small := mkJob("small", group("main", 1, 2), submitted(later))
	scav := mkJob("scav", group("main", 1, 1), meta("impact_tier", "scavenger"), submitted(later))
	urgent := mkJob("urgent", group("main", 1, 1), meta("impact_tier", "critical"), submitted(later))
	wide := mkJob("wide", group("w", 1, 16), submitted(early))
	r1 := mkJob("r1", running())
	r2 := mkJob("r2", running())
	nodes := []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2), mkNode("n3", 8, 2)}
	busy := []*cluster.Alloc{
		alloc("a1", "r1", "n1", t0.Add(-time.Hour), 0, 1, 2, 3, 4, 5, 6, 7),
		alloc("a2", "r2", "n2", t0.Add(-time.Hour), 0, 1, 2, 3, 4, 5, 6, 7),
	}
	gather := `backfill {
  reservations = 0
  gather       = true
}`
	cases := []struct {
		name      string
		policy    string
		jobs      []*cluster.Job
		allocs    []*cluster.Alloc
		wantAdmit string
		// gathered: the gang's Explanation.Gathered (0: not gathering).
		gathered int
	}{
		{"off: the small job takes the free node", `backfill { reservations = 0 }`,
			[]*cluster.Job{r1, r2, gang, small}, busy, "small", 0},
		{"on: the free node is held for the gang", gather,
			[]*cluster.Job{r1, r2, gang, small}, busy, "", 1},
		{"on: not even work the gang may preempt backfills it", gather,
			[]*cluster.Job{r1, r2, gang, small, scav}, busy, "", 1},
		// urgent takes a GPU of the free node: no allocation of the gang
		// fits any more, so small takes two of the seven left.
		{"on: a job ahead of the gang takes its GPU first", gather,
			[]*cluster.Job{r1, r2, gang, urgent, small}, busy, "small,urgent", 0},
		// n3 has 7 free GPUs: "one" (1 x 8) fits nowhere and holds nothing.
		{"on: one allocation never gathers", gather,
			[]*cluster.Job{r1, r2, mkJob("one", group("w", 1, 8), submitted(early)), small},
			append(busy[:2:2], alloc("a3", "r2", "n3", t0.Add(-time.Hour), 0)), "small", 0},
		{"on: the gang starts once both of its nodes are free", gather,
			[]*cluster.Job{r1, r2, gang, small}, busy[:1], "gang", 0},
		// A 16-GPU single allocation fits no 8-GPU node: parked, not gathering.
		{"on: a job no node can hold is parked", gather,
			[]*cluster.Job{r1, r2, wide, small}, busy, "small", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol := mustPolicy(t, tc.policy)
			snap := mustSnap(t, nodes, tc.jobs, tc.allocs)
			plan := mustEngine(t, pol).Decide(snap, t0)
			if err := ValidatePlan(pol, snap, plan); err != nil {
				t.Fatal(err)
			}
			if got := join(admittedIDs(plan)); got != tc.wantAdmit {
				t.Fatalf("admitted %q, want %q; %+v", got, tc.wantAdmit, plan.Explanations)
			}
			g, ok := plan.Explanations["gang"]
			if !ok {
				return
			}
			if g.Gathered != tc.gathered {
				t.Fatalf("gang gathered %d allocations, want %d: %+v", g.Gathered, tc.gathered, g)
			}
			if tc.gathered > 0 {
				if g.Status != StatusReserved || !strings.Contains(g.Reason, "gathering its nodes: holds the GPUs of 1 of its 2 allocations") {
					t.Fatalf("gang: %+v, want reserved and its gathering explained", g)
				}
				for _, id := range []string{"small", "scav"} {
					if _, ok := plan.Explanations[id]; !ok {
						continue
					}
					if r := plan.Explanations[id].Reason; !strings.Contains(r, "reserved for gang (gathering its nodes)") || !strings.Contains(r, "no job may use them while a gang gathers its nodes") {
						t.Fatalf("%s's reason %q does not say the GPUs are held, unusable, for the gathering gang", id, r)
					}
				}
			}
		})
	}
}

// Gathering is off unless the policy asks for it, and the policy file
// reads it.
func TestGatherPolicy(t *testing.T) {
	if policy.Default().Backfill.Gather {
		t.Fatal("the default policy gathers")
	}
	if !mustPolicy(t, `backfill { gather = true }`).Backfill.Gather {
		t.Fatal("backfill { gather = true } not read")
	}
}

// A gang gathering its nodes is not moved for: with gather on it holds
// the free node n1 and no small job is moved off n2; with gather off the
// same gang, waiting, moves v to n3's free GPU and is bound to n1 and n2.
func TestGatheringGangIsNotMovedFor(t *testing.T) {
	h := func(d float64) time.Time { return t0.Add(-time.Duration(d * float64(time.Hour))) }
	jobs := []*cluster.Job{
		mkJob("v", running(), meta("impact_tier", "normal", "impact_grace", "1m")),
		mkJob("r", running(), group("main", 1, 7), meta("impact_tier", "high")),
		mkJob("gang", group("w", 2, 8), submitted(h(5))),
	}
	nodes := []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2), mkNode("n3", 8, 2)}
	allocs := []*cluster.Alloc{
		withCheckpoint(alloc("va", "v", "n2", h(2), 7), h(0.02)),
		alloc("ra", "r", "n3", h(2), 0, 1, 2, 3, 4, 5, 6),
	}
	for _, tc := range []struct {
		name      string
		gather    bool
		wantMoved string
		gathered  int
	}{
		{"gather on", true, "", 1},
		{"gather off", false, "v", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := mustPolicy(t, fmt.Sprintf("backfill {\n  reservations = 0\n  gather = %t\n}\n%s", tc.gather, defragOn))
			snap := mustSnap(t, nodes, jobs, allocs)
			plan := mustEngine(t, pol).Decide(snap, t0)
			if err := ValidatePlan(pol, snap, plan); err != nil {
				t.Fatal(err)
			}
			g := plan.Explanations["gang"]
			if got := join(preemptedIDs(plan)); got != tc.wantMoved {
				t.Fatalf("moved %q, want %q; gang: %+v", got, tc.wantMoved, g)
			}
			if g.Gathered != tc.gathered {
				t.Fatalf("gang gathered %d, want %d: %+v", g.Gathered, tc.gathered, g)
			}
		})
	}
}
