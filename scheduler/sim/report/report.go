// Package report turns simulation results into what people read: the
// report.json of `impact sim`, the table it prints, and the definitions and
// modelling assumptions both carry.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// Scenario describes what was simulated.
type Scenario struct {
	Command      string             `json:"command"`
	Trace        string             `json:"trace"`
	Format       string             `json:"format"`
	From         string             `json:"from,omitempty"`
	To           string             `json:"to,omitempty"`
	Jobs         int                `json:"jobs"`
	OutsideRows  int                `json:"rows_outside_window"`
	SkippedRows  int                `json:"skipped_bad_rows"`
	SkipErrors   []string           `json:"skipped_row_errors,omitempty"`
	Nodes        int                `json:"nodes"`
	GPUs         int                `json:"gpus"`
	Cluster      string             `json:"cluster"`
	Seed         int64              `json:"seed"`
	LabelRule    string             `json:"label_rule"`
	Model        Model              `json:"model"`
	TierWeights  map[string]float64 `json:"jct_tier_weights"`
	ImpactPolicy string             `json:"impact_policy,omitempty"`
	// Idleness describes the idleness model (sim.IdleModel).
	Idleness string `json:"idleness,omitempty"`
	// TopTierBound is the waits of the top tier alone on the cluster
	// (placed by backfill at the impact scheduler's cadence): the gap of
	// a policy's top-tier waits to it is what the other work costs them.
	TopTierBound *sim.Percentiles `json:"top_tier_bound_wait_s,omitempty"`
}

// Model is sim.Model with its meaning spelled out for readers.
type Model struct {
	CheckpointIntervalS int64  `json:"checkpoint_interval_s"`
	RestartCostS        int64  `json:"restart_cost_s"`
	GraceS              int64  `json:"grace_s"`
	SaveOnSignalS       int64  `json:"save_on_signal_s,omitempty"`
	DebounceS           int64  `json:"impact_debounce_s"`
	IntervalS           int64  `json:"impact_interval_s"`
	BaselineDebounceS   int64  `json:"baseline_debounce_s"`
	BaselineIntervalS   int64  `json:"baseline_interval_s"`
	SampleS             int64  `json:"sample_s"`
	Description         string `json:"description"`
}

// ModelOf describes m, the impact scheduler's model, and base, the
// baselines' (the same but for the cadence); cadenceNote says where the
// impact cadence comes from.
func ModelOf(m, base sim.Model, cadenceNote string) Model {
	stop := fmt.Sprintf("keeps running for the %ds grace period, then stops, loses the work done since its last checkpoint", m.Grace)
	if m.SaveOnSignal > 0 {
		stop = fmt.Sprintf("saves its work within %ds and exits, losing only those seconds, where its grace allows "+
			"(else it keeps running for the %ds grace period, then stops and loses the work done since its last checkpoint)", m.SaveOnSignal, m.Grace)
	}
	return Model{
		CheckpointIntervalS: m.CheckpointInterval,
		RestartCostS:        m.RestartCost,
		GraceS:              m.Grace,
		SaveOnSignalS:       m.SaveOnSignal,
		DebounceS:           m.Debounce,
		IntervalS:           m.Interval,
		BaselineDebounceS:   base.Debounce,
		BaselineIntervalS:   base.Interval,
		SampleS:             m.Sample,
		Description: fmt.Sprintf("Jobs checkpoint every %ds of progress. A preempted job gets the checkpoint signal, keeps its GPUs, "+
			"%s, and queues again "+
			"as if submitted then (the executor parks it by re-registering it, and Nomad stamps a new submit time), "+
			"its walltime unchanged and the work its preemption's plan said it saved as its impact_progress; "+
			"each restart spends %ds holding its GPUs before progress resumes. A gang makes progress only when every member is placed; "+
			"placed members of a partially placed gang hold their GPUs idle. The impact scheduler decides as the live agent does: %s (%s); "+
			"the baselines decide %s (as Nomad evaluates at once). Nodes never fail: every GPU is healthy for the whole run. "+
			"Jobs wider than a node are gangs of whole-node members. "+
			"nomad-native places each allocation as Nomad 2.0.5's batch scheduler does: the better bin-packed of the first two feasible nodes "+
			"in a random order (the power of two choices), a job's CPU and memory asks taken to be in proportion to its GPUs.",
			m.CheckpointInterval, stop, m.RestartCost, m.Cadence(), cadenceNote, base.Cadence()),
	}
}

