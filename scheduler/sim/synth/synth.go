// Package synth generates seeded synthetic job traces for the simulator's
// robustness suite (make robustness): workloads the bundled Philly trace
// does not stress, each built to break one assumption a policy tuned on
// Philly could lean on. Every generator is deterministic in its seed and
// labels every job (tier, preemptibility, walltime, project) itself.
package synth

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// Spec describes a generated workload.
type Spec struct {
	Name string
	// Desc says what the workload stresses, for the report.
	Desc string
	// Nodes x GPUsPerNode is the cluster it is sized for.
	Nodes, GPUsPerNode int
	// Span is the submission window in seconds (from 0).
	Span int64
	Jobs []trace.Job
}

// OfferedLoad is the GPU-time asked by jobs over the GPU-time of the
// cluster during the submission window.
func OfferedLoad(jobs []trace.Job, gpus int, span int64) float64 {
	var asked float64
	for _, j := range jobs {
		asked += float64(j.GPUs) * float64(j.Duration)
	}
	return asked / (float64(gpus) * float64(span))
}

type gen struct {
	r    *rand.Rand
	jobs []trace.Job
	name string
}

func newGen(name string, seed int64) *gen {
	return &gen{r: rand.New(rand.NewPCG(uint64(seed), 0x5eed_0000+uint64(len(name)))), name: name}
}

// lognormal draws a duration with the given median, spread sigma, within
// [lo, hi].
func (g *gen) lognormal(median, sigma float64, lo, hi int64) int64 {
	v := int64(median * math.Exp(sigma*g.r.NormFloat64()))
	return min(max(v, lo), hi)
}

func (g *gen) pick(weights []float64) int {
	u := g.r.Float64()
	for i, w := range weights {
		if u < w {
			return i
		}
		u -= w
	}
	return len(weights) - 1
}

// tier draws a tier by shares (order of trace.Tiers).
func (g *gen) tier(shares []float64) string { return trace.Tiers[g.pick(shares)] }

// add appends a job; wall < 0 means the user gave no walltime.
func (g *gen) add(submit, dur int64, gpus int, tier string, preemptible bool, wall int64) {
	if wall < 0 {
		wall = trace.UnknownWalltime
	}
	p := preemptible
	g.jobs = append(g.jobs, trace.Job{
		ID: fmt.Sprintf("%s-%d", g.name, len(g.jobs)), Submit: submit, Duration: max(dur, 1), GPUs: gpus,
		Project: fmt.Sprintf("p%d", g.r.IntN(6)), Tier: tier, Preemptible: &p, Walltime: max(wall, 60),
	})
}

// estimate is a walltime estimate: duration x U[1, 3), rounded up to a
// minute (the simulator's default rule).
func (g *gen) estimate(dur int64) int64 {
	return int64(math.Ceil(float64(dur)*(1+2*g.r.Float64())/60)) * 60
}

func (g *gen) done(s Spec) Spec {
	sort.SliceStable(g.jobs, func(a, b int) bool { return g.jobs[a].Submit < g.jobs[b].Submit })
	for i := range g.jobs {
		g.jobs[i].Line = i + 2
	}
	s.Jobs = g.jobs
	return s
}

var defaultPreemptible = map[string]bool{"critical": false, "high": false, "normal": true, "scavenger": true}

// Saturated: a small cluster saturated for days by long-running
// non-preemptible work (most walltimes unknown), thousands of jobs
// queued, and a rare top tier. Preemption cannot help here (almost
// nothing running is preemptible) and backfill reservations protect the
// queue head only after it arrives: only capacity kept free of
// non-preemptible work gets urgent jobs started at once. Offered load
// about 1.6.
func Saturated(seed int64, scale float64) Spec {
	g := newGen("saturated", seed)
	s := Spec{Name: "saturated", Desc: "8x8 GPUs saturated by long non-preemptible jobs (60% unknown walltimes), rare critical", Nodes: 8, GPUsPerNode: 8, Span: int64(4 * 86400 * scale)}
	t := int64(0)
	for t < s.Span {
		// Bursty: the rate doubles for a few hours twice a day.
		rate := 1.0 / 540
		if (t/3600)%12 < 3 {
			rate *= 2.5
		}
		t += int64(g.r.ExpFloat64()/rate) + 1
		if t >= s.Span {
			break
		}
		size := []int{1, 2, 4, 8}[g.pick([]float64{0.45, 0.2, 0.25, 0.1})]
		wall := int64(-1)
		switch tier := g.tier([]float64{0.015, 0.15, 0.7, 0.135}); tier {
		case "critical":
			d := g.lognormal(1800, 0.8, 300, 4*3600)
			g.add(t, d, size, tier, false, g.estimate(d))
		case "scavenger":
			d := g.lognormal(2*3600, 1, 600, 24*3600)
			if g.r.Float64() < 0.4 {
				wall = g.estimate(d)
			}
			g.add(t, d, size, tier, true, wall)
		default:
			d := g.lognormal(2.5*3600, 1, 900, 48*3600)
			if g.r.Float64() < 0.4 {
				wall = g.estimate(d)
			}
			g.add(t, d, size, tier, false, wall)
		}
	}
	return g.done(s)
}

