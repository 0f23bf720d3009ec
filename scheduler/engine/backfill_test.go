package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// The blocked head of the queue holds a reservation; later jobs may use the
// reserved GPUs only if they end (by walltime) before it is needed, or are
// preemptible by the reserving job (and preemption is enabled).
func TestBackfillAroundReservation(t *testing.T) {
	later := t0.Add(-10 * time.Minute)
	jobs := []*cluster.Job{
		mkJob("r1", running(), meta("impact_walltime", "2h")),
		mkJob("head", group("w", 2, 8), submitted(t0.Add(-5*time.Hour))),
		mkJob("short", group("main", 1, 4), meta("impact_walltime", "30m"), submitted(later)),
		mkJob("long", group("main", 1, 4), meta("impact_walltime", "3h"), submitted(later)),
		mkJob("unknown", group("main", 1, 4), submitted(later)),
		mkJob("scav", group("main", 1, 4), meta("impact_tier", "scavenger"), submitted(later)),
	}
	nodes := []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)}
	allocs := []*cluster.Alloc{alloc("a1", "r1", "n1", t0.Add(-time.Hour), 0, 1, 2, 3, 4, 5, 6, 7)}

	cases := []struct {
		name      string
		pol       *policy.Policy
		wantAdmit string
	}{
		{"backfill", policy.Default(), "scav,short"},
		{"backfill disabled", mustPolicy(t, `backfill { enabled = false }`), ""},
		// The head could never take its GPUs back from scav by preemption:
		// only a job that ends before the reservation may use them.
		{"preemption disabled", mustPolicy(t, `preemption { enabled = false }`), "short"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			snap := mustSnap(t, nodes, jobs, allocs)
			plan := mustEngine(t, tc.pol).Decide(snap, t0)
			if err := ValidatePlan(tc.pol, snap, plan); err != nil {
				t.Fatal(err)
			}
			if got := join(admittedIDs(plan)); got != tc.wantAdmit {
				t.Fatalf("admitted %q, want %q; %+v", got, tc.wantAdmit, plan.Explanations)
			}
			head := plan.Explanations["head"]
			if head.Status != StatusReserved || !head.ReservedUntil.Equal(t0.Add(time.Hour)) {
				t.Fatalf("head: %+v, want reserved until r1 ends (t0+1h)", head)
			}
			for _, a := range plan.Admissions {
				if !a.Backfilled {
					t.Fatalf("%s started ahead of a reservation but is not marked backfilled", a.JobID)
				}
			}
			for _, id := range []string{"long", "unknown"} {
				if st := plan.Explanations[id].Status; st == StatusAdmitted {
					t.Fatalf("%s could delay the reservation but was admitted", id)
				}
			}
		})
	}
}

func TestWaitingBehindReservationIsExplained(t *testing.T) {
	snap := mustSnap(t, []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)}, []*cluster.Job{
		mkJob("r1", running(), meta("impact_walltime", "2h")),
		mkJob("head", group("w", 2, 8), submitted(t0.Add(-5*time.Hour))),
		mkJob("long", group("main", 1, 4), meta("impact_walltime", "3h"), submitted(t0)),
	}, []*cluster.Alloc{alloc("a1", "r1", "n1", t0.Add(-time.Hour), 0, 1, 2, 3, 4, 5, 6, 7)})
	plan := mustEngine(t, nil).Decide(snap, t0)
	if r := plan.Explanations["long"].Reason; !strings.Contains(r, "reserved for head") || !strings.Contains(r, "impact_walltime") {
		t.Fatalf("reason %q does not explain the reservation", r)
	}
}

// A preemptor's free GPUs are its own for the rest of the cycle, even to a
// job that may backfill a reservation. c (critical, 8 GPUs) preempts s on
// n1 and will take n1's 4 free GPUs with s's 4; w (high, 8 GPUs) holds a
// reservation on n2 behind h; b (scavenger, 1 GPU) may backfill w's
// reservation (w may preempt it). It used to be admitted on one of c's
// free GPUs, which were only reserved: the next cycle c's placement was
// broken, and on a two-node pool the preemptor and the backfilled jobs
// preempted each other for ever (robustness seed 2, rand-06).
func TestPreemptorsFreeGPUsAreNotBackfilled(t *testing.T) {
	jobs := []*cluster.Job{
		mkJob("s", running(), meta("impact_tier", "scavenger"), group("main", 1, 4)),
		mkJob("h", running(), meta("impact_tier", "high", "impact_walltime", "2h"), group("main", 1, 8)),
		mkJob("c", meta("impact_tier", "critical"), group("main", 1, 8), submitted(t0.Add(-2*time.Minute))),
		mkJob("w", meta("impact_tier", "high"), group("main", 1, 8), submitted(t0.Add(-time.Minute))),
		mkJob("b", meta("impact_tier", "scavenger"), submitted(t0)),
	}
	nodes := []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)}
	allocs := []*cluster.Alloc{
		alloc("a-s", "s", "n1", t0.Add(-2*time.Hour), 0, 1, 2, 3),
		alloc("a-h", "h", "n2", t0.Add(-time.Hour), 0, 1, 2, 3, 4, 5, 6, 7),
	}
	pol := mustPolicy(t, "backfill {\n  reservations = 1\n}\n")
	snap := mustSnap(t, nodes, jobs, allocs)
	plan := mustEngine(t, pol).Decide(snap, t0)
	if err := ValidatePlan(pol, snap, plan); err != nil {
		t.Fatal(err)
	}
	if got := join(preemptedIDs(plan)); got != "s" {
		t.Fatalf("preempted %q, want s (for c)", got)
	}
	if w := plan.Explanations["w"]; w.Status != StatusReserved || !w.ReservedUntil.Equal(t0.Add(time.Hour)) {
		t.Fatalf("w: %+v, want reserved until h ends (t0+1h)", w)
	}
	if got := join(admittedIDs(plan)); got != "" {
		t.Fatalf("admitted %q, want none (b on one of c's GPUs); b: %+v", got, plan.Explanations["b"])
	}
}
