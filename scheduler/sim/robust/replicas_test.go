package robust

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/baseline"
	"github.com/impact-sched/nomad-impact/scheduler/sim/impact"
	"github.com/impact-sched/nomad-impact/scheduler/sim/synth"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// TestJitterStreams: each stream gives its own copy, the same every time;
// the compared policies' replicas and the twin's never share a stream.
func TestJitterStreams(t *testing.T) {
	var jobs []trace.Job
	for i := range 200 {
		jobs = append(jobs, trace.Job{ID: string(rune('a' + i%26)), Submit: int64(10 * i), Duration: 60, GPUs: 1})
	}
	copies := map[uint64][]trace.Job{}
	for _, s := range []uint64{0, 1, 2, 3} {
		a, b := Jitter(jobs, 5, 1e6, s), Jitter(jobs, 5, 1e6, s)
		if !slices.Equal(a, b) {
			t.Fatalf("stream %d: two copies differ", s)
		}
		for r, c := range copies {
			if slices.Equal(a, c) {
				t.Fatalf("streams %d and %d give the same copy", s, r)
			}
		}
		copies[s] = a
	}
	seen := map[uint64]string{}
	for k := range 5 {
		streams := map[string]uint64{"twin": twinStream(k)}
		if k > 0 {
			streams["replica"] = replicaStream(k)
		}
		for name, s := range streams {
			if o, dup := seen[s]; dup {
				t.Fatalf("%s %d's stream %d is also %s's", name, k, s, o)
			}
			seen[s] = name
		}
	}
}

// summaryRun is a run with the metrics the checks read.
func summaryRun(p50, jct float64) *sim.Result {
	return &sim.Result{WaitS: map[string]sim.Percentiles{"normal": {P50: p50, P99: p50}}, WeightedJCTS: jct, Occupancy: 0.9,
		JobsCompletedByTier: map[string]int{"normal": 1}, Capacity: 8, WindowStart: 0, WindowEnd: 3600}
}

// TestChecksCompareMeans: over replicas the checks compare the policies'
// means, and a failed check counts the replicas on which impact fails it
// against native's run on the same jobs: one bad replica does not fail a
// check whose mean passes, two replicas' excess fail one whose mean is
// over. The twin's failures count their replicas too.
func TestChecksCompareMeans(t *testing.T) {
	runs := func(p50s, jcts []float64) (*sim.Result, []*sim.Result) {
		var rs []*sim.Result
		for i := range p50s {
			rs = append(rs, summaryRun(p50s[i], jcts[i]))
		}
		return rs[0], rs[1:]
	}
	o := &Outcome{Results: map[string]*sim.Result{}, Replicas: map[string][]*sim.Result{}, NumReplicas: 3, Debounce: 1}
	// Native: p50 1000s (limit 1220s), JCT 510s (limit 511s).
	o.Results[baseline.NomadNative], o.Replicas[baseline.NomadNative] = runs([]float64{1000, 1000, 1000}, []float64{510, 510, 510})
	// Impact: one replica over the p50 limit but a mean under it (1100);
	// JCTs over native on two replicas and on average (520).
	o.Results[impact.Name], o.Replicas[impact.Name] = runs([]float64{900, 900, 1500}, []float64{500, 520, 540})
	cs := NeverWorse(o)
	byName := map[string]Check{}
	for _, c := range cs {
		byName[c.Name] = c
	}
	if c := byName["normal wait p50"]; !c.OK || c.ReplicasFailed != 0 || !strings.Contains(c.Detail, "18m vs native 17m") {
		t.Errorf("p50: %+v, want passed on the mean 1100s", c)
	}
	jct := byName[WeightedJCTCheck]
	if jct.OK || jct.ReplicasFailed != 2 {
		t.Fatalf("weighted JCT: %+v, want failed on 2 replicas", jct)
	}
	if jct.JCTByTier == nil || math.Abs(jct.JCTByTier.OtherS-10) > 1e-9 {
		t.Errorf("JCT breakdown %+v: want the means' difference, 10s, in OtherS (no jobs to match)", jct.JCTByTier)
	}
	o.Checks = cs
	var b strings.Builder
	WriteFailures(&b, []*Outcome{o})
	if !strings.Contains(b.String(), "weighted JCT: 9m vs native 8m (limit: native + the 1s debounce) (fails on 2 of 3 replicas)") {
		t.Errorf("failures:\n%s", b.String())
	}
	// A twin over native's JCT on every replica (515s each): the tally
	// tells its failures on every replica from impact's on two of three.
	o.Results[NativeTwin], o.Replicas[NativeTwin] = runs([]float64{1000, 1000, 1000}, []float64{515, 515, 515})
	twinChecks(o)
	if !slices.Equal(o.TwinFailed, []string{WeightedJCTCheck}) || o.TwinReplicasFailed[WeightedJCTCheck] != 3 {
		t.Errorf("twin failed %v on %v replicas, want the weighted JCT on 3", o.TwinFailed, o.TwinReplicasFailed)
	}
	n, ok := TwinTally([]*Outcome{o})
	if want := (TwinCount{TwinFailed: 1, TwinEvery: 1, ImpactFailed: 1}); !ok || n != want {
		t.Errorf("tally %+v, want %+v", n, want)
	}
	if d := n.describe(3); !strings.Contains(d, "it fails 1 checks against nomad-native itself, 1 of them on all 3 replicas; impact fails 1 of those kinds, 0 of them on all 3 replicas") {
		t.Errorf("tally line %q", d)
	}
	// One replica: the same numbers as replica 0 alone, no count.
	one := &Outcome{Results: o.Results, Debounce: 1}
	for _, c := range NeverWorse(one) {
		if c.Name == "normal wait p50" && !c.OK {
			t.Errorf("replica 0 alone failed p50: %+v", c)
		}
		if c.ReplicasFailed != 0 {
			t.Errorf("one replica counted %+v", c)
		}
	}
}

