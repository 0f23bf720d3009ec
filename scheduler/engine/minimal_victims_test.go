package engine

import (
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// The victim set is minimal: no victim whose removal still leaves room.
// The victim search works one allocation at a time, cheapest room first:
// for a 2x8 critical gang it takes the cheap 2x4 scavenger gang for the
// first allocation (a4's 4 free GPUs plus its 4), then finds no room for
// the second without the 3x8 gang, which alone frees 24 GPUs on n1-n3:
// enough for the whole preemptor. Only the 3x8 may be preempted (seen on
// a real cluster: the 2x4 was preempted and re-admitted 1.3s later).
func TestMinimalVictimSet(t *testing.T) {
	long := t0.Add(-3 * time.Hour)
	scav := func(id string, g groupDef) *cluster.Job {
		return mkJob(id, running(), meta("impact_tier", "scavenger"), group("main", g.count, g.gpus))
	}
	nodes := []*cluster.Node{mkNode("n1", 8, 1), mkNode("n2", 8, 1), mkNode("n3", 8, 1), mkNode("a4", 8, 2), mkNode("a5", 8, 2)}
	jobs := []*cluster.Job{
		scav("big", groupDef{count: 3, gpus: 8}),
		scav("small", groupDef{count: 2, gpus: 4}),
		mkJob("keep", running(), meta("impact_tier", "critical")),
		mkJob("urgent", meta("impact_tier", "critical"), group("w", 2, 8)),
	}
	allocs := []*cluster.Alloc{
		withCheckpoint(alloc("b1", "big", "n1", long, 0, 1, 2, 3, 4, 5, 6, 7), t0.Add(-30*time.Minute)),
		withCheckpoint(alloc("b2", "big", "n2", long, 0, 1, 2, 3, 4, 5, 6, 7), t0.Add(-30*time.Minute)),
		withCheckpoint(alloc("b3", "big", "n3", long, 0, 1, 2, 3, 4, 5, 6, 7), t0.Add(-30*time.Minute)),
		// small: the cheapest room for one allocation on a4 (4 free).
		withCheckpoint(alloc("s1", "small", "a4", long, 4, 5, 6, 7), t0.Add(-time.Minute)),
		withCheckpoint(alloc("s2", "small", "a5", long, 4, 5, 6, 7), t0.Add(-time.Minute)),
		// keep: a5's other half, not preemptible by anyone.
		alloc("k1", "keep", "a5", long, 0, 1, 2, 3),
	}
	pol := policy.Default()
	e := mustEngine(t, pol)
	snap := mustSnap(t, nodes, jobs, allocs)
	plan := e.Decide(snap, t0)
	if err := ValidatePlan(pol, snap, plan); err != nil {
		t.Fatalf("invalid plan: %v", err)
	}
	if got := join(preemptedIDs(plan)); got != "big" {
		t.Fatalf("preempted %q, want big alone (it frees 24 GPUs, the 2x8 gang needs 16); explanation %+v", got, plan.Explanations["urgent"])
	}
	if v := plan.Explanations["urgent"].Victims; len(v) != 1 || v[0] != "big" {
		t.Errorf("explanation victims = %v, want [big]", v)
	}
}

// GPUs freed by a preemption are bound to the preemptor: while a second
// victim is still stopping, the first victim, queued again and
// preemptible by the preemptor (so allowed to backfill a reservation of
// its), must not be admitted onto the GPUs it was stopped to free (seen
// on a real cluster: a victim re-admitted 0.1s after its stop, its
// preemptor starting 3 minutes later). Once every victim has stopped the
// preemptor gets them.
func TestFreedGPUsAreBoundToThePreemptor(t *testing.T) {
	long := t0.Add(-3 * time.Hour)
	nodes := []*cluster.Node{mkNode("n1", 8, 1), mkNode("n2", 8, 1)}
	scav := func(id string, opts ...jobOpt) *cluster.Job {
		return mkJob(id, append([]jobOpt{meta("impact_tier", "scavenger"), group("main", 1, 8)}, opts...)...)
	}
	urgent := mkJob("urgent", meta("impact_tier", "critical"), group("w", 2, 8))
	pol := policy.Default()
	e := mustEngine(t, pol)

	snap := mustSnap(t, nodes, []*cluster.Job{scav("a", running()), scav("b", running()), urgent}, []*cluster.Alloc{
		withCheckpoint(alloc("a1", "a", "n1", long, 0, 1, 2, 3, 4, 5, 6, 7), t0.Add(-time.Minute)),
		withCheckpoint(alloc("b1", "b", "n2", long, 0, 1, 2, 3, 4, 5, 6, 7), t0.Add(-time.Minute)),
	})
	plan := e.Decide(snap, t0)
	if got := join(preemptedIDs(plan)); got != "a,b" {
		t.Fatalf("cycle 1 preempted %q, want a,b; %+v", got, plan.Explanations["urgent"])
	}

	// a has stopped and is queued again; b is still stopping.
	stopping := withCheckpoint(alloc("b1", "b", "n2", long, 0, 1, 2, 3, 4, 5, 6, 7), t0.Add(-time.Minute))
	stopping.Stopping = true
	snap = mustSnap(t, nodes, []*cluster.Job{scav("a", submitted(t0.Add(time.Second))), scav("b", running()), urgent}, []*cluster.Alloc{stopping})
	plan = e.Decide(snap, t0.Add(10*time.Second))
	if err := ValidatePlan(pol, snap, plan); err != nil {
		t.Fatalf("invalid plan: %v", err)
	}
	if len(plan.Admissions) != 0 {
		t.Fatalf("cycle 2 admitted %v onto GPUs freed for urgent; explanations a=%+v urgent=%+v", admittedIDs(plan), plan.Explanations["a"], plan.Explanations["urgent"])
	}
	if exp := plan.Explanations["urgent"]; exp.Status != StatusPreempting {
		t.Errorf("urgent = %+v, want waiting for its victims", exp)
	}

	// b has stopped too: urgent is admitted on both nodes, a waits.
	snap = mustSnap(t, nodes, []*cluster.Job{scav("a", submitted(t0.Add(time.Second))), scav("b", submitted(t0.Add(15*time.Second))), urgent}, nil)
	plan = e.Decide(snap, t0.Add(20*time.Second))
	if got := join(admittedIDs(plan)); got != "urgent" {
		t.Fatalf("cycle 3 admitted %q, want urgent alone; urgent=%+v", got, plan.Explanations["urgent"])
	}
}

// A binding does not outlive its reason: once the preemptor is admitted,
// deregistered, or forgotten by the adapter, the GPUs are free for others.
func TestBindingEndsWithThePreemptor(t *testing.T) {
	long := t0.Add(-3 * time.Hour)
	nodes := []*cluster.Node{mkNode("n1", 8, 1)}
	scav := mkJob("a", running(), meta("impact_tier", "scavenger"), group("main", 1, 8))
	urgent := mkJob("urgent", meta("impact_tier", "critical"), group("w", 1, 8))
	e := mustEngine(t, policy.Default())
	snap := mustSnap(t, nodes, []*cluster.Job{scav, urgent}, []*cluster.Alloc{
		withCheckpoint(alloc("a1", "a", "n1", long, 0, 1, 2, 3, 4, 5, 6, 7), t0.Add(-time.Minute)),
	})
	if plan := e.Decide(snap, t0); join(preemptedIDs(plan)) != "a" {
		t.Fatalf("preempted %v, want a", preemptedIDs(plan))
	}
	// The preemptor is gone (purged) before its victim's GPUs were free.
	requeued := mkJob("a", meta("impact_tier", "scavenger"), group("main", 1, 8))
	snap = mustSnap(t, nodes, []*cluster.Job{requeued}, nil)
	if plan := e.Decide(snap, t0.Add(10*time.Second)); join(admittedIDs(plan)) != "a" {
		t.Fatalf("admitted %v, want a: the preemptor left, nothing is bound any more; %+v", admittedIDs(plan), plan.Explanations["a"])
	}
}

// A preemptor that cannot be admitted at once after its victims stopped
// (its admission was rolled back and deferred) keeps its freed GPUs: the
// victim may not take them back meanwhile. The binding expires after the
// admission TTL, so GPUs are never held idle for good.
func TestBindingHeldThroughDeferralUntilItExpires(t *testing.T) {
	long := t0.Add(-3 * time.Hour)
	nodes := []*cluster.Node{mkNode("n1", 8, 1)}
	scav := func(opts ...jobOpt) *cluster.Job {
		return mkJob("a", append([]jobOpt{meta("impact_tier", "scavenger"), group("main", 1, 8)}, opts...)...)
	}
	urgent := mkJob("urgent", meta("impact_tier", "critical"), group("w", 1, 8))
	e := mustEngine(t, policy.Default(), WithAdmissionTTL(5*time.Minute))
	snap := mustSnap(t, nodes, []*cluster.Job{scav(running()), urgent}, []*cluster.Alloc{
		withCheckpoint(alloc("a1", "a", "n1", long, 0, 1, 2, 3, 4, 5, 6, 7), t0.Add(-time.Minute)),
	})
	if plan := e.Decide(snap, t0); join(preemptedIDs(plan)) != "a" {
		t.Fatalf("preempted %v, want a", preemptedIDs(plan))
	}
	e.Defer("urgent", t0.Add(time.Hour), "its admission was rolled back")
	snap = mustSnap(t, nodes, []*cluster.Job{scav(submitted(t0.Add(time.Second))), urgent}, nil)
	for _, at := range []time.Duration{10 * time.Second, 4 * time.Minute} {
		if plan := e.Decide(snap, t0.Add(at)); len(plan.Admissions) != 0 {
			t.Fatalf("at +%v admitted %v onto the GPUs bound to urgent; a=%+v", at, admittedIDs(plan), plan.Explanations["a"])
		}
	}
	if plan := e.Decide(snap, t0.Add(6*time.Minute)); join(admittedIDs(plan)) != "a" {
		t.Fatalf("after the binding expired admitted %v, want a; a=%+v", admittedIDs(plan), plan.Explanations["a"])
	}
}

// A new leader learns the preemptions under way from the previous
// leader's intents (Preempting), with the job each is for: the preemptor
// waits for that victim instead of choosing another one.
func TestPreemptingFromAnotherLeader(t *testing.T) {
	long := t0.Add(-3 * time.Hour)
	nodes := []*cluster.Node{mkNode("n1", 8, 1), mkNode("n2", 8, 1)}
	scav := func(id string) *cluster.Job {
		return mkJob(id, running(), meta("impact_tier", "scavenger"), group("main", 1, 8))
	}
	urgent := mkJob("urgent", meta("impact_tier", "critical"), group("w", 1, 8))
	snap := mustSnap(t, nodes, []*cluster.Job{scav("a"), scav("b"), urgent}, []*cluster.Alloc{
		// b is the cheaper victim, but a is already being preempted.
		withCheckpoint(alloc("a1", "a", "n1", long, 0, 1, 2, 3, 4, 5, 6, 7), t0.Add(-30*time.Minute)),
		withCheckpoint(alloc("b1", "b", "n2", long, 0, 1, 2, 3, 4, 5, 6, 7), t0.Add(-time.Minute)),
	})
	e := mustEngine(t, policy.Default())
	e.Preempting(Preemption{Stop: Stop{JobID: "a", Allocs: []string{"a1"}, Grace: time.Minute}, Preemptor: "urgent"}, t0.Add(-10*time.Second))
	plan := e.Decide(snap, t0)
	if len(plan.Preemptions) != 0 {
		t.Fatalf("preempted %v; a's preemption is under way and frees enough", preemptedIDs(plan))
	}
	if exp := plan.Explanations["urgent"]; exp.Status != StatusPreempting || join(exp.Victims) != "a" {
		t.Fatalf("urgent = %+v, want waiting for a", exp)
	}
}
