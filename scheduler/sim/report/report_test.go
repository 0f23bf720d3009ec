package report

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/sim"
)

// result builds a policy's result with per-tier completion times (hours)
// and the same floor (1h) and job count (10) in every tier.
func result(name string, jctH map[string]float64, p99 float64, occ float64) *sim.Result {
	r := &sim.Result{Policy: name, Occupancy: occ, WaitS: map[string]sim.Percentiles{"critical": {P99: p99}},
		MeanJCTS: map[string]float64{}, MeanJCTFloorS: map[string]float64{}, JobsCompletedByTier: map[string]int{}}
	wsum, w := 0.0, map[string]float64{"critical": 8, "high": 4, "normal": 2, "scavenger": 1}
	for t, h := range jctH {
		r.MeanJCTS[t] = h * 3600
		r.MeanJCTFloorS[t] = 3600
		r.JobsCompletedByTier[t] = 10
		r.WeightedJCTS += w[t] * 10 * h * 3600
		wsum += w[t] * 10
	}
	r.WeightedJCTS /= wsum
	r.WeightedJCTFloorS = 3600
	return r
}

func TestCompareCeilings(t *testing.T) {
	// Baseline: critical 1h (at its floor), high 2h, normal 3h, scavenger
	// 6h. Weighted (8,4,2,1): (80+80+60+60)/150 = 28/15 h.
	base := result("nomad-native", map[string]float64{"critical": 1, "high": 2, "normal": 3, "scavenger": 6}, 3600, 0.80)
	imp := result("impact", map[string]float64{"critical": 1, "high": 1.5, "normal": 2, "scavenger": 4}, 60, 0.82)
	r := &Report{Policies: []*sim.Result{base, imp}}
	r.Compare("impact")
	if len(r.Comparisons) != 1 {
		t.Fatalf("%d comparisons", len(r.Comparisons))
	}
	c := r.Comparisons[0]
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(c.TopTierP99WaitRatio, 60) || !near(c.OccupancyPoints, 2) {
		t.Fatalf("p99 ratio %v, occupancy points %v", c.TopTierP99WaitRatio, c.OccupancyPoints)
	}
	if !near(c.WeightedJCTRatioCeiling, 28.0/15) {
		t.Fatalf("ceiling %v, want %v", c.WeightedJCTRatioCeiling, 28.0/15)
	}
	// Top-k tiers with equal weights: 1/1, 3/2, 6/3, 12/4: the best is 3.
	if !near(c.JCTRatioCeilingAnyWeights, 3) {
		t.Fatalf("ceiling under any weights %v, want 3", c.JCTRatioCeilingAnyWeights)
	}
	if c.WeightedJCTRatio > c.WeightedJCTRatioCeiling || c.WeightedJCTRatioCeiling > c.JCTRatioCeilingAnyWeights {
		t.Fatalf("ratio %v, ceiling %v, any-weights ceiling %v out of order", c.WeightedJCTRatio, c.WeightedJCTRatioCeiling, c.JCTRatioCeilingAnyWeights)
	}
}

func TestTableShowsFloorAndCeilings(t *testing.T) {
	base := result("nomad-native", map[string]float64{"critical": 1, "high": 2, "normal": 3, "scavenger": 6}, 3600, 0.80)
	imp := result("impact", map[string]float64{"critical": 1, "high": 1.5, "normal": 2, "scavenger": 4}, 60, 0.82)
	r := &Report{Policies: []*sim.Result{base, imp}}
	r.Compare("impact")
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if strings.Contains(out, "..)") {
		t.Errorf("a scenario without --from/--to prints an empty span:\n%s", out)
	}
	for _, want := range []string{
		"weighted JCT (floor)",
		"1.9h (1.0h)", // the baseline's weighted JCT and the floor
		"no policy can exceed 1.87x",
		"3.00x under any tier weights",
		"critical p99 wait 60.0x lower",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
