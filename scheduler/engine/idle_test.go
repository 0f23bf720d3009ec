package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// feed gives the engine one poll per step from `from` up to and including
// `to`; util says each allocation's utilisation at an instant (negative:
// missing stats).
func feed(e *Engine, allocs []*cluster.Alloc, from, to time.Time, step time.Duration, util func(a *cluster.Alloc, at time.Time) float64) {
	for at := from; !at.After(to); at = at.Add(step) {
		var s []AllocUtilization
		for _, a := range allocs {
			s = append(s, AllocUtilization{AllocID: a.ID, JobID: a.JobID, GPUs: len(a.GPUs), Percent: util(a, at)})
		}
		e.ObserveUtilization(at, s)
	}
}

func constant(v float64) func(*cluster.Alloc, time.Time) float64 {
	return func(*cluster.Alloc, time.Time) float64 { return v }
}

func runningOf(p *Plan, id string) *RunningJob {
	for i := range p.Running {
		if p.Running[i].JobID == id {
			return &p.Running[i]
		}
	}
	return nil
}

func TestUtilTrackIdleSince(t *testing.T) {
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	cases := []struct {
		name      string
		samples   []float64 // one a minute from t0; negative: missing
		threshold float64
		since     int // minutes; -1: not idle
	}{
		{"all below", []float64{1, 0, 2, 0}, 5, 0},
		{"run after a busy sample", []float64{1, 90, 3, 0, 4}, 5, 2},
		{"latest sample busy", []float64{0, 0, 0, 50}, 5, -1},
		{"at the threshold is not below", []float64{0, 5, 0}, 5, 2},
		{"missing stats break the run", []float64{0, 0, -1, 0, 0}, 5, 3},
		{"latest sample missing", []float64{0, 0, -1}, 5, -1},
		{"higher threshold reaches further back", []float64{30, 8, 3, 9, 1}, 10, 1},
		{"lower threshold", []float64{30, 8, 3, 9, 1}, 5, 4},
		{"falling steadily", []float64{50, 40, 30, 20, 10, 4, 3, 2}, 25, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var tr utilTrack
			for i, v := range tc.samples {
				tr.observe(at(i), v)
			}
			got, ok := tr.idleSince(tc.threshold)
			if tc.since < 0 {
				if ok {
					t.Fatalf("idle since %s, want not idle", got)
				}
				return
			}
			if !ok || !got.Equal(at(tc.since)) {
				t.Fatalf("idleSince = %s, %v; want %s", got, ok, at(tc.since))
			}
		})
	}
}

// A history that falls for longer than the record bound still answers,
// starting later (idle time understated, never overstated).
func TestUtilTrackBounded(t *testing.T) {
	var tr utilTrack
	for i := range 200 {
		tr.observe(t0.Add(time.Duration(i)*time.Minute), float64(200-i)/10)
	}
	if len(tr.recs) > maxUtilRecords {
		t.Fatalf("%d records kept", len(tr.recs))
	}
	since, ok := tr.idleSince(100)
	if !ok || since.Before(t0) || since.After(t0.Add(199*time.Minute)) {
		t.Fatalf("idleSince = %s, %v", since, ok)
	}
	// Exact below the bound: utilisation < 5 from sample 151 (4.9) on.
	since, ok = tr.idleSince(5)
	if !ok || !since.Equal(t0.Add(151*time.Minute)) {
		t.Fatalf("idleSince(5) = %s, %v", since, ok)
	}
}

