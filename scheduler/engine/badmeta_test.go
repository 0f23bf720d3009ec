package engine

import (
	"strings"
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// Bad metadata keeps a job parked, with the key at fault in its
// explanation, however much room there is; good jobs are not held up.
func TestBadMetadataParks(t *testing.T) {
	jobs := []*cluster.Job{
		mkJob("bad-grace", meta("impact_grace", "-5m")),
		mkJob("bad-tier", meta("impact_tier", "urgent")),
		mkJob("typo", meta("impact_walltim", "1h")),
		mkJob("bad-group", group("w", 1, 1, "impact_tier", "critical"), meta("impact_tier", "normal")),
		mkJob("too-big", group("w", 1, 16)),
		mkJob("many-bad", meta("impact_grace", "-5m", "impact_walltime", "0s", "impact_teir", "high")),
		mkJob("grace-and-tier", meta("impact_grace", "soon", "impact_tier", "urgnet")),
		mkJob("good", meta("impact_tier", "scavenger")),
	}
	want := map[string]string{
		"bad-grace": "impact_grace",
		"bad-tier":  "impact_tier",
		"typo":      "impact_walltim",
		"bad-group": "impact_tier",
		"too-big":   "largest schedulable node",
		"many-bad":  "impact_grace",
		// Issue 36: the unknown tier with the malformed grace, at once.
		"grace-and-tier": `impact_grace = "soon"`,
	}
	snap := mustSnap(t, []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)}, jobs, nil)
	plan := mustEngine(t, nil).Decide(snap, t0)
	if err := ValidatePlan(policy.Default(), snap, plan); err != nil {
		t.Fatal(err)
	}
	if got := join(admittedIDs(plan)); got != "good" {
		t.Fatalf("admitted %q, want only the good job", got)
	}
	for id, key := range want {
		exp := plan.Explanations[id]
		if exp == nil || exp.Status != StatusParked {
			t.Fatalf("%s: want parked, got %+v", id, exp)
		}
		if !strings.Contains(exp.Reason, key) {
			t.Fatalf("%s: reason %q does not name %q", id, exp.Reason, key)
		}
	}
	// Every bad key is named at once, in key order.
	r := plan.Explanations["many-bad"].Reason
	g, te, w := strings.Index(r, "impact_grace = "), strings.Index(r, "impact_teir = "), strings.Index(r, "impact_walltime = ")
	if g < 0 || te <= g || w <= te {
		t.Fatalf("many-bad: reason %q should name impact_grace, impact_teir, impact_walltime in order", r)
	}
	if r := plan.Explanations["grace-and-tier"].Reason; !strings.Contains(r, `impact_tier = "urgnet": unknown tier`) ||
		strings.Index(r, "impact_tier") < strings.Index(r, "impact_grace") {
		t.Fatalf("grace-and-tier: reason %q should name the bad grace, then the unknown tier", r)
	}
	// Jobs with bad metadata sort after every job that could run.
	pos := map[string]int{}
	for i, id := range plan.Queue {
		pos[id] = i
	}
	for _, id := range []string{"bad-grace", "bad-tier", "typo", "bad-group", "many-bad", "grace-and-tier"} {
		if pos[id] < pos["good"] {
			t.Fatalf("queue %v: %s ahead of the good job", plan.Queue, id)
		}
	}
}
