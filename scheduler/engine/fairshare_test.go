package engine

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// Two projects of equal share under contention converge to equal
// GPU-hours (within 5%), although their jobs differ in shape and one
// project submits more, longer work.
func TestFairShareConverges(t *testing.T) {
	pol := mustPolicy(t, `
project "a" { share = 1 }
project "b" { share = 1 }
fair_share { half_life = "12h" }
`)
	a, b := fairShareRun(t, pol)
	total := 32 * 6 * 24.0
	if a+b < 0.9*total {
		t.Fatalf("cluster under-used: %.0f of %.0f GPU-hours", a+b, total)
	}
	if dev := math.Abs(a-b) / ((a + b) / 2); dev > 0.05 {
		t.Fatalf("GPU-hours a=%.0f b=%.0f differ by %.1f%%, want within 5%%", a, b, 100*dev)
	}
	t.Logf("GPU-hours a=%.0f b=%.0f (%.1f%% apart)", a, b, 100*math.Abs(a-b)/((a+b)/2))

	// Control: without the fair-share term the shapes of the two streams,
	// not the shares, decide; the test would catch a broken fair share.
	unfair := pol.Clone()
	unfair.FairShare.Weight = 0
	if a, b := fairShareRun(t, unfair); math.Abs(a-b)/((a+b)/2) <= 0.05 {
		t.Fatalf("control without fair share is already fair (a=%.0f b=%.0f): scenario too weak", a, b)
	}
}

// fairShareRun drives a week of contention and returns the GPU-hours of
// projects a and b after a day of warm-up.
func fairShareRun(t *testing.T, pol *policy.Policy) (float64, float64) {
	var nodes []*cluster.Node
	for i := range 4 {
		nodes = append(nodes, mkNode(fmt.Sprintf("n%d", i), 8, 2))
	}
	s := newTsim(t, pol, nodes)
	seq := 0
	queued := func() map[string]int {
		n := map[string]int{}
		s.store.Snapshot().EachJob(func(j *cluster.Job) {
			if j.State == cluster.JobQueued {
				n[s.project[j.ID]]++
			}
		})
		return n
	}
	refill := func() {
		// a: 4-GPU jobs of 3h; b: 1-GPU jobs of 1h. Each project alone
		// could fill the cluster (32 GPUs) with its queue.
		q := queued()
		for ; q["a"] < 10; q["a"]++ {
			seq++
			s.submit(mkJob(fmt.Sprintf("a-%04d", seq), group("main", 1, 4), meta("impact_project", "a")), 3*time.Hour)
		}
		for ; q["b"] < 40; q["b"]++ {
			seq++
			s.submit(mkJob(fmt.Sprintf("b-%04d", seq), meta("impact_project", "b")), time.Hour)
		}
	}
	var at1, bt1 float64
	for i := range 7 * 24 * 6 { // a week of 10-minute steps
		if i == 24*6 {
			// Measure after a day of warm-up, once fair share has memory.
			at1, bt1 = s.gpuHours["a"], s.gpuHours["b"]
		}
		refill()
		s.step(10 * time.Minute)
	}
	return s.gpuHours["a"] - at1, s.gpuHours["b"] - bt1
}

