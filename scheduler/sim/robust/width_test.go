package robust

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/baseline"
	"github.com/impact-sched/nomad-impact/scheduler/sim/impact"
)

// waitRun is a run given as each tier's waits by job width; a negative
// wait is a job that never finished.
type waitRun map[string]map[int][]int64

// result is the run as the simulator reports it: one finished job per
// wait (submitted at 0), its tiers' percentiles and completions, equal
// occupancy and weighted JCT for every run.
func (wr waitRun) result() *sim.Result {
	r := &sim.Result{TierWeights: []float64{8, 4, 2, 1}, WaitS: map[string]sim.Percentiles{}, JobsCompletedByTier: map[string]int{},
		Occupancy: 0.5, Capacity: 8, WindowEnd: 3600}
	for tier, widths := range wr {
		var all []float64
		for gpus, waits := range widths {
			for i, w := range waits {
				id := fmt.Sprintf("%s-%d-%d", tier, gpus, i)
				if w < 0 {
					r.Jobs = append(r.Jobs, sim.JobResult{ID: id, Tier: tier, GPUs: gpus, FirstStart: -1, Finish: -1})
					continue
				}
				r.Jobs = append(r.Jobs, sim.JobResult{ID: id, Tier: tier, GPUs: gpus, FirstStart: w, Finish: w + 100})
				all = append(all, float64(w))
			}
		}
		slices.Sort(all)
		r.WaitS[tier] = sim.Percentiles{P50: all[sim.NearestRank(len(all), 50)], P99: all[sim.NearestRank(len(all), 99)]}
		r.JobsCompletedByTier[tier] = len(all)
	}
	return r
}

// TestWaitBreakdownByHand: two replicas of a scavenger tier whose 1-GPU
// jobs wait longer under impact while the normal tier's 2-GPU jobs wait
// less. The breakdown is the check's percentile per width, the mean of
// the replicas where both policies finished such jobs, unfinished jobs
// left out; the failures list shows every width of the failed tier and
// the widths impact served better in the tiers above, and only the
// failed tier-wait checks carry it.
func TestWaitBreakdownByHand(t *testing.T) {
	imp := []waitRun{
		{"scavenger": {1: {1000, 3000, 5000, -1}, 2: {500}}, "normal": {1: {1000}, 2: {10, 20}}},
		{"scavenger": {1: {2000, 4000, 6000}, 2: {700}}, "normal": {1: {1000}, 2: {30, 40}}},
	}
	nat := []waitRun{
		{"scavenger": {1: {10, 20, 30}, 2: {40}}, "normal": {1: {1000}, 2: {600, 900}}},
		{"scavenger": {1: {20, 40, 60}, 2: {-1}}, "normal": {1: {1000}, 2: {700, 800}}},
	}
	o := &Outcome{Scenario: Scenario{Name: "s"}, Results: map[string]*sim.Result{}, Replicas: map[string][]*sim.Result{}, NumReplicas: 2, Debounce: 1}
	for k := range imp {
		for name, wr := range map[string]waitRun{impact.Name: imp[k], baseline.NomadNative: nat[k]} {
			if k == 0 {
				o.Results[name] = wr.result()
			} else {
				o.Replicas[name] = append(o.Replicas[name], wr.result())
			}
		}
	}
	o.Checks = NeverWorse(o)

	var scav *Check
	for i, c := range o.Checks {
		if (c.WaitByGPUs != nil) != (!c.OK && c.tier != "") {
			t.Errorf("check %q (ok %v): breakdown %v", c.Name, c.OK, c.WaitByGPUs)
		}
		if c.Name == "scavenger wait p50" {
			scav = &o.Checks[i]
		}
	}
	if scav == nil || scav.OK || scav.WaitByGPUs == nil {
		t.Fatalf("scavenger p50 check %+v: want it failed, with a breakdown", scav)
	}
	b := scav.WaitByGPUs
	want := []TierWaits{
		{Tier: "scavenger", Widths: []WidthWait{{GPUs: 1, Jobs: 3, ImpactS: 3500, NativeS: 30}, {GPUs: 2, Jobs: 1, ImpactS: 500, NativeS: 40}}},
		{Tier: "normal", Widths: []WidthWait{{GPUs: 1, Jobs: 1, ImpactS: 1000, NativeS: 1000}, {GPUs: 2, Jobs: 2, ImpactS: 20, NativeS: 650}}},
	}
	if b.Percentile != 50 || len(b.Tiers) != len(want) {
		t.Fatalf("breakdown %+v, want p50 of %+v", b, want)
	}
	for i, tw := range b.Tiers {
		if tw.Tier != want[i].Tier || len(tw.Widths) != len(want[i].Widths) {
			t.Fatalf("tier %d: %+v, want %+v", i, tw, want[i])
		}
		for j, w := range tw.Widths {
			x := want[i].Widths[j]
			if w.GPUs != x.GPUs || math.Abs(w.Jobs-x.Jobs) > 1e-9 || math.Abs(w.ImpactS-x.ImpactS) > 1e-9 || math.Abs(w.NativeS-x.NativeS) > 1e-9 {
				t.Errorf("%s width %d: %+v, want %+v", tw.Tier, j, w, x)
			}
		}
	}

	var buf bytes.Buffer
	WriteFailures(&buf, []*Outcome{o})
	line := "s: scavenger wait p50: "
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.HasPrefix(l, line) {
			line = l
		}
	}
	wantText := fmt.Sprintf("; by GPUs, impact vs native p50: scavenger 1 GPU %s vs %s (3 jobs), 2 GPUs %s vs %s (1 job); tiers above, where impact served them better: normal 2 GPUs %s vs %s (2 jobs)",
		sim.FormatSeconds(3500), sim.FormatSeconds(30), sim.FormatSeconds(500), sim.FormatSeconds(40), sim.FormatSeconds(20), sim.FormatSeconds(650))
	if !strings.HasSuffix(line, wantText) {
		t.Errorf("failure line\n%s\nwant it to end\n%s", line, wantText)
	}
}

