// Package robust is the simulator's robustness suite (`impact robustness`,
// make robustness): the impact policy against nomad-native and backfill
// on Philly windows at several offered loads and on the synthetic
// workloads of package synth, with the top tier's bound, the
// never-worse checks of each scenario, averaged over its replicas
// (replicas.go), and, with Config.TwinJitter, their noise floor (the
// native twin, twin.go).
//
// The top-tier bound of a scenario is the waits its top-tier jobs get when
// they are alone on the cluster, placed by backfill at the impact
// scheduler's cadence: what queueing behind other work costs them is the
// gap between a policy's top-tier waits and it.
package robust

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/policy"
	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/baseline"
	"github.com/impact-sched/nomad-impact/scheduler/sim/impact"
	"github.com/impact-sched/nomad-impact/scheduler/sim/synth"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// Policies the suite compares, in report order.
var Policies = []string{baseline.NomadNative, baseline.Backfill, impact.Name}

// Scenario is one workload on one cluster.
type Scenario struct {
	Name string `json:"name"`
	Desc string `json:"description"`
	// Cluster and the jobs (labelled, sorted by submit).
	Cluster sim.ClusterSpec `json:"-"`
	GPUs    int             `json:"gpus"`
	Jobs    []trace.Job     `json:"-"`
	NumJobs int             `json:"jobs"`
	// Window is the submission window [WindowStart, WindowEnd).
	WindowStart int64 `json:"window_start"`
	WindowEnd   int64 `json:"window_end"`
	// Load is the offered load over the window.
	Load float64 `json:"offered_load"`
}

func newScenario(name, desc string, cl sim.ClusterSpec, jobs []trace.Job, start, end int64) Scenario {
	return Scenario{Name: name, Desc: desc, Cluster: cl, GPUs: cl.GPUs(), Jobs: jobs, NumJobs: len(jobs),
		WindowStart: start, WindowEnd: end, Load: synth.OfferedLoad(jobs, cl.GPUs(), end-start)}
}

// Config is how the suite runs.
type Config struct {
	Policy *policy.Policy
	// ImpactModel and BaseModel differ only in their cadence.
	ImpactModel, BaseModel sim.Model
	// Refresh is impact.Scheduler.Refresh.
	Refresh int64
	// Parallel bounds the simulations run at once.
	Parallel int
	// TwinJitter, when above 0, also runs the native twin (twin.go):
	// nomad-native with every submit moved later by up to that many
	// seconds.
	TwinJitter int64
	// Replicas is how many times each policy runs on a scenario (at least
	// 1), ReplicaJitter the most seconds a replica's submits move
	// (replicas.go): the checks compare the policies' means.
	Replicas      int
	ReplicaJitter int64
	// JobsDir, when set, receives the per-job outcomes of each policy's
	// replica 0 (SCENARIO.POLICY.tsv, writeJobs); with Reasons also
	// impact's waiting reasons (SCENARIO.impact.reasons.tsv,
	// impact.WithReasons).
	// The directory must exist.
	JobsDir string
	Reasons bool
}

// Outcome is a scenario's results.
type Outcome struct {
	Scenario Scenario        `json:"scenario"`
	Bound    sim.Percentiles `json:"top_tier_bound_wait_s"`
	BoundN   int             `json:"top_tier_jobs"`
	// Debounce is the impact cadence's delay from an event to its
	// decision, seconds: every job waits at least that long.
	Debounce int64 `json:"impact_debounce_s"`
	// Grace is the time a preempted job takes to stop: a top-tier job
	// that finds no idle GPU starts at the earliest that long after the
	// decision that preempts for it. StopBasis says what sets it (see
	// stopTime; "" reads as the model's grace).
	Grace     int64  `json:"grace_s"`
	StopBasis string `json:"stop_basis,omitempty"`
	// Results is each policy's replica 0, its run on the scenario's jobs
	// as given; Replicas its runs on the jittered copies, replicas 1 to
	// NumReplicas-1 (replicas.go).
	Results     map[string]*sim.Result   `json:"-"`
	Replicas    map[string][]*sim.Result `json:"-"`
	NumReplicas int                      `json:"replicas"`
	// Summary is each policy's headline metrics, means over its replicas
	// (report.json of impact sim has them all for one run).
	Summary map[string]Summary `json:"policies"`
	Checks  []Check            `json:"checks"`
	// TwinFailed names the checks the native twin fails against
	// nomad-native (twin.go): empty when it fails none, nil (null in
	// JSON) without a twin.
	TwinFailed []string `json:"native_twin_failed"`
	// TwinReplicasFailed, with more than one replica, is on how many
	// replicas the twin fails each check of TwinFailed against the
	// native run of the same replica.
	TwinReplicasFailed map[string]int `json:"native_twin_replicas_failed,omitempty"`
}

