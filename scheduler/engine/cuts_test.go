package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// A preemption that cuts the pool is undone in shape: a two-GPU critical
// job that took two one-GPU jobs' GPUs leaves, when it ends, GPUs that go
// first to jobs no wider than one GPU, though a two-GPU high job waits
// ahead of them; one that took a two-GPU job's GPUs cut nothing, and the
// high job takes them. An engine that did not see the preemption (a new
// leader) gives them to the high job too.
func TestCutUndoneInShapeWhenItsPreemptorEnds(t *testing.T) {
	long := t0.Add(-3 * time.Hour)
	nodes := []*cluster.Node{mkNode("n1", 2, 1)}
	urgent := func(opts ...jobOpt) *cluster.Job {
		return mkJob("urgent", append([]jobOpt{meta("impact_tier", "critical"), group("w", 1, 2)}, opts...)...)
	}
	// What waits once urgent has ended: a wide high job ahead of two
	// narrow normal ones.
	waiting := []*cluster.Job{
		mkJob("wide", meta("impact_tier", "high"), group("main", 1, 2)),
		mkJob("narrow1", meta("impact_tier", "normal"), group("main", 1, 1)),
		mkJob("narrow2", meta("impact_tier", "normal"), group("main", 1, 1)),
	}
	// Two one-GPU scavenger jobs on n1.
	singles := []*cluster.Job{
		mkJob("s1", running(), meta("impact_tier", "scavenger"), group("main", 1, 1)),
		mkJob("s2", running(), meta("impact_tier", "scavenger"), group("main", 1, 1)),
	}
	singleAllocs := []*cluster.Alloc{
		withCheckpoint(alloc("s1-0", "s1", "n1", long, 0), t0.Add(-time.Minute)),
		withCheckpoint(alloc("s2-0", "s2", "n1", long, 1), t0.Add(-time.Minute)),
	}
	for _, tc := range []struct {
		name    string
		victims []*cluster.Job
		allocs  []*cluster.Alloc
		fresh   bool // decide the last cycle with a new engine
		want    string
	}{
		{
			name:    "two one-GPU victims: the narrow jobs",
			victims: singles,
			allocs:  singleAllocs,
			want:    "narrow1,narrow2",
		},
		{
			name:    "one victim of its shape: the wide job",
			victims: []*cluster.Job{mkJob("p", running(), meta("impact_tier", "scavenger"), group("main", 1, 2))},
			allocs:  []*cluster.Alloc{withCheckpoint(alloc("p-0", "p", "n1", long, 0, 1), t0.Add(-time.Minute))},
			want:    "wide",
		},
		{
			name:    "a new engine: the wide job",
			victims: singles,
			allocs:  singleAllocs,
			fresh:   true,
			want:    "wide",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := policy.Default()
			e := mustEngine(t, pol)
			snap := mustSnap(t, nodes, append(tc.victims, urgent()), tc.allocs)
			plan := e.Decide(snap, t0)
			if err := ValidatePlan(pol, snap, plan); err != nil {
				t.Fatalf("invalid plan: %v", err)
			}
			if len(preemptedIDs(plan)) != len(tc.victims) {
				t.Fatalf("cycle 1 preempted %q, want every victim; %+v", join(preemptedIDs(plan)), plan.Explanations["urgent"])
			}
			// The victims stopped: urgent is admitted on their GPUs, and
			// then runs there.
			snap = mustSnap(t, nodes, []*cluster.Job{urgent()}, nil)
			if plan := e.Decide(snap, t0.Add(time.Minute)); join(admittedIDs(plan)) != "urgent" {
				t.Fatalf("cycle 2 admitted %v, want urgent", admittedIDs(plan))
			}
			snap = mustSnap(t, nodes, []*cluster.Job{urgent(running())}, []*cluster.Alloc{alloc("u-0", "urgent", "n1", t0.Add(2*time.Minute), 0, 1)})
			if plan := e.Decide(snap, t0.Add(3*time.Minute)); len(plan.Admissions)+len(plan.Preemptions) != 0 {
				t.Fatalf("cycle 3 admitted %v, preempted %v; want nothing", admittedIDs(plan), preemptedIDs(plan))
			}
			// urgent has ended.
			if tc.fresh {
				e = mustEngine(t, pol)
			}
			snap = mustSnap(t, nodes, waiting, nil)
			plan = e.Decide(snap, t0.Add(time.Hour))
			if err := ValidatePlan(pol, snap, plan); err != nil {
				t.Fatalf("invalid plan: %v", err)
			}
			if got := join(admittedIDs(plan)); got != tc.want {
				t.Fatalf("admitted %q once urgent ended, want %q; wide: %+v", got, tc.want, plan.Explanations["wide"])
			}
			if tc.want != "wide" {
				if r := plan.Explanations["wide"].Reason; !strings.Contains(r, "go first to jobs no wider than the 1-GPU allocations it preempted") {
					t.Errorf("wide's reason %q does not say why the freed GPUs went to narrower jobs", r)
				}
			}
			// The cut is undone once: from the next cycle on the GPUs
			// go to any job.
			if len(e.cuts) != 0 {
				t.Fatalf("cuts after the cycle that undid them = %+v, want none", e.cuts)
			}
		})
	}
}