// Definitions of the metrics, written into report.json.
var Definitions = map[string]string{
	"occupancy":                   "allocated GPU-hours / healthy GPU-hours over the submission window [from, to); GPUs held by partially placed gangs count as allocated (they are assigned, if idle)",
	"occupancy_vs_bound":          "allocated GPU-hours / the integral over the window of min(capacity, GPUs asked by submitted unfinished jobs)",
	"occupancy_run":               "occupancy over the whole run, from the first submit to the last finish (drain included)",
	"partial_gang_idle_gpu_hours": "GPU-hours held by placed members of gangs whose other members were not yet placed (whole run)",
	"wait_s":                      "per tier, first start minus submit of each completed job, seconds, nearest-rank percentiles",
	"weighted_jct_s":              "sum over completed jobs of w(tier) x (finish - submit) / sum of w(tier), seconds; weights in scenario.jct_tier_weights. The weights are fixed by the report, not read from the impact policy, so that every policy is measured with the same ruler and a policy file cannot change the score of the others",
	"weighted_jct_floor_s":        "the same mean with every job starting at its submit and never stopped (its duration): the floor no policy can beat; mean_jct_s and mean_jct_floor_s give both per tier",
	"comparisons":                 "impact against each baseline: ratios baseline/impact (above 1: impact better), occupancy in percentage points (impact minus baseline); weighted_jct_ratio_ceiling is the best weighted-JCT ratio any policy could reach (baseline weighted JCT / floor); jct_ratio_ceiling_any_tier_weights is the best such ceiling under any tier weights that never weigh a lower tier above a higher one",
	"preemptions":                 "jobs stopped by preemption (preemptions_issued counts the orders; a job finishing inside its grace period is not stopped, nor one whose preemption was withdrawn within it: preemptions_withdrawn)",
	"lost_gpu_hours":              "GPU-hours of running allocations that did not become kept progress: work since the last checkpoint at a preemption, restart time and the grace period's unsaved work",
	"delivered_gpu_hours":         "GPU-hours of useful progress kept (sum of duration x GPUs of completed work)",
	"decision_latency_ms":         "wall time of each scheduling decision (one cycle of the policy, the impact adapter's model update included), milliseconds; cycles where the policy saw at a glance that nothing could be placed or preempted are counted in cycles_skipped, not here",
	"jobs_completed":              "jobs that finished",
	"idle_held_gpu_hours":         "under the idleness model (scenario.idleness): GPU-hours held by hung runs from the hang to their stop (reclaimed by the policy's idle action, preempted, or killed at their walltime estimate); hung_runs counts those runs, reclaims the stops a policy ordered for idleness, hung_killed_at_walltime those left to their walltime. Baselines never reclaim",
	"fair_share":                  "per project, mean over window samples of allocated GPUs against its max-min fair share (equal shares, capped by its outstanding demand); fair_share_deviation = mean of sum |allocated - fair| / (2 x capacity)",
}

