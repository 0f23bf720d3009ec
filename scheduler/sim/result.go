package sim

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// Percentiles are nearest-rank percentiles.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
}

// Latency is decision latency in milliseconds.
type Latency struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// FairShare is one project's allocation against its max-min fair share of
// the cluster (equal shares, capped by its demand), averaged over the
// window's samples, in GPUs.
type FairShare struct {
	MeanAllocatedGPUs float64 `json:"mean_allocated_gpus"`
	MeanFairGPUs      float64 `json:"mean_fair_gpus"`
	// MeanAbsDeviationGPUs is the mean of |allocated - fair| over samples.
	MeanAbsDeviationGPUs float64 `json:"mean_abs_deviation_gpus"`
}

// Result holds a run's metrics (see the report for each definition).
type Result struct {
	Policy string `json:"policy"`
	// Cadence says when the policy decided (Model.Cadence).
	Cadence string `json:"cadence"`
	// Occupancy is allocated / healthy GPU-hours over the submission window.
	Occupancy float64 `json:"occupancy"`
	// OccupancyVsBound is allocated GPU-hours / the integral of
	// min(capacity, outstanding demand) over the window.
	OccupancyVsBound float64 `json:"occupancy_vs_bound"`
	// OccupancyRun and OccupancyVsBoundRun are the same over the whole run,
	// drain included.
	OccupancyRun        float64 `json:"occupancy_run"`
	OccupancyVsBoundRun float64 `json:"occupancy_vs_bound_run"`

	PartialGangIdleGPUHours       float64 `json:"partial_gang_idle_gpu_hours"`
	PartialGangIdleGPUHoursWindow float64 `json:"partial_gang_idle_gpu_hours_window"`
	// HeadroomCost is, per pool with a policy headroom (schedulers that
	// keep one: HeadroomCoster), the GPU-hours in the window its kept GPUs
	// sat idle while work it keeps out waited, with the reserve tiers'
	// reserved GPUs idle on its idle budget's account, and that as a
	// share of the pool's GPU-hours in the window: the occupancy urgency
	// cost.
	HeadroomCost map[string]HeadroomCost `json:"headroom_cost,omitempty"`

	// WaitS is, per tier, first start - submit of each job, in seconds.
	WaitS map[string]Percentiles `json:"wait_s"`
	// WeightedJCTS is sum(w_tier * (finish - submit)) / sum(w_tier) over
	// the jobs that finished, w_tier from TierWeights (TierWeight).
	WeightedJCTS float64 `json:"weighted_jct_s"`
	// TierWeights are the weights WeightedJCTS was taken with, in the order
	// of trace.Tiers (Options.TierWeights). Not in JSON: a report gives
	// them once for all its policies (report.Scenario.TierWeights).
	TierWeights []float64 `json:"-"`
	// WeightedJCTFloorS is the same mean if every job started at once
	// and ran uninterrupted: its duration. No policy can go below it.
	WeightedJCTFloorS float64 `json:"weighted_jct_floor_s"`
	// MeanJCTS and MeanJCTFloorS are, per tier, the mean completion time of
	// completed jobs and its floor (their mean duration); JobsCompletedByTier
	// counts them. With these a reader can recompute the weighted JCT and
	// its floor under any tier weights.
	MeanJCTS            map[string]float64 `json:"mean_jct_s"`
	MeanJCTFloorS       map[string]float64 `json:"mean_jct_floor_s"`
	JobsCompletedByTier map[string]int     `json:"jobs_completed_by_tier"`

	Preemptions       int `json:"preemptions"`
	PreemptionsIssued int `json:"preemptions_issued"`
	// PreemptionsWithdrawn of those issued were withdrawn within their
	// grace (engine.Withdrawal): their victims ran on.
	PreemptionsWithdrawn int     `json:"preemptions_withdrawn,omitempty"`
	LostGPUHours         float64 `json:"lost_gpu_hours"`
	// DeliveredGPUHours is useful work: GPU-hours of progress that counted.
	DeliveredGPUHours float64 `json:"delivered_gpu_hours"`
	// LostFraction is LostGPUHours / DeliveredGPUHours.
	LostFraction float64 `json:"lost_fraction"`

	// The utilisation layer under the idleness model (IdleModel):
	// IdleHeldGPUHours is the GPU-hours hung runs held, from the hang to
	// their stop (reclaimed, preempted or killed at their walltime);
	// HungRuns counts those runs, Reclaims the stops the scheduler ordered
	// by its idle policy, HungKilled the runs killed at their walltime.
	IdleHeldGPUHours float64 `json:"idle_held_gpu_hours"`
	HungRuns         int     `json:"hung_runs"`
	Reclaims         int     `json:"reclaims"`
	HungKilled       int     `json:"hung_killed_at_walltime"`

	DecisionLatencyMS Latency `json:"decision_latency_ms"`
	// Cycles counts decisions made; CyclesSkipped the cycles where the
	// scheduler saw there was nothing to decide.
	Cycles        int `json:"cycles"`
	CyclesSkipped int `json:"cycles_skipped"`

	JobsTotal     int `json:"jobs_total"`
	JobsCompleted int `json:"jobs_completed"`
	// JobsUnfinished never finished (stuck or cut by a time limit);
	// JobsUnschedulable can never fit the cluster and were not run.
	JobsUnfinished    int      `json:"jobs_unfinished"`
	JobsUnschedulable int      `json:"jobs_unschedulable"`
	Unschedulable     []string `json:"unschedulable_ids,omitempty"`

	// FairShare per project and its summary: the mean over samples of
	// sum_p |allocated_p - fair_p| / (2 * capacity), the share of the cluster
	// given to the wrong project.
	FairShare          map[string]FairShare `json:"fair_share"`
	FairShareDeviation float64              `json:"fair_share_deviation"`

	MakespanS   int64 `json:"makespan_s"`
	WindowStart int64 `json:"window_start"`
	WindowEnd   int64 `json:"window_end"`
	Capacity    int   `json:"capacity_gpus"`

	// Series, Waits and Jobs feed the plots and tests; they are not part of
	// report.json.
	Series []Sample           `json:"-"`
	Waits  map[string][]int64 `json:"-"`
	Jobs   []JobResult        `json:"-"`
}

