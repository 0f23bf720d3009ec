package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// wallWorld is a store-backed scenario for learned walltimes: two nodes of
// 8 GPUs; what runs and waits is added per test, and past runs are taught
// through the store's finished log, as the adapter and the simulator
// record them.
type wallWorld struct {
	t     *testing.T
	store *cluster.Store
	e     *Engine
	n     int // runs taught so far (unique IDs)
}

func newWallWorld(t *testing.T, pol *policy.Policy) *wallWorld {
	t.Helper()
	w := &wallWorld{t: t, store: cluster.NewStore(), e: mustEngine(t, pol)}
	for _, n := range []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)} {
		mustDo(t, w.store.UpsertNode(n))
	}
	return w
}

// wallPolicy learns walltimes with the given minimum of samples, and
// estimates running work's ends too when running.
func wallPolicy(t *testing.T, minSamples int, running bool) *policy.Policy {
	return mustPolicy(t, fmt.Sprintf(`walltime {
  learn       = true
  running     = %v
  quantile    = 0.9
  min_samples = %d
  window      = "72h"
}`, running, minSamples))
}

// teach records one run per duration of a job with meta kv holding gpus
// GPUs in one allocation, ending at end: completed (ran to its end on its
// own) or stopped (FinishAlloc: preempted, failed, lost). The jobs leave
// the store once finished; the engine reads the records at its next
// cycle.
func (w *wallWorld) teach(kv []string, gpus int, end time.Time, completed bool, runs ...time.Duration) []string {
	w.t.Helper()
	var ids []string
	for _, run := range runs {
		w.n++
		id := fmt.Sprintf("done-%03d", w.n)
		mustDo(w.t, w.store.UpsertJob(mkJob(id, running(), group("main", 1, gpus), meta(kv...))))
		idx := make([]int, gpus)
		for i := range idx {
			idx[i] = i
		}
		mustDo(w.t, w.store.UpsertAlloc(alloc(id+"-a", id, "nt", end.Add(-run), idx...)))
		if completed {
			w.store.CompleteAlloc(id+"-a", end)
		} else {
			w.store.FinishAlloc(id+"-a", end)
		}
		w.store.DeleteJob(id)
		ids = append(ids, id+"-a")
	}
	return ids
}

func (w *wallWorld) decide(now time.Time) *Plan {
	w.t.Helper()
	snap := w.store.Snapshot()
	p := w.e.Decide(snap, now)
	if err := ValidatePlan(w.e.Policy(), snap, p); err != nil {
		w.t.Fatal(err)
	}
	return p
}

func hours(hs ...float64) []time.Duration {
	out := make([]time.Duration, len(hs))
	for i, h := range hs {
		out[i] = time.Duration(h * float64(time.Hour))
	}
	return out
}

// runningFull fills n1 with job r1 (8 GPUs, no walltime, started at
// start) and queues head, which needs both nodes whole: it reserves n1.
func (w *wallWorld) runningFull(start time.Time) {
	mustDo(w.t, w.store.UpsertJob(mkJob("r1", running(), group("main", 1, 8))))
	mustDo(w.t, w.store.UpsertAlloc(alloc("a1", "r1", "n1", start, 0, 1, 2, 3, 4, 5, 6, 7)))
	mustDo(w.t, w.store.UpsertJob(mkJob("head", group("w", 2, 8), submitted(t0.Add(-5*time.Hour)))))
}

// A reservation behind running work without a walltime has no time until
// enough runs of its class have finished (and the policy estimates
// running work); then the (1 - quantile) quantile of those that ran
// longer than it has so far times it, and the explanation says the time
// is estimated.
func TestLearnedWalltimeTimesReservation(t *testing.T) {
	// r1 has run 1h01m: 2h..10h ran longer, and their p10 (nearest rank)
	// is 2h.
	runs := hours(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	cases := []struct {
		name    string
		pol     *policy.Policy
		taught  int
		wantEnd time.Duration // from r1's start; 0: unknown
	}{
		{"learning off", policy.Default(), 10, 0},
		{"running work not estimated", wallPolicy(t, 10, false), 10, 0},
		{"one sample short", wallPolicy(t, 10, true), 9, 0},
		{"enough samples", wallPolicy(t, 10, true), 10, 2 * time.Hour},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWallWorld(t, tc.pol)
			start := t0.Add(-time.Hour)
			w.runningFull(start)
			w.teach(nil, 8, t0.Add(-time.Minute), true, runs[:tc.taught]...)
			w.decide(t0)                       // learns
			p := w.decide(t0.Add(time.Minute)) // estimates
			head := p.Explanations["head"]
			if head.Status != StatusReserved {
				t.Fatalf("head: %+v, want reserved", head)
			}
			if tc.wantEnd == 0 {
				if !head.ReservedUntil.IsZero() || head.ReservedUntilEstimated || !strings.Contains(head.Reason, "time unknown") {
					t.Fatalf("head: until %v estimated %v reason %q, want time unknown", head.ReservedUntil, head.ReservedUntilEstimated, head.Reason)
				}
				return
			}
			if want := start.Add(tc.wantEnd); !head.ReservedUntil.Equal(want) || !head.ReservedUntilEstimated {
				t.Fatalf("head reserved until %v (estimated %v), want %v estimated", head.ReservedUntil, head.ReservedUntilEstimated, want)
			}
			if !strings.Contains(head.Reason, "estimated") {
				t.Fatalf("head's reason %q does not say the time is estimated", head.Reason)
			}
		})
	}
}

