package engine

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// A headroom with an idle budget keeps its GPUs only as long as the time
// they idle while work it keeps out waits is within its allowance: it
// earns while nothing waits, spends while its kept GPUs idle, yields
// (keeps nothing, the kept-out job may start) once overspent, and is kept
// again when the allowance has caught up. Every turn falls at the instant
// the plan before it announced (TurnsAt).
func TestHeadroomIdleBudget(t *testing.T) {
	// 16 GPUs, 8 kept; a budget of a quarter of the pool: 4 GPU-seconds
	// a second.
	pol := mustPolicy(t, `
headroom "gpu" {
  tiers       = ["critical"]
  gpus        = 8
  idle_budget = 0.25
}
`)
	store := cluster.NewStore()
	_ = store.UpsertNode(mkNode("n1", 8, 2))
	_ = store.UpsertNode(mkNode("n2", 8, 2))
	_ = store.UpsertJob(mkJob("h1", group("main", 1, 8), meta("impact_tier", "high"), running()))
	_ = store.UpsertAlloc(&cluster.Alloc{ID: "h1-a", JobID: "h1", Group: "main", NodeID: "n1", GPUs: []string{"n1-g0", "n1-g1", "n1-g2", "n1-g3", "n1-g4", "n1-g5", "n1-g6", "n1-g7"}, Start: t0.Add(-time.Hour)})
	e := mustEngine(t, pol)

	type step struct {
		at        time.Duration // after t0
		h2Waits   bool          // h2 (high, 8 GPUs) is queued
		kept      int           // the headroom's GPUs
		admitted  string
		idle      int
		creditGPU float64 // GPU-seconds after the cycle
		turnsAt   time.Duration
	}
	steps := []step{
		// Nothing waits: the account opens at zero and earns.
		{at: 0, kept: 8, creditGPU: 0},
		{at: 100 * time.Second, kept: 8, creditGPU: 400},
		// h2 is kept out: 8 GPUs idle, 4 a second more than earned; the
		// 400 earned last 100 seconds.
		{at: 100 * time.Second, h2Waits: true, kept: 8, idle: 8, creditGPU: 400, turnsAt: 201 * time.Second},
		{at: 150 * time.Second, h2Waits: true, kept: 8, idle: 8, creditGPU: 200, turnsAt: 201 * time.Second},
		// Overspent: the headroom yields, h2 may start.
		{at: 201 * time.Second, h2Waits: true, kept: 0, admitted: "h2", creditGPU: -4, turnsAt: 202 * time.Second},
		// Paid back a second later: kept again (h2's admission holds
		// the GPUs it was given; nothing else waits).
		{at: 202 * time.Second, h2Waits: true, kept: 8, creditGPU: 0},
	}
	for i, s := range steps {
		if s.h2Waits {
			_ = store.UpsertJob(mkJob("h2", group("main", 1, 8), meta("impact_tier", "high"), submitted(t0)))
		}
		now := t0.Add(s.at)
		p := e.Decide(store.Snapshot(), now)
		if err := ValidatePlan(pol, store.Snapshot(), p); err != nil {
			t.Fatal(err)
		}
		if len(p.Headroom) != 1 || p.Headroom[0].IdleBudget == nil {
			t.Fatalf("step %d: headroom %+v, want one with an idle budget", i, p.Headroom)
		}
		h, b := p.Headroom[0], p.Headroom[0].IdleBudget
		var turns time.Time
		if s.turnsAt > 0 {
			turns = t0.Add(s.turnsAt)
		}
		if got := join(admittedIDs(p)); got != s.admitted || h.GPUs != s.kept || h.IdleKeptGPUs != s.idle || b.Yielded != (s.kept == 0) ||
			math.Abs(b.CreditGPUHours*3600-s.creditGPU) > 1e-6 || !b.TurnsAt.Equal(turns) || b.Share != 0.25 {
			t.Fatalf("step %d (t0+%s): admitted %q, headroom %d GPUs, %d idle, budget %+v; want %q, %d, %d, credit %v GPU-s, turns at t0+%s",
				i, s.at, got, h.GPUs, h.IdleKeptGPUs, *b, s.admitted, s.kept, s.idle, s.creditGPU, s.turnsAt)
		}
		if b.Yielded && !strings.Contains(h.Basis, "yielded: it kept GPUs idle 0.0 GPU-hours beyond its idle budget") {
			t.Fatalf("step %d: basis %q does not say the headroom yielded", i, h.Basis)
		}
		if s.idle > 0 && !strings.Contains(p.Explanations["h2"].Reason, "headroom: pool \"gpu\" keeps 8 GPUs (8 GPUs, idle at most 25% of the pool on average)") {
			t.Fatalf("step %d: h2 %q", i, p.Explanations["h2"].Reason)
		}
	}
}

// The turn of an idle account: a kept headroom that idles faster than it
// earns yields at the first whole second its balance is below zero; a
// yielded one is kept again at the first whole second it is paid back;
// one that idles no faster than it earns never turns.
func TestHeadroomIdleBudgetTurns(t *testing.T) {
	cases := []struct {
		credit, rate float64
		idle         int
		yielded      bool
		want         time.Duration // 0: never
	}{
		{credit: 400, rate: 4, idle: 8, want: 101 * time.Second},
		{credit: 401, rate: 4, idle: 8, want: 101 * time.Second},
		{credit: 0, rate: 4, idle: 8, want: time.Second},
		{credit: 100, rate: 4, idle: 4},
		{credit: 100, rate: 4, idle: 0},
		{credit: -40, rate: 4, yielded: true, want: 10 * time.Second},
		{credit: -41, rate: 4, yielded: true, want: 11 * time.Second},
		{credit: -1e-3, rate: 4, yielded: true, want: time.Second},
	}
	for _, c := range cases {
		got := turnsAt(t0, c.credit, c.rate, c.idle, c.yielded)
		var want time.Time
		if c.want > 0 {
			want = t0.Add(c.want)
		}
		if !got.Equal(want) {
			t.Errorf("credit %v rate %v idle %d yielded %v: turns at %v, want %v", c.credit, c.rate, c.idle, c.yielded, got, want)
		}
	}
}