// TestRunReplicas: Run simulates each policy and the twin once per
// replica, replica k of every compared policy on the same jittered copy
// (paired) and the twin on copies of its own; the summary is the mean of
// the replicas, and the report says how many there were.
func TestRunReplicas(t *testing.T) {
	cfg := config(t)
	cfg.TwinJitter, cfg.Replicas, cfg.ReplicaJitter = 1, 3, 5
	sc := scenario(t, synth.Bursty(1, 0.05))
	o, err := Run(sc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	submits := func(r *sim.Result) map[string]int64 {
		m := map[string]int64{}
		for _, j := range r.Jobs {
			m[j.ID] = j.Submit
		}
		return m
	}
	equal := func(a, b map[string]int64) bool {
		for id, s := range a {
			if b[id] != s {
				return false
			}
		}
		return len(a) == len(b)
	}
	for _, n := range append(slices.Clone(Policies), NativeTwin) {
		if got := len(o.runs(n)); got != 3 {
			t.Fatalf("%s: %d runs, want 3", n, got)
		}
	}
	nat := o.runs(baseline.NomadNative)
	given := map[string]int64{}
	for _, j := range sc.Jobs {
		given[j.ID] = j.Submit
	}
	if !equal(submits(nat[0]), given) {
		t.Error("replica 0 does not run the scenario's jobs as given")
	}
	for k := 1; k < 3; k++ {
		ns := submits(nat[k])
		if equal(ns, submits(nat[0])) {
			t.Errorf("replica %d: no submit moved", k)
		}
		for _, n := range []string{impact.Name, baseline.Backfill} {
			if !equal(submits(o.runs(n)[k]), ns) {
				t.Errorf("replica %d: %s ran other jobs than nomad-native", k, n)
			}
		}
		if equal(submits(o.runs(NativeTwin)[k]), ns) {
			t.Errorf("replica %d: the twin shares native's jitter", k)
		}
	}
	imp := o.runs(impact.Name)
	want := (imp[0].WeightedJCTS + imp[1].WeightedJCTS + imp[2].WeightedJCTS) / 3
	if got := o.Summary[impact.Name].WeightedJCTS; math.Abs(got-want) > 1e-9 {
		t.Errorf("summary weighted JCT %v, want the mean %v", got, want)
	}
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"replicas":3`) {
		t.Errorf("report lacks the replica count: %.300s", b)
	}
}

// TestMeanJCTByHand: over replicas the breakdown is the mean of each
// replica's (a tier missing from one counts zero there), so its parts
// still sum to the difference of the mean weighted JCTs the check
// compares.
func TestMeanJCTByHand(t *testing.T) {
	run := func(jobs ...sim.JobResult) *sim.Result {
		r := &sim.Result{TierWeights: []float64{8, 4, 2, 1}, Jobs: jobs}
		r.WeightedJCTS = weighted(r)
		return r
	}
	n := func(start int64) sim.JobResult {
		return sim.JobResult{ID: "n1", Tier: "normal", FirstStart: start, Finish: start + 100}
	}
	s := func(finish int64, preempted int) sim.JobResult {
		return sim.JobResult{ID: "s1", Tier: "scavenger", Finish: finish, Preempted: preempted}
	}
	imp := []*sim.Result{run(n(60)), run(n(0), s(300, 1))}
	nat := []*sim.Result{run(n(0)), run(n(0), s(100, 0))}
	b := meanJCT(imp, nat)
	want := []JCTPart{
		{Tier: "scavenger", Jobs: 0.5, AfterStartS: 200.0 / 3 / 2, Preemptions: 0.5},
		{Tier: "normal", Jobs: 1, FirstStartS: 30},
	}
	if len(b.Tiers) != len(want) {
		t.Fatalf("tiers %+v, want %+v", b.Tiers, want)
	}
	sum := b.OtherS
	for i, p := range b.Tiers {
		w := want[i]
		if p.Tier != w.Tier || p.Jobs != w.Jobs || p.Preemptions != w.Preemptions ||
			math.Abs(p.FirstStartS-w.FirstStartS) > 1e-9 || math.Abs(p.AfterStartS-w.AfterStartS) > 1e-9 {
			t.Errorf("tier %d: %+v, want %+v", i, p, w)
		}
		sum += p.TotalS()
	}
	d := (imp[0].WeightedJCTS+imp[1].WeightedJCTS)/2 - (nat[0].WeightedJCTS+nat[1].WeightedJCTS)/2
	if math.Abs(sum-d) > 1e-9 || math.Abs(b.OtherS) > 1e-9 {
		t.Errorf("parts sum to %v with %v left over, the means differ by %v", sum, b.OtherS, d)
	}
	if !strings.Contains(b.String(), "preemptions 0.5, native 0") {
		t.Errorf("breakdown line %q", b.String())
	}
}
