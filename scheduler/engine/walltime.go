package engine

import (
	"math"
	"slices"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
)

// walltimes is the learned-walltime step (policy walltime block). Once a
// cycle it learns the run times of the allocations that ran to their end
// since the last one (begin: the store's finished log, records marked
// Completed; stopped, failed or lost allocations, and those whose stop
// this engine ordered, teach nothing). It estimates from the runs that
// ended within the policy's window of the finest class of jobs with at
// least min_samples of them: the same project, tier and GPUs per
// allocation, else the same project and tier, else the same tier. A
// waiting job without a walltime is estimated to run the policy's
// quantile of them (ofQueued: may it backfill reserved GPUs? how much
// of a learned headroom does it take?); with the
// policy's running, a running job without one to end early in what is
// left of them (ofHolder: a reservation's time). Estimates never stop a
// job. Without the policy's learn every method answers "none" at once.
//
// What it learns goes to the cycle's changes (wallRuns); Engine.apply
// adds it to the engine's wallMemory, so a cycle estimates from the runs
// that ended before it began.
type walltimes struct {
	c *cycle
	// on: learn and estimate waiting jobs' walltimes; running: estimate
	// running work's ends too (policy walltime learn, running).
	on, running bool
	// holderFacts are the running holders' spec facts (managedFacts).
	holderFacts []*specFacts
	// memo: per class of job asked, the sorted run times its estimates
	// are drawn from this cycle (nil: none).
	memo map[wallAsk][]time.Duration
}

// wallAsk is a class of job as the cycle asks it: its spec facts (tier
// and project) and the most GPUs one of its allocations holds.
type wallAsk struct {
	f    *specFacts
	gpus int32
}

// wallKey is a class of jobs whose run times are learned together: a
// project, a tier, GPUs per allocation; gpus 0 is any number of GPUs,
// project "" any project (a resolved project name is never empty).
type wallKey struct {
	project, tier string
	gpus          int32
}

// wallClassesOf are the classes a job's runs are learned in and its
// estimates drawn from, finest first: its project, tier and GPUs per
// allocation; its project and tier; its tier.
func wallClassesOf(project, tier string, gpus int32) [3]wallKey {
	return [3]wallKey{{project, tier, gpus}, {project, tier, 0}, {"", tier, 0}}
}

// wallRun is one run time learned: when it ended (Unix nanoseconds) and
// how long it ran.
type wallRun struct {
	end int64
	run time.Duration
}

// learnedRun is a run time learned this cycle, with its job's class.
type learnedRun struct {
	project, tier string
	gpus          int32
	wallRun
}

// wallMemory is the engine's learned run times per class, oldest first.
// It is bounded: at most maxWallRuns recent runs per class are read (the
// slice is cut back when twice that), at most maxWallClasses classes are
// kept, and runs that ended before the window are dropped once per
// window. It lives in the engine only, not in Memory: a new leader starts
// learning again.
type wallMemory struct {
	classes map[wallKey][]wallRun
	swept   time.Time
}

const (
	maxWallRuns    = 256
	maxWallClasses = 2048
)

func newWalltimes(c *cycle) walltimes {
	return walltimes{c: c, on: c.pol.Walltime.Learn, running: c.pol.Walltime.Learn && c.pol.Walltime.Running}
}

// begin is told the running holders' spec facts (managedFacts) and learns
// the run times of the allocations that ran to their end since the last
// cycle. Consecutive records of one job (a gang's members) count once. A
// run time is the whole job's, as impact_walltime is: the run's own and
// the work earlier runs had saved (Finished.Progress), so a job resumed
// from a checkpoint does not teach the short run that finished it.
func (w *walltimes) begin(facts []*specFacts) {
	if !w.on {
		return
	}
	w.holderFacts = facts
	recs, _ := w.c.snap.FinishedSince(w.c.e.finishedSeq)
	last := ""
	for i := range recs {
		r := &recs[i]
		if !r.Completed || r.Start.IsZero() || !r.End.After(r.Start) || r.JobID == last {
			continue
		}
		last = r.JobID
		if _, stopped := w.c.e.inflight[r.AllocID]; stopped {
			continue // this engine stopped it: a preemption or a reclaim, not a run time
		}
		f := w.c.specFacts(&jobspec.Spec{Tier: r.Tier, Project: r.Project})
		if f.bad != "" {
			continue
		}
		w.c.mem.wallRuns = append(w.c.mem.wallRuns, learnedRun{project: f.project, tier: f.tier, gpus: clamp32(r.GPUs),
			wallRun: wallRun{end: r.End.UnixNano(), run: r.Progress + r.End.Sub(r.Start)}})
	}
}