// Usage is charged for GPU time wherever it falls between cycles: an
// allocation that starts and ends between two cycles (never in a
// snapshot), and one that ends after a cycle, are charged exactly the
// time they ran, and nothing is charged twice.
func TestUsageChargedForAllocationsBetweenCycles(t *testing.T) {
	pol := mustPolicy(t, `fair_share { half_life = "1000000h" }`) // no decay to speak of
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	store := cluster.NewStore()
	_ = store.UpsertNode(mkNode("n1", 8, 1))
	for _, j := range []*cluster.Job{
		mkJob("short", running(), meta("impact_project", "p")),
		mkJob("long", running(), meta("impact_project", "q")),
	} {
		_ = store.UpsertJob(j)
	}
	e := mustEngine(t, pol)
	e.Decide(store.Snapshot(), t0) // first cycle: nothing to charge yet
	// Between cycles: "short" runs 2 GPUs from +10m to +40m; "long" runs
	// 1 GPU from +30m and is still running at the next cycle.
	_ = store.UpsertAlloc(alloc("s1", "short", "n1", t0.Add(10*time.Minute), 0, 1))
	_ = store.UpsertAlloc(alloc("l1", "long", "n1", t0.Add(30*time.Minute), 2))
	store.FinishAlloc("s1", t0.Add(40*time.Minute))
	e.Decide(store.Snapshot(), t0.Add(time.Hour))
	u := e.Usage()
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-3 }
	if p, q := u.Get("p", t0.Add(time.Hour)), u.Get("q", t0.Add(time.Hour)); !near(p, 1.0) || !near(q, 0.5) {
		t.Fatalf("after cycle 2: p=%.4f q=%.4f GPU-hours, want 1.0 (2 GPUs x 30m) and 0.5 (1 GPU x 30m)", p, q)
	}
	// "long" ends 15m into the next interval: charged those 15m only.
	store.FinishAlloc("l1", t0.Add(75*time.Minute))
	e.Decide(store.Snapshot(), t0.Add(2*time.Hour))
	u = e.Usage()
	if p, q := u.Get("p", t0.Add(2*time.Hour)), u.Get("q", t0.Add(2*time.Hour)); !near(p, 1.0) || !near(q, 0.75) {
		t.Fatalf("after cycle 3: p=%.4f q=%.4f GPU-hours, want 1.0 and 0.75", p, q)
	}
}

// Whatever the cycle times, the usage charged is the GPU time allocations
// held between the first and the last cycle: allocations seen running,
// ending between cycles, or starting and ending between two cycles are
// each charged exactly once (no decay to speak of here).
func TestUsageChargeIndependentOfCycleTimes(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		pol := mustPolicy(rt, `fair_share { half_life = "1000000h" }`)
		store := cluster.NewStore()
		_ = store.UpsertNode(mkNode("n1", 8, 1))
		_ = store.UpsertJob(mkJob("j", running(), meta("impact_project", "p")))
		type span struct {
			id         string
			gpus       int
			start, end time.Duration // from t0
		}
		var spans []span
		for i := range rapid.IntRange(1, 8).Draw(rt, "allocs") {
			start := time.Duration(rapid.IntRange(0, 600).Draw(rt, "start")) * time.Minute
			spans = append(spans, span{
				id: fmt.Sprintf("a%d", i), gpus: rapid.IntRange(1, 8).Draw(rt, "gpus"),
				start: start, end: start + time.Duration(rapid.IntRange(1, 300).Draw(rt, "len"))*time.Minute,
			})
		}
		var cycles []time.Duration
		at := time.Duration(0)
		for range rapid.IntRange(2, 12).Draw(rt, "cycles") {
			cycles = append(cycles, at)
			at += time.Duration(rapid.IntRange(1, 200).Draw(rt, "gap")) * time.Minute
		}
		// Replay events (starts, ends) and cycles in time order; at equal
		// times events come first, as the model is updated before a cycle.
		e := mustEngine(rt, pol)
		type ev struct {
			at    time.Duration
			kind  int // 0 start, 1 end, 2 cycle
			index int
		}
		var evs []ev
		for i, s := range spans {
			evs = append(evs, ev{s.start, 0, i}, ev{s.end, 1, i})
		}
		for i, c := range cycles {
			evs = append(evs, ev{c, 2, i})
		}
		slices.SortStableFunc(evs, func(a, b ev) int {
			if a.at != b.at {
				return cmp.Compare(a.at, b.at)
			}
			return cmp.Compare(a.kind, b.kind)
		})
		for _, x := range evs {
			switch x.kind {
			case 0:
				s := spans[x.index]
				var gpus []int
				for g := range s.gpus {
					gpus = append(gpus, g)
				}
				_ = store.UpsertAlloc(alloc(s.id, "j", "n1", t0.Add(s.start), gpus...))
			case 1:
				store.FinishAlloc(spans[x.index].id, t0.Add(spans[x.index].end))
			case 2:
				e.Decide(store.Snapshot(), t0.Add(x.at))
			}
		}
		first, last := cycles[0], cycles[len(cycles)-1]
		want := 0.0
		for _, s := range spans {
			from, to := max(s.start, first), min(s.end, last)
			if to > from {
				want += float64(s.gpus) * (to - from).Hours()
			}
		}
		got := e.Usage().Get("p", t0.Add(last))
		if math.Abs(got-want) > 1e-3*math.Max(1, want) {
			rt.Fatalf("charged %.4f GPU-hours, want %.4f", got, want)
		}
	})
}
