package sim

import (
	"math"
	"sort"
)

// accounting integrates the cluster's state over simulated time. State is
// piecewise constant between events, so the integrals are exact.
type accounting struct {
	r        *runner
	capacity int
	lastT    int64
	first    int64
	end      int64 // last finish

	alloc   int // GPUs held by any job (partial, running, stopping)
	partial int // GPUs held by gangs not yet fully placed
	demandG int // GPUs asked for by submitted, unfinished jobs

	projAlloc  map[string]int
	projDemand map[string]int

	// integrals in GPU-seconds: over the window and over the whole run
	winAlloc, winBound, winPartial float64
	allAlloc, allBound, allPartial float64

	delivered, lost float64 // GPU-seconds
	preemptions     int
	// The idleness model: GPU-seconds held by hung runs, hung runs ended,
	// reclaims by the scheduler, hung runs killed at their walltime.
	idleHeld           float64
	hungRuns, reclaims int
	hangKills          int
	done               int

	nextSample int64
	series     []Sample

	// fair share: per project, sums over window samples
	fsSamples int
	fsAlloc   map[string]float64
	fsFair    map[string]float64
	fsAbsDev  map[string]float64
}

// Sample is the cluster at one time step, for plots.
type Sample struct {
	T int64 `json:"t"`
	// Allocated GPUs, GPUs held idle by partial gangs, the occupancy bound
	// min(capacity, demand), and waiting jobs.
	Allocated int `json:"allocated"`
	Partial   int `json:"partial_idle"`
	Bound     int `json:"bound"`
	Queue     int `json:"queue"`
}

func (a *accounting) init(r *runner, first int64) {
	a.r = r
	a.capacity = r.opts.Cluster.GPUs()
	a.first, a.lastT = first, first
	a.nextSample = first
	a.projAlloc = map[string]int{}
	a.projDemand = map[string]int{}
	a.fsAlloc = map[string]float64{}
	a.fsFair = map[string]float64{}
	a.fsAbsDev = map[string]float64{}
}

func overlap(a0, a1, b0, b1 int64) float64 {
	lo, hi := max(a0, b0), min(a1, b1)
	if hi <= lo {
		return 0
	}
	return float64(hi - lo)
}

// advance integrates the current state from the last event up to t.
func (a *accounting) advance(t int64) {
	if t < a.lastT {
		return
	}
	for a.nextSample < t {
		a.sample(a.nextSample)
		a.nextSample += a.r.opts.Model.Sample
	}
	dt := float64(t - a.lastT)
	w := overlap(a.lastT, t, a.r.opts.WindowStart, a.r.opts.WindowEnd)
	bound := float64(min(a.capacity, a.demandG))
	a.allAlloc += dt * float64(a.alloc)
	a.allBound += dt * bound
	a.allPartial += dt * float64(a.partial)
	a.winAlloc += w * float64(a.alloc)
	a.winBound += w * bound
	a.winPartial += w * float64(a.partial)
	a.lastT = t
}

func (a *accounting) finishSeries(t int64) {
	if len(a.series) == 0 || a.series[len(a.series)-1].T < t {
		a.sample(t)
	}
}

func (a *accounting) sample(t int64) {
	a.series = append(a.series, Sample{T: t, Allocated: a.alloc, Partial: a.partial,
		Bound: min(a.capacity, a.demandG), Queue: len(a.r.st.Queue())})
	if t < a.r.opts.WindowStart || t >= a.r.opts.WindowEnd {
		return
	}
	fair := waterFill(a.capacity, a.projDemand)
	a.fsSamples++
	for p := range a.projDemand {
		al := float64(a.projAlloc[p])
		a.fsAlloc[p] += al
		a.fsFair[p] += fair[p]
		a.fsAbsDev[p] += math.Abs(al - fair[p])
	}
	for p, al := range a.projAlloc {
		if _, ok := a.projDemand[p]; !ok {
			a.fsAlloc[p] += float64(al)
			a.fsAbsDev[p] += float64(al)
		}
	}
}

// waterFill is the max-min fair split of capacity between projects of equal
// share, each capped at its demand.
func waterFill(capacity int, demand map[string]int) map[string]float64 {
	type pd struct {
		p string
		d int
	}
	ds := make([]pd, 0, len(demand))
	for p, d := range demand {
		if d > 0 {
			ds = append(ds, pd{p, d})
		}
	}
	sort.Slice(ds, func(i, j int) bool {
		if ds[i].d != ds[j].d {
			return ds[i].d < ds[j].d
		}
		return ds[i].p < ds[j].p
	})
	out := make(map[string]float64, len(ds))
	left := float64(capacity)
	for i, x := range ds {
		share := left / float64(len(ds)-i)
		give := math.Min(share, float64(x.d))
		out[x.p] = give
		left -= give
	}
	return out
}

func (a *accounting) hold(j *Job, g int) {
	a.alloc += g
	a.projAlloc[j.Project] += g
	if a.projAlloc[j.Project] == 0 {
		delete(a.projAlloc, j.Project)
	}
}

func (a *accounting) addPartial(g int) { a.partial += g }

func (a *accounting) demand(j *Job, sign int) {
	g := sign * j.TotalGPUs()
	a.demandG += g
	a.projDemand[j.Project] += g
	if a.projDemand[j.Project] == 0 {
		delete(a.projDemand, j.Project)
	}
}

func (a *accounting) work(_ *Job, useful, lost int64) {
	a.delivered += float64(useful)
	a.lost += float64(lost)
}
