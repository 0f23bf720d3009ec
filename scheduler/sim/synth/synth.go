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
	"time"

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

// RandomParams are the knobs one scenario of the random family was drawn
// with (reported beside its results).
type RandomParams struct {
	Nodes int `json:"nodes"`
	// Load is the offered load aimed at (the drawn jobs' is reported by
	// the suite).
	Load float64 `json:"target_load"`
	// PreemptibleShare is the probability that a job of a tier other than
	// the top one is preemptible.
	PreemptibleShare float64 `json:"preemptible_share"`
	// TierShares are the tiers' shares of the jobs (order of trace.Tiers).
	TierShares []float64 `json:"tier_shares"`
	// MaxGPUs is the widest job (a power of two; wider than a node: a gang
	// of whole nodes).
	MaxGPUs int `json:"max_gpus"`
	// Walltimes: "accurate" (1x-3x the run), "unknown" (UnknownShare of
	// them given none, the rest accurate) or "wild" (0.2x-10x, some
	// unknown).
	Walltimes    string  `json:"walltimes"`
	UnknownShare float64 `json:"unknown_walltime_share"`
	// Bursty arrivals come in floods of short jobs over a background;
	// steady ones are Poisson.
	Bursty bool `json:"bursty"`
	// MedianS is the median run time of the background jobs.
	MedianS int64 `json:"median_run_s"`
}

// Describe is the parameters in a line.
func (p RandomParams) Describe() string {
	arr := "steady"
	if p.Bursty {
		arr = "bursty"
	}
	return fmt.Sprintf("%dx8 GPUs, load %.2f, %.0f%% preemptible, tiers %.1f/%.0f/%.0f/%.0f%%, jobs up to %d GPUs, walltimes %s (%.0f%% unknown), %s, median run %s",
		p.Nodes, p.Load, 100*p.PreemptibleShare, 100*p.TierShares[0], 100*p.TierShares[1], 100*p.TierShares[2], 100*p.TierShares[3],
		p.MaxGPUs, p.Walltimes, 100*p.UnknownShare, arr, time.Duration(p.MedianS)*time.Second)
}

// RandomJobs bounds the jobs of a random scenario (keeps the suite quick).
const RandomJobs = 2500

// Random draws the i-th scenario of the seeded random family: a pool of 2
// to 128 nodes (8 GPUs each, log-uniform), an offered load of 0.6 to 2.0,
// 10% to 90% of the non-top-tier jobs preemptible, a random tier mix (the
// top tier 0.5% to 5% of the jobs), jobs up to 1 GPU to 8 nodes wide,
// accurate, missing or wild walltimes, steady or bursty arrivals. The
// window is as long as the job budget allows, 6 hours to 4 days.
func Random(seed int64, i int) (Spec, RandomParams) {
	name := fmt.Sprintf("rand-%02d", i)
	g := &gen{r: rand.New(rand.NewPCG(uint64(seed), 0xa11_0000+uint64(i))), name: name}
	p := drawRandomParams(g.r)
	rj := randomJobs{g: g, p: p}
	meanGPUs := rj.sizeMix()
	meanDur := float64(p.MedianS) * math.Exp(randomSigma*randomSigma/2)
	gpus := 8 * p.Nodes
	// Span: the job budget at this load, 12h to 4 days.
	span := float64(RandomJobs) * meanGPUs * meanDur / (p.Load * float64(gpus))
	s := Spec{Name: name, Nodes: p.Nodes, GPUsPerNode: 8, Span: int64(min(max(span, 6*3600), 4*86400))}
	rate := p.Load * float64(gpus) / (meanGPUs * meanDur) // jobs a second
	if !p.Bursty {
		rj.steady(s.Span, rate)
		return g.done(s), p
	}
	// Bursty: half the load from a background, half from floods.
	rj.steady(s.Span, rate/2)
	rj.floods(s.Span, rate)
	return g.done(s), p
}

// randomSigma is the spread of a random scenario's log-normal run times.
const randomSigma = 1.0