// Comparison is the impact policy against one baseline. Ratios are
// baseline / impact (above 1: impact is better); points are impact minus
// baseline, in percentage points.
type Comparison struct {
	Baseline                string  `json:"baseline"`
	TopTierP99WaitRatio     float64 `json:"top_tier_p99_wait_ratio"`
	WeightedJCTRatio        float64 `json:"weighted_jct_ratio"`
	WeightedJCTRatioCeiling float64 `json:"weighted_jct_ratio_ceiling"`
	// JCTRatioCeilingAnyWeights is the largest WeightedJCTRatioCeiling
	// over every choice of tier weights w(critical) >= w(high) >= ... >= 0.
	// Over that cone the ratio of two weighted sums is largest on one of
	// its edges, the weights 1 for the top k tiers and 0 below, so it is
	// the largest of those k ratios.
	JCTRatioCeilingAnyWeights float64 `json:"jct_ratio_ceiling_any_tier_weights"`
	OccupancyPoints           float64 `json:"occupancy_points"`
	ImpactOccupancyVsBound    float64 `json:"impact_occupancy_vs_bound"`
	BaselinePartialIdleGPUH   float64 `json:"baseline_partial_gang_idle_gpu_hours"`
	ImpactPartialIdleGPUH     float64 `json:"impact_partial_gang_idle_gpu_hours"`
	ImpactLostFraction        float64 `json:"impact_lost_fraction"`
	// GPU-hours held by hung runs under the idleness model (the
	// utilisation layer), and the impact policy's reduction of them in
	// percent.
	BaselineIdleHeldGPUH  float64 `json:"baseline_idle_held_gpu_hours"`
	ImpactIdleHeldGPUH    float64 `json:"impact_idle_held_gpu_hours"`
	IdleHeldReductionPct  float64 `json:"idle_held_reduction_pct"`
	DeliveredGPUHoursGain float64 `json:"delivered_gpu_hours_gain"`
}

// Compare builds the comparisons of the policy named impact against every
// other policy in r.
func (r *Report) Compare(impact string) {
	var imp *sim.Result
	for _, p := range r.Policies {
		if p.Policy == impact {
			imp = p
		}
	}
	if imp == nil {
		return
	}
	top := trace.Tiers[0]
	ratio := func(a, b float64) float64 {
		if b <= 0 {
			if a <= 0 {
				return 1
			}
			return a // b is zero: at least a times better, in seconds
		}
		return a / b
	}
	for _, p := range r.Policies {
		if p == imp {
			continue
		}
		r.Comparisons = append(r.Comparisons, Comparison{
			Baseline:                  p.Policy,
			TopTierP99WaitRatio:       ratio(p.WaitS[top].P99, imp.WaitS[top].P99),
			WeightedJCTRatio:          ratio(p.WeightedJCTS, imp.WeightedJCTS),
			WeightedJCTRatioCeiling:   ratio(p.WeightedJCTS, imp.WeightedJCTFloorS),
			JCTRatioCeilingAnyWeights: ceilingAnyWeights(p),
			OccupancyPoints:           100 * (imp.Occupancy - p.Occupancy),
			ImpactOccupancyVsBound:    imp.OccupancyVsBound,
			BaselinePartialIdleGPUH:   p.PartialGangIdleGPUHours,
			ImpactPartialIdleGPUH:     imp.PartialGangIdleGPUHours,
			ImpactLostFraction:        imp.LostFraction,
			BaselineIdleHeldGPUH:      p.IdleHeldGPUHours,
			ImpactIdleHeldGPUH:        imp.IdleHeldGPUHours,
			IdleHeldReductionPct:      reductionPct(p.IdleHeldGPUHours, imp.IdleHeldGPUHours),
			DeliveredGPUHoursGain:     imp.DeliveredGPUHours - p.DeliveredGPUHours,
		})
	}
}

// reductionPct is how much lower b is than a, in percent of a (0 when a
// is 0).
func reductionPct(a, b float64) float64 {
	if a <= 0 {
		return 0
	}
	return 100 * (a - b) / a
}

// ceilingAnyWeights is the best ratio of p's completion times to their
// floor under tier weights that never favour a lower tier: the largest,
// over k, of the ratio over the top k tiers with equal weights per job.
func ceilingAnyWeights(p *sim.Result) float64 {
	best, jct, floor := 0.0, 0.0, 0.0
	for _, t := range trace.Tiers {
		n := float64(p.JobsCompletedByTier[t])
		jct += n * p.MeanJCTS[t]
		floor += n * p.MeanJCTFloorS[t]
		if floor > 0 {
			best = max(best, jct/floor)
		}
	}
	return best
}

// Report is report.json.
type Report struct {
	Scenario    Scenario          `json:"scenario"`
	Definitions map[string]string `json:"definitions"`
	Policies    []*sim.Result     `json:"policies"`
	// Comparisons of the impact policy against each baseline.
	Comparisons []Comparison `json:"comparisons,omitempty"`
	// WallS is each policy's run time in seconds (they may run in parallel).
	WallS map[string]float64 `json:"wall_s"`
}

