package robust

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/baseline"
	"github.com/impact-sched/nomad-impact/scheduler/sim/impact"
	"github.com/impact-sched/nomad-impact/scheduler/sim/synth"
)

// weighted is the tier-weighted JCT of jobs as the simulator takes it,
// over those that finished.
func weighted(r *sim.Result) float64 {
	var w, sum float64
	for _, j := range r.Jobs {
		if j.Finish >= 0 {
			w += r.TierWeight(j.Tier)
			sum += r.TierWeight(j.Tier) * float64(j.Finish-j.Submit)
		}
	}
	return sum / w
}

// TestJCTBreakdownByHand: a critical job that starts 90s sooner under
// impact, a scavenger job that impact preempted and finished 400s later,
// and one only impact finished: each tier's share is its weight over
// impact's summed weights times the change, split at the first start,
// and the rest is the job finished under one policy only.
func TestJCTBreakdownByHand(t *testing.T) {
	w := []float64{8, 4, 2, 1}
	imp := &sim.Result{TierWeights: w, Jobs: []sim.JobResult{
		{ID: "c1", Tier: "critical", Submit: 0, FirstStart: 10, Finish: 110},
		{ID: "s1", Tier: "scavenger", Submit: 0, FirstStart: 0, Finish: 500, Preempted: 1},
		{ID: "s2", Tier: "scavenger", Submit: 0, FirstStart: 0, Finish: 300},
	}}
	nat := &sim.Result{TierWeights: w, Jobs: []sim.JobResult{
		{ID: "c1", Tier: "critical", Submit: 0, FirstStart: 100, Finish: 200},
		{ID: "s1", Tier: "scavenger", Submit: 0, FirstStart: 0, Finish: 100},
		{ID: "s2", Tier: "scavenger", Submit: 0, FirstStart: -1, Finish: -1},
	}}
	imp.WeightedJCTS, nat.WeightedJCTS = weighted(imp), weighted(nat) // 168 and 188.9
	b := breakJCT(imp, nat)
	want := []JCTPart{
		{Tier: "critical", Jobs: 1, FirstStartS: 8 * -90.0 / 10},
		{Tier: "scavenger", Jobs: 1, AfterStartS: 400.0 / 10, Preemptions: 1},
	}
	if len(b.Tiers) != len(want) {
		t.Fatalf("tiers %+v, want %+v", b.Tiers, want)
	}
	for i, p := range b.Tiers {
		if p.Tier != want[i].Tier || p.Jobs != want[i].Jobs || p.Preemptions != want[i].Preemptions ||
			math.Abs(p.FirstStartS-want[i].FirstStartS) > 1e-9 || math.Abs(p.AfterStartS-want[i].AfterStartS) > 1e-9 {
			t.Errorf("tier %d: %+v, want %+v", i, p, want[i])
		}
	}
	if other := imp.WeightedJCTS - nat.WeightedJCTS - (-72 + 40); math.Abs(b.OtherS-other) > 1e-9 || math.Abs(other) < 1 {
		t.Errorf("other %.3f, want %.3f", b.OtherS, other)
	}
	s := b.String()
	for _, frag := range []string{"critical -72.0s (first starts -72.0s", "scavenger +40.0s (first starts +0.0s, first start to finish +40.0s; preemptions 1, native 0)", "finished under one policy only +11.1s"} {
		if !strings.Contains(s, frag) {
			t.Errorf("%q lacks %q", s, frag)
		}
	}
}

