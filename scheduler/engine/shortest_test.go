package engine

import (
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// shortestFirstOnly is a policy whose only order within a tier is
// shortest_first (weight 0.9, overdue at 0.75 of the oldest's wait): no
// aging, no fair share, no preemption.
func shortestFirstOnly(t tb) *policy.Policy {
	return mustPolicy(t, `
aging {
  weight_per_hour = 0
}
fair_share {
  weight = 0
}
preemption {
  enabled = false
}
shortest_first {
  weight        = 0.9
  overdue_share = 0.75
}
`)
}

// shortest_first orders a tier's waiting jobs: the overdue ones first
// (waited more than overdue_share of the oldest of their tier in their
// pool), first come, first served, then the rest shortest walltime
// first, a job without one counted as an hour's. Each pool's queue has
// its own oldest job. The term is in the explanation.
func TestShortestFirstOrdersATier(t *testing.T) {
	pol := shortestFirstOnly(t)
	now := t0
	ago := func(h float64) jobOpt { return submitted(now.Add(-time.Duration(h * float64(time.Hour)))) }
	busy := mkJob("busy", running())
	jobs := []*cluster.Job{
		busy,
		mkJob("long", ago(1), meta("impact_walltime", "20h")),
		mkJob("nowall", ago(2)),
		mkJob("short", ago(1), meta("impact_walltime", "10m")),
		mkJob("mid", ago(8), meta("impact_walltime", "10h")),
		mkJob("old", ago(10), meta("impact_walltime", "50h")),
		mkJob("elsewhere", ago(2), meta("impact_walltime", "30h", "impact_pool", "other")),
		mkJob("critical", ago(0.5), meta("impact_tier", "critical", "impact_walltime", "100h")),
	}
	snap := mustSnap(t, []*cluster.Node{mkNode("n1", 1, 1)}, jobs, []*cluster.Alloc{alloc("busy-0", "busy", "n1", now.Add(-time.Hour), 0)})
	plan := mustEngine(t, pol).Decide(snap, now)
	want := "critical,old,mid,elsewhere,short,nowall,long"
	if got := join(plan.Queue); got != want {
		t.Fatalf("queue %s, want %s", got, want)
	}
	for _, c := range []struct {
		id      string
		short   float64
		overdue bool
	}{
		{"old", 0.9, true},              // the oldest of its pool's normal queue
		{"mid", 0.9, true},              // 8h, past 0.75 x 10h
		{"elsewhere", 0.9, true},        // the oldest of pool "other"
		{"short", 0.9 * 60 / 70, false}, // 10m walltime
		{"nowall", 0.45, false},         // counted as an hour's
		{"long", 0.9 / 21, false},       // 20h
		{"critical", 0.9, true},         // alone in its tier: its own oldest
	} {
		sc := plan.Explanations[c.id].Score
		if d := sc.Short - c.short; d > 1e-9 || d < -1e-9 || sc.Overdue != c.overdue {
			t.Errorf("%s: short %v overdue %v, want %v %v", c.id, sc.Short, sc.Overdue, c.short, c.overdue)
		}
	}
}
