package engine

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// pacePolicy: critical work (the top tier) and high work preempt
// scavenger work; a preemption is valued over a minute; weighEnds sets
// weigh_ends, perCycle max_per_cycle; extra is appended.
func pacePolicy(t tb, weighEnds bool, perCycle int, extra string) *policy.Policy {
	return mustPolicy(t, fmt.Sprintf(`
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
  max_per_cycle = %d
  weigh_ends    = %v
}
`, perCycle, weighEnds)+extra)
}

// paceStore: two nodes of 8 GPUs full of 1-GPU scavenger jobs that have
// run an hour (no checkpoint: each would lose a GPU-hour; a minute's
// grace), and jobs of gpus GPUs of tier waiting, submitted waited ago,
// the first longest.
func paceStore(t tb, tier string, gpus, waiting int, waited time.Duration) *cluster.Store {
	t.Helper()
	store := cluster.NewStore()
	for _, n := range []string{"n1", "n2"} {
		mustDo(t, store.UpsertNode(mkNode(n, 8, 2)))
		for g := range 8 {
			id := fmt.Sprintf("s-%s-%d", n, g)
			mustDo(t, store.UpsertJob(mkJob(id, running(), meta("impact_tier", "scavenger", "impact_grace", "60s"))))
			mustDo(t, store.UpsertAlloc(alloc(id+"-a", id, n, t0.Add(-time.Hour), g)))
		}
	}
	for i := range waiting {
		mustDo(t, store.UpsertJob(mkJob(fmt.Sprintf("w-%d", i), group("main", 1, gpus), meta("impact_tier", tier), submitted(t0.Add(-waited+time.Duration(i)*time.Second)))))
	}
	return store
}

// teachEnds records n allocations of 1 GPU on node "gone" that ran 10
// minutes to end, at end: to their end on their own (completed), or
// stopped.
func teachEnds(t tb, store *cluster.Store, n int, end time.Time, completed bool) {
	t.Helper()
	for i := range n {
		id := fmt.Sprintf("done-%d-%d", end.Unix(), i)
		mustDo(t, store.UpsertJob(mkJob(id, running())))
		mustDo(t, store.UpsertAlloc(alloc(id+"-a", id, "gone", end.Add(-10*time.Minute), 0)))
		if completed {
			store.CompleteAlloc(id+"-a", end)
		} else {
			store.FinishAlloc(id+"-a", end)
		}
		store.DeleteJob(id)
	}
}