// Check is one never-worse target on one scenario.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	// Bound, on a failed check, is the bound that proves the scenario
	// cannot meet it without giving up occupancy (the exception: occupancy
	// wins); a failed check with a bound does not fail the suite.
	Bound string `json:"bound,omitempty"`
	// Twin, on a failed check, is the native twin's result on the same
	// check against nomad-native (twin.go): a failure no larger than it
	// is within what chance moves on the scenario.
	Twin string `json:"native_twin,omitempty"`
	// WithinTwin: the twin is at least as bad on this check (Twin).
	WithinTwin bool `json:"within_native_twin,omitempty"`
	// ReplicasFailed, on a failed check of impact with more than one
	// replica, is on how many replicas impact fails it against the native
	// run on the same jobs: on every one, the failure is no accident of
	// the submit times.
	ReplicasFailed int `json:"replicas_failed,omitempty"`
	// JCTByTier, on impact's failed weighted-JCT check, is where the
	// difference comes from (jct.go), averaged over the replicas.
	JCTByTier *JCTBreakdown `json:"jct_by_tier,omitempty"`
	// WaitByGPUs, on impact's failed tier-wait check, is the same
	// percentile by job width, of the tier and the tiers above it
	// (width.go), averaged over the replicas.
	WaitByGPUs *WaitBreakdown `json:"wait_by_gpus,omitempty"`
	// worse is the checked value, larger worse (compare); a tier-wait
	// check's tier and percentile are in tier and pct.
	worse float64
	tier  string
	pct   float64
}

// Waived reports whether c failed with the bound that proves it cannot be
// met.
func (c Check) Waived() bool { return !c.OK && c.Bound != "" }

// Run simulates sc under every policy, each on its replicas, and its top
// tier alone, in parallel.
func Run(sc Scenario, cfg Config) (*Outcome, error) {
	reps := max(1, cfg.Replicas)
	stop, basis := stopTime(cfg)
	o := &Outcome{Scenario: sc, Results: map[string]*sim.Result{}, Replicas: map[string][]*sim.Result{}, NumReplicas: reps,
		Debounce: cfg.ImpactModel.Debounce, Grace: stop, StopBasis: basis}
	type spec struct {
		name    string
		replica int
	}
	specs := []spec{{"bound", 0}}
	names := slices.Clone(Policies)
	if cfg.TwinJitter > 0 {
		names = append(names, NativeTwin)
	}
	for k := range reps {
		for _, n := range names {
			specs = append(specs, spec{n, k})
		}
	}
	res := make([]*sim.Result, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, cfg.Parallel))
	for i, sp := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			res[i], errs[i] = runOne(sc, cfg, sp.name, sp.replica)
		}()
	}
	wg.Wait()
	for i, sp := range specs {
		if errs[i] != nil {
			return nil, fmt.Errorf("scenario %s: %s, replica %d: %w", sc.Name, sp.name, sp.replica, errs[i])
		}
		switch {
		case sp.name == "bound":
			o.Bound = res[i].WaitS[trace.Tiers[0]]
			o.BoundN = res[i].JobsCompleted
		case sp.replica == 0:
			o.Results[sp.name] = res[i]
		default:
			o.Replicas[sp.name] = append(o.Replicas[sp.name], res[i])
		}
	}
	o.Checks = NeverWorse(o)
	twinChecks(o)
	o.Summary = map[string]Summary{}
	for n := range o.Results {
		o.Summary[n] = o.mean(n)
	}
	return o, nil
}