// Only runs that ended on their own teach: stopped allocations (preempted,
// failed, lost) and those whose stop this engine ordered do not, nor runs
// that ended before the window, and a job that has run longer than every
// run of its class has no estimated end.
func TestLearnedWalltimeSamples(t *testing.T) {
	runs := hours(2, 2, 2, 2, 2)
	cases := []struct {
		name  string
		setup func(w *wallWorld) time.Time // returns the instant of the checked cycle
		known bool
	}{
		{"completed runs", func(w *wallWorld) time.Time {
			w.teach(nil, 8, t0.Add(-time.Minute), true, runs...)
			return t0.Add(time.Minute)
		}, true},
		{"stopped runs", func(w *wallWorld) time.Time {
			w.teach(nil, 8, t0.Add(-time.Minute), false, runs...)
			return t0.Add(time.Minute)
		}, false},
		{"runs this engine stopped", func(w *wallWorld) time.Time {
			// The stops are ordered (Preempting) before the runs end: a
			// job that exits 0 on its checkpoint signal still completes.
			ids := make([]string, len(runs))
			for i := range ids {
				ids[i] = fmt.Sprintf("done-%03d-a", i+1)
			}
			w.e.Preempting(Preemption{Stop: Stop{JobID: "victims", Allocs: ids, Grace: time.Minute}}, t0.Add(-2*time.Minute))
			w.teach(nil, 8, t0.Add(-time.Minute), true, runs...)
			return t0.Add(time.Minute)
		}, false},
		{"runs before the window", func(w *wallWorld) time.Time {
			w.teach(nil, 8, t0.Add(-time.Minute), true, runs...)
			return t0.Add(73 * time.Hour)
		}, false},
		{"another tier's runs", func(w *wallWorld) time.Time {
			w.teach([]string{"impact_tier", "high"}, 8, t0.Add(-time.Minute), true, runs...)
			return t0.Add(time.Minute)
		}, false},
		{"another project's runs of the same tier", func(w *wallWorld) time.Time {
			// The coarsest class is the tier: any project's runs.
			w.teach([]string{"impact_project", "other"}, 8, t0.Add(-time.Minute), true, runs...)
			return t0.Add(time.Minute)
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWallWorld(t, wallPolicy(t, len(runs), true))
			start := t0.Add(-time.Hour)
			w.runningFull(start)
			at := tc.setup(w)
			w.decide(t0)
			if at.Sub(start) > 2*time.Hour {
				// Keep r1 within its estimate: it started an hour ago.
				start = at.Add(-time.Hour)
				mustDo(t, w.store.UpsertAlloc(alloc("a1", "r1", "n1", start, 0, 1, 2, 3, 4, 5, 6, 7)))
			}
			head := w.decide(at).Explanations["head"]
			if got := !head.ReservedUntil.IsZero(); got != tc.known {
				t.Fatalf("head reserved until %v, want known=%v; %q", head.ReservedUntil, tc.known, head.Reason)
			}
			if tc.known && !head.ReservedUntil.Equal(start.Add(2*time.Hour)) {
				t.Fatalf("head reserved until %v, want r1's start + 2h", head.ReservedUntil)
			}
		})
	}

	t.Run("running longer than its class", func(t *testing.T) {
		w := newWallWorld(t, wallPolicy(t, len(runs), true))
		w.runningFull(t0.Add(-3 * time.Hour)) // every run took 2h
		w.teach(nil, 8, t0.Add(-time.Minute), true, runs...)
		w.decide(t0)
		head := w.decide(t0.Add(time.Minute)).Explanations["head"]
		if !head.ReservedUntil.IsZero() || head.ReservedUntilEstimated {
			t.Fatalf("head reserved until %v (estimated %v): a job older than every run of its class has no estimated end", head.ReservedUntil, head.ReservedUntilEstimated)
		}
	})
}