// Detection as the plan reports it: threshold, duration, missing stats and
// partial gangs.
func TestIdleDetection(t *testing.T) {
	start := t0.Add(-2 * time.Hour)
	gang := func() ([]*cluster.Job, []*cluster.Alloc) {
		j := mkJob("g", running(), group("main", 4, 2), meta("impact_tier", "scavenger"))
		return []*cluster.Job{j}, []*cluster.Alloc{
			alloc("g0", "g", "n1", start, 0, 1), alloc("g1", "g", "n1", start, 2, 3),
			alloc("g2", "g", "n2", start, 0, 1), alloc("g3", "g", "n2", start, 2, 3)}
	}
	per := func(m map[string]float64) func(*cluster.Alloc, time.Time) float64 {
		return func(a *cluster.Alloc, _ time.Time) float64 { return m[a.ID] }
	}
	cases := []struct {
		name         string
		from         time.Duration // before t0
		util         func(*cluster.Alloc, time.Time) float64
		idle, hung   bool
		idleFor      time.Duration
		noteContains string
	}{
		{name: "all at 0% for 31m: idle and hung", from: 31 * time.Minute, util: constant(0), idle: true, hung: true, idleFor: 31 * time.Minute},
		{name: "all at 0% for 29m: not yet", from: 29 * time.Minute, util: constant(0), idleFor: 29 * time.Minute},
		{name: "all at 6% (threshold 5%): never", from: 2 * time.Hour, util: constant(6)},
		{name: "three members at 0%, one at 10%: idle (mean 2.5%), not hung", from: time.Hour,
			util: per(map[string]float64{"g0": 0, "g1": 0, "g2": 0, "g3": 10}), idle: true, idleFor: time.Hour},
		{name: "one member busy at 40%: mean 10%, not idle", from: time.Hour,
			util: per(map[string]float64{"g0": 0, "g1": 0, "g2": 0, "g3": 40})},
		{name: "missing stats 20m ago restart the duration", from: time.Hour,
			util: func(_ *cluster.Alloc, at time.Time) float64 {
				if at.Equal(t0.Add(-20 * time.Minute)) {
					return -1
				}
				return 0
			}, idleFor: 19 * time.Minute},
		{name: "one member with missing stats: job unknown, not idle", from: time.Hour,
			util: per(map[string]float64{"g0": 0, "g1": 0, "g2": 0, "g3": -1})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			jobs, allocs := gang()
			e := mustEngine(t, nil)
			feed(e, allocs, t0.Add(-tc.from), t0, time.Minute, tc.util)
			snap := mustSnap(t, []*cluster.Node{mkNode("n1", 4, 1), mkNode("n2", 4, 1)}, jobs, allocs)
			p := e.Decide(snap, t0)
			r := runningOf(p, "g")
			if r == nil {
				t.Fatalf("g not in Plan.Running: %+v", p.Running)
			}
			if r.Idle != tc.idle || r.Hung != tc.hung || r.IdleFor != tc.idleFor {
				t.Fatalf("idle %v hung %v for %s; want %v %v %s (%+v)", r.Idle, r.Hung, r.IdleFor, tc.idle, tc.hung, tc.idleFor, *r)
			}
			if r.Action != policy.IdleReport || r.Threshold != 5 || r.Duration != 30*time.Minute || r.GPUs != 8 || r.Tier != "scavenger" {
				t.Fatalf("running view %+v", *r)
			}
			if len(p.Reclaims) != 0 || len(p.Preemptions) != 0 {
				t.Fatalf("report action acted: %+v %+v", p.Reclaims, p.Preemptions)
			}
		})
	}
}