// runOne simulates sc's replica under the policy name (replicas.go); for
// "bound", its top tier alone under backfill at the impact cadence; for
// NativeTwin, nomad-native on the twin's jittered copy of the replica.
// Only replica 0 writes its jobs to Config.JobsDir.
func runOne(sc Scenario, cfg Config, name string, replica int) (res *sim.Result, err error) {
	write := cfg.JobsDir != "" && replica == 0
	o := sim.Options{Cluster: sc.Cluster, WindowStart: sc.WindowStart, WindowEnd: sc.WindowEnd, FreeAtSubmit: write}
	jobs := sc.Jobs
	if replica > 0 {
		jobs = Jitter(sc.Jobs, cfg.ReplicaJitter, sc.WindowEnd, replicaStream(replica))
	}
	var s sim.Scheduler
	switch name {
	case impact.Name:
		o.Model = cfg.ImpactModel
		var opts []impact.Option
		if cfg.Reasons && write {
			var rf *reasonsFile
			if rf, err = createReasons(reasonsPath(cfg.JobsDir, sc.Name)); err != nil {
				return nil, err
			}
			// The named err: a failed flush or close fails the run.
			defer func() { err = errors.Join(err, rf.close()) }()
			opts = append(opts, impact.WithReasons(rf.w))
		}
		var is *impact.Scheduler
		if is, err = impact.New(cfg.Policy, nil, opts...); err == nil {
			is.Refresh = cfg.Refresh
			s = is
		}
	case "bound":
		o.Model = cfg.ImpactModel
		jobs = TopTier(sc.Jobs)
		s, err = baseline.New(baseline.Backfill)
	case NativeTwin:
		o.Model = cfg.BaseModel
		jobs = Jitter(sc.Jobs, cfg.TwinJitter, sc.WindowEnd, twinStream(replica))
		s, err = baseline.New(baseline.NomadNative)
	default:
		o.Model = cfg.BaseModel
		s, err = baseline.New(name)
	}
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return &sim.Result{}, nil
	}
	if res, err = sim.Run(jobs, s, o); err == nil && write {
		err = writeJobs(jobsPath(cfg.JobsDir, sc.Name, name), jobs, res)
	}
	return res, err
}

// Summary is one policy's headline metrics on a scenario, each the mean
// over its replicas (summarize): what the checks compare.
type Summary struct {
	Cadence   string  `json:"cadence"`
	Occupancy float64 `json:"occupancy"`
	// OccupancyNet leaves out GPU-hours idle in partial gangs.
	OccupancyNet            float64                    `json:"occupancy_net_of_partial_gang_idle"`
	PartialGangIdleGPUHours float64                    `json:"partial_gang_idle_gpu_hours"`
	WaitS                   map[string]sim.Percentiles `json:"wait_s"`
	JobsCompletedByTier     map[string]float64         `json:"jobs_completed_by_tier"`
	WeightedJCTS            float64                    `json:"weighted_jct_s"`
	Preemptions             float64                    `json:"preemptions"`
	LostFraction            float64                    `json:"lost_fraction"`
	JobsUnfinished          float64                    `json:"jobs_unfinished"`
	// HeadroomIdleShare is the share of the pool its headroom's kept GPUs
	// sat idle while work it keeps out waited (sim.HeadroomCost), when
	// Headroom: the policy keeps one.
	HeadroomIdleShare float64 `json:"headroom_idle_share,omitempty"`
	Headroom          bool    `json:"headroom,omitempty"`
}

// TopTierBound is the waits of the top tier's jobs alone on the cluster of
// opts, placed by backfill at the cadence of model (the impact
// scheduler's), and how many there were.
func TopTierBound(jobs []trace.Job, opts sim.Options, model sim.Model) (sim.Percentiles, int, error) {
	top := TopTier(jobs)
	if len(top) == 0 {
		return sim.Percentiles{}, 0, nil
	}
	s, err := baseline.New(baseline.Backfill)
	if err != nil {
		return sim.Percentiles{}, 0, err
	}
	opts.Model = model
	opts.Progress = nil
	r, err := sim.Run(top, s, opts)
	if err != nil {
		return sim.Percentiles{}, 0, fmt.Errorf("top-tier bound: %w", err)
	}
	return r.WaitS[trace.Tiers[0]], r.JobsCompleted, nil
}