// JobResult is one job's outcome; FirstStart and Finish are -1 if never.
// FreeAtSubmit and WidestFreeAtSubmit are the GPUs free in the cluster
// and the most free on one node when the job arrived (its submit, not a
// requeue's), before any policy decided on it (-1 unless
// Options.FreeAtSubmit): with them a job that
// waited under one policy and not another can be told apart as one that
// found the cluster full (its GPUs went to earlier work) or one that
// found room it was not given.
type JobResult struct {
	ID                 string
	Tier               string
	GPUs               int // all its allocations together
	Submit             int64
	FirstStart         int64
	Finish             int64
	Preempted          int
	FreeAtSubmit       int
	WidestFreeAtSubmit int
}

// TierWeight is the weight a job of tier had in r's WeightedJCTS.
func (r *Result) TierWeight(tier string) float64 { return weightAt(r.TierWeights, tierRank(tier)) }

// weightAt is the weight of the tier of rank in weights: 1 past their end.
func weightAt(weights []float64, rank int) float64 {
	if rank < len(weights) {
		return weights[rank]
	}
	return 1
}

// Percentile is the p-th percentile of sorted values by NearestRank; 0
// for none.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[NearestRank(len(sorted), p)]
}

// NearestRank is the index, in n sorted values (n > 0), of their p-th
// percentile as the simulator reports every percentile: the value with
// at least p% of them at or below it. A check that asks how many values
// may lie above a bound reads the same rank (robust's preemption bound).
func NearestRank(n int, p float64) int {
	k := int(math.Ceil(p/100*float64(n))) - 1
	return max(0, min(k, n-1))
}

