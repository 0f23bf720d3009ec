package impact

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/policy"
	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/baseline"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

func tj(id string, submit, dur int64, gpus int, tier string, preemptible bool) trace.Job {
	p := preemptible
	return trace.Job{ID: id, Submit: submit, Duration: dur, GPUs: gpus, Project: "p", Tier: tier, Preemptible: &p, Walltime: dur}
}

func newSched(t *testing.T) *Scheduler {
	t.Helper()
	pol, err := DefaultPolicy()
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(pol, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newSchedNoHeadroom is the built-in policy without its headroom block:
// on a one-node cluster the headroom would keep the only node for
// critical work, which is not what these tests are about.
func newSchedNoHeadroom(t *testing.T) *Scheduler {
	t.Helper()
	return newSchedWith(t, func(pol *policy.Policy) { pol.Headrooms = nil })
}

// newSchedWith is the built-in policy changed by change, with opts.
func newSchedWith(t *testing.T, change func(*policy.Policy), opts ...Option) *Scheduler {
	t.Helper()
	pol, err := DefaultPolicy()
	if err != nil {
		t.Fatal(err)
	}
	change(pol)
	s, err := New(pol, nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// byID is each job's outcome in res, by job ID.
func byID(res *sim.Result) map[string]sim.JobResult {
	out := make(map[string]sim.JobResult, len(res.Jobs))
	for _, j := range res.Jobs {
		out[j.ID] = j
	}
	return out
}

func opts(t *testing.T, nodes int) sim.Options {
	t.Helper()
	cl, err := sim.UniformCluster(nodes, 8, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	m := sim.DefaultModel()
	m.Debounce, m.Interval, m.Grace, m.RestartCost, m.CheckpointInterval = 1, 10, 60, 120, 1800
	return sim.Options{Cluster: cl, Model: m}
}

// TestCriticalPreemptsScavenger: a scavenger job fills the node; a
// critical job arriving after the scavenger's minimum runtime (30m) makes
// the engine preempt it. The critical job starts once the grace period
// (60s) has passed, at the next decision (the release's, 1s later).
func TestCriticalPreemptsScavenger(t *testing.T) {
	jobs := []trace.Job{
		tj("scav", 0, 7200, 8, "scavenger", true),
		tj("crit", 2400, 600, 4, "critical", false),
	}
	res, err := sim.Run(jobs, newSched(t), opts(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Preemptions != 1 || res.JobsCompleted != 2 {
		t.Fatalf("preemptions %d completed %d", res.Preemptions, res.JobsCompleted)
	}
	starts := byID(res)
	// Submitted at 2400, decided 1s later (the debounce), stopped at
	// 2461, admitted 1s after the release.
	if got := starts["crit"].FirstStart; got != 2462 {
		t.Fatalf("critical started at %d, want 2462", got)
	}
	// The scavenger checkpointed at 1800, lost the 660s after it and pays
	// the 120s restart, on 8 GPUs.
	if want := (660.0 + 120) * 8 / 3600; res.LostGPUHours < want-1e-9 || res.LostGPUHours > want+1e-9 {
		t.Fatalf("lost %v GPU-h, want %v", res.LostGPUHours, want)
	}
}

// TestPreemptedJobQueuesBehindItsTier: a preempted job is queued again as
// Nomad re-registers a parked job, with a new submit time, so the
// scavenger job submitted while it ran starts before it. The scenario is
// TestCriticalPreemptsScavenger's with a second 8-GPU scavenger job,
// submitted at 600, waiting for the node; when the critical job ends
// (3062) it starts, and the victim (queued again at 2461) runs after it.
// A victim that kept its first submit time (0) would restart first and
// finish first.
func TestPreemptedJobQueuesBehindItsTier(t *testing.T) {
	jobs := []trace.Job{
		tj("scav", 0, 7200, 8, "scavenger", true),
		tj("later", 600, 600, 8, "scavenger", true),
		tj("crit", 2400, 600, 4, "critical", false),
	}
	res, err := sim.Run(jobs, newSched(t), opts(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Preemptions != 1 || res.JobsCompleted != 3 {
		t.Fatalf("preemptions %d completed %d", res.Preemptions, res.JobsCompleted)
	}
	r := byID(res)
	if r["later"].FirstStart < r["crit"].Finish || r["later"].Finish >= r["scav"].Finish {
		t.Errorf("later ran %d-%d, the victim finished at %d (critical ended at %d): want later to run before the victim's restart",
			r["later"].FirstStart, r["later"].Finish, r["scav"].Finish, r["crit"].Finish)
	}
}

// A run that ends on its own is recorded as completed, as the live
// adapter records an allocation that completes while Nomad still wants it
// running (its run time may teach learned walltimes); a preempted run is
// recorded as stopped. The scenario is TestCriticalPreemptsScavenger's,
// with a late job whose arrival makes the store take in the last finish.
func TestFinishedRunsRecordedAsCompletedOrStopped(t *testing.T) {
	jobs := []trace.Job{
		tj("scav", 0, 7200, 8, "scavenger", true),
		tj("crit", 2400, 600, 4, "critical", false),
		tj("late", 20000, 60, 1, "normal", true),
	}
	s := newSched(t)
	res, err := sim.Run(jobs, s, opts(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Preemptions != 1 || res.JobsCompleted != 3 {
		t.Fatalf("preemptions %d completed %d", res.Preemptions, res.JobsCompleted)
	}
	recs, _ := s.store.Snapshot().FinishedSince(0)
	var got []string
	for _, r := range recs {
		got = append(got, fmt.Sprintf("%s completed=%v", r.JobID, r.Completed))
	}
	// The scavenger's first run, stopped for the critical job; the
	// critical job's run; the scavenger's second run.
	want := []string{"scav completed=false", "crit completed=true", "scav completed=true"}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("finished records %q, want %q", got, want)
	}
	if run := recs[1].End.Sub(recs[1].Start); run != 600*time.Second {
		t.Fatalf("critical run recorded as %v, want 10m", run)
	}
}

// TestNonPreemptibleIsNeverPreempted: the same with a non-preemptible
// occupant: the critical job waits for it to end.
func TestNonPreemptibleIsNeverPreempted(t *testing.T) {
	jobs := []trace.Job{
		tj("high", 0, 7200, 8, "high", false),
		tj("crit", 2400, 600, 4, "critical", false),
	}
	res, err := sim.Run(jobs, newSchedNoHeadroom(t), opts(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Preemptions != 0 || res.PreemptionsIssued != 0 {
		t.Fatalf("preempted a non-preemptible job")
	}
	for _, j := range res.Jobs {
		// high started at 1 (1s after its submit), ends at 7201.
		if j.ID == "crit" && j.FirstStart != 7202 {
			t.Fatalf("critical started at %d, want 7202", j.FirstStart)
		}
	}
}

// TestMinRuntimeProtectsYoungJobs: before the victim's minimum runtime
// (30m) the critical job waits; at the first cycle after it, it preempts.
func TestMinRuntimeProtectsYoungJobs(t *testing.T) {
	jobs := []trace.Job{
		tj("scav", 0, 7200, 8, "scavenger", true),
		tj("crit", 600, 600, 4, "critical", false),
	}
	res, err := sim.Run(jobs, newSchedNoHeadroom(t), opts(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range res.Jobs {
		// scav started at 1, so its minimum runtime ends at 1801: the
		// 1810 tick preempts, the grace ends at 1870, which is a tick.
		if j.ID == "crit" && j.FirstStart != 1870 {
			t.Fatalf("critical started at %d, want 1870", j.FirstStart)
		}
	}
	if res.Preemptions != 1 {
		t.Fatalf("preemptions %d", res.Preemptions)
	}
}

// TestGangsAreAllOrNothing: a 16-GPU gang on two nodes, one of them busy:
// nomad-native places one allocation on the free node and holds it idle;
// impact places nothing until both fit, and never leaves GPUs idle in a
// partial gang. Gathering, it holds the free node as native does (a small
// job behind it starts when native's does); without, the small job uses
// it meanwhile.
func TestGangsAreAllOrNothing(t *testing.T) {
	jobs := []trace.Job{
		tj("busy", 0, 3600, 8, "high", false),
		tj("gang", 60, 600, 16, "normal", true),
		tj("small", 120, 600, 2, "normal", true),
	}
	impactRes, err := sim.Run(jobs, newSched(t), opts(t, 2))
	if err != nil {
		t.Fatal(err)
	}
	native, _ := baseline.New(baseline.NomadNative)
	nativeRes, err := sim.Run(jobs, native, opts(t, 2))
	if err != nil {
		t.Fatal(err)
	}
	if impactRes.PartialGangIdleGPUHours != 0 {
		t.Fatalf("impact left %v GPU-h idle in partial gangs", impactRes.PartialGangIdleGPUHours)
	}
	if nativeRes.PartialGangIdleGPUHours <= 0 {
		t.Fatal("nomad-native placed no gang partially")
	}
	start := func(r *sim.Result, id string) int64 {
		for _, j := range r.Jobs {
			if j.ID == id {
				return j.FirstStart
			}
		}
		t.Fatalf("no job %s", id)
		return 0
	}
	if g := start(impactRes, "gang"); g < 3600 {
		t.Fatalf("impact started the gang at %d, before the busy node was free", g)
	}
	// The built-in policy gathers: the gang holds the free node from 60,
	// as nomad-native's first allocation does, so small starts when the
	// gang ends under both (impact a debounce or two later).
	if s, n := start(impactRes, "small"), start(nativeRes, "small"); s < n || s > n+10 {
		t.Fatalf("impact started small at %d, nomad-native at %d", s, n)
	}
	// Without gathering the small job uses the free node while the gang
	// cannot start.
	noGather := newSchedWith(t, func(pol *policy.Policy) { pol.Backfill.Gather = false })
	res, err := sim.Run(jobs, noGather, opts(t, 2))
	if err != nil {
		t.Fatal(err)
	}
	if s := start(res, "small"); s != 120 {
		t.Fatalf("without gather impact started small at %d, want 120", s)
	}
	if res.PartialGangIdleGPUHours != 0 {
		t.Fatalf("impact without gather left %v GPU-h idle in partial gangs", res.PartialGangIdleGPUHours)
	}
}

// TestRandomTraceInvariants: on random traces the engine finishes every
// job, never places a gang partially, delivers the trace's work exactly
// once (preempted work is lost, then redone), never preempts a
// non-preemptible job, and gives equal results for equal input.
func TestRandomTraceInvariants(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		x := seed*0x9e3779b97f4a7c15 + 7
		next := func(k int) int {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			return int(x % uint64(k))
		}
		var jobs []trace.Job
		want := 0.0
		ts := int64(0)
		for i := 0; i < 250; i++ {
			ts += int64(next(90))
			gpus := []int{1, 1, 1, 2, 4, 8, 16}[next(7)]
			tier := trace.Tiers[next(len(trace.Tiers))]
			dur := int64(120 + next(9000))
			jobs = append(jobs, tj(fmt.Sprintf("r%d", i), ts, dur, gpus, tier, tier == "normal" || tier == "scavenger"))
			want += float64(dur*int64(gpus)) / 3600
		}
		run := func() *sim.Result {
			res, err := sim.Run(jobs, newSched(t), opts(t, 4))
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			return res
		}
		// Repeatability is checked on the first seed only (the engine
		// dominates the package's -race time).
		a := run()
		b := a
		if seed == 1 {
			b = run()
		}
		if a.JobsCompleted != len(jobs) || a.PartialGangIdleGPUHours != 0 {
			t.Fatalf("seed %d: completed %d, partial %v", seed, a.JobsCompleted, a.PartialGangIdleGPUHours)
		}
		if d := a.DeliveredGPUHours - want; d > 1e-6 || d < -1e-6 {
			t.Fatalf("seed %d: delivered %v, want %v", seed, a.DeliveredGPUHours, want)
		}
		for _, j := range a.Jobs {
			if j.Preempted > 0 && (j.Tier == "critical" || j.Tier == "high") {
				t.Fatalf("seed %d: non-preemptible %s preempted", seed, j.ID)
			}
		}
		for _, s := range a.Series {
			if s.Allocated > 32 || s.Partial != 0 {
				t.Fatalf("seed %d: bad sample %+v", seed, s)
			}
		}
		if a.WeightedJCTS != b.WeightedJCTS || a.Preemptions != b.Preemptions || a.LostGPUHours != b.LostGPUHours {
			t.Fatalf("seed %d: two runs differ", seed)
		}
	}
}

// TestEngineSeesCheckpoints: the engine must be told of the checkpoints
// the simulated jobs take, or it prices victims by the work since their
// start. A (from 0) checkpointed at 3600 and would lose 100s at 3700; B
// (from 1000) checkpointed at 2800 and would lose 900s: the critical job
// arriving at 3700 preempts A, and at once (the built-in headroom's
// take_back_unsaved of 2m). Counting from the starts it would pick B,
// after its grace.
func TestEngineSeesCheckpoints(t *testing.T) {
	jobs := []trace.Job{
		tj("A", 0, 20000, 8, "scavenger", true),
		tj("B", 1000, 20000, 8, "scavenger", true),
		tj("crit", 3700, 600, 8, "critical", false),
	}
	res, err := sim.Run(jobs, newSched(t), opts(t, 2))
	if err != nil {
		t.Fatal(err)
	}
	got := byID(res)
	// Decided and released at 3701, started 1s later.
	if got["A"].Preempted != 1 || got["B"].Preempted != 0 || got["crit"].FirstStart != 3702 {
		t.Fatalf("A preempted %d, B preempted %d, critical started at %d; want A once, B never, start 3702",
			got["A"].Preempted, got["B"].Preempted, got["crit"].FirstStart)
	}
	// A keeps the 3600s it saved: it loses the 100s since (with no grace
	// after the decision) and the 120s restart, on 8 GPUs.
	if want := (100.0 + 120) * 8 / 3600; math.Abs(res.LostGPUHours-want) > 1e-9 {
		t.Fatalf("lost %v GPU-h, want %v", res.LostGPUHours, want)
	}
}

// TestUsageChargedForRunsNoCycleSaw: fair share must count every GPU-hour,
// as the live adapter's FinishAlloc makes it. Job a (project A, 8 GPUs)
// runs 0..3600 while the queue is empty, so no cycle sees it run or end;
// when b arrives at 7200 the engine must still charge A 8 GPU-h (decayed
// over two hours of a 24h half-life), and nothing to B yet.
func TestUsageChargedForRunsNoCycleSaw(t *testing.T) {
	a := tj("a", 0, 3600, 8, "normal", true)
	a.Project = "A"
	b := tj("b", 7200, 60, 1, "normal", true)
	b.Project = "B"
	s := newSched(t)
	res, err := sim.Run([]trace.Job{a, b}, s, opts(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	if res.JobsCompleted != 2 {
		t.Fatalf("completed %d", res.JobsCompleted)
	}
	u := s.eng.Usage()
	// Charged at the 7200 cycle for [0, 3600]: 8 GPU-h decayed from about
	// the middle of the run (1800) to 7200, 1.5h: 8 x 2^(-1.5/24) = 7.66.
	if got := u.Get("A", sim.At(7200)); got < 7.5 || got > 8 {
		t.Fatalf("project A usage %v GPU-h at 7200, want about 7.66", got)
	}
	if got := u.Get("B", sim.At(7200)); got != 0 {
		t.Fatalf("project B usage %v GPU-h, want 0", got)
	}
}

// TestHeadroomStartsCriticalAtOnce: with the built-in policy's headroom
// (its floor, min_gpus = 8: the whole of this one 8-GPU node) but no idle
// budget, the second high-tier job (non-preemptible, kept out of the
// headroom) waits although 4 GPUs are free, so the critical job arriving
// later starts at once (on the 2400 tick) instead of waiting two hours;
// high2 starts when high1 ends. With the built-in idle budget (0.4% of
// the pool: 0.032 GPU-seconds a second) 4 idle GPUs overspend it within
// the first seconds: the headroom yields, high2 starts on the next tick
// and the critical job waits for a high job to end, as it does without a
// headroom. The trade is the budget's to make: 4 of 8 GPUs idle for 40
// minutes is half the pool's occupancy for one job's two hours.
func TestHeadroomStartsCriticalAtOnce(t *testing.T) {
	jobs := []trace.Job{
		tj("high1", 0, 7200, 4, "high", false),
		tj("high2", 1, 7200, 4, "high", false),
		tj("crit", 2400, 600, 4, "critical", false),
	}
	noBudget := func(pol *policy.Policy) {
		for _, h := range pol.Headrooms {
			h.IdleBudget = 0
		}
	}
	for _, c := range []struct {
		name        string
		s           *Scheduler
		high2, crit int64
	}{
		{"headroom without an idle budget", newSchedWith(t, noBudget), 7202, 2400},
		{"headroom with the built-in idle budget", newSched(t), 10, 7202},
		// Without the headroom the decision after high1's submit takes both.
		{"no headroom", newSchedNoHeadroom(t), 1, 7202},
	} {
		res, err := sim.Run(jobs, c.s, opts(t, 1))
		if err != nil {
			t.Fatal(err)
		}
		starts := map[string]int64{}
		for _, j := range res.Jobs {
			starts[j.ID] = j.FirstStart
		}
		if starts["crit"] != c.crit || starts["high2"] != c.high2 {
			t.Errorf("%s: starts %v, want high2 at %d, crit at %d", c.name, starts, c.high2, c.crit)
		}
	}
}

// TestCheckpointWakesOnlyForAVictim: a checkpoint lowers what preempting
// its job would lose, so it is worth a decision only while a waiting job
// may preempt that job. Scavenger A (8 GPUs) checkpoints at 2501 (2500s
// of progress from its start at 1).
//   - Normal job N waits from 100: normal may preempt scavenger. Past A's
//     minimum runtime (1801) A is still too costly (all its work since
//     the start would be lost) until the checkpoint; the tick after it
//     (2510) preempts A, and N starts when the grace ends, on the 2570
//     tick (it comes after the release at the same second). Without
//     waking on the checkpoint the preemption would wait for the next
//     refresh of the quiet ticks (2710).
//   - With A a normal job and normal job W waiting (a tier that may
//     preempt, but not normal work), no waiting job may preempt A: the run
//     makes as many decisions as one without checkpoints at all.
func TestCheckpointWakesOnlyForAVictim(t *testing.T) {
	run := func(aTier string, waiter trace.Job, ckpt int64) *sim.Result {
		o := opts(t, 1)
		o.Model.CheckpointInterval = ckpt
		s := newSchedWith(t, func(pol *policy.Policy) {
			pol.Headrooms = nil
			pol.Tiers["normal"].MayPreempt = []string{"scavenger"}
		})
		res, err := sim.Run([]trace.Job{tj("A", 0, 20000, 8, aTier, true), waiter}, s, o)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// Normal work may preempt scavenger work here (the built-in policy
	// lets only critical work preempt, and at once whatever A lost).
	res := run("scavenger", tj("N", 100, 600, 8, "normal", true), 2500)
	for _, j := range res.Jobs {
		if j.ID == "N" && j.FirstStart != 2570 {
			t.Errorf("N started at %d, want 2570 (A preempted on the tick after its checkpoint)", j.FirstStart)
		}
	}
	w := tj("W", 100, 600, 8, "normal", true)
	with, without := run("normal", w, 2500), run("normal", w, 0)
	if with.Cycles != without.Cycles || with.Cycles == 0 {
		t.Errorf("decisions with A's checkpoints %d, without %d: a checkpoint no waiting job can use woke the engine", with.Cycles, without.Cycles)
	}
}

// TestDefragmentStartsWholeNodeJob: node 0 holds normal job "keep" (one
// GPU, 10 hours) once seven short jobs beside it end; node 1 holds four
// long high jobs. The normal 8-GPU job "big" arriving at 2400 fits the 11
// free GPUs but no node, and normal may not preempt normal. With the
// built-in policy's defragment block, keep is moved: stopped on the
// decision after big's submit (losing the work since its checkpoint at
// 1800s of progress), it restarts on node 1 right after its 60s grace,
// and big starts on node 0 then. Without the block big waits for keep to
// end, ten hours.
func TestDefragmentStartsWholeNodeJob(t *testing.T) {
	jobs := []trace.Job{tj("keep", 0, 36000, 1, "normal", true)}
	for i := range 7 {
		jobs = append(jobs, tj(fmt.Sprintf("s%d", i), 0, 600, 1, "normal", true))
	}
	for i := range 4 {
		jobs = append(jobs, tj(fmt.Sprintf("h%d", i), 100, 36000, 1, "high", false))
	}
	jobs = append(jobs, tj("big", 2400, 3600, 8, "normal", true))
	for _, on := range []bool{true, false} {
		s := newSchedNoHeadroom(t)
		if !on {
			pol := s.eng.Policy().Clone()
			pol.Defragment.Enabled = false
			var err error
			if s, err = New(pol, nil); err != nil {
				t.Fatal(err)
			}
		}
		res, err := sim.Run(jobs, s, opts(t, 2))
		if err != nil {
			t.Fatal(err)
		}
		if res.JobsCompleted != len(jobs) {
			t.Fatalf("defragment %t: %d of %d jobs completed", on, res.JobsCompleted, len(jobs))
		}
		by := byID(res)
		big, keep := by["big"], by["keep"]
		t.Logf("defragment %t: big started at %d; keep preempted %d times, finished at %d", on, big.FirstStart, keep.Preempted, keep.Finish)
		if on && (big.FirstStart > 2400+120 || keep.Preempted != 1 || keep.Finish > 36000+1200 || res.Preemptions != 1) {
			t.Fatalf("with defragment: big started at %d (submitted 2400), keep preempted %d times and finished at %d, %d preemptions; want big within 2 minutes, keep moved once and restarted at once",
				big.FirstStart, keep.Preempted, keep.Finish, res.Preemptions)
		}
		if !on && (big.FirstStart < 36000 || keep.Preempted != 0) {
			t.Fatalf("without defragment: big started at %d, keep preempted %d times; want big to wait for keep's end", big.FirstStart, keep.Preempted)
		}
	}
}

// TestCheckpointWakesOnlyWhenCostsWeighed: a checkpoint lowers a victim's
// cost, which matters only to a plan that weighed costs. Scavenger A and
// non-preemptible normal B fill two nodes; normal gang N (2x8) waits from
// 100. Normal may preempt scavenger, but A's 8 GPUs can never make room
// for 16, so no decision weighs A's cost (engine.Plan.CostsWeighed) and
// A's checkpoints every 2500s wake no decision: the run makes as many as
// one without checkpoints. N starts when A and B end.
func TestCheckpointWakesOnlyWhenCostsWeighed(t *testing.T) {
	run := func(ckpt int64) *sim.Result {
		o := opts(t, 2)
		o.Model.CheckpointInterval = ckpt
		jobs := []trace.Job{
			tj("A", 0, 20000, 8, "scavenger", true),
			tj("B", 0, 20000, 8, "normal", false),
			tj("N", 100, 600, 16, "normal", true),
		}
		res, err := sim.Run(jobs, newSchedNoHeadroom(t), o)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	with, without := run(2500), run(0)
	if with.Cycles != without.Cycles || with.Cycles == 0 {
		t.Errorf("decisions with A's checkpoints %d, without %d: a checkpoint no plan weighs woke the engine", with.Cycles, without.Cycles)
	}
	for _, j := range with.Jobs {
		if j.ID == "N" && j.FirstStart < 20000 {
			t.Errorf("N started at %d, before A and B end (20000)", j.FirstStart)
		}
	}
}

// TestYoungWakeOnlyForAVictim: a preemptible run passing its minimum
// runtime becomes a victim, which matters only if some waiting job may
// preempt or move it. Normal A (8 GPUs) runs from 0 and normal W waits
// from 100: normal may not preempt normal and A is too big to move, so
// A's minimum runtime ending wakes no decision: with the refresh of
// quiet ticks off, the run makes as many decisions whether A is
// preemptible or not.
func TestYoungWakeOnlyForAVictim(t *testing.T) {
	run := func(preemptible bool) *sim.Result {
		o := opts(t, 1)
		o.Model.CheckpointInterval = 0
		jobs := []trace.Job{tj("A", 0, 20000, 8, "normal", preemptible), tj("W", 100, 600, 8, "normal", true)}
		s := newSchedNoHeadroom(t)
		s.Refresh = 1 << 40 // decide on changes and wakes only
		res, err := sim.Run(jobs, s, o)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	pre, non := run(true), run(false)
	if pre.Cycles != non.Cycles || pre.Cycles == 0 {
		t.Errorf("decisions with A preemptible %d, not preemptible %d: a minimum runtime no waiting job can use woke the engine", pre.Cycles, non.Cycles)
	}
}