// TopTier returns the jobs of the top tier.
func TopTier(jobs []trace.Job) []trace.Job {
	var out []trace.Job
	for _, j := range jobs {
		if j.Tier == trace.Tiers[0] {
			out = append(out, j)
		}
	}
	return out
}

// Never-worse targets: a tier's wait may exceed nomad-native's by at most
// WaitFactor x native + WaitSlackS; occupancy may be at most
// OccupancySlack lower; the top tier's p99 must be TopTierGain times lower
// wherever native's exceeds TopTierGain x the bound.
const (
	WaitFactor     = 1.1
	WaitSlackS     = 120
	OccupancySlack = 0.005
	TopTierGain    = 10
)

// WeightedJCTCheck names the tier-weighted JCT check.
const WeightedJCTCheck = "weighted JCT"

// compare holds run a to nomad-native's run nat by the checks that
// compare two runs of any policy: every tier's p50 and p99 wait, the
// tier-weighted JCT (up to debounce seconds more: a run at the live
// cadence waits that long for each decision) and occupancy.
func compare(a, nat Summary, debounce int64) []Check {
	var cs []Check
	add := func(name string, worse float64, ok bool, format string, args ...any) *Check {
		cs = append(cs, Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...), worse: worse})
		return &cs[len(cs)-1]
	}
	for _, t := range trace.Tiers {
		if nat.JobsCompletedByTier[t] == 0 && a.JobsCompletedByTier[t] == 0 {
			continue
		}
		aw, nw := a.WaitS[t], nat.WaitS[t]
		for _, q := range []struct {
			pct    float64
			av, nv float64
		}{{50, aw.P50, nw.P50}, {99, aw.P99, nw.P99}} {
			limit := WaitFactor*q.nv + WaitSlackS
			c := add(fmt.Sprintf("%s wait p%g", t, q.pct), q.av, q.av <= limit, "%s vs native %s (limit %s)", sim.FormatSeconds(q.av), sim.FormatSeconds(q.nv), sim.FormatSeconds(limit))
			c.tier, c.pct = t, q.pct
		}
	}
	// The live cadence makes every job wait its debounce: a policy that
	// decides as the agent does cannot beat that part.
	add(WeightedJCTCheck, a.WeightedJCTS, a.WeightedJCTS <= nat.WeightedJCTS+float64(debounce), "%s vs native %s (limit: native + the %ds debounce)",
		sim.FormatSeconds(a.WeightedJCTS), sim.FormatSeconds(nat.WeightedJCTS), debounce)
	add("occupancy", -a.Occupancy, a.Occupancy >= nat.OccupancyNet-OccupancySlack, "%.1f%% vs native %.1f%% (%.1f%% counting GPUs idle in its partial gangs as occupied)",
		100*a.Occupancy, 100*nat.OccupancyNet, 100*nat.Occupancy)
	return cs
}

// NeverWorse checks impact against nomad-native on o: their means over
// the replicas; a failed check says on how many replicas impact fails it
// against the native run on the same jobs, a failed top-tier gain the
// bound that proves it when there is one, a failed weighted JCT where
// the difference comes from.
func NeverWorse(o *Outcome) []Check {
	impRuns, natRuns := o.runs(impact.Name), o.runs(baseline.NomadNative)
	if impRuns == nil || natRuns == nil {
		return nil
	}
	imp, nat := summarize(impRuns), summarize(natRuns)
	cs := checkPair(o, imp, nat)
	failed := replicaFailures(impRuns, natRuns, func(a, b Summary) []Check { return checkPair(o, a, b) })
	for i := range cs {
		c := &cs[i]
		if c.OK {
			continue
		}
		c.ReplicasFailed = failed[c.Name]
		if c.tier != "" {
			c.WaitByGPUs = breakWaits(impRuns, natRuns, c.tier, c.pct)
		}
		switch c.Name {
		case WeightedJCTCheck:
			c.JCTByTier = meanJCT(impRuns, natRuns)
		case TopTierGainCheck:
			var short string
			c.Bound, short = preemptionBound(o, nat.WaitS[trace.Tiers[0]].P99/TopTierGain, imp.Occupancy-(nat.OccupancyNet-OccupancySlack))
			c.Detail += short
		}
	}
	return cs
}