// A job that declares no walltime and may not be preempted by the
// reserving job backfills reserved GPUs once its learned estimate ends
// before the reservation is needed, and not while it has no estimate or
// its estimate ends after.
func TestLearnedWalltimeBackfill(t *testing.T) {
	cases := []struct {
		name      string
		pol       func(t *testing.T) *policy.Policy
		runs      []time.Duration
		wantAdmit bool
	}{
		{"no estimate", func(t *testing.T) *policy.Policy { return wallPolicy(t, 20, false) }, hours(0.5, 0.5, 0.5), false},
		{"estimate ends before", func(t *testing.T) *policy.Policy { return wallPolicy(t, 20, false) }, repeat(30*time.Minute, 20), true},
		{"estimate ends after", func(t *testing.T) *policy.Policy { return wallPolicy(t, 20, false) }, repeat(3*time.Hour, 20), false},
		{"learning off", func(t *testing.T) *policy.Policy { return policy.Default() }, repeat(30*time.Minute, 20), false},
	}
	fixed := []string{"impact_preemptible", "false"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWallWorld(t, tc.pol(t))
			mustDo(t, w.store.UpsertJob(mkJob("r1", running(), meta("impact_walltime", "2h"))))
			mustDo(t, w.store.UpsertAlloc(alloc("a1", "r1", "n1", t0.Add(-time.Hour), 0, 1, 2, 3, 4, 5, 6, 7)))
			mustDo(t, w.store.UpsertJob(mkJob("head", group("w", 2, 8), submitted(t0.Add(-5*time.Hour)))))
			// Runs of the same tier, project and size, preemptible or not:
			// the class does not depend on it.
			w.teach(nil, 4, t0.Add(-time.Minute), true, tc.runs...)
			w.decide(t0)
			mustDo(t, w.store.UpsertJob(mkJob("unknown", group("main", 1, 4), meta(fixed...), submitted(t0))))
			p := w.decide(t0.Add(time.Minute))
			if head := p.Explanations["head"]; head.Status != StatusReserved || head.ReservedUntilEstimated {
				t.Fatalf("head: %+v, want reserved by r1's declared walltime", head)
			}
			a := admission(p, "unknown")
			if (a != nil) != tc.wantAdmit {
				t.Fatalf("unknown admitted=%v, want %v; %+v", a != nil, tc.wantAdmit, p.Explanations["unknown"])
			}
			if a == nil {
				return
			}
			if r := p.Explanations["unknown"].Reason; !a.Backfilled || !strings.Contains(r, "estimate") {
				t.Fatalf("unknown backfilled=%v reason %q, want backfilled by its estimate", a.Backfilled, r)
			}
		})
	}
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

// The memory is bounded: a class keeps its most recent runs, and runs
// that ended before the window are dropped once a window has passed.
func TestLearnedWalltimeMemoryBounded(t *testing.T) {
	w := newWallWorld(t, wallPolicy(t, 5, false))
	w.teach(nil, 8, t0.Add(-time.Minute), true, repeat(time.Hour, 3*maxWallRuns)...)
	w.decide(t0)
	k := wallKey{project: "default", tier: "normal", gpus: 8}
	if n := len(w.e.walls.classes[k]); n > 2*maxWallRuns || n < maxWallRuns {
		t.Fatalf("class holds %d runs, want between %d and %d", n, maxWallRuns, 2*maxWallRuns)
	}
	w.decide(t0.Add(73 * time.Hour))
	if n := len(w.e.walls.classes); n != 0 {
		t.Fatalf("%d classes kept after their runs left the window", n)
	}
}