// TierWeightMap pairs trace.Tiers with weights.
func TierWeightMap(w []float64) map[string]float64 {
	out := map[string]float64{}
	for i, t := range trace.Tiers {
		if i < len(w) {
			out[t] = w[i]
		}
	}
	return out
}

// WriteJSON writes dir/report.json.
func (r *Report) WriteJSON(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create output directory: %w", err)
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encode report: %w", err)
	}
	path := filepath.Join(dir, "report.json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("write report: %w", err)
	}
	return path, nil
}

// WriteTable prints one row per policy.
func (r *Report) WriteTable(w io.Writer) error {
	if err := r.writePolicies(w); err != nil {
		return err
	}
	idleOn := false
	for _, p := range r.Policies {
		idleOn = idleOn || p.HungRuns > 0
	}
	if idleOn {
		if err := r.writeUtilization(w); err != nil {
			return err
		}
	}
	r.writeNotes(w)
	r.writeComparisons(w, idleOn)
	r.writeBound(w)
	r.writeScenario(w)
	return nil
}

// writePolicies writes the main table: one row per policy.
func (r *Report) writePolicies(w io.Writer) error {
	top := trace.Tiers[0]
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\toccupancy\tvs bound\tpartial-gang idle GPU-h\t%s wait p50\t%s wait p99\tnormal wait p99\tweighted JCT (floor)\tpreemptions\tlost GPU-h (%% of delivered)\tdelivered GPU-h\tfair-share dev\tdecision ms p50/p99\tcompleted\t\n", top, top)
	for _, p := range r.Policies {
		wt := p.WaitS[top]
		fmt.Fprintf(tw, "%s\t%.1f%%\t%.1f%%\t%.0f\t%s\t%s\t%s\t%s (%s)\t%d\t%.0f (%.2f%%)\t%.0f\t%.1f%%\t%.2f/%.2f\t%d/%d\t\n",
			p.Policy, 100*p.Occupancy, 100*p.OccupancyVsBound, p.PartialGangIdleGPUHours,
			sim.FormatSeconds(wt.P50), sim.FormatSeconds(wt.P99), sim.FormatSeconds(p.WaitS["normal"].P99), sim.FormatSeconds(p.WeightedJCTS), sim.FormatSeconds(p.WeightedJCTFloorS),
			p.Preemptions, p.LostGPUHours, 100*p.LostFraction, p.DeliveredGPUHours, 100*p.FairShareDeviation,
			p.DecisionLatencyMS.P50, p.DecisionLatencyMS.P99, p.JobsCompleted, p.JobsTotal-p.JobsUnschedulable)
	}
	return tw.Flush()
}