// drawRandomParams draws a random scenario's parameters (the order of the
// draws is the family's: changing it changes every scenario).
func drawRandomParams(r *rand.Rand) RandomParams {
	var p RandomParams
	p.Nodes = int(math.Round(math.Exp(math.Log(2) + r.Float64()*(math.Log(128)-math.Log(2)))))
	p.Load = 0.6 + 1.4*r.Float64()
	p.PreemptibleShare = 0.1 + 0.8*r.Float64()
	top := 0.005 + 0.045*r.Float64()
	w := []float64{r.ExpFloat64(), r.ExpFloat64(), r.ExpFloat64()}
	sum := w[0] + w[1] + w[2]
	p.TierShares = []float64{top, (1 - top) * w[0] / sum, (1 - top) * w[1] / sum, (1 - top) * w[2] / sum}
	// Widest job: 1, 2, 4, 8 GPUs or a gang of 2 to 8 nodes, at most half
	// the pool (a gang as wide as the pool would wait for it to empty).
	p.MaxGPUs = 1 << r.IntN(7)
	for p.MaxGPUs > 1 && p.MaxGPUs > 8*p.Nodes/2 && p.MaxGPUs > 8 {
		p.MaxGPUs /= 2
	}
	p.MaxGPUs = min(p.MaxGPUs, 8*p.Nodes)
	switch r.IntN(3) {
	case 0:
		p.Walltimes = "accurate"
	case 1:
		p.Walltimes, p.UnknownShare = "unknown", 0.3+0.5*r.Float64()
	default:
		p.Walltimes, p.UnknownShare = "wild", 0.3*r.Float64()
	}
	p.Bursty = r.IntN(2) == 0
	p.MedianS = []int64{900, 1800, 3600, 2 * 3600, 4 * 3600}[r.IntN(5)]
	return p
}

// randomJobs draws a random scenario's jobs.
type randomJobs struct {
	g *gen
	p RandomParams
	// sizes are the job widths, powers of two up to MaxGPUs, with their
	// weights (sizeMix).
	sizes   []int
	weights []float64
}

// sizeMix makes the widths, smaller ones likelier, and returns their mean.
func (rj *randomJobs) sizeMix() float64 {
	for s, wt := 1, 1.0; s <= rj.p.MaxGPUs; s, wt = s*2, wt*0.55 {
		rj.sizes = append(rj.sizes, s)
		rj.weights = append(rj.weights, wt)
	}
	tot := 0.0
	for _, v := range rj.weights {
		tot += v
	}
	mean := 0.0
	for k := range rj.weights {
		rj.weights[k] /= tot
		mean += rj.weights[k] * float64(rj.sizes[k])
	}
	return mean
}

// steady submits jobs in a Poisson stream of rate jobs a second until span.
func (rj *randomJobs) steady(span int64, rate float64) {
	for t := int64(0); ; {
		t += int64(rj.g.r.ExpFloat64()/rate) + 1
		if t >= span {
			return
		}
		rj.job(t, float64(rj.p.MedianS))
	}
}

// floods submits, every 2 to 8 hours, a flood of jobs 10x shorter
// arriving within 10 minutes and carrying half the load (rate) of the gap.
func (rj *randomJobs) floods(span int64, rate float64) {
	r := rj.g.r
	for b := int64(r.IntN(4 * 3600)); b < span; {
		gap := int64(2*3600 + r.IntN(6*3600))
		n := int(rate / 2 * float64(gap) * 10)
		median := float64(rj.p.MedianS) / 10
		if lim := RandomJobs / max(1, int(span/(5*3600))); n > lim {
			// Fewer, longer flood jobs carry the same load.
			median *= float64(n) / float64(lim)
			n = lim
		}
		for k := 0; k < n; k++ {
			rj.job(b+int64(r.IntN(600)), median)
		}
		b += gap
	}
}

// job adds one job submitted at t with a run time around median.
func (rj *randomJobs) job(t int64, median float64) {
	g, p, r := rj.g, rj.p, rj.g.r
	tier := g.tier(p.TierShares)
	size := rj.sizes[g.pick(rj.weights)]
	d := g.lognormal(median, randomSigma, 60, 3*86400)
	pre := false
	if tier == trace.Tiers[0] {
		// Urgent work: shorter, at most a node.
		size = min(size, 8)
		d = g.lognormal(float64(min(p.MedianS, 1800)), 0.8, 60, 6*3600)
	} else {
		pre = r.Float64() < p.PreemptibleShare
	}
	g.add(t, d, size, tier, pre, rj.walltime(d))
}

// walltime is the walltime a job of run time d declares: accurate (the
// estimate), unknown for a share of jobs, or wild (0.2x to 10x).
func (rj *randomJobs) walltime(d int64) int64 {
	g, p, r := rj.g, rj.p, rj.g.r
	switch p.Walltimes {
	case "accurate":
		return g.estimate(d)
	case "unknown":
		if r.Float64() < p.UnknownShare {
			return -1
		}
		return g.estimate(d)
	default:
		if r.Float64() < p.UnknownShare {
			return -1
		}
		return int64(float64(d) * (0.2 + 9.8*r.Float64()*r.Float64()))
	}
}