// ofHolder is the walltime of running holder h: its impact_walltime less
// the work its earlier runs saved (jobspec.Spec.Left; estimated false),
// else, when the policy times running work by estimates (walltime
// running), its estimated end (true): the
// (1 - quantile) quantile of the runs of its class that ran longer than
// it has so far, an early end, since a reservation timed too late lets
// backfilled work delay it; 0 when it has neither (no such run: it has
// outlived its class). Learned run times are whole jobs': a holder that
// earlier runs saved work for has run that much longer, and needs that
// much less of the estimate.
func (w *walltimes) ofHolder(h int, hd *placement.Holder) (time.Duration, bool) {
	if hd.Job == nil {
		return 0, false
	}
	if wall := hd.Job.Spec.Left(); wall > 0 || !w.running {
		return wall, false
	}
	if h >= len(w.holderFacts) {
		return 0, false
	}
	gpus := 0
	for _, a := range hd.Allocs {
		gpus = max(gpus, len(a.GPUs))
	}
	runs := w.runs(w.holderFacts[h], clamp32(gpus))
	saved := hd.Job.Spec.Progress
	age := saved + w.c.now.Sub(earliestStart(hd.Allocs))
	longer := runs[sortedAfter(runs, age):]
	if len(longer) == 0 {
		return 0, false
	}
	return longer[rank(1-w.c.pol.Walltime.Quantile, len(longer))] - saved, true
}

// sortedAfter is the index of the first of sorted runs longer than d.
func sortedAfter(runs []time.Duration, d time.Duration) int {
	i, found := slices.BinarySearch(runs, d)
	for found && i < len(runs) && runs[i] == d {
		i++
	}
	return i
}

// rank is the nearest-rank index of quantile q among n sorted values.
func rank(q float64, n int) int {
	return min(max(int(math.Ceil(q*float64(n)))-1, 0), n-1)
}

// ofQueued is the walltime of a waiting job: its impact_walltime less
// the work its earlier runs saved (jobspec.Spec.Left; estimated false),
// else the policy's quantile of its class's runs (true), of those longer
// than the work it saved, less that work (learned run times are whole
// jobs'); 0 when it has neither.
func (w *walltimes) ofQueued(q *queued) (time.Duration, bool) {
	if q.walltime > 0 || !w.on {
		return q.walltime, false
	}
	saved := q.job.Spec.Progress
	runs := w.runs(q.f, q.maxAlloc)
	longer := runs[sortedAfter(runs, saved):]
	if len(longer) == 0 {
		return 0, false
	}
	return longer[rank(w.c.pol.Walltime.Quantile, len(longer))] - saved, true
}

// notes: estimates are on, so reasons that speak of walltimes say that
// one may be estimated.
func (w *walltimes) notes() bool { return w.on }

// runs are the run times, sorted, that estimates of a class of job are
// drawn from (none: no estimate yet), memoized for the cycle.
func (w *walltimes) runs(f *specFacts, gpus int32) []time.Duration {
	if f == nil || f.bad != "" || w.c.e.walls == nil {
		return nil
	}
	k := wallAsk{f: f, gpus: gpus}
	if r, ok := w.memo[k]; ok {
		return r
	}
	r := w.window(f.project, f.tier, gpus)
	if w.memo == nil {
		w.memo = map[wallAsk][]time.Duration{}
	}
	w.memo[k] = r
	return r
}

// window is the sorted run times within the policy's window of the
// finest class with at least min_samples of them; nil when none has.
func (w *walltimes) window(project, tier string, gpus int32) []time.Duration {
	pol := w.c.pol.Walltime
	from := w.c.now.Add(-pol.Window).UnixNano()
	for _, k := range wallClassesOf(project, tier, gpus) {
		runs := w.c.e.walls.classes[k]
		runs = runs[max(0, len(runs)-maxWallRuns):]
		if len(runs) < pol.MinSamples {
			continue
		}
		var buf []time.Duration
		for _, r := range runs {
			if r.end >= from {
				buf = append(buf, r.run)
			}
		}
		if len(buf) < pol.MinSamples {
			continue
		}
		slices.Sort(buf)
		return buf
	}
	return nil
}

// learnWalltimes adds the run times a cycle learned to the engine's
// memory (Engine.apply), and once a window drops the runs that ended
// before it.
func (e *Engine) learnWalltimes(runs []learnedRun, now time.Time) {
	if len(runs) == 0 && e.walls == nil {
		return
	}
	if e.walls == nil {
		e.walls = &wallMemory{classes: map[wallKey][]wallRun{}, swept: now}
	}
	m := e.walls
	for _, r := range runs {
		for _, k := range wallClassesOf(r.project, r.tier, r.gpus) {
			cls, ok := m.classes[k]
			if !ok && len(m.classes) >= maxWallClasses {
				continue
			}
			if len(cls) >= 2*maxWallRuns {
				cls = append(cls[:0], cls[len(cls)-maxWallRuns:]...)
			}
			m.classes[k] = append(cls, r.wallRun)
		}
	}
	window := e.pol.Walltime.Window
	if now.Sub(m.swept) < window {
		return
	}
	m.swept = now
	from := now.Add(-window).UnixNano()
	for k, cls := range m.classes {
		keep := slices.DeleteFunc(cls, func(r wallRun) bool { return r.end < from })
		if len(keep) == 0 {
			delete(m.classes, k)
		} else {
			m.classes[k] = keep
		}
	}
}