// TopTierGainCheck names the check of the top tier's p99 against
// native's.
var TopTierGainCheck = trace.Tiers[0] + " p99 gain"

// checkPair is every never-worse check of impact's metrics imp against
// nomad-native's nat on o.
func checkPair(o *Outcome, imp, nat Summary) []Check {
	cs := compare(imp, nat, o.Debounce)
	add := func(name string, ok bool, format string, args ...any) {
		cs = append(cs, Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}
	add("partial-gang idle", imp.PartialGangIdleGPUHours == 0, "%.0f GPU-h", imp.PartialGangIdleGPUHours)
	add("finished", imp.JobsUnfinished == 0, "%.3g jobs unfinished", imp.JobsUnfinished)
	if o.BoundN == 0 {
		return cs
	}
	top := trace.Tiers[0]
	np, ip := nat.WaitS[top].P99, imp.WaitS[top].P99
	if np > TopTierGain*o.Bound.P99 {
		add(TopTierGainCheck, ip*TopTierGain <= np, "%s vs native %s: %.1fx (native exceeds %dx the bound %s)",
			sim.FormatSeconds(ip), sim.FormatSeconds(np), ratio(np, ip), TopTierGain, sim.FormatSeconds(o.Bound.P99))
	} else {
		add(TopTierGainCheck, true, "not required: native %s is within %dx the bound %s", sim.FormatSeconds(np), TopTierGain, sim.FormatSeconds(o.Bound.P99))
	}
	return cs
}

// preemptionBound is the bound that proves a top-tier p99 of need
// seconds cannot be met without giving up occupancy, or "" when it does
// not: a top-tier job that finds its GPUs held starts at the earliest one
// debounce (the decision) plus the time its victim takes to stop
// (o.Grace: a grace, or less where jobs save on their signal or a
// headroom lends its nodes, stopTime) after it arrives, or when running
// work happens to end. A p99 below that needs
// 99% of the top tier's jobs to find idle GPUs on arrival, at unforeseen
// instants: GPUs kept idle at all times, at least as many as the widest
// of them asks that the p99 does not let wait (bursts of them ask more),
// which a full pool pays in occupancy. That proves the conflict only when
// it costs more than room, the occupancy impact has above the floor of
// the occupancy check (native's less OccupancySlack): with less, keeping
// them idle would not fail the occupancy check, so the bound proves
// nothing and the failure stands. short then says why there is no
// bound, for the check's detail.
func preemptionBound(o *Outcome, need, room float64) (bound, short string) {
	floor := float64(o.Debounce + o.Grace)
	if need >= floor {
		return "", ""
	}
	widest := widestThatMustStart(o.Scenario.Jobs)
	cost := float64(widest) / float64(max(1, o.Scenario.GPUs))
	basis := cmp.Or(o.StopBasis, fmt.Sprintf("grace %ds", o.Grace))
	idle := fmt.Sprintf("10x below native needs p99 <= %s, under the %s a job waits to start by preemption (debounce %ds + %s): it needs at least %d GPUs kept idle at all times, %.1f points of occupancy",
		sim.FormatSeconds(need), sim.FormatSeconds(floor), o.Debounce, basis, widest, 100*cost)
	if cost <= room {
		return "", fmt.Sprintf("; no bound: %s, within the %.1f points impact has above the occupancy check's floor", idle, 100*room)
	}
	return fmt.Sprintf("%s, more than the %.1f points impact has above the occupancy check's floor (native's less %.1f)", idle, 100*max(0, room), 100*OccupancySlack), ""
}

// stopTime is how long a preempted job takes to stop under cfg, the
// preemption bound's floor with the debounce, and what sets it: the
// model's grace; the time to save where jobs save on their signal and
// exit sooner (sim.Model.SaveOnSignal); the shortest loan where the
// impact policy lends a headroom's nodes (policy.Headroom.LoanGrace):
// a top-tier job may stop work on loan after that, so no floor above it
// is proved; none where it takes back young work or work with little
// unsaved (policy.Headroom.TakeBack, TakeBackUnsaved), which stops at
// once.
func stopTime(cfg Config) (int64, string) {
	m := cfg.ImpactModel
	t, basis := m.Grace, fmt.Sprintf("grace %ds", m.Grace)
	if s := m.SaveOnSignal; s > 0 && s <= t {
		t, basis = s, fmt.Sprintf("%ds to save on the checkpoint signal", s)
	}
	if cfg.Policy != nil {
		for _, pool := range slices.Sorted(maps.Keys(cfg.Policy.Headrooms)) {
			h := cfg.Policy.Headrooms[pool]
			if h.TakeBack > 0 {
				return 0, fmt.Sprintf("headroom %q take_back %s: young work stops at once", pool, h.TakeBack)
			}
			if h.TakeBackUnsaved > 0 {
				return 0, fmt.Sprintf("headroom %q take_back_unsaved %s: work with little unsaved stops at once", pool, h.TakeBackUnsaved)
			}
			if h.LoanGrace == nil {
				continue
			}
			if g := int64(*h.LoanGrace / time.Second); g < t {
				t, basis = g, fmt.Sprintf("headroom %q loan_grace %ds", pool, g)
			}
		}
	}
	return t, basis
}

// widestThatMustStart is the most GPUs a top-tier job of jobs asks once
// the widest ones that its p99 lets wait are set aside: of n jobs, the
// nearest-rank p99 (sim.NearestRank) lets n - 1 - its rank wait past it,
// and those may be the widest. 0 without top-tier jobs.
func widestThatMustStart(jobs []trace.Job) int {
	var asks []int
	for _, j := range jobs {
		if j.Tier == trace.Tiers[0] {
			asks = append(asks, j.GPUs)
		}
	}
	if len(asks) == 0 {
		return 0
	}
	slices.Sort(asks)
	return asks[sim.NearestRank(len(asks), 99)]
}

// netOccupancy is r's occupancy without the GPU-hours its partially
// placed gangs held idle in the window: the simulator counts those GPUs
// as allocated (they are assigned), but no work runs on them, and a
// policy that never places a gang partially cannot be behind on them.
func netOccupancy(r *sim.Result) float64 {
	hours := float64(r.Capacity) * float64(r.WindowEnd-r.WindowStart) / 3600
	if hours <= 0 {
		return r.Occupancy
	}
	return r.Occupancy - r.PartialGangIdleGPUHoursWindow/hours
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		if a <= 0 {
			return 1
		}
		return math.Inf(1)
	}
	return a / b
}