// TestJCTBreakdownSumsToTheDifference: on simulated runs the tiers' shares
// add up to the difference of the weighted JCTs, nothing is left over
// when both policies finish every job, and a tier none of whose jobs was
// preempted under either policy adds nothing after its first starts (a
// job runs its duration under both).
func TestJCTBreakdownSumsToTheDifference(t *testing.T) {
	cfg := config(t)
	preempted := false
	for _, s := range []synth.Spec{synth.Gangs(1, 0.15), synth.Saturated(1, 0.2)} {
		o, err := Run(scenario(t, s), cfg)
		if err != nil {
			t.Fatal(err)
		}
		imp, nat := o.Results[impact.Name], o.Results[baseline.NomadNative]
		if imp.JobsUnfinished != 0 || nat.JobsUnfinished != 0 {
			t.Fatalf("%s: unfinished jobs %d, %d", s.Name, imp.JobsUnfinished, nat.JobsUnfinished)
		}
		b := breakJCT(imp, nat)
		t.Logf("%s: %d jobs, diff %.2f: %s", s.Name, len(imp.Jobs), imp.WeightedJCTS-nat.WeightedJCTS, b)
		sum := b.OtherS
		for _, p := range b.Tiers {
			sum += p.TotalS()
			if p.Preemptions == 0 && p.NativePreemptions == 0 && math.Abs(p.AfterStartS) > 1e-6 {
				t.Errorf("%s: %s, never preempted, adds %.3fs after its first starts", s.Name, p.Tier, p.AfterStartS)
			}
			preempted = preempted || p.Preemptions > 0
		}
		if d := imp.WeightedJCTS - nat.WeightedJCTS; math.Abs(sum-d) > 1e-6*math.Max(1, math.Abs(d)) || math.Abs(b.OtherS) > 1e-6 {
			t.Errorf("%s: shares sum to %.6f with %.6f left over, the difference is %.6f", s.Name, sum, b.OtherS, d)
		}
	}
	if !preempted {
		t.Error("impact preempted nothing: the test does not reach time after a first start")
	}
}

// TestFailuresShowTheJCTBreakdown: the failures list carries the
// breakdown on impact's failed weighted-JCT check, and only there.
func TestFailuresShowTheJCTBreakdown(t *testing.T) {
	w := []float64{8, 4, 2, 1}
	res := func(start int64) *sim.Result {
		r := &sim.Result{TierWeights: w, WaitS: map[string]sim.Percentiles{"normal": {}}, JobsCompletedByTier: map[string]int{"normal": 1},
			Occupancy: 0.5, Capacity: 8, WindowEnd: 3600,
			Jobs: []sim.JobResult{{ID: "n1", Tier: "normal", Submit: 0, FirstStart: start, Finish: start + 100}}}
		r.WeightedJCTS = weighted(r)
		return r
	}
	o := &Outcome{Scenario: Scenario{Name: "s"}, Results: map[string]*sim.Result{
		baseline.NomadNative: res(0),
		impact.Name:          res(60),
	}, Debounce: 1}
	o.Checks = NeverWorse(o)
	var buf bytes.Buffer
	WriteFailures(&buf, []*Outcome{o})
	got := buf.String()
	if !strings.Contains(got, "s: weighted JCT: ") || !strings.Contains(got, "by tier, impact minus native in the weighted mean: normal +60.0s (first starts +60.0s") {
		t.Errorf("failures:\n%s", got)
	}
	for _, c := range o.Checks {
		if (c.JCTByTier != nil) != (c.Name == WeightedJCTCheck) {
			t.Errorf("check %q: breakdown %v", c.Name, c.JCTByTier)
		}
	}
	if strings.Count(got, "by tier") != 1 {
		t.Errorf("breakdown on more than the JCT check:\n%s", got)
	}
}

// TestJCTBreakdownIsReproducible: the rest of the difference is summed in
// the tiers' sorted order (largest share first), not in a map's, so the
// same runs give the same OtherS to the last bit. The shares are chosen so
// that the order matters in floating point: subtracting the 1s share
// between the two 1e16s ones loses it, so a map's order gave 0 or -1.
func TestJCTBreakdownIsReproducible(t *testing.T) {
	w := []float64{1, 1, 1, 1}
	imp := &sim.Result{TierWeights: w, Jobs: []sim.JobResult{
		{ID: "c", Tier: "critical", Submit: 0, FirstStart: 3e16, Finish: 3e16 + 1},
		{ID: "h", Tier: "high", Submit: 0, FirstStart: 3, Finish: 4},
		{ID: "n", Tier: "normal", Submit: 0, FirstStart: 0, Finish: 1},
	}}
	nat := &sim.Result{TierWeights: w, Jobs: []sim.JobResult{
		{ID: "c", Tier: "critical", Submit: 0, FirstStart: 0, Finish: 1},
		{ID: "h", Tier: "high", Submit: 0, FirstStart: 0, Finish: 1},
		{ID: "n", Tier: "normal", Submit: 0, FirstStart: 3e16, Finish: 3e16 + 1},
	}}
	// Both weighted JCTs are left at 0: OtherS is then minus the shares'
	// sum, 1e16 + 1 - 1e16 = 1 exactly when the large shares cancel first.
	for i := range 50 {
		if b := breakJCT(imp, nat); b.OtherS != -1 {
			t.Fatalf("call %d: other %v, want -1 (shares %+v)", i, b.OtherS, b.Tiers)
		}
	}
}