// The preemptible action: an idle job becomes a victim for waiting work of
// its own tier or a heavier one, costed up to going idle; the opt-out and
// a tier that forbids it.
func TestIdlePreemptible(t *testing.T) {
	const pol = `
tier "normal" {
  idle {
    action        = "preemptible"
    allow_opt_out = %s
  }
}
tier "scavenger" {
  preemptible = false
}
`
	start := t0.Add(-3 * time.Hour)
	cases := []struct {
		name       string
		optOut     string // allow_opt_out
		victimMeta []string
		waiting    *cluster.Job
		busy       bool // the victim's GPUs are busy
		preempted  bool
	}{
		{name: "same tier preempts an idle job", optOut: "true", waiting: mkJob("w", meta("impact_tier", "normal"), group("main", 1, 4)), preempted: true},
		{name: "a heavier tier too", optOut: "true", waiting: mkJob("w", meta("impact_tier", "high"), group("main", 1, 4)), preempted: true},
		{name: "a lighter tier does not", optOut: "true", waiting: mkJob("w", meta("impact_tier", "scavenger"), group("main", 1, 4))},
		{name: "a busy job is not preempted by its tier", optOut: "true", busy: true, waiting: mkJob("w", meta("impact_tier", "normal"), group("main", 1, 4))},
		{name: "opted out", optOut: "true", victimMeta: []string{"impact_idle", "ignore"}, waiting: mkJob("w", meta("impact_tier", "normal"), group("main", 1, 4))},
		{name: "opt-out forbidden by the tier", optOut: "false", victimMeta: []string{"impact_idle", "ignore"}, waiting: mkJob("w", meta("impact_tier", "normal"), group("main", 1, 4)), preempted: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPolicy(t, strings.Replace(pol, "%s", tc.optOut, 1))
			// The victim says it is not preemptible and is far past no
			// min runtime question: only the idle action makes it a victim.
			vm := append([]string{"impact_tier", "normal", "impact_preemptible", "false", "impact_grace", "45s",
				"impact_checkpoint_signal", "SIGUSR1", "impact_checkpoint_interval", "1h"}, tc.victimMeta...)
			v := mkJob("v", running(), group("main", 1, 4), meta(vm...))
			allocs := []*cluster.Alloc{alloc("va", "v", "n1", start, 0, 1, 2, 3)}
			e := mustEngine(t, p)
			util := constant(0)
			if tc.busy {
				util = constant(70)
			}
			// Busy until 40m ago (2h20m after start), idle since.
			feed(e, allocs, start, t0, time.Minute, func(a *cluster.Alloc, at time.Time) float64 {
				if at.Before(t0.Add(-40 * time.Minute)) {
					return 80
				}
				return util(a, at)
			})
			snap := mustSnap(t, []*cluster.Node{mkNode("n1", 4, 1)}, []*cluster.Job{v, tc.waiting}, allocs)
			plan := e.Decide(snap, t0)
			if got := len(plan.Preemptions) == 1; got != tc.preempted {
				t.Fatalf("preempted %v, want %v (%+v; waiting: %s)", got, tc.preempted, plan.Preemptions, plan.Explanations["w"].Reason)
			}
			r := runningOf(plan, "v")
			if r == nil {
				t.Fatal("v not in Plan.Running")
			}
			if !tc.preempted {
				if !tc.busy && !r.Idle {
					t.Fatalf("v not reported idle: %+v", *r)
				}
				if len(tc.victimMeta) > 0 && (!r.OptedOut || !strings.Contains(r.Note, "ignore")) {
					t.Fatalf("opt-out not shown: %+v", *r)
				}
				return
			}
			pr := plan.Preemptions[0]
			if pr.JobID != "v" || pr.Preemptor != "w" || !pr.Idle || pr.Grace != 45*time.Second || pr.CheckpointSignal != "SIGUSR1" {
				t.Fatalf("preemption %+v", pr)
			}
			// Checkpoints every hour from the start: the last before
			// going idle (t0-40m = start+2h20m) was at start+2h, so 20m
			// of 4 GPUs is lost, not the 40m since it went idle too.
			if want := 4 * (20.0 / 60); pr.LostGPUHours < want-1e-9 || pr.LostGPUHours > want+1e-9 {
				t.Fatalf("lost %.4f GPU-hours, want %.4f", pr.LostGPUHours, want)
			}
			if want := 4 * (40.0 / 60); pr.IdleGPUHours < want-1e-9 || pr.IdleGPUHours > want+1e-9 {
				t.Fatalf("idle %.4f GPU-hours, want %.4f", pr.IdleGPUHours, want)
			}
			for _, w := range []string{"idle since", "0.0% < 5% for 40m0s", "up to going idle"} {
				if !strings.Contains(pr.Reason, w) {
					t.Fatalf("reason %q lacks %q", pr.Reason, w)
				}
			}
		})
	}
}