// Failed returns the failed checks of o, waived ones too.
func (o *Outcome) Failed() []Check {
	var out []Check
	for _, c := range o.Checks {
		if !c.OK {
			out = append(out, c)
		}
	}
	return out
}

// Failing returns the failed checks of o that no bound waives: those that
// fail the suite.
func (o *Outcome) Failing() []Check {
	var out []Check
	for _, c := range o.Checks {
		if !c.OK && !c.Waived() {
			out = append(out, c)
		}
	}
	return out
}

// worstWait is the largest ratio, over tiers and p50/p99, of impact's
// wait to its never-worse limit (at most 1 passes).
func worstWait(o *Outcome) (float64, string) {
	imp, nat := o.mean(impact.Name), o.mean(baseline.NomadNative)
	worst, what := 0.0, ""
	for _, t := range trace.Tiers {
		if nat.JobsCompletedByTier[t] == 0 {
			continue
		}
		for _, q := range []struct {
			name   string
			iv, nv float64
		}{{"p50", imp.WaitS[t].P50, nat.WaitS[t].P50}, {"p99", imp.WaitS[t].P99, nat.WaitS[t].P99}} {
			if r := q.iv / (WaitFactor*q.nv + WaitSlackS); r > worst {
				worst, what = r, t+" "+q.name
			}
		}
	}
	return worst, what
}