// The kept GPUs wait only for a narrower job that may use their pool: a
// narrow job of another pool (its own node busy) keeps nothing from the
// wide job, which takes them in the cycle urgent ended.
func TestCutKeptOnlyForJobsOfItsPool(t *testing.T) {
	long := t0.Add(-3 * time.Hour)
	nodes := []*cluster.Node{mkNode("n1", 2, 1), mkNode("o1", 1, 1, inPool("other"))}
	urgent := func(opts ...jobOpt) *cluster.Job {
		return mkJob("urgent", append([]jobOpt{meta("impact_tier", "critical", "impact_pool", "gpu"), group("w", 1, 2)}, opts...)...)
	}
	busy := mkJob("busy", running(), meta("impact_tier", "high", "impact_pool", "other"), group("main", 1, 1))
	busyAlloc := alloc("busy-0", "busy", "o1", long, 0)
	pol := policy.Default()
	e := mustEngine(t, pol)
	snap := mustSnap(t, nodes, []*cluster.Job{
		mkJob("s1", running(), meta("impact_tier", "scavenger", "impact_pool", "gpu"), group("main", 1, 1)),
		mkJob("s2", running(), meta("impact_tier", "scavenger", "impact_pool", "gpu"), group("main", 1, 1)),
		busy, urgent(),
	}, []*cluster.Alloc{
		withCheckpoint(alloc("s1-0", "s1", "n1", long, 0), t0.Add(-time.Minute)),
		withCheckpoint(alloc("s2-0", "s2", "n1", long, 1), t0.Add(-time.Minute)),
		busyAlloc,
	})
	if plan := e.Decide(snap, t0); len(plan.Preemptions) != 2 {
		t.Fatalf("preempted %v, want s1 and s2", preemptedIDs(plan))
	}
	snap = mustSnap(t, nodes, []*cluster.Job{busy, urgent()}, []*cluster.Alloc{busyAlloc})
	if plan := e.Decide(snap, t0.Add(time.Minute)); join(admittedIDs(plan)) != "urgent" {
		t.Fatalf("admitted %v, want urgent", admittedIDs(plan))
	}
	snap = mustSnap(t, nodes, []*cluster.Job{busy, urgent(running())}, []*cluster.Alloc{busyAlloc, alloc("u-0", "urgent", "n1", t0.Add(2*time.Minute), 0, 1)})
	e.Decide(snap, t0.Add(3*time.Minute))
	// urgent has ended; a wide job of its pool waits ahead of a narrow
	// one of the other pool, whose only node is busy.
	snap = mustSnap(t, nodes, []*cluster.Job{
		busy,
		mkJob("wide", meta("impact_tier", "high", "impact_pool", "gpu"), group("main", 1, 2)),
		mkJob("narrow", meta("impact_tier", "normal", "impact_pool", "other"), group("main", 1, 1)),
	}, []*cluster.Alloc{busyAlloc})
	plan := e.Decide(snap, t0.Add(time.Hour))
	if err := ValidatePlan(pol, snap, plan); err != nil {
		t.Fatalf("invalid plan: %v", err)
	}
	if got := join(admittedIDs(plan)); got != "wide" || plan.CutGPUsKept != 2 {
		t.Fatalf("admitted %q (cut GPUs kept %d) once urgent ended, want wide (2 GPUs of an ended cut, kept from no one); wide: %+v", got, plan.CutGPUsKept, plan.Explanations["wide"])
	}
}

// A cut whose preemptor was never admitted is forgotten after
// cutStartLimit: nothing ran there to undo.
func TestCutForgottenWhenItsPreemptorNeverStarts(t *testing.T) {
	long := t0.Add(-3 * time.Hour)
	nodes := []*cluster.Node{mkNode("n1", 2, 1)}
	pol := policy.Default()
	e := mustEngine(t, pol)
	snap := mustSnap(t, nodes, []*cluster.Job{
		mkJob("s1", running(), meta("impact_tier", "scavenger"), group("main", 1, 1)),
		mkJob("s2", running(), meta("impact_tier", "scavenger"), group("main", 1, 1)),
		mkJob("urgent", meta("impact_tier", "critical"), group("w", 1, 2)),
	}, []*cluster.Alloc{
		withCheckpoint(alloc("s1-0", "s1", "n1", long, 0), t0.Add(-time.Minute)),
		withCheckpoint(alloc("s2-0", "s2", "n1", long, 1), t0.Add(-time.Minute)),
	})
	if plan := e.Decide(snap, t0); len(plan.Preemptions) != 2 {
		t.Fatalf("preempted %v, want s1 and s2", preemptedIDs(plan))
	}
	if len(e.cuts["urgent"]) != 1 {
		t.Fatalf("cuts after the preemption = %+v, want one for urgent", e.cuts)
	}
	// urgent was deregistered before it started.
	snap = mustSnap(t, nodes, nil, nil)
	e.Decide(snap, t0.Add(time.Minute))
	if len(e.cuts) != 1 {
		t.Fatalf("cuts a minute later = %+v, want urgent's still waiting for it", e.cuts)
	}
	e.Decide(snap, t0.Add(cutStartLimit+time.Minute))
	if len(e.cuts) != 0 {
		t.Fatalf("cuts after cutStartLimit = %+v, want none", e.cuts)
	}
}