// teachGangEnds records n gangs of allocs allocations of gpus GPUs each
// on node "gone" that ran to their end, each allocation a second after
// the one before, the gangs 15 seconds apart up to end.
func teachGangEnds(t tb, store *cluster.Store, n, allocs, gpus int, end time.Time) {
	t.Helper()
	idx := make([]int, gpus)
	for i := range idx {
		idx[i] = i
	}
	for i := range n {
		id := fmt.Sprintf("gang-%d-%d", end.Unix(), i)
		at := end.Add(-time.Duration(i) * 15 * time.Second)
		mustDo(t, store.UpsertJob(mkJob(id, running())))
		for a := range allocs {
			aid := fmt.Sprintf("%s-a%d", id, a)
			mustDo(t, store.UpsertAlloc(alloc(aid, id, "gone", at.Add(-10*time.Minute), idx...)))
			store.CompleteAlloc(aid, at.Add(time.Duration(a)*time.Second))
		}
		store.DeleteJob(id)
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
// behind the first need more ends to come first, and preempt. Ends that
// free many GPUs at once are as rare as they are, not as many as their
// GPUs.
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
		// gang: the ends are gangs of gang[0] allocations of gang[1]
		// GPUs each (teachGangEnds), not 1-GPU jobs.
		gang [2]int
	}{
		{"no ends seen", "critical", 1, 1, 5 * time.Second, false, 0, 0, true, []string{"w-0"}, [2]int{}},
		{"an end every 15 seconds", "critical", 1, 1, 5 * time.Second, false, 240, 10 * time.Minute, true, nil, [2]int{}},
		{"an end every 2 minutes", "critical", 1, 1, 5 * time.Second, false, 30, 10 * time.Minute, true, []string{"w-0"}, [2]int{}},
		{"frequent, but stops, not ends", "critical", 1, 1, 5 * time.Second, false, 240, 10 * time.Minute, false, []string{"w-0"}, [2]int{}},
		{"frequent, but over an hour ago", "critical", 1, 1, 5 * time.Second, false, 240, 70 * time.Minute, true, []string{"w-0"}, [2]int{}},
		{"frequent, but it has waited a grace already", "critical", 1, 1, time.Minute, false, 240, 10 * time.Minute, true, []string{"w-0"}, [2]int{}},
		{"frequent, below the top tier", "high", 1, 1, 5 * time.Second, false, 240, 10 * time.Minute, true, []string{"w-0"}, [2]int{}},
		{"frequent, weigh_ends off", "critical", 1, 1, 5 * time.Second, true, 240, 10 * time.Minute, true, []string{"w-0"}, [2]int{}},
		// The pace would free 4 GPUs in a grace, but the job needs them on
		// one node, and each frees half of them.
		{"frequent, but the job needs 4 GPUs on one node", "critical", 4, 1, 5 * time.Second, false, 480, 10 * time.Minute, true, []string{"w-0"}, [2]int{}},
		{"a burst: the first waits, the others preempt", "critical", 1, 3, 5 * time.Second, false, 240, 10 * time.Minute, true, []string{"w-1", "w-2"}, [2]int{}},
		// As many GPUs freed as an end every 15 seconds, but 16 at once
		// (a gang of two 8-GPU allocations) every 4 minutes: an end
		// within the grace is a chance of about 1 in 5.
		{"as many GPUs, but in lumps of 16 every 4 minutes", "critical", 1, 1, 5 * time.Second, false, 15, 10 * time.Minute, true, []string{"w-0"}, [2]int{2, 8}},
		// As many allocations as an end every 15 seconds, but a gang's
		// four end together, once a minute: about 2 in 3.
		{"as many allocations, but four ending together every minute", "critical", 1, 1, 5 * time.Second, false, 60, 10 * time.Minute, true, []string{"w-0"}, [2]int{4, 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := paceStore(t, tc.tier, tc.gpus, tc.waiting, tc.waited)
			if tc.gang[0] > 0 {
				teachGangEnds(t, store, tc.ends, tc.gang[0], tc.gang[1], t0.Add(-tc.endsAt))
			} else {
				teachEnds(t, store, tc.ends, t0.Add(-tc.endsAt), tc.completed)
			}
			pol := pacePolicy(t, !tc.off, 4, "")
			snap := store.Snapshot()
			p := mustEngine(t, pol).Decide(snap, t0)
			if err := ValidatePlan(pol, snap, p); err != nil {
				t.Fatal(err)
			}
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

func TestCompoundBelow(t *testing.T) {
	cases := []struct {
		mu   float64
		m    int
		want float64
	}{
		{1, 0, 0},
		{1, 1, math.Exp(-1)},
		{2, 3, math.Exp(-2) * (1 + 2 + 2)},
		{0.5, 2, math.Exp(-0.5) * 1.5},
		{1000, 900, 0.00062260}, // e^-1000 underflows: computed rescaled
		{1000, 1000, 0.49579},
		{4, 100, 1},
	}
	for _, tc := range cases {
		got := compoundBelow(tc.mu, []lump{{gpus: 1, events: 3}}, tc.m)
		if math.Abs(got-tc.want) > 1e-3*max(tc.want, 1e-3) && math.Abs(got-tc.want) > 1e-6 {
			t.Errorf("events of one GPU: compoundBelow(%g, %d) = %g, want Poisson's %g", tc.mu, tc.m, got, tc.want)
		}
	}
	// Lumps: fewer GPUs than m freed means fewer events than it takes.
	lumpy := []struct {
		name  string
		mu    float64
		sizes []lump
		m     int
		want  float64
	}{
		{"events of 2 GPUs, fewer than 2 freed: none came", 1, []lump{{2, 5}}, 2, math.Exp(-1)},
		{"events of 2 GPUs, fewer than 3 freed: at most one came", 1, []lump{{2, 5}}, 3, math.Exp(-1) * 2},
		{"half of 1 GPU, half of 3: fewer than 2 freed", 1, []lump{{1, 4}, {3, 4}}, 2, math.Exp(-1) * 1.5},
		{"half of 1 GPU, half of 3: fewer than 4 freed", 2, []lump{{1, 4}, {3, 4}}, 4,
			// S = 0; 1 (one event of 1); 2 (two of 1); 3 (three of 1, or one of 3).
			math.Exp(-2) * (1 + 2*0.5 + 2*0.25 + (8.0/6)*0.125 + 2*0.5)},
		{"events of 2 GPUs at a large pace: rescaled", 1000, []lump{{2, 1}}, 1800, 0.00062260},
	}
	for _, tc := range lumpy {
		got := compoundBelow(tc.mu, tc.sizes, tc.m)
		if math.Abs(got-tc.want) > 1e-3*max(tc.want, 1e-3) && math.Abs(got-tc.want) > 1e-6 {
			t.Errorf("%s: compoundBelow(%g, %v, %d) = %g, want %g", tc.name, tc.mu, tc.sizes, tc.m, got, tc.want)
		}
	}
}

// The count of jobs waiting ahead of a top-tier job decides how likely
// the ends come first for it; an engine without explanations skips
// deciding most waiting jobs (onlyWaits) and must count them the same:
// over random bursts, paces and budgets, with old scavenger jobs that
// aging ranks ahead of the critical ones (they may preempt no one, so
// the lean engine skips them), both engines decide the same.
func TestPropertyPaceSameWithoutExplanations(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		store := paceStore(t, "critical", rapid.SampledFrom([]int{1, 2, 4}).Draw(t, "gpus"), rapid.IntRange(1, 8).Draw(t, "waiting"),
			time.Duration(rapid.IntRange(0, 90).Draw(t, "waited"))*time.Second)
		for i := range rapid.IntRange(0, 6).Draw(t, "high") {
			mustDo(t, store.UpsertJob(mkJob(fmt.Sprintf("h-%d", i), meta("impact_tier", "high"), submitted(t0.Add(-time.Duration(i)*time.Second)))))
		}
		for i := range rapid.IntRange(0, 4).Draw(t, "old") {
			mustDo(t, store.UpsertJob(mkJob(fmt.Sprintf("old-%d", i), meta("impact_tier", "scavenger"), submitted(t0.Add(-3*time.Hour)))))
		}
		teachEnds(t, store, rapid.IntRange(0, 600).Draw(t, "ends"), t0.Add(-time.Duration(rapid.IntRange(1, 50).Draw(t, "ago"))*time.Minute), true)
		pol := pacePolicy(t, true, rapid.IntRange(1, 4).Draw(t, "perCycle"), `
aging {
  weight_per_hour = 1000
  max             = 5000
}
`)
		snap := store.Snapshot()
		a := mustEngine(t, pol).Decide(snap, t0)
		b := mustEngine(t, pol, WithoutExplanations()).Decide(snap, t0)
		if !reflect.DeepEqual(a.Preemptions, b.Preemptions) || !reflect.DeepEqual(a.Admissions, b.Admissions) {
			t.Fatalf("decisions differ:\n%+v\n%+v", a.Preemptions, b.Preemptions)
		}
	})
}