// WriteTable prints one row per scenario, on the policies' means over the
// replicas: impact's ratios against
// nomad-native and backfill (baseline / impact: above 1 is better for
// impact; occupancy in points, impact minus baseline net of the
// baseline's GPUs idle in partial gangs), the top tier's p99
// of each policy against its bound, how many checks the native twin
// fails against nomad-native ("-": no twin), and the never-worse verdict.
func WriteTable(w io.Writer, outs []*Outcome) error {
	top := trace.Tiers[0]
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "scenario\tload\tjobs\t%s p99 bound\tnative\tbackfill\timpact\t%s p99 x vs native\tvs backfill\tJCT x vs native\tvs backfill\tocc pts vs native\tvs backfill\theadroom idle pts\tworst wait/limit\tnative twin fails\tnever-worse\t\n", top, top)
	for _, o := range outs {
		imp, nat, bf := o.mean(impact.Name), o.mean(baseline.NomadNative), o.mean(baseline.Backfill)
		ww, what := worstWait(o)
		verdict := "yes"
		var names, waived []string
		for _, c := range o.Failed() {
			if c.Waived() {
				waived = append(waived, c.Name)
			} else {
				names = append(names, c.Name)
			}
		}
		switch {
		case len(names) > 0:
			verdict = "NO: " + strings.Join(names, ", ")
			if len(waived) > 0 {
				verdict += " (bound: " + strings.Join(waived, ", ") + ")"
			}
		case len(waived) > 0:
			verdict = "yes but bound: " + strings.Join(waived, ", ")
		}
		hr := "-"
		if imp.Headroom {
			hr = fmt.Sprintf("%.2f", 100*imp.HeadroomIdleShare)
		}
		bound := "-"
		if o.BoundN > 0 {
			bound = sim.FormatSeconds(o.Bound.P99)
		}
		twin := "-"
		if o.TwinFailed != nil {
			twin = fmt.Sprint(len(o.TwinFailed))
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%.2f\t%+.1f\t%+.1f\t%s\t%.2f (%s)\t%s\t%s\t\n",
			o.Scenario.Name, o.Scenario.Load, o.Scenario.NumJobs, bound,
			sim.FormatSeconds(nat.WaitS[top].P99), sim.FormatSeconds(bf.WaitS[top].P99), sim.FormatSeconds(imp.WaitS[top].P99),
			fmtRatio(ratio(nat.WaitS[top].P99, imp.WaitS[top].P99)), fmtRatio(ratio(bf.WaitS[top].P99, imp.WaitS[top].P99)),
			ratio(nat.WeightedJCTS, imp.WeightedJCTS), ratio(bf.WeightedJCTS, imp.WeightedJCTS),
			100*(imp.Occupancy-nat.OccupancyNet), 100*(imp.Occupancy-bf.OccupancyNet), hr, ww, what, twin, verdict)
	}
	return tw.Flush()
}

func fmtRatio(r float64) string {
	if math.IsInf(r, 1) {
		return "inf"
	}
	return fmt.Sprintf("%.1f", r)
}

// headroomPool is the pool of r's headroom cost the table shows: the
// suite's clusters have one pool.
func headroomPool(r *sim.Result) string {
	for p := range r.HeadroomCost {
		return p
	}
	return ""
}