// TestWaitBreakdownKeepsTheTopTierAlone: a failed top-tier check has no
// tier above it, and its line lists none; a tier with no width both
// policies finished stays first, and its line says so rather than show
// a tier above as its own.
func TestWaitBreakdownKeepsTheTopTierAlone(t *testing.T) {
	imp := waitRun{"critical": {8: {18000}, 1: {40}}, "high": {1: {5}}}.result()
	nat := waitRun{"critical": {8: {6000}, 1: {1400}}, "high": {1: {60}}}.result()
	b := breakWaits([]*sim.Result{imp}, []*sim.Result{nat}, "critical", 99)
	if len(b.Tiers) != 1 || b.Tiers[0].Tier != "critical" || len(b.Tiers[0].Widths) != 2 {
		t.Fatalf("breakdown %+v: want the critical tier's two widths alone", b)
	}
	if s := b.String(); strings.Contains(s, "tiers above") || !strings.Contains(s, "8 GPUs "+sim.FormatSeconds(18000)+" vs "+sim.FormatSeconds(6000)) {
		t.Errorf("line %q", s)
	}
	imp = waitRun{"critical": {1: {40}}, "high": {4: {5000}}}.result()
	nat = waitRun{"critical": {1: {1400}}, "high": {2: {60}}}.result()
	b = breakWaits([]*sim.Result{imp}, []*sim.Result{nat}, "high", 50)
	if len(b.Tiers) != 2 || b.Tiers[0].Tier != "high" || len(b.Tiers[0].Widths) != 0 || b.Tiers[1].Tier != "critical" {
		t.Fatalf("breakdown %+v: want high first, without widths, then critical", b)
	}
	if s := b.String(); s != "by GPUs: no width of the tier finished under both policies" {
		t.Errorf("line %q", s)
	}

}