func (r *runner) result() *Result {
	a := &r.acc
	res := &Result{
		Policy:               r.sched.Name(),
		Cadence:              r.opts.Model.Cadence(),
		Capacity:             a.capacity,
		WindowStart:          r.opts.WindowStart,
		WindowEnd:            r.opts.WindowEnd,
		TierWeights:          slices.Clone(r.opts.TierWeights),
		Preemptions:          a.preemptions,
		PreemptionsIssued:    r.issued,
		PreemptionsWithdrawn: r.withdrawn,
		LostGPUHours:         a.lost / 3600,
		DeliveredGPUHours:    a.delivered / 3600,
		IdleHeldGPUHours:     a.idleHeld / 3600,
		HungRuns:             a.hungRuns,
		Reclaims:             a.reclaims,
		HungKilled:           a.hangKills,
		Cycles:               len(r.lat),
		CyclesSkipped:        r.calls - len(r.lat),
		JobsTotal:            len(r.st.Jobs),
		JobsUnschedulable:    len(r.unsch),
		Unschedulable:        r.unsch,
		WaitS:                map[string]Percentiles{},
		MeanJCTS:             map[string]float64{},
		MeanJCTFloorS:        map[string]float64{},
		JobsCompletedByTier:  map[string]int{},
		Waits:                map[string][]int64{},
		FairShare:            map[string]FairShare{},
		Series:               a.series,
	}
	if a.delivered > 0 {
		res.LostFraction = a.lost / a.delivered
	}
	r.occupancy(res)
	r.headroomCost(res)
	r.jobTimes(res)
	lat := append([]float64(nil), r.lat...)
	sort.Float64s(lat)
	if len(lat) > 0 {
		res.DecisionLatencyMS = Latency{P50: Percentile(lat, 50), P99: Percentile(lat, 99), Max: lat[len(lat)-1]}
	}
	r.fairShare(res)
	return res
}

// HeadroomCost is a pool headroom's occupancy cost over a window.
type HeadroomCost struct {
	IdleGPUHours float64 `json:"idle_gpu_hours"`
	// Share is IdleGPUHours over the cluster's GPU-hours in the window.
	Share float64 `json:"share_of_capacity"`
}

// HeadroomCoster is a scheduler that keeps headroom for urgent work and
// reports its cost: per pool, the GPU-seconds in [from, to) its kept GPUs
// sat idle while work it keeps out waited (and the reserve tiers'
// reserved GPUs idle on its idle budget's account).
type HeadroomCoster interface {
	HeadroomIdleGPUSeconds(from, to int64) map[string]float64
}

// headroomCost fills res.HeadroomCost from a HeadroomCoster.
func (r *runner) headroomCost(res *Result) {
	hc, ok := r.sched.(HeadroomCoster)
	if !ok {
		return
	}
	idle := hc.HeadroomIdleGPUSeconds(r.opts.WindowStart, r.opts.WindowEnd)
	if len(idle) == 0 {
		return
	}
	res.HeadroomCost = map[string]HeadroomCost{}
	capS := float64(r.acc.capacity) * float64(r.opts.WindowEnd-r.opts.WindowStart)
	for pool, sec := range idle {
		c := HeadroomCost{IdleGPUHours: sec / 3600}
		if capS > 0 {
			c.Share = sec / capS
		}
		res.HeadroomCost[pool] = c
	}
}

// occupancy fills the occupancy metrics and the makespan.
func (r *runner) occupancy(res *Result) {
	a := &r.acc
	winLen := float64(r.opts.WindowEnd - r.opts.WindowStart)
	if winLen > 0 {
		res.Occupancy = a.winAlloc / (winLen * float64(a.capacity))
	}
	if a.winBound > 0 {
		res.OccupancyVsBound = a.winAlloc / a.winBound
	}
	runLen := float64(a.end - a.first)
	if runLen > 0 {
		res.OccupancyRun = a.allAlloc / (runLen * float64(a.capacity))
	}
	if a.allBound > 0 {
		res.OccupancyVsBoundRun = a.allAlloc / a.allBound
	}
	res.PartialGangIdleGPUHours = a.allPartial / 3600
	res.PartialGangIdleGPUHoursWindow = a.winPartial / 3600
	res.MakespanS = a.end - a.first
}