// WriteFailures prints every failed check with its numbers (over several
// replicas, on how many of them it fails), for a
// waived one the bound that proves it cannot be met, and with a native
// twin the twin's result on the same check.
func WriteFailures(w io.Writer, outs []*Outcome) {
	for _, o := range outs {
		for _, c := range o.Failed() {
			line := fmt.Sprintf("%s: %s: %s", o.Scenario.Name, c.Name, c.Detail)
			if o.NumReplicas > 1 {
				line += fmt.Sprintf(" (fails on %d of %d replicas)", c.ReplicasFailed, o.NumReplicas)
			}
			if c.Waived() {
				line += "; exception, bound: " + c.Bound
			}
			if c.Twin != "" {
				within := "worse than it"
				if c.WithinTwin {
					within = "within it"
				}
				line += fmt.Sprintf("; native twin: %s (%s)", c.Twin, within)
			}
			if c.JCTByTier != nil {
				line += "; " + c.JCTByTier.String()
			}
			if c.WaitByGPUs != nil {
				line += "; " + c.WaitByGPUs.String()
			}
			fmt.Fprintln(w, line)
		}
	}
}

// Synthetic returns the scenarios of every synth generator.
func Synthetic(seed int64, scale float64) ([]Scenario, error) {
	var out []Scenario
	for _, s := range synth.All(seed, scale) {
		cl, err := sim.UniformCluster(s.Nodes, s.GPUsPerNode, 2, 8)
		if err != nil {
			return nil, err
		}
		out = append(out, newScenario(s.Name, s.Desc, cl, s.Jobs, 0, s.Span))
	}
	return out, nil
}

// RandomScenarios is the suite's default size of the random family.
const RandomScenarios = 48

// Random returns the first n scenarios of the seeded random family
// (synth.Random).
func Random(seed int64, n int) ([]Scenario, error) {
	var out []Scenario
	for i := range n {
		s, p := synth.Random(seed, i)
		cl, err := sim.UniformCluster(s.Nodes, s.GPUsPerNode, 2, 8)
		if err != nil {
			return nil, err
		}
		out = append(out, newScenario(s.Name, p.Describe(), cl, s.Jobs, 0, s.Span))
	}
	return out, nil
}

// PhillyWindow is a window of the Philly trace at a target offered load:
// the node count (8 GPUs each) is chosen to give that load.
type PhillyWindow struct {
	From, To string // dates, To inclusive
	Load     float64
}

// DefaultPhillyWindows are the suite's four windows, a week each, from
// light to heavily overloaded.
var DefaultPhillyWindows = []PhillyWindow{
	{"2017-10-02", "2017-10-08", 0.8},
	{"2017-10-09", "2017-10-15", 1.0},
	{"2017-10-16", "2017-10-22", 1.15},
	{"2017-10-23", "2017-10-29", 1.3},
}

// Philly builds the scenarios of windows from the Philly trace at path,
// labels synthesized from seed.
func Philly(path string, seed int64, windows []PhillyWindow) ([]Scenario, error) {
	tr, err := trace.ReadFile(path, trace.FormatPhilly, trace.ReadOptions{})
	if err != nil {
		return nil, err
	}
	if err := trace.Synthesize(tr.Jobs, tr.Source, seed); err != nil {
		return nil, err
	}
	var out []Scenario
	for _, w := range windows {
		from, err := trace.ParseTimeBound(trace.FormatPhilly, w.From, false)
		if err != nil {
			return nil, err
		}
		to, err := trace.ParseTimeBound(trace.FormatPhilly, w.To, true)
		if err != nil {
			return nil, err
		}
		var jobs []trace.Job
		var asked float64
		for _, j := range tr.Jobs {
			if j.Submit >= from && j.Submit < to {
				jobs = append(jobs, j)
				asked += float64(j.GPUs) * float64(j.Duration)
			}
		}
		if len(jobs) == 0 {
			return nil, fmt.Errorf("philly window %s..%s: no jobs", w.From, w.To)
		}
		sort.SliceStable(jobs, func(a, b int) bool { return jobs[a].Submit < jobs[b].Submit })
		nodes := max(1, int(math.Round(asked/(w.Load*8*float64(to-from)))))
		// Every job must fit: a gang wider than the cluster is never run.
		cl, err := sim.UniformCluster(nodes, 8, 2, 8)
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("philly-%s", w.From[5:])
		out = append(out, newScenario(name, fmt.Sprintf("Philly %s..%s on %d x 8 GPUs", w.From, w.To, nodes), cl, jobs, from, to))
	}
	return out, nil
}
