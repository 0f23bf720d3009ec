package engine

import (
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// A multi-node gang that preempts is placed as a whole on what its victims
// free: the victim search works one allocation at a time (cheapest room
// first), which can pick a victim per allocation where one victim's node
// holds the whole gang. The whole-gang placement (fewest nodes, like an
// admission) spares the victims it does not need.
func TestGangPreemptionFewestNodes(t *testing.T) {
	long := t0.Add(-3 * time.Hour)
	scav := func(id string) *cluster.Job { return mkJob(id, running(), meta("impact_tier", "scavenger")) }
	nodes := []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)}
	allocs := []*cluster.Alloc{
		// n1: half held by a job nobody may preempt, half by s1, the
		// cheapest room for one allocation (checkpointed a minute ago).
		alloc("b1", "busy", "n1", long, 0, 1, 2, 3),
		withCheckpoint(alloc("a1", "s1", "n1", long, 4, 5, 6, 7), t0.Add(-time.Minute)),
		// n2: all held by s2, which saved its work 20 minutes ago.
		withCheckpoint(alloc("a2", "s2", "n2", long, 0, 1, 2, 3, 4, 5, 6, 7), t0.Add(-20*time.Minute)),
	}
	busy := mkJob("busy", running(), meta("impact_tier", "critical"))
	gang := mkJob("c", group("w", 2, 4), meta("impact_tier", "critical"))
	pol := policy.Default()
	store := cluster.NewStore()
	for _, n := range nodes {
		if err := store.UpsertNode(n); err != nil {
			t.Fatal(err)
		}
	}
	for _, j := range []*cluster.Job{busy, scav("s1"), scav("s2"), gang} {
		if err := store.UpsertJob(j); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range allocs {
		if err := store.UpsertAlloc(a); err != nil {
			t.Fatal(err)
		}
	}
	e := mustEngine(t, pol)
	snap := store.Snapshot()
	plan := e.Decide(snap, t0)
	if err := ValidatePlan(pol, snap, plan); err != nil {
		t.Fatalf("invalid plan: %v", err)
	}
	if got := join(preemptedIDs(plan)); got != "s2" {
		t.Fatalf("preempted %q, want s2 only (its node holds the whole gang); %+v", got, plan.Explanations["c"])
	}
	// The victim stops; the gang then starts on the node it freed.
	if err := Apply(store, snap, plan, t0); err != nil {
		t.Fatal(err)
	}
	snap = store.Snapshot()
	plan = e.Decide(snap, t0.Add(time.Minute))
	a := admission(plan, "c")
	if a == nil {
		t.Fatalf("gang not admitted after its victim stopped: %+v", plan.Explanations["c"])
	}
	if got := join(nodesOf(a)); got != "n2" {
		t.Fatalf("gang placed on %s, want n2 alone", got)
	}
}