// A learned headroom sizes an urgent job without a walltime by its
// learned estimate once there is one, by an hour before.
func TestLearnedWalltimeSizesHeadroom(t *testing.T) {
	for _, tc := range []struct {
		name     string
		taught   int
		wantGPUs int
	}{
		// One 4-GPU critical job over a 4h window: 4 x 1h / 4h = 1, plus
		// the largest arrival, 4.
		{"no estimate", 2, 5},
		// Its estimate, 2h: 4 x 2h / 4h = 2, plus 4.
		{"estimated", 3, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWallWorld(t, mustPolicy(t, `
walltime {
  learn       = true
  min_samples = 3
}
headroom "gpu" {
  tiers     = ["critical"]
  learn     = true
  window    = "4h"
  max_share = 1
}
`))
			crit := []string{"impact_tier", "critical"}
			w.teach(crit, 4, t0.Add(-time.Minute), true, repeat(2*time.Hour, tc.taught)...)
			w.decide(t0)
			mustDo(t, w.store.UpsertJob(mkJob("c1", group("main", 1, 4), meta(crit...), submitted(t0))))
			p := w.decide(t0.Add(time.Minute))
			if h := p.Headroom[0]; h.GPUs != tc.wantGPUs || h.Arrivals != 1 {
				t.Fatalf("headroom %+v, want %d GPUs from 1 arrival", h, tc.wantGPUs)
			}
		})
	}
}

// Learned run times are whole jobs', as impact_walltime is: a job resumed
// from a checkpoint (impact_progress) teaches its saved work and its last
// run together, and a running job with saved work has run that much
// longer and needs that much less of the estimate.
func TestLearnedWalltimeCountsSavedWork(t *testing.T) {
	start := t0.Add(-time.Hour)
	reserveBehind := func(w *wallWorld, kv ...string) {
		mustDo(t, w.store.UpsertJob(mkJob("r1", running(), group("main", 1, 8), meta(kv...))))
		mustDo(t, w.store.UpsertAlloc(alloc("a1", "r1", "n1", start, 0, 1, 2, 3, 4, 5, 6, 7)))
		mustDo(t, w.store.UpsertJob(mkJob("head", group("w", 2, 8), submitted(t0.Add(-5*time.Hour)))))
	}
	for _, c := range []struct {
		name    string
		taught  []string // meta of the finished jobs
		runs    []time.Duration
		holder  []string // meta of the running job
		wantEnd time.Duration
	}{
		// Ten jobs resumed with 2h saved that ran 1h more: 3h jobs. r1
		// has run 1h of such a job; counted by their last runs it would
		// have outlived them all (no estimate).
		{"resumed jobs teach their whole run", []string{"impact_progress", "2h"}, repeat(time.Hour, 10), nil, 3 * time.Hour},
		// r1 saved 30m before this run: it has run 1h30m of its job, the
		// jobs longer than that ran 2h..10h, their p10 is 2h, and 30m of
		// it is done (counted from this run alone: 2h from its start).
		{"a resumed holder needs less", nil, hours(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), []string{"impact_progress", "30m"}, 90 * time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWallWorld(t, wallPolicy(t, 10, true))
			reserveBehind(w, c.holder...)
			w.teach(c.taught, 8, t0.Add(-time.Minute), true, c.runs...)
			w.decide(t0)
			head := w.decide(t0.Add(time.Minute)).Explanations["head"]
			if want := start.Add(c.wantEnd); head.Status != StatusReserved || !head.ReservedUntil.Equal(want) || !head.ReservedUntilEstimated {
				t.Fatalf("head %s until %v (estimated %v), want reserved until %v estimated", head.Status, head.ReservedUntil, head.ReservedUntilEstimated, want)
			}
		})
	}
	// A waiting job of a class that runs 3h, with 2h50m saved, needs 10m:
	// it backfills GPUs reserved for an hour from now; with nothing saved
	// it does not.
	for _, saved := range []string{"", "2h50m"} {
		t.Run("a resumed waiting job backfills by what is left: saved "+saved, func(t *testing.T) {
			w := newWallWorld(t, wallPolicy(t, 10, false))
			reserveBehind(w, "impact_walltime", "2h")
			w.teach([]string{"impact_preemptible", "false"}, 4, t0.Add(-time.Minute), true, repeat(3*time.Hour, 10)...)
			w.decide(t0)
			kv := []string{"impact_preemptible", "false"}
			if saved != "" {
				kv = append(kv, "impact_progress", saved)
			}
			mustDo(t, w.store.UpsertJob(mkJob("resumed", group("main", 1, 4), meta(kv...), submitted(t0))))
			p := w.decide(t0.Add(time.Minute))
			if a := admission(p, "resumed"); (a != nil) != (saved != "") {
				t.Fatalf("resumed admitted=%v with %q saved; %+v", a != nil, saved, p.Explanations["resumed"])
			}
		})
	}
}