// jobTimes fills the per-job outcomes, the waits and completion times per
// tier and the tier-weighted JCT.
func (r *runner) jobTimes(res *Result) {
	jct := map[string][]float64{}
	floor := map[string]float64{}
	var wsum, wjct, wfloor float64
	for _, j := range r.st.Jobs {
		res.Jobs = append(res.Jobs, JobResult{ID: j.ID, Tier: j.Tier, GPUs: j.GPUs, Submit: j.Submit, FirstStart: j.FirstStart, Finish: j.Finish, Preempted: j.Preempted,
			FreeAtSubmit: j.FreeAtSubmit, WidestFreeAtSubmit: j.WidestFreeAtSubmit})
		if j.State != Done {
			continue
		}
		res.JobsCompleted++
		res.Waits[j.Tier] = append(res.Waits[j.Tier], j.FirstStart-j.Submit)
		c := float64(j.Finish - j.Submit)
		jct[j.Tier] = append(jct[j.Tier], c)
		w := weightAt(r.opts.TierWeights, j.TierRank)
		wsum += w
		wjct += w * c
		wfloor += w * float64(j.Duration)
		floor[j.Tier] += float64(j.Duration)
	}
	res.JobsUnfinished = res.JobsTotal - res.JobsCompleted - res.JobsUnschedulable
	if wsum > 0 {
		res.WeightedJCTS = wjct / wsum
		res.WeightedJCTFloorS = wfloor / wsum
	}
	for _, t := range trace.Tiers {
		ws := res.Waits[t]
		if len(ws) == 0 {
			continue
		}
		f := make([]float64, len(ws))
		for i, w := range ws {
			f[i] = float64(w)
		}
		sort.Float64s(f)
		res.WaitS[t] = Percentiles{P50: Percentile(f, 50), P95: Percentile(f, 95), P99: Percentile(f, 99)}
		s := 0.0
		for _, c := range jct[t] {
			s += c
		}
		res.MeanJCTS[t] = s / float64(len(jct[t]))
		res.MeanJCTFloorS[t] = floor[t] / float64(len(jct[t]))
		res.JobsCompletedByTier[t] = len(jct[t])
	}
}

// fairShare fills each project's mean allocation against its fair share
// and the summary deviation.
func (r *runner) fairShare(res *Result) {
	a := &r.acc
	n := float64(a.fsSamples)
	if n == 0 {
		return
	}
	// Sum in project order: map order would change the float total's
	// last bits from run to run.
	var projects []string
	for p := range a.fsAbsDev {
		projects = append(projects, p)
	}
	sort.Strings(projects)
	total := 0.0
	for _, p := range projects {
		fs := FairShare{MeanAllocatedGPUs: a.fsAlloc[p] / n, MeanFairGPUs: a.fsFair[p] / n, MeanAbsDeviationGPUs: a.fsAbsDev[p] / n}
		res.FairShare[p] = fs
		total += fs.MeanAbsDeviationGPUs
	}
	res.FairShareDeviation = total / (2 * float64(a.capacity))
}

// FormatSeconds writes a duration in seconds in the unit a reader takes in
// at a glance (5s, 2m, 1.5h, 2.0d): the report's table and the plots'
// legends use it so they always agree.
func FormatSeconds(s float64) string {
	switch {
	case s >= 86400:
		return fmt.Sprintf("%.1fd", s/86400)
	case s >= 3600:
		return fmt.Sprintf("%.1fh", s/3600)
	case s >= 60:
		return fmt.Sprintf("%.0fm", s/60)
	}
	return fmt.Sprintf("%.0fs", s)
}
