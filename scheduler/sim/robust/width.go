package robust

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// WaitBreakdown is, for a failed tier-wait check, the same percentile of
// the waits by job width: of the failed tier's jobs, and of the tiers
// above it. A tier's percentile mixes jobs of every width, and the two
// schedulers serve widths differently (how each places, and whom impact
// preempts, takes back and keeps out). The breakdown shows which widths
// of the failed tier waited longer, and which widths of the tiers above
// waited less (on rand-46, seed 1, every width of every tier above:
// example/sim/README.md, "Twenty-eighth pass"); it does not say why
// (the twenty-ninth pass traces rand-46's to the take-backs).
type WaitBreakdown struct {
	// Percentile is the check's: 50 or 99.
	Percentile float64 `json:"percentile"`
	// Tiers: the failed tier first (its Widths empty when no width of it
	// was finished under both policies), then the tiers above it with
	// such widths, top first.
	Tiers []TierWaits `json:"tiers"`
}

// TierWaits is one tier's waits by the GPUs its jobs ask.
type TierWaits struct {
	Tier   string      `json:"tier"`
	Widths []WidthWait `json:"widths"`
}

// WidthWait is the percentile of the waits of a tier's jobs of one width
// (GPUs, all allocations together) that each policy finished, the mean
// of the replicas' (a replica where either policy finished none of them
// left out), and how many such jobs impact finished (mean).
type WidthWait struct {
	GPUs    int     `json:"gpus"`
	Jobs    float64 `json:"jobs"`
	ImpactS float64 `json:"impact_s"`
	NativeS float64 `json:"native_s"`
}

// waitsByGPUs is each tier's waits (first start - submit) by job width, of
// the jobs r finished, each width's sorted (sim.Percentile reads them).
func waitsByGPUs(r *sim.Result) map[string]map[int][]float64 {
	out := map[string]map[int][]float64{}
	for _, j := range r.Jobs {
		if j.Finish < 0 || j.FirstStart < 0 {
			continue
		}
		m := out[j.Tier]
		if m == nil {
			m = map[int][]float64{}
			out[j.Tier] = m
		}
		m[j.GPUs] = append(m[j.GPUs], float64(j.FirstStart-j.Submit))
	}
	for _, m := range out {
		for _, w := range m {
			slices.Sort(w)
		}
	}
	return out
}

// breakWaits is the WaitBreakdown of tier's p-th percentile, impRuns[k]
// against natRuns[k] (the same jobs), averaged over the replicas.
func breakWaits(impRuns, natRuns []*sim.Result, tier string, p float64) *WaitBreakdown {
	b := &WaitBreakdown{Percentile: p}
	rank := slices.Index(trace.Tiers, tier)
	if rank < 0 {
		return b
	}
	order := append([]string{tier}, trace.Tiers[:rank]...)
	n := min(len(impRuns), len(natRuns))
	imp, nat := make([]map[string]map[int][]float64, n), make([]map[string]map[int][]float64, n)
	for k := range n {
		imp[k], nat[k] = waitsByGPUs(impRuns[k]), waitsByGPUs(natRuns[k])
	}
	for _, t := range order {
		type acc struct {
			jobs, imp, nat float64
			runs           int
		}
		by := map[int]*acc{}
		for k := range n {
			for g, iw := range imp[k][t] {
				nw := nat[k][t][g]
				if len(nw) == 0 {
					continue
				}
				a := by[g]
				if a == nil {
					a = &acc{}
					by[g] = a
				}
				a.jobs += float64(len(iw))
				a.imp += sim.Percentile(iw, p)
				a.nat += sim.Percentile(nw, p)
				a.runs++
			}
		}
		tw := TierWaits{Tier: t}
		for g, a := range by {
			f := 1 / float64(a.runs)
			tw.Widths = append(tw.Widths, WidthWait{GPUs: g, Jobs: f * a.jobs, ImpactS: f * a.imp, NativeS: f * a.nat})
		}
		slices.SortFunc(tw.Widths, func(x, y WidthWait) int { return cmp.Compare(x.GPUs, y.GPUs) })
		// The failed tier stays first even with no width both finished.
		if len(tw.Widths) > 0 || t == tier {
			b.Tiers = append(b.Tiers, tw)
		}
	}
	return b
}

// servedBetter reports whether impact's wait at w is at least a tenth
// below native's (and a minute): the tiers above a failed one list only
// those widths in the line of failures.
func (w WidthWait) servedBetter() bool { return w.ImpactS <= 0.9*w.NativeS-60 }

// String is the breakdown in a line, for the suite's list of failures:
// every width of the failed tier, and the widths of the tiers above that
// impact served better (the JSON keeps them all).
func (b *WaitBreakdown) String() string {
	if len(b.Tiers) == 0 || len(b.Tiers[0].Widths) == 0 {
		return "by GPUs: no width of the tier finished under both policies"
	}
	width := func(w WidthWait) string {
		unit := "GPUs"
		if w.GPUs == 1 {
			unit = "GPU"
		}
		jobs := "jobs"
		if w.Jobs == 1 {
			jobs = "job"
		}
		return fmt.Sprintf("%d %s %s vs %s (%.4g %s)", w.GPUs, unit, sim.FormatSeconds(w.ImpactS), sim.FormatSeconds(w.NativeS), w.Jobs, jobs)
	}
	tier := func(tw TierWaits, keep func(WidthWait) bool) string {
		var parts []string
		for _, w := range tw.Widths {
			if keep(w) {
				parts = append(parts, width(w))
			}
		}
		if len(parts) == 0 {
			return ""
		}
		return tw.Tier + " " + strings.Join(parts, ", ")
	}
	s := fmt.Sprintf("by GPUs, impact vs native p%g: %s", b.Percentile, tier(b.Tiers[0], func(WidthWait) bool { return true }))
	var above []string
	for _, tw := range b.Tiers[1:] {
		if t := tier(tw, WidthWait.servedBetter); t != "" {
			above = append(above, t)
		}
	}
	if len(above) > 0 {
		s += "; tiers above, where impact served them better: " + strings.Join(above, "; ")
	}
	return s
}