// Bursty: bursts of hundreds of short 1-GPU jobs (a sweep, an eval
// batch) over a quieter background, tiers by the default shares. The
// decisions come in floods; cadence and per-cycle limits matter more than
// placement. Offered load about 0.8 on average, far above 1 in a burst.
func Bursty(seed int64, scale float64) Spec {
	g := newGen("bursty", seed)
	s := Spec{Name: "bursty", Desc: "16x8 GPUs, bursts of hundreds of short 1-GPU jobs over a background", Nodes: 16, GPUsPerNode: 8, Span: int64(3 * 86400 * scale)}
	shares := []float64{0.05, 0.15, 0.5, 0.3}
	job := func(t int64, short bool) {
		size := 1
		if g.r.Float64() < 0.1 {
			size = []int{2, 4}[g.r.IntN(2)]
		}
		d := g.lognormal(600, 0.8, 30, 4*3600)
		if !short {
			d = g.lognormal(2*3600, 1, 300, 24*3600)
		}
		tier := g.tier(shares)
		g.add(t, d, size, tier, defaultPreemptible[tier], g.estimate(d))
	}
	for t := int64(0); t < s.Span; {
		t += int64(g.r.ExpFloat64()*300) + 1
		if t < s.Span {
			job(t, false)
		}
	}
	for b := int64(g.r.IntN(7200)); b < s.Span; b += 3*3600 + int64(g.r.IntN(7200)) {
		n := 300 + g.r.IntN(700)
		for i := 0; i < n; i++ {
			job(b+int64(g.r.IntN(600)), true)
		}
	}
	return g.done(s)
}

// Walltimes: a Philly-like size mix whose walltimes are unknown (30%,
// the week-long default), underestimated (30%, 0.2x to 1x the run) or
// far overestimated (40%, 1x to 10x). Backfill and reservation decisions
// built on walltimes go wrong; a policy must not lean on them. Offered
// load about 1.0.
func Walltimes(seed int64, scale float64) Spec {
	g := newGen("walltimes", seed)
	s := Spec{Name: "walltimes", Desc: "16x8 GPUs, walltimes unknown (30%), under- (30%) or over-estimated up to 10x (40%)", Nodes: 16, GPUsPerNode: 8, Span: int64(3 * 86400 * scale)}
	shares := []float64{0.05, 0.15, 0.5, 0.3}
	for t := int64(0); t < s.Span; {
		t += int64(g.r.ExpFloat64()*200) + 1
		if t >= s.Span {
			break
		}
		size := []int{1, 2, 4, 8, 16}[g.pick([]float64{0.6, 0.1, 0.15, 0.1, 0.05})]
		d := g.lognormal(3600, 1.4, 60, 3*86400)
		var wall int64
		switch u := g.r.Float64(); {
		case u < 0.3:
			wall = -1
		case u < 0.6:
			wall = int64(float64(d) * (0.2 + 0.8*g.r.Float64()))
		default:
			wall = int64(float64(d) * (1 + 9*g.r.Float64()))
		}
		tier := g.tier(shares)
		g.add(t, d, size, tier, defaultPreemptible[tier], wall)
	}
	return g.done(s)
}

// Gangs: multi-node gangs of 16 to 64 GPUs among many small jobs. A
// policy that places gangs member by member holds GPUs idle; one that
// waits for a whole gang must not starve the small jobs or the gang.
// Offered load about 1.0.
func Gangs(seed int64, scale float64) Spec {
	g := newGen("gangs", seed)
	s := Spec{Name: "gangs", Desc: "32x8 GPUs, gangs of 16-64 GPUs (8% of jobs) among 1-4 GPU jobs", Nodes: 32, GPUsPerNode: 8, Span: int64(3 * 86400 * scale)}
	shares := []float64{0.05, 0.15, 0.5, 0.3}
	for t := int64(0); t < s.Span; {
		t += int64(g.r.ExpFloat64()*150) + 1
		if t >= s.Span {
			break
		}
		tier := g.tier(shares)
		if g.r.Float64() < 0.08 {
			size := []int{16, 32, 64}[g.pick([]float64{0.5, 0.35, 0.15})]
			d := g.lognormal(3*3600, 0.8, 1800, 24*3600)
			g.add(t, d, size, tier, defaultPreemptible[tier], g.estimate(d))
			continue
		}
		size := []int{1, 2, 4}[g.pick([]float64{0.6, 0.2, 0.2})]
		d := g.lognormal(1800, 1, 60, 12*3600)
		g.add(t, d, size, tier, defaultPreemptible[tier], g.estimate(d))
	}
	return g.done(s)
}

// All returns every generator's workload for seed at scale (1: the
// suite's size; smaller for tests).
func All(seed int64, scale float64) []Spec {
	return []Spec{Saturated(seed, scale), Bursty(seed, scale), Walltimes(seed, scale), Gangs(seed, scale)}
}
