package engine

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// paceWorld: two nodes of 8 GPUs full of 1-GPU scavenger jobs that have
// run an hour (no checkpoint: each would lose a GPU-hour), jobs of gpus
// GPUs of tier waiting, submitted waited ago, the first longest; critical work
// (the top tier) and high work preempt scavenger work, whose grace is a
// minute. weighEnds sets the policy's weigh_ends.
func paceWorld(t *testing.T, tier string, gpus, waiting int, waited time.Duration, weighEnds bool) *wallWorld {
	t.Helper()
	w := newWallWorld(t, mustPolicy(t, fmt.Sprintf(`
default_tier = "scavenger"
tier "critical" {
  weight      = 1000
  may_preempt = ["scavenger"]
}
tier "high" {
  weight      = 500
  may_preempt = ["scavenger"]
}
tier "scavenger" {
  weight      = 1
  preemptible = true
}
preemption {
  enabled       = true
  min_runtime   = "0s"
  restart_cost  = "2m"
  gain_horizon  = "1m"
  max_per_cycle = 4
  weigh_ends    = %v
}
`, weighEnds)))
	for _, n := range []string{"n1", "n2"} {
		for g := range 8 {
			id := fmt.Sprintf("s-%s-%d", n, g)
			mustDo(t, w.store.UpsertJob(mkJob(id, running(), meta("impact_tier", "scavenger", "impact_grace", "60s"))))
			mustDo(t, w.store.UpsertAlloc(alloc(id+"-a", id, n, t0.Add(-time.Hour), g)))
		}
	}
	for i := range waiting {
		mustDo(t, w.store.UpsertJob(mkJob(fmt.Sprintf("w-%d", i), group("main", 1, gpus), meta("impact_tier", tier), submitted(t0.Add(-waited+time.Duration(i)*time.Second)))))
	}
	return w
}

// endsTaught records n allocations of 1 GPU that ran to their end (or
// were stopped, when completed is false) at the given instants.
func (w *wallWorld) endsTaught(n int, end time.Time, completed bool) {
	w.t.Helper()
	for range n {
		w.teach(nil, 1, end, completed, 10*time.Minute)
	}
}

// A top-tier job's preemption pays only for the wait it saves: where
// running work has ended every few seconds over the last hour, it waits
// for the next end instead (its victims would stop only after their
// grace, and it would start on whatever freed first), saying why; where
// ends are rare, not seen, too old to count, or came from stops rather
// than runs to their end, it preempts, and so it does once it has waited
// as long as the grace, below the top tier, and with weigh_ends off. A
// job of several GPUs needs the ends on one node. In a burst the jobs
// behind the first need more ends to come first, and preempt.
func TestPreemptionWeighsNaturalEnds(t *testing.T) {
	cases := []struct {
		name      string
		tier      string
		gpus      int
		waiting   int
		waited    time.Duration
		off       bool
		ends      int
		endsAt    time.Duration // before t0
		completed bool
		// preempting: which waiting jobs preempt.
		preempting []string
	}{
		{"no ends seen", "critical", 1, 1, 5 * time.Second, false, 0, 0, true, []string{"w-0"}},
		{"an end every 15 seconds", "critical", 1, 1, 5 * time.Second, false, 240, 10 * time.Minute, true, nil},
		{"an end every 2 minutes", "critical", 1, 1, 5 * time.Second, false, 30, 10 * time.Minute, true, []string{"w-0"}},
		{"frequent, but stops, not ends", "critical", 1, 1, 5 * time.Second, false, 240, 10 * time.Minute, false, []string{"w-0"}},
		{"frequent, but over an hour ago", "critical", 1, 1, 5 * time.Second, false, 240, 70 * time.Minute, true, []string{"w-0"}},
		{"frequent, but it has waited a grace already", "critical", 1, 1, time.Minute, false, 240, 10 * time.Minute, true, []string{"w-0"}},
		{"frequent, below the top tier", "high", 1, 1, 5 * time.Second, false, 240, 10 * time.Minute, true, []string{"w-0"}},
		{"frequent, weigh_ends off", "critical", 1, 1, 5 * time.Second, true, 240, 10 * time.Minute, true, []string{"w-0"}},
		// The pace would free 4 GPUs in a grace, but the job needs them on
		// one node, and each frees half of them.
		{"frequent, but the job needs 4 GPUs on one node", "critical", 4, 1, 5 * time.Second, false, 480, 10 * time.Minute, true, []string{"w-0"}},
		{"a burst: the first waits, the others preempt", "critical", 1, 3, 5 * time.Second, false, 240, 10 * time.Minute, true, []string{"w-1", "w-2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := paceWorld(t, tc.tier, tc.gpus, tc.waiting, tc.waited, !tc.off)
			w.endsTaught(tc.ends, t0.Add(-tc.endsAt), tc.completed)
			p := w.decide(t0)
			var got []string
			for i := range tc.waiting {
				id := fmt.Sprintf("w-%d", i)
				e := p.Explanations[id]
				switch {
				case e.Status == StatusPreempting:
					got = append(got, id)
				case !strings.Contains(e.Reason, "ending on its own is likely"):
					t.Errorf("%s waits without saying why: %q", id, e.Reason)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.preempting) {
				t.Errorf("preempting %v, want %v", got, tc.preempting)
			}
		})
	}
}

func TestPoissonBelow(t *testing.T) {
	cases := []struct {
		mu   float64
		m    int
		want float64
	}{
		{1, 0, 0},
		{1, 1, math.Exp(-1)},
		{2, 3, math.Exp(-2) * (1 + 2 + 2)},
		{0.5, 2, math.Exp(-0.5) * 1.5},
		{1000, 900, 0.00062260}, // e^-1000 underflows: computed in logs
		{1000, 1000, 0.49579},
		{4, 100, 1},
	}
	for _, tc := range cases {
		got := poissonBelow(tc.mu, tc.m)
		if math.Abs(got-tc.want) > 1e-3*max(tc.want, 1e-3) && math.Abs(got-tc.want) > 1e-6 {
			t.Errorf("poissonBelow(%g, %d) = %g, want %g", tc.mu, tc.m, got, tc.want)
		}
	}
}