// The requeue action: a hung gang is stopped and queued again at most
// max_requeues times, then stopped for good; a gang that is idle but not
// hung is left alone; the count survives Memory and Forget gives it back.
func TestIdleRequeue(t *testing.T) {
	p := mustPolicy(t, `
tier "scavenger" {
  idle {
    action       = "requeue"
    max_requeues = 2
    duration     = "10m"
  }
}
`)
	e := mustEngine(t, p)
	nodes := []*cluster.Node{mkNode("n1", 4, 1), mkNode("n2", 4, 1)}
	job := mkJob("s", running(), group("main", 2, 4), meta("impact_tier", "scavenger", "impact_grace", "30s",
		"impact_checkpoint_signal", "SIGUSR1", "impact_walltime", "4h"))
	// run n: a fresh gang (new allocations) that hangs at once.
	run := func(n int, now time.Time, util func(*cluster.Alloc, time.Time) float64) *Plan {
		t.Helper()
		start := now.Add(-time.Hour)
		allocs := []*cluster.Alloc{
			alloc("s0-"+string(rune('a'+n)), "s", "n1", start, 0, 1, 2, 3),
			alloc("s1-"+string(rune('a'+n)), "s", "n2", start, 0, 1, 2, 3)}
		feed(e, allocs, now.Add(-15*time.Minute), now, time.Minute, util)
		return e.Decide(mustSnap(t, nodes, []*cluster.Job{job}, allocs), now)
	}
	// One member at 8%: the job is idle (mean 4%) but not hung: nothing
	// happens.
	plan := run(0, t0, func(a *cluster.Alloc, _ time.Time) float64 {
		if strings.HasPrefix(a.ID, "s1") {
			return 8
		}
		return 0
	})
	if r := runningOf(plan, "s"); len(plan.Reclaims) != 0 || r == nil || !r.Idle || r.Hung || !strings.Contains(r.Note, "not hung") {
		t.Fatalf("partial gang: reclaims %+v, running %+v", plan.Reclaims, r)
	}
	for n, want := range []struct {
		requeue  bool
		requeues int
	}{{true, 1}, {true, 2}, {false, 2}} {
		now := t0.Add(time.Duration(n+1) * time.Hour)
		plan = run(n+1, now, constant(0))
		if len(plan.Reclaims) != 1 {
			t.Fatalf("run %d: reclaims %+v", n+1, plan.Reclaims)
		}
		r := plan.Reclaims[0]
		if r.JobID != "s" || r.Requeue != want.requeue || r.Requeues != want.requeues || len(r.Allocs) != 2 || r.GPUs != 8 ||
			r.Grace != 30*time.Second || r.CheckpointSignal != "SIGUSR1" {
			t.Fatalf("run %d: reclaim %+v, want requeue %v #%d", n+1, r, want.requeue, want.requeues)
		}
		// 15m idle x 8 GPUs held; 3h of walltime left x 8 GPUs freed.
		if r.IdleGPUHours != 2 || r.ReclaimedGPUHours != 24 {
			t.Fatalf("run %d: idle %.2f reclaimed %.2f GPU-hours", n+1, r.IdleGPUHours, r.ReclaimedGPUHours)
		}
		for _, w := range []string{"hung: every member below 5% for 15m0s", "requeue"} {
			if !strings.Contains(r.Reason, w) {
				t.Fatalf("reason %q lacks %q", r.Reason, w)
			}
		}
		if !want.requeue && !strings.Contains(r.Reason, "left stopped") {
			t.Fatalf("final reason %q", r.Reason)
		}
		// The next cycle sees the gang stopping: no second reclaim.
		again := e.Decide(mustSnap(t, nodes, []*cluster.Job{job}, []*cluster.Alloc{
			alloc("s0-"+string(rune('a'+n+1)), "s", "n1", now.Add(-time.Hour), 0, 1, 2, 3),
			alloc("s1-"+string(rune('a'+n+1)), "s", "n2", now.Add(-time.Hour), 0, 1, 2, 3)}), now.Add(time.Second))
		if len(again.Reclaims) != 0 {
			t.Fatalf("run %d: reclaimed twice: %+v", n+1, again.Reclaims)
		}
	}
	if m := e.Memory(t0); m.Requeues["s"] != 2 {
		t.Fatalf("memory requeues %v", m.Requeues)
	}
	e2 := mustEngine(t, p, WithMemory(e.Memory(t0)))
	if e2.requeues["s"] != 2 {
		t.Fatalf("restored requeues %v", e2.requeues)
	}
	// The count goes with the job: once it leaves, it is forgotten.
	e2.Decide(mustSnap(t, nodes, nil, nil), t0.Add(5*time.Hour))
	if _, ok := e2.requeues["s"]; ok || len(e2.Memory(t0).Requeues) != 0 {
		t.Fatalf("requeues of a job that left kept: %v", e2.requeues)
	}
	// Forget gives back a requeue the adapter did not carry out.
	e3 := mustEngine(t, p)
	allocs := []*cluster.Alloc{alloc("x0", "s", "n1", t0.Add(-time.Hour), 0, 1, 2, 3), alloc("x1", "s", "n2", t0.Add(-time.Hour), 0, 1, 2, 3)}
	feed(e3, allocs, t0.Add(-15*time.Minute), t0, time.Minute, constant(0))
	if plan := e3.Decide(mustSnap(t, nodes, []*cluster.Job{job}, allocs), t0); len(plan.Reclaims) != 1 || e3.requeues["s"] != 1 {
		t.Fatalf("reclaims %+v requeues %v", plan.Reclaims, e3.requeues)
	}
	e3.Forget("s")
	if e3.requeues["s"] != 0 {
		t.Fatalf("Forget kept the requeue: %v", e3.requeues)
	}
}

// An opted-out hung job on the requeue action is only reported.
func TestIdleRequeueOptOut(t *testing.T) {
	p := mustPolicy(t, "tier \"scavenger\" {\n  idle {\n    action = \"requeue\"\n  }\n}\n")
	e := mustEngine(t, p)
	job := mkJob("s", running(), meta("impact_tier", "scavenger", "impact_idle", "ignore"))
	allocs := []*cluster.Alloc{alloc("a", "s", "n1", t0.Add(-2*time.Hour), 0)}
	feed(e, allocs, t0.Add(-time.Hour), t0, time.Minute, constant(0))
	plan := e.Decide(mustSnap(t, []*cluster.Node{mkNode("n1", 1, 1)}, []*cluster.Job{job}, allocs), t0)
	if r := runningOf(plan, "s"); len(plan.Reclaims) != 0 || r == nil || !r.Hung || !r.OptedOut {
		t.Fatalf("reclaims %+v running %+v", plan.Reclaims, r)
	}
}
