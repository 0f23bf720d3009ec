package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// A tier with a preemption budget of its own (tier.max_gpu_hours_lost_per_hour)
// does not spend the shared one: after normal-tier jobs preempted
// scavengers up to the shared cap, a critical job can still preempt. With
// one shared budget it cannot, and says so.
func TestPreemptionBudgetPerTier(t *testing.T) {
	cases := []struct {
		name   string
		policy string
		// want: what the critical job does in the third cycle.
		wantPreempted string
		wantReason    string
	}{
		{
			name:       "shared budget: normal spent it, critical refused",
			policy:     `preemption { max_gpu_hours_lost_per_hour = 10 }`,
			wantReason: "preemption limit (shared budget): 8.0 GPU-hours lost in the last hour",
		},
		{
			name: "normal has its own budget: critical still preempts",
			policy: `preemption { max_gpu_hours_lost_per_hour = 10 }
tier "normal" { max_gpu_hours_lost_per_hour = 10 }`,
			wantPreempted: "s2",
		},
		{
			name: "the tier's own budget binds its own preemptions",
			policy: `preemption { max_gpu_hours_lost_per_hour = 100 }
tier "critical" { max_gpu_hours_lost_per_hour = 4 }`,
			wantReason: `preemption limit (tier "critical" budget): 0.0 GPU-hours lost in the last hour, 8.3 more would exceed 4.0`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol := mustPolicy(t, tc.policy)
			e := mustEngine(t, pol)
			store := cluster.NewStore()
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(store.UpsertNode(mkNode("n1", 8, 2)))
			must(store.UpsertNode(mkNode("n2", 8, 2)))
			for _, id := range []string{"s1", "s2"} {
				must(store.UpsertJob(mkJob(id, running(), meta("impact_tier", "scavenger"))))
			}
			must(store.UpsertAlloc(alloc("a1", "s1", "n1", t0.Add(-time.Hour), 0, 1, 2, 3, 4, 5, 6, 7)))
			must(store.UpsertAlloc(alloc("a2", "s2", "n2", t0.Add(-time.Hour), 0, 1, 2, 3, 4, 5, 6, 7)))
			must(store.UpsertJob(mkJob("n", meta("impact_tier", "normal"), group("main", 1, 8))))

			// Cycle 1: the normal job preempts a scavenger (8 GPU-hours
			// lost); cycle 2: it starts on the freed node.
			snap := store.Snapshot()
			plan := e.Decide(snap, t0)
			if got := join(preemptedIDs(plan)); got != "s1" {
				t.Fatalf("cycle 1 preempted %q, want s1; normal job: %+v", got, plan.Explanations["n"])
			}
			must(Apply(store, snap, plan, t0))
			snap = store.Snapshot()
			plan = e.Decide(snap, t0.Add(time.Minute))
			if admission(plan, "n") == nil {
				t.Fatalf("cycle 2: normal job not admitted: %+v", plan.Explanations["n"])
			}
			must(Apply(store, snap, plan, t0.Add(time.Minute)))

			// Cycle 3: a critical job needs the other scavenger's node.
			must(store.UpsertJob(mkJob("c", meta("impact_tier", "critical"), group("main", 1, 8), submitted(t0.Add(2*time.Minute)))))
			snap = store.Snapshot()
			plan = e.Decide(snap, t0.Add(2*time.Minute))
			if err := ValidatePlan(pol, snap, plan); err != nil {
				t.Fatalf("invalid plan: %v", err)
			}
			exp := plan.Explanations["c"]
			if got := join(preemptedIDs(plan)); got != tc.wantPreempted {
				t.Fatalf("cycle 3 preempted %q, want %q; critical job: %+v", got, tc.wantPreempted, exp)
			}
			if tc.wantPreempted != "" && exp.Status != StatusPreempting {
				t.Fatalf("critical job %s, want preempting: %+v", exp.Status, exp)
			}
			if !strings.Contains(exp.Reason, tc.wantReason) {
				t.Fatalf("critical job's reason %q, want it to mention %q", exp.Reason, tc.wantReason)
			}
			// The engine's memory keeps which budget each loss was charged
			// to, so a new leader enforces the same limits.
			restored := mustEngine(t, pol, WithMemory(e.Memory(t0.Add(2*time.Minute))))
			for _, budget := range []string{"", "normal", "critical"} {
				if got, want := restored.lostFrom(budget, t0.Add(2*time.Minute)), e.lostFrom(budget, t0.Add(2*time.Minute)); got != want {
					t.Fatalf("budget %q: %.2f GPU-hours lost after restore, %.2f before", budget, got, want)
				}
			}
		})
	}
}
