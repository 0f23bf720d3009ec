package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// A critical job that waits only because the gangs it could preempt are
// still within their impact_min_runtime says so, naming the one that
// becomes preemptible first and when; at that time it preempts it. A job
// whose tier may not preempt them gets no such note, and without
// explanations the decisions are the same.
func TestExplainWaitingForMinRuntime(t *testing.T) {
	scav := func(id, minRT string) *cluster.Job {
		return mkJob(id, running(), meta("impact_tier", "scavenger", "impact_min_runtime", minRT))
	}
	nodes := []*cluster.Node{mkNode("n1", 8, 2)}
	allocs := []*cluster.Alloc{
		alloc("a1", "s1", "n1", t0.Add(-50*time.Minute), 0, 1, 2, 3), // preemptible from t0+10m
		alloc("a2", "s2", "n1", t0.Add(-10*time.Minute), 4, 5, 6, 7), // preemptible from t0+20m
	}
	jobs := []*cluster.Job{scav("s1", "1h"), scav("s2", "30m"),
		mkJob("c", group("main", 1, 4), meta("impact_tier", "critical"))}
	snap := mustSnap(t, nodes, jobs, allocs)
	pol := policy.Default()

	full, lean := mustEngine(t, pol), mustEngine(t, pol, WithoutExplanations())
	plan := full.Decide(snap, t0)
	if got := join(preemptedIDs(plan)); got != "" {
		t.Fatalf("preempted %q before min runtime", got)
	}
	exp := plan.Explanations["c"]
	want := "; could preempt s1 from " + t0.Add(10*time.Minute).UTC().Format(time.RFC3339) + " (impact_min_runtime 1h0m0s)"
	if exp.Status == StatusPreempting || !strings.Contains(exp.Reason, want) {
		t.Fatalf("reason %q (status %s) should contain %q", exp.Reason, exp.Status, want)
	}
	if exp.CouldPreempt != "s1" || !exp.CouldPreemptFrom.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("structured chance %q from %v, want s1 from %v", exp.CouldPreempt, exp.CouldPreemptFrom, t0.Add(10*time.Minute))
	}
	if strings.Contains(exp.Reason, "s2") {
		t.Fatalf("reason %q should name only the earliest gang", exp.Reason)
	}
	leanPlan := lean.Decide(snap, t0)
	if len(leanPlan.Preemptions) != 0 || len(leanPlan.Admissions) != len(plan.Admissions) || len(leanPlan.Explanations) != 0 {
		t.Fatalf("without explanations the plan differs: %+v", leanPlan)
	}

	// At the time named, the gang is preempted.
	later := mustEngine(t, pol).Decide(snap, t0.Add(10*time.Minute))
	if got := join(preemptedIDs(later)); got != "s1" {
		t.Fatalf("at the named time preempted %q, want s1; %+v", got, later.Explanations["c"])
	}

	// Issue 36: a gang protected by the policy's min_runtime (its own
	// impact_min_runtime is smaller, or not given) is not said to be held
	// by an impact_min_runtime it does not set: the note names the
	// policy's (10m by default).
	for _, own := range []string{"", "5m"} {
		m := []string{"impact_tier", "scavenger"}
		if own != "" {
			m = append(m, "impact_min_runtime", own)
		}
		policyOnly := []*cluster.Job{mkJob("s1", running(), meta(m...)),
			mkJob("c", group("main", 1, 8), meta("impact_tier", "critical"))}
		young := []*cluster.Alloc{alloc("a1", "s1", "n1", t0.Add(-4*time.Minute), 0, 1, 2, 3, 4, 5, 6, 7)}
		plan = mustEngine(t, pol).Decide(mustSnap(t, nodes, policyOnly, young), t0)
		want := "; could preempt s1 from " + t0.Add(6*time.Minute).UTC().Format(time.RFC3339) + " (the policy's preemption min_runtime 10m0s)"
		if r := plan.Explanations["c"].Reason; !strings.Contains(r, want) {
			t.Fatalf("impact_min_runtime %q: reason %q should contain %q", own, r, want)
		}
	}

	// A normal job may not preempt normal work: no note.
	normal := []*cluster.Job{
		mkJob("s1", running(), meta("impact_tier", "normal", "impact_min_runtime", "1h")),
		mkJob("s2", running(), meta("impact_tier", "normal", "impact_min_runtime", "30m")),
		mkJob("c", group("main", 1, 4), meta("impact_tier", "normal"))}
	plan = mustEngine(t, pol).Decide(mustSnap(t, nodes, normal, allocs), t0)
	if r := plan.Explanations["c"].Reason; strings.Contains(r, "could preempt") {
		t.Fatalf("normal job may not preempt normal work, yet reason says %q", r)
	}
}

// A gang that the pool's headroom lets its tiers preempt young
// (TestHeadroomTiersPreemptYoungWork) is not named as a chance for later:
// its min runtime does not hold it from the critical job. Here preempting
// the young scavenger would not make room beside the high job, so the
// critical job waits, and only without the headroom does its reason say
// it could preempt the scavenger once its min runtime has passed.
func TestExplainNoMinRuntimeChanceWhereTheHeadroomWaivesIt(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		note      bool
	}{
		{name: "headroom", src: "headroom \"gpu\" {\n  tiers = [\"critical\"]\n  gpus  = 4\n}\n", note: false},
		{name: "no headroom", src: "", note: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := cluster.NewStore()
			_ = store.UpsertNode(mkNode("n1", 8, 2))
			_ = store.UpsertJob(mkJob("s", group("main", 1, 4), meta("impact_tier", "scavenger"), running()))
			_ = store.UpsertAlloc(alloc("s-a", "s", "n1", t0.Add(-time.Minute), 0, 1, 2, 3))
			_ = store.UpsertJob(mkJob("h", group("main", 1, 4), meta("impact_tier", "high"), running()))
			_ = store.UpsertAlloc(alloc("h-a", "h", "n1", t0.Add(-time.Hour), 4, 5, 6, 7))
			_ = store.UpsertJob(mkJob("c", group("main", 1, 8), meta("impact_tier", "critical"), submitted(t0)))
			p := mustEngine(t, mustPolicy(t, tc.src)).Decide(store.Snapshot(), t0.Add(time.Second))
			if got := join(preemptedIDs(p)); got != "" {
				t.Fatalf("preempted %q, though that makes no room beside the high job", got)
			}
			exp := p.Explanations["c"]
			if got := strings.Contains(exp.Reason, "could preempt s from"); got != tc.note || (exp.CouldPreempt == "s") != tc.note {
				t.Fatalf("reason %q (structured chance %q): note %v, want %v", exp.Reason, exp.CouldPreempt, got, tc.note)
			}
		})
	}
}
