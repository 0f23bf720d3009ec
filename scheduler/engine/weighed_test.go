package engine

import (
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// TestCostsWeighed: a plan says it weighed victims' costs exactly when
// some waiting job's preemption got as far as candidates with GPUs
// enough; then, and only then, a victim's new checkpoint could change
// the next plan (the simulator relies on it to skip cycles).
func TestCostsWeighed(t *testing.T) {
	h := func(d float64) time.Time { return t0.Add(-time.Duration(d * float64(time.Hour))) }
	run := func(tier string, preemptible bool) *cluster.Job {
		return mkJob("r", running(), meta("impact_tier", tier, "impact_preemptible", map[bool]string{true: "true", false: "false"}[preemptible]))
	}
	waiting := func(tier string, count, gpus int) *cluster.Job {
		return mkJob("w", group("main", count, gpus), meta("impact_tier", tier))
	}
	cases := []struct {
		name    string
		jobs    []*cluster.Job
		start   time.Time
		want    bool
		preempt bool // the plan preempts the running job
	}{
		{name: "critical preempts an old scavenger", jobs: []*cluster.Job{run("scavenger", true), waiting("critical", 1, 4)}, start: h(2), want: true, preempt: true},
		{name: "the only gang is not preemptible", jobs: []*cluster.Job{run("normal", false), waiting("critical", 1, 4)}, start: h(2)},
		{name: "the scavenger is within its minimum runtime", jobs: []*cluster.Job{run("scavenger", true), waiting("critical", 1, 4)}, start: t0.Add(-time.Minute)},
		{name: "the waiting tier may preempt no one", jobs: []*cluster.Job{run("scavenger", true), waiting("scavenger", 1, 4)}, start: h(2)},
		{name: "the victims hold too few GPUs for a 2x8 gang", jobs: []*cluster.Job{run("scavenger", true), waiting("critical", 2, 8)}, start: h(2)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nodes := []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)}
			allocs := []*cluster.Alloc{alloc("a1", "r", "n1", tc.start, 0, 1, 2, 3, 4, 5, 6, 7)}
			// n2 is full of work nobody may preempt.
			jobs := append(tc.jobs, mkJob("keep", running(), meta("impact_tier", "critical", "impact_preemptible", "false")))
			allocs = append(allocs, alloc("a2", "keep", "n2", h(1), 0, 1, 2, 3, 4, 5, 6, 7))
			for _, opts := range [][]Option{nil, {WithoutExplanations()}} {
				p := mustEngine(t, nil, opts...).Decide(mustSnap(t, nodes, jobs, allocs), t0)
				if p.CostsWeighed != tc.want {
					t.Errorf("explanations %v: costs weighed %v, want %v", opts == nil, p.CostsWeighed, tc.want)
				}
				if got := join(preemptedIDs(p)) == "r"; got != tc.preempt {
					t.Errorf("explanations %v: preempted %v, want r preempted %v", opts == nil, preemptedIDs(p), tc.preempt)
				}
			}
		})
	}
}
