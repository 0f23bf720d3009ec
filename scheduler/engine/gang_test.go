package engine

import (
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// Gang all-or-nothing: a job starts only when every allocation of every
// group is placed; otherwise nothing of it starts.
func TestGangAllOrNothing(t *testing.T) {
	cases := []struct {
		name      string
		nodes     []*cluster.Node
		allocs    []*cluster.Alloc
		running   []*cluster.Job
		jobs      []*cluster.Job
		wantAdmit []string
		wantWait  []string
	}{
		{
			name:      "gang fits on two nodes",
			nodes:     []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)},
			jobs:      []*cluster.Job{mkJob("g", group("w", 2, 8))},
			wantAdmit: []string{"g"},
		},
		{
			name:     "gang one node short places nothing",
			nodes:    []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)},
			jobs:     []*cluster.Job{mkJob("g", group("w", 3, 8))},
			wantWait: []string{"g"},
		},
		{
			name:    "second group does not fit: first group not placed either",
			nodes:   []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)},
			running: []*cluster.Job{mkJob("r", running())},
			allocs:  []*cluster.Alloc{alloc("r1", "r", "n2", t0.Add(-48*3600e9), 0, 1, 2, 3)},
			jobs: []*cluster.Job{mkJob("g",
				group("ps", 1, 8), group("workers", 1, 8))},
			wantWait: []string{"g"},
		},
		{
			name:      "unhealthy and ineligible capacity is not counted",
			nodes:     []*cluster.Node{mkNode("n1", 8, 2, unhealthy(7)), mkNode("n2", 8, 2, ineligible()), mkNode("n3", 8, 2)},
			jobs:      []*cluster.Job{mkJob("g", group("w", 2, 8)), mkJob("s", group("w", 1, 7))},
			wantAdmit: []string{"s"},
			wantWait:  []string{"g"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			jobs := append(append([]*cluster.Job{}, tc.running...), tc.jobs...)
			snap := mustSnap(t, tc.nodes, jobs, tc.allocs)
			plan := mustEngine(t, nil).Decide(snap, t0)
			if got := join(admittedIDs(plan)); got != join(tc.wantAdmit) {
				t.Fatalf("admitted %q, want %q; explanations: %+v", got, join(tc.wantAdmit), plan.Explanations)
			}
			for _, id := range tc.wantWait {
				exp := plan.Explanations[id]
				if exp == nil || exp.Status == StatusAdmitted {
					t.Fatalf("job %s: want waiting, got %+v", id, exp)
				}
				if exp.Reason == "" {
					t.Fatalf("job %s waits without a reason", id)
				}
			}
			for _, a := range plan.Admissions {
				j, _ := snap.Job(a.JobID)
				for gi, g := range j.Groups {
					if len(a.Groups[gi].Allocs) != g.Count {
						t.Fatalf("job %s group %s: %d allocs placed, want %d", a.JobID, g.Name, len(a.Groups[gi].Allocs), g.Count)
					}
					for _, al := range a.Groups[gi].Allocs {
						if len(al.GPUs) != g.GPUs {
							t.Fatalf("job %s: alloc with %d GPUs, want %d", a.JobID, len(al.GPUs), g.GPUs)
						}
					}
				}
			}
			if err := ValidatePlan(policy.Default(), snap, plan); err != nil {
				t.Fatalf("invalid plan: %v", err)
			}
		})
	}
}

// An admission holds its GPUs until its allocations appear: a cycle that
// runs before Nomad has placed them neither admits the job twice nor gives
// its GPUs to another job.
func TestAdmissionHeldUntilAllocationsAppear(t *testing.T) {
	store := cluster.NewStore()
	_ = store.UpsertNode(mkNode("n1", 8, 2))
	_ = store.UpsertJob(mkJob("a", group("main", 1, 8), submitted(t0.Add(-2*time.Hour))))
	_ = store.UpsertJob(mkJob("b", group("main", 1, 8)))
	e := mustEngine(t, nil)
	snap := store.Snapshot()
	p1 := e.Decide(snap, t0)
	if got := join(admittedIDs(p1)); got != "a" {
		t.Fatalf("first cycle admitted %q, want a", got)
	}
	// The adapter has not acted: same snapshot.
	p2 := e.Decide(store.Snapshot(), t0.Add(time.Second))
	if len(p2.Admissions) != 0 {
		t.Fatalf("second cycle admitted %v before a's allocations appeared", admittedIDs(p2))
	}
	if st := p2.Explanations["a"].Status; st != StatusAdmitted {
		t.Fatalf("a: status %s, want admitted (waiting for allocations)", st)
	}
	// The adapter rolls a back: it may be admitted again.
	e.Forget("a")
	p3 := e.Decide(store.Snapshot(), t0.Add(2*time.Second))
	if got := join(admittedIDs(p3)); got != "a" {
		t.Fatalf("after Forget admitted %q, want a again", got)
	}
	// Allocations appear: the hold gives way to the real allocation.
	if err := Apply(store, snap, p3, t0.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	p4 := e.Decide(store.Snapshot(), t0.Add(3*time.Second))
	if len(p4.Admissions) != 0 || p4.Explanations["b"].Status == StatusAdmitted {
		t.Fatalf("b admitted onto a's GPUs: %v", admittedIDs(p4))
	}
	// The hold expires: with a gone and its hold forgotten, b starts.
	for _, al := range store.Snapshot().JobAllocs("a") {
		store.DeleteAlloc(al.ID)
	}
	store.DeleteJob("a")
	p5 := e.Decide(store.Snapshot(), t0.Add(4*time.Second))
	if got := join(admittedIDs(p5)); got != "b" {
		t.Fatalf("after a finished admitted %q, want b", got)
	}
}