// writeUtilization writes the utilization layer's table (idleness model on).
func (r *Report) writeUtilization(w io.Writer) error {
	fmt.Fprintln(w, "\nutilization layer (idleness model on):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "policy\thung runs\tGPU-h held idle\treclaimed by idle policy\tkilled at walltime\tdelivered GPU-h\t\n")
	for _, p := range r.Policies {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%d\t%d\t%.0f\t\n", p.Policy, p.HungRuns, p.IdleHeldGPUHours, p.Reclaims, p.HungKilled, p.DeliveredGPUHours)
	}
	return tw.Flush()
}

// writeNotes names the jobs that never finished or could never fit, and
// the preemptions withdrawn.
func (r *Report) writeNotes(w io.Writer) {
	for _, p := range r.Policies {
		if p.JobsUnfinished > 0 {
			fmt.Fprintf(w, "note: %s: %d jobs never finished\n", p.Policy, p.JobsUnfinished)
		}
		if p.JobsUnschedulable > 0 {
			fmt.Fprintf(w, "note: %s: %d jobs can never fit the cluster and were not run\n", p.Policy, p.JobsUnschedulable)
		}
		if p.PreemptionsWithdrawn > 0 {
			fmt.Fprintf(w, "note: %s: %d of its %d preemptions were withdrawn within their grace (their preemptor started on GPUs freed meanwhile): their victims ran on\n",
				p.Policy, p.PreemptionsWithdrawn, p.PreemptionsIssued)
		}
	}
}

// writeComparisons writes impact against each baseline.
func (r *Report) writeComparisons(w io.Writer, idleOn bool) {
	if len(r.Comparisons) > 0 {
		fmt.Fprintln(w)
	}
	for _, c := range r.Comparisons {
		fmt.Fprintf(w, "impact vs %s: %s p99 wait %.1fx lower; weighted JCT %.2fx lower (no policy can exceed %.2fx: the floor, no job ever waiting; %.2fx under any tier weights favouring higher tiers); occupancy %+.1f points; partial-gang idle %.0f vs %.0f GPU-h\n",
			c.Baseline, trace.Tiers[0], c.TopTierP99WaitRatio, c.WeightedJCTRatio, c.WeightedJCTRatioCeiling, c.JCTRatioCeilingAnyWeights, c.OccupancyPoints, c.ImpactPartialIdleGPUH, c.BaselinePartialIdleGPUH)
		if idleOn {
			fmt.Fprintf(w, "  utilization layer: GPU-h held idle by hung runs %.0f vs %.0f (%.0f%% less); delivered GPU-h %+.0f\n",
				c.ImpactIdleHeldGPUH, c.BaselineIdleHeldGPUH, c.IdleHeldReductionPct, c.DeliveredGPUHoursGain)
		}
	}
}

// writeBound writes the top tier's bound and each policy's p99 against it.
func (r *Report) writeBound(w io.Writer) {
	b := r.Scenario.TopTierBound
	if b == nil {
		return
	}
	top := trace.Tiers[0]
	fmt.Fprintf(w, "\n%s bound (%s jobs alone on the cluster, backfill at the impact cadence): p50 %s, p99 %s; each policy's %s p99:", top, top,
		sim.FormatSeconds(b.P50), sim.FormatSeconds(b.P99), top)
	for i, p := range r.Policies {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(w, "%s %s %s (%s the bound)", sep, p.Policy, sim.FormatSeconds(p.WaitS[top].P99), timesBound(p.WaitS[top].P99, b.P99))
	}
	fmt.Fprintln(w)
}

// writeScenario writes what was simulated, under which model.
func (r *Report) writeScenario(w io.Writer) {
	span := ""
	if r.Scenario.From != "" || r.Scenario.To != "" {
		span = fmt.Sprintf(", submitted %s..%s", r.Scenario.From, r.Scenario.To)
	}
	fmt.Fprintf(w, "\nScenario: %d jobs (%s%s) on %s.\n", r.Scenario.Jobs, r.Scenario.Trace, span, r.Scenario.Cluster)
	fmt.Fprintf(w, "%s\n", r.Scenario.LabelRule)
	if r.Scenario.Idleness != "" {
		fmt.Fprintf(w, "%s\n", r.Scenario.Idleness)
	}
	fmt.Fprintf(w, "Model: %s\n", r.Scenario.Model.Description)
	fmt.Fprintln(w, "Occupancy and fair share are measured over the submission window; waits, JCT, preemptions and lost work over the whole run.")
}

func timesBound(v, bound float64) string {
	if bound <= 0 {
		if v <= 0 {
			return "1x"
		}
		return "above"
	}
	return fmt.Sprintf("%.1fx", v/bound)
}

// WriteSeries writes dir/series-<policy>.csv: the sampled time series the
// plots are drawn from, for anyone who wants to plot it differently.
func (r *Report) WriteSeries(dir string) error {
	for _, p := range r.Policies {
		var b strings.Builder
		b.WriteString("t,allocated,partial_idle,bound,queue\n")
		for _, s := range p.Series {
			fmt.Fprintf(&b, "%d,%d,%d,%d,%d\n", s.T, s.Allocated, s.Partial, s.Bound, s.Queue)
		}
		path := filepath.Join(dir, "series-"+p.Policy+".csv")
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("write series: %w", err)
		}
	}
	return nil
}
