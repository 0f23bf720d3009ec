package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// A preemptor takes victims of its own shape (each allocation as many
// GPUs as each of its own) before cheaper victims it would have to cut
// another way: on n1 a free GPU beside one-GPU scavenger jobs that
// checkpointed a minute ago, on n2 two-GPU jobs whose last checkpoint is
// older. The cheapest room for a two-GPU critical job is n1's free GPU
// and one of its one-GPU jobs; that would leave a two-GPU block where
// there were single GPUs (see searchShaped). Without a victim of its
// shape, or when those cost more than its gain, it takes the cheapest.
func TestPreemptorTakesVictimsOfItsShape(t *testing.T) {
	long := t0.Add(-3 * time.Hour)
	nodes := []*cluster.Node{mkNode("n1", 4, 1), mkNode("n2", 4, 1)}
	one := func(id string) *cluster.Job {
		return mkJob(id, running(), meta("impact_tier", "scavenger"), group("main", 1, 1))
	}
	singles := []*cluster.Alloc{
		withCheckpoint(alloc("s1-0", "s1", "n1", long, 1), t0.Add(-time.Minute)),
		withCheckpoint(alloc("s2-0", "s2", "n1", long, 2), t0.Add(-time.Minute)),
		withCheckpoint(alloc("s3-0", "s3", "n1", long, 3), t0.Add(-time.Minute)),
	}
	pairs := func(tier string, start time.Time, checkpoint time.Time) ([]*cluster.Job, []*cluster.Alloc) {
		var jobs []*cluster.Job
		var allocs []*cluster.Alloc
		for i, id := range []string{"p1", "p2"} {
			jobs = append(jobs, mkJob(id, running(), meta("impact_tier", tier), group("main", 1, 2)))
			a := alloc(id+"-0", id, "n2", start, 2*i, 2*i+1)
			if !checkpoint.IsZero() {
				a = withCheckpoint(a, checkpoint)
			}
			allocs = append(allocs, a)
		}
		return jobs, allocs
	}
	for _, tc := range []struct {
		name  string
		tier  string // of the two-GPU jobs on n2
		start time.Time
		// checkpoint of the two-GPU jobs (zero: none known, their work
		// lost counts from their start)
		checkpoint time.Time
		want       []string // one of these, alone
	}{
		{name: "a victim of its shape before a cheaper split", tier: "scavenger", start: long, checkpoint: t0.Add(-20 * time.Minute), want: []string{"p1", "p2"}},
		{name: "no victim of its shape: the cheapest split", tier: "high", start: long, want: []string{"s1", "s2", "s3"}},
		{name: "victims of its shape dearer than its gain: the cheapest split", tier: "normal", start: t0.Add(-300 * time.Hour), want: []string{"s1", "s2", "s3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jobs := []*cluster.Job{one("s1"), one("s2"), one("s3"), mkJob("urgent", meta("impact_tier", "critical"), group("w", 1, 2))}
			pj, pa := pairs(tc.tier, tc.start, tc.checkpoint)
			pol := policy.Default()
			e := mustEngine(t, pol)
			snap := mustSnap(t, nodes, append(jobs, pj...), append(slices.Clone(singles), pa...))
			plan := e.Decide(snap, t0)
			if err := ValidatePlan(pol, snap, plan); err != nil {
				t.Fatalf("invalid plan: %v", err)
			}
			got := preemptedIDs(plan)
			if len(got) != 1 || !slices.Contains(tc.want, got[0]) {
				t.Fatalf("preempted %q, want one of %q; explanation %+v", join(got), join(tc.want), plan.Explanations["urgent"])
			}
		})
	}
}

// allocShape is the size of every allocation of a job whose GPU groups
// all ask the same; a job asking two sizes has no shape.
func TestAllocShape(t *testing.T) {
	for _, tc := range []struct {
		name string
		job  *cluster.Job
		size int
		ok   bool
	}{
		{"one allocation", mkJob("j", group("a", 1, 2)), 2, true},
		{"a gang of equal allocations", mkJob("j", group("a", 3, 8), group("b", 1, 8)), 8, true},
		{"a group without GPUs beside", mkJob("j", group("a", 2, 4), group("ps", 1, 0)), 4, true},
		{"two sizes", mkJob("j", group("a", 1, 8), group("b", 2, 4)), 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &queued{job: tc.job}
			for _, g := range tc.job.Groups {
				if g.Count > 0 {
					q.maxAlloc = max(q.maxAlloc, int32(g.GPUs))
				}
			}
			size, ok := allocShape(q)
			if size != tc.size || ok != tc.ok {
				t.Fatalf("allocShape = %d, %v; want %d, %v", size, ok, tc.size, tc.ok)
			}
		})
	}
}
