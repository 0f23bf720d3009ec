package sim_test

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/baseline"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// job builds a labelled trace job.
func job(id string, submit, dur int64, gpus int, tier string, walltime int64) trace.Job {
	p := tier == "normal" || tier == "scavenger"
	if walltime == 0 {
		walltime = dur
	}
	return trace.Job{ID: id, Submit: submit, Duration: dur, GPUs: gpus, Project: "p", Tier: tier, Preemptible: &p, Walltime: walltime}
}

func cluster(t *testing.T, nodes, gpus int) sim.ClusterSpec {
	t.Helper()
	c, err := sim.UniformCluster(nodes, gpus, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func model() sim.Model {
	m := sim.DefaultModel()
	m.Debounce = 0
	return m
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func mustBaseline(t *testing.T, name string) sim.Scheduler {
	t.Helper()
	s, err := baseline.New(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// starts runs s and returns each job's first start.
func starts(t *testing.T, jobs []trace.Job, s sim.Scheduler, opts sim.Options) (*sim.Result, map[string]int64) {
	t.Helper()
	res, err := sim.Run(jobs, s, opts)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, j := range res.Jobs {
		out[j.ID] = j.FirstStart
	}
	return res, out
}

// TestFIFOHandComputed: one node of 4 GPUs.
// A(0s, 2 GPUs, 100s) starts at 0; B(10s, 4 GPUs, 50s) blocks the head
// until A ends at 100 and runs to 150; C(20s, 2 GPUs, 30s) fits beside A but
// waits behind B, runs 150..180.
func TestFIFOHandComputed(t *testing.T) {
	jobs := []trace.Job{
		job("A", 0, 100, 2, "normal", 0),
		job("B", 10, 50, 4, "critical", 0),
		job("C", 20, 30, 2, "scavenger", 0),
	}
	res, _ := starts(t, jobs, mustBaseline(t, baseline.FIFOGang), sim.Options{
		Cluster: cluster(t, 1, 4), Model: model(), WindowStart: 0, WindowEnd: 180,
	})
	if res.JobsCompleted != 3 || res.MakespanS != 180 {
		t.Fatalf("completed %d, makespan %d", res.JobsCompleted, res.MakespanS)
	}
	// Waits: A 0, B 90, C 130. JCT: A 100, B 140, C 160.
	if res.WaitS["critical"].P99 != 90 || res.WaitS["scavenger"].P50 != 130 || res.WaitS["normal"].P50 != 0 {
		t.Fatalf("waits %+v", res.WaitS)
	}
	// Weighted JCT with weights critical 8, normal 2, scavenger 1.
	want := (8*140.0 + 2*100 + 1*160) / 11
	if !near(res.WeightedJCTS, want) {
		t.Fatalf("weighted JCT %v, want %v", res.WeightedJCTS, want)
	}
	// Floor: the durations, A 100, B 50, C 30.
	if floor := (8*50.0 + 2*100 + 1*30) / 11; !near(res.WeightedJCTFloorS, floor) || res.MeanJCTFloorS["critical"] != 50 ||
		res.MeanJCTS["critical"] != 140 || res.JobsCompletedByTier["scavenger"] != 1 {
		t.Fatalf("floor %v (want %v), per tier %v, JCT %v, counts %v", res.WeightedJCTFloorS, floor, res.MeanJCTFloorS, res.MeanJCTS, res.JobsCompletedByTier)
	}
	// Allocated: 2x100 + 4x50 + 2x30 = 460 GPU-s of 4x180.
	if !near(res.Occupancy, 460.0/720) {
		t.Fatalf("occupancy %v, want %v", res.Occupancy, 460.0/720)
	}
	// Bound min(4, demand): 2x10 + 4x10 + 4x80 + 4x50 + 2x30 = 640.
	if !near(res.OccupancyVsBound, 460.0/640) {
		t.Fatalf("occupancy vs bound %v, want %v", res.OccupancyVsBound, 460.0/640)
	}
	if !near(res.DeliveredGPUHours, 460.0/3600) || res.LostGPUHours != 0 || res.Preemptions != 0 || res.PartialGangIdleGPUHours != 0 {
		t.Fatalf("delivered %v lost %v preemptions %d partial %v", res.DeliveredGPUHours, res.LostGPUHours, res.Preemptions, res.PartialGangIdleGPUHours)
	}
}

// TestNomadNativePlacesGangsPartially: two nodes of 4 GPUs. A takes node 0
// for 100s; B (8 GPUs = two whole-node members) arrives at 1: nomad-native
// places one member on node 1, which holds 4 GPUs idle until A ends; fifo-gang
// places nothing until both fit.
func TestNomadNativePlacesGangsPartially(t *testing.T) {
	jobs := []trace.Job{
		job("A", 0, 100, 4, "normal", 0),
		job("B", 1, 10, 8, "critical", 0),
	}
	m := model()
	m.Sample = 50
	opts := sim.Options{Cluster: cluster(t, 2, 4), Model: m, WindowStart: 0, WindowEnd: 110}
	native, err := sim.Run(jobs, mustBaseline(t, baseline.NomadNative), opts)
	if err != nil {
		t.Fatal(err)
	}
	if want := 4 * 99.0 / 3600; !near(native.PartialGangIdleGPUHours, want) {
		t.Fatalf("nomad-native partial idle %v GPU-h, want %v", native.PartialGangIdleGPUHours, want)
	}
	if native.WaitS["critical"].P50 != 99 {
		t.Fatalf("B waited %v, want 99", native.WaitS["critical"].P50)
	}
	// Partial members count as allocated: 4x100 + 4x99 + 8x10.
	if !near(native.Occupancy, (400.0+396+80)/(8*110)) {
		t.Fatalf("nomad-native occupancy %v", native.Occupancy)
	}
	if native.Series[1].T != 50 || native.Series[1].Partial != 4 || native.Series[1].Allocated != 8 {
		t.Fatalf("series does not show the idle member: %+v", native.Series[:2])
	}
	fifo, err := sim.Run(jobs, mustBaseline(t, baseline.FIFOGang), opts)
	if err != nil {
		t.Fatal(err)
	}
	if fifo.PartialGangIdleGPUHours != 0 || fifo.WaitS["critical"].P50 != 99 {
		t.Fatalf("fifo-gang partial %v wait %v", fifo.PartialGangIdleGPUHours, fifo.WaitS["critical"].P50)
	}
}

// TestFIFOHeadBlocks: one node of 4 GPUs. A holds 3; B (2 GPUs) cannot
// start; C (1 GPU) fits but fifo-gang keeps it behind B. nomad-native and
// backfill start C at once.
func TestFIFOHeadBlocks(t *testing.T) {
	jobs := []trace.Job{
		job("A", 0, 100, 3, "normal", 0),
		job("B", 1, 10, 2, "normal", 0),
		job("C", 2, 10, 1, "normal", 0),
	}
	opts := sim.Options{Cluster: cluster(t, 1, 4), Model: model()}
	want := map[string]int64{baseline.FIFOGang: 100, baseline.NomadNative: 2, baseline.Backfill: 2}
	for name, cStart := range want {
		_, st := starts(t, jobs, mustBaseline(t, name), opts)
		if st["C"] != cStart {
			t.Errorf("%s: C started at %d, want %d", name, st["C"], cStart)
		}
	}
}

// TestBackfillKeepsReservation: one node of 8 GPUs. A holds 6 until 100
// (walltime 100). B wants all 8: it is the blocked head, reserved for 100.
// C (1 GPU, walltime 20) ends before 100: backfilled at once. D (1 GPU,
// walltime 200) would delay B: backfill holds it until B is done; nomad-native
// starts D at once and B waits for D.
func TestBackfillKeepsReservation(t *testing.T) {
	jobs := []trace.Job{
		job("A", 0, 100, 6, "normal", 100),
		job("B", 1, 50, 8, "normal", 50),
		job("C", 2, 10, 1, "normal", 20),
		job("D", 3, 150, 1, "normal", 200),
	}
	opts := sim.Options{Cluster: cluster(t, 1, 8), Model: model()}
	cases := map[string]map[string]int64{
		baseline.Backfill:    {"A": 0, "B": 100, "C": 2, "D": 150},
		baseline.NomadNative: {"A": 0, "B": 153, "C": 2, "D": 3},
	}
	for name, want := range cases {
		res, st := starts(t, jobs, mustBaseline(t, name), opts)
		if res.JobsCompleted != 4 {
			t.Fatalf("%s: completed %d", name, res.JobsCompleted)
		}
		for id, w := range want {
			if st[id] != w {
				t.Errorf("%s: %s started at %d, want %d", name, id, st[id], w)
			}
		}
	}
}

// scripted places jobs top tier first on free GPUs and preempts the
// lowest-tier running job when the top waiting job does not fit.
type scripted struct{ noPreempt bool }

// scriptedProgress is the work each of scripted's preemptions says its
// victim saved.
const scriptedProgress = 3 * time.Minute

func (scripted) Name() string { return "scripted" }

func (s scripted) Schedule(st *sim.State, now int64) (*engine.Plan, error) {
	q := append([]*sim.Job(nil), st.Queue()...)
	sort.SliceStable(q, func(a, b int) bool { return q[a].TierRank < q[b].TierRank })
	plan := &engine.Plan{}
	free := st.Nodes[0].FreeGPUsOn()
	for _, j := range q {
		if j.MemberGPUs() <= len(free) {
			sim.Place(plan, j, st.Nodes[0], free[:j.MemberGPUs()])
			free = free[j.MemberGPUs():]
			continue
		}
		if s.noPreempt {
			break
		}
		for _, v := range st.Active() {
			if v.State == sim.Running && v.TierRank > j.TierRank {
				// Progress: what the plan says the victim will have saved
				// (scriptedProgress more than its contract said before),
				// which the simulator writes into the contract it queues
				// again with; its own accounting counts the work saved.
				stop := engine.Stop{JobID: v.ID, Grace: v.Cluster.Spec.Grace, Progress: v.Cluster.Spec.Progress + scriptedProgress}
				plan.Preemptions = append(plan.Preemptions, engine.Preemption{Stop: stop})
				break
			}
		}
		break
	}
	return plan, nil
}

// TestPreemptionAccounting: one GPU; checkpoint every 100s, restart 20s,
// grace 10s. L (1000s) runs from 0; H arrives at 250 and preempts it: L
// runs to 260, keeps 200s of checkpointed work and loses 60; H runs 260..310;
// L restarts at 310, spends 20s reloading, then 800s: done at 1130.
func TestPreemptionAccounting(t *testing.T) {
	m := model()
	m.CheckpointInterval, m.RestartCost, m.Grace = 100, 20, 10
	jobs := []trace.Job{
		job("L", 0, 1000, 1, "scavenger", 0),
		job("H", 250, 50, 1, "critical", 0),
	}
	res, err := sim.Run(jobs, scripted{}, sim.Options{Cluster: cluster(t, 1, 1), Model: m, WindowStart: 0, WindowEnd: 1130})
	if err != nil {
		t.Fatal(err)
	}
	if res.Preemptions != 1 || res.PreemptionsIssued != 1 {
		t.Fatalf("preemptions %d issued %d", res.Preemptions, res.PreemptionsIssued)
	}
	if res.MakespanS != 1130 {
		t.Fatalf("makespan %d, want 1130", res.MakespanS)
	}
	if !near(res.LostGPUHours, 80.0/3600) || !near(res.DeliveredGPUHours, 1050.0/3600) {
		t.Fatalf("lost %v delivered %v GPU-h", res.LostGPUHours*3600, res.DeliveredGPUHours*3600)
	}
	if res.WaitS["critical"].P50 != 10 || res.WaitS["scavenger"].P50 != 0 {
		t.Fatalf("waits %+v", res.WaitS)
	}
	// Allocated the whole time: 1130 of 1130 GPU-s.
	if !near(res.Occupancy, 1) {
		t.Fatalf("occupancy %v", res.Occupancy)
	}
}

// withdrawing is scripted that also withdraws every stop under way once
// no job waits after its placements (their preemptor started on GPUs
// freed meanwhile).
type withdrawing struct{ scripted }

func (w withdrawing) Schedule(st *sim.State, now int64) (*engine.Plan, error) {
	plan, err := w.scripted.Schedule(st, now)
	if err != nil || len(plan.Preemptions) > 0 {
		return plan, err
	}
	placed := 0
	for _, a := range plan.Admissions {
		placed += len(a.Groups)
	}
	if placed < len(st.Queue()) {
		return plan, nil
	}
	for _, j := range st.Active() {
		if j.State == sim.Stopping {
			plan.Withdrawals = append(plan.Withdrawals, engine.Withdrawal{JobID: j.ID, Preemptor: "H"})
		}
	}
	return plan, nil
}

// TestWithdrawnPreemption: two GPUs; checkpoint every 100s, grace 30s.
// L (1000s) and E (260s) run from 0; H arrives at 250 and preempts L (its
// stop due at 280), but E ends at 260 and H starts there: L's stop is
// withdrawn and L loses nothing. H2 arrives at 265 and preempts L again:
// its stop is due at 295, not at 280, the first stop's end, and H2
// starts then. L keeps 200s of checkpointed work and loses 95s and its
// 20s restart: it starts again when H ends, done at 310 + 20 + 800, 1130.
func TestWithdrawnPreemption(t *testing.T) {
	m := model()
	m.CheckpointInterval, m.RestartCost, m.Grace = 100, 20, 30
	jobs := []trace.Job{
		job("L", 0, 1000, 1, "scavenger", 0),
		job("E", 0, 260, 1, "scavenger", 0),
		job("H", 250, 50, 1, "critical", 0),
		job("H2", 265, 50, 1, "critical", 0),
	}
	res, st := starts(t, jobs, withdrawing{}, sim.Options{Cluster: cluster(t, 1, 2), Model: m})
	if res.PreemptionsIssued != 2 || res.PreemptionsWithdrawn != 1 || res.Preemptions != 1 {
		t.Fatalf("preemptions issued %d, withdrawn %d, carried out %d; want 2, 1, 1", res.PreemptionsIssued, res.PreemptionsWithdrawn, res.Preemptions)
	}
	if st["H"] != 260 || st["H2"] != 295 {
		t.Errorf("H started at %d, H2 at %d; want 260 and 295", st["H"], st["H2"])
	}
	if !near(res.LostGPUHours, 115.0/3600) || res.MakespanS != 1130 {
		t.Errorf("lost %v GPU-s, makespan %d; want 115 and 1130", res.LostGPUHours*3600, res.MakespanS)
	}
}

// TestFinishInsideGrace: a victim that ends inside its grace period is not
// stopped and loses nothing.
func TestFinishInsideGrace(t *testing.T) {
	m := model()
	m.CheckpointInterval, m.RestartCost, m.Grace = 100, 20, 10
	jobs := []trace.Job{
		job("L", 0, 255, 1, "scavenger", 0),
		job("H", 250, 50, 1, "critical", 0),
	}
	res, err := sim.Run(jobs, scripted{}, sim.Options{Cluster: cluster(t, 1, 1), Model: m})
	if err != nil {
		t.Fatal(err)
	}
	if res.Preemptions != 0 || res.PreemptionsIssued != 1 || res.LostGPUHours != 0 || res.MakespanS != 305 {
		t.Fatalf("preemptions %d issued %d lost %v makespan %d", res.Preemptions, res.PreemptionsIssued, res.LostGPUHours, res.MakespanS)
	}
}

// badScheduler gives a GPU that is taken.
type badScheduler struct{}

func (badScheduler) Name() string { return "bad" }
func (badScheduler) Schedule(st *sim.State, _ int64) (*engine.Plan, error) {
	plan := &engine.Plan{}
	for _, j := range st.Queue() {
		sim.Place(plan, j, st.Nodes[0], []int{0})
	}
	return plan, nil
}

func TestInvalidActionsFailTheRun(t *testing.T) {
	jobs := []trace.Job{job("A", 0, 10, 1, "normal", 0), job("B", 0, 10, 1, "normal", 0)}
	_, err := sim.Run(jobs, badScheduler{}, sim.Options{Cluster: cluster(t, 1, 2), Model: model()})
	if err == nil || !strings.Contains(err.Error(), "GPU 0 of node node-000 is held by job A") {
		t.Fatalf("error = %v", err)
	}
}

func TestUnschedulableJobsAreReported(t *testing.T) {
	// "absurd" asks for 2^31-1 GPUs: reported, without building a member
	// per node's worth of them (16 GiB of slice).
	jobs := []trace.Job{job("A", 0, 10, 1, "normal", 0), job("huge", 1, 10, 64, "normal", 0), job("absurd", 2, 10, math.MaxInt32, "normal", 0)}
	res, err := sim.Run(jobs, mustBaseline(t, baseline.FIFOGang), sim.Options{Cluster: cluster(t, 2, 8), Model: model()})
	if err != nil {
		t.Fatal(err)
	}
	if res.JobsUnschedulable != 2 || res.Unschedulable[0] != "huge" || res.Unschedulable[1] != "absurd" || res.JobsCompleted != 1 || res.JobsUnfinished != 0 {
		t.Fatalf("unschedulable %v completed %d unfinished %d", res.Unschedulable, res.JobsCompleted, res.JobsUnfinished)
	}
}

// TestDebounceBatchesDecisions: with a 3s debounce, a job submitted at 5
// starts at 8, and a job submitted at 7 joins that decision (it does not
// push it back, as the live agent's debounce timer starts at the first
// event of a burst).
func TestDebounceBatchesDecisions(t *testing.T) {
	m := model()
	m.Debounce = 3
	jobs := []trace.Job{job("A", 5, 10, 1, "normal", 0), job("B", 7, 10, 1, "normal", 0)}
	res, err := sim.Run(jobs, mustBaseline(t, baseline.FIFOGang), sim.Options{Cluster: cluster(t, 1, 2), Model: m})
	if err != nil {
		t.Fatal(err)
	}
	if res.Jobs[0].FirstStart != 8 || res.Jobs[1].FirstStart != 8 {
		t.Fatalf("starts %d, %d, want both 8", res.Jobs[0].FirstStart, res.Jobs[1].FirstStart)
	}
	if res.Cadence != m.Cadence() {
		t.Fatalf("cadence %q, want %q", res.Cadence, m.Cadence())
	}
}

// TestIntervalTicksAtMultiples: the timer ticks at multiples of the
// interval whatever the events: a job waiting for nothing but time (the
// gate places nothing before 30) starts at the next tick, 40.
func TestIntervalTicksAtMultiples(t *testing.T) {
	m := model()
	m.Interval = 40
	jobs := []trace.Job{job("A", 25, 10, 1, "normal", 0), job("Z", 1000, 10, 1, "normal", 0)}
	res, err := sim.Run(jobs, gate{from: 30}, sim.Options{Cluster: cluster(t, 1, 4), Model: m})
	if err != nil {
		t.Fatal(err)
	}
	if res.Jobs[0].FirstStart != 40 {
		t.Fatalf("A started at %d, want the tick at 40", res.Jobs[0].FirstStart)
	}
}

func TestGangFor(t *testing.T) {
	cases := []struct{ gpus, node, count, each int }{{1, 8, 1, 1}, {8, 8, 1, 8}, {12, 8, 2, 8}, {16, 8, 2, 8}, {128, 8, 16, 8}}
	for _, c := range cases {
		if count, each := sim.GangFor(c.gpus, c.node); count != c.count || each != c.each {
			t.Errorf("GangFor(%d,%d) = %d x %d, want %d x %d", c.gpus, c.node, count, each, c.count, c.each)
		}
	}
}

// randomJobs builds a seeded random trace on 8-GPU nodes: mostly 1-GPU
// jobs, some whole nodes and some multi-node gangs.
func randomJobs(seed int64, n int) []trace.Job {
	x := uint64(seed)*0x9e3779b97f4a7c15 + 1
	next := func(k int) int {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return int(x % uint64(k))
	}
	var jobs []trace.Job
	t := int64(0)
	for i := 0; i < n; i++ {
		t += int64(next(120))
		gpus := []int{1, 1, 1, 1, 2, 4, 8, 16}[next(8)]
		tier := trace.Tiers[next(len(trace.Tiers))]
		dur := int64(60 + next(7200))
		jobs = append(jobs, job(fmt.Sprintf("r%d", i), t, dur, gpus, tier, dur*int64(1+next(3))))
	}
	return jobs
}

// TestBaselineInvariants: on random traces every baseline finishes every
// job, never allocates more than the cluster, delivers exactly the work of
// the trace, loses nothing (no preemption), and gives equal results for
// equal input.
func TestBaselineInvariants(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		jobs := randomJobs(seed, 300)
		want := 0.0
		for _, j := range jobs {
			want += float64(j.Duration) * float64(j.GPUs) / 3600
		}
		for _, name := range []string{baseline.NomadNative, baseline.FIFOGang, baseline.Backfill} {
			opts := sim.Options{Cluster: cluster(t, 4, 8), Model: sim.DefaultModel()}
			a, err := sim.Run(jobs, mustBaseline(t, name), opts)
			if err != nil {
				t.Fatalf("seed %d %s: %v", seed, name, err)
			}
			b, err := sim.Run(jobs, mustBaseline(t, name), opts)
			if err != nil {
				t.Fatal(err)
			}
			if a.JobsCompleted != len(jobs) || a.Preemptions != 0 || a.LostGPUHours != 0 || math.Abs(a.DeliveredGPUHours-want) > 1e-6 {
				t.Fatalf("seed %d %s: completed %d preemptions %d lost %v delivered %v want %v", seed, name, a.JobsCompleted, a.Preemptions, a.LostGPUHours, a.DeliveredGPUHours, want)
			}
			for _, s := range a.Series {
				if s.Allocated > 32 || s.Partial > s.Allocated || s.Bound > 32 {
					t.Fatalf("seed %d %s: bad sample %+v", seed, name, s)
				}
			}
			if a.Occupancy > 1 || a.OccupancyVsBound > 1+1e-9 {
				t.Fatalf("seed %d %s: occupancy %v vs bound %v", seed, name, a.Occupancy, a.OccupancyVsBound)
			}
			if name != baseline.NomadNative && a.PartialGangIdleGPUHours != 0 {
				t.Fatalf("seed %d %s placed a gang partially", seed, name)
			}
			if a.WeightedJCTS != b.WeightedJCTS || a.Occupancy != b.Occupancy || a.MakespanS != b.MakespanS {
				t.Fatalf("seed %d %s: two runs differ", seed, name)
			}
		}
	}
}

// skipper never decides anything, then places everything at once.
// gate places every waiting job on node 0, but only from time from on.
type gate struct{ from int64 }

func (gate) Name() string { return "gate" }
func (g gate) Schedule(st *sim.State, now int64) (*engine.Plan, error) {
	plan := &engine.Plan{}
	if now < g.from {
		return plan, nil
	}
	free := st.Nodes[0].FreeGPUsOn()
	for i, j := range st.Queue() {
		sim.Place(plan, j, st.Nodes[0], free[i:i+1])
	}
	return plan, nil
}

type skipper struct{ calls int }

func (*skipper) Name() string { return "skipper" }
func (s *skipper) Schedule(st *sim.State, _ int64) (*engine.Plan, error) {
	s.calls++
	if s.calls < 3 {
		return nil, nil
	}
	plan := &engine.Plan{}
	free := st.Nodes[0].FreeGPUsOn()
	for i, j := range st.Queue() {
		sim.Place(plan, j, st.Nodes[0], free[i:i+1])
	}
	return plan, nil
}

// TestSkippedCyclesAreNotDecisions: a cycle the scheduler skips is counted
// apart and kept out of the decision latency.
func TestSkippedCyclesAreNotDecisions(t *testing.T) {
	m := model()
	m.Interval = 100
	// Cycles at 0 (A submitted) and 100 (the timer) are skipped; at 150 (B
	// submitted) A and B are placed; at 250 C is.
	jobs := []trace.Job{job("A", 0, 10, 1, "normal", 0), job("B", 150, 10, 1, "normal", 0), job("C", 250, 10, 1, "normal", 0)}
	res, err := sim.Run(jobs, &skipper{}, sim.Options{Cluster: cluster(t, 1, 4), Model: m})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cycles != 2 || res.CyclesSkipped != 2 || res.JobsCompleted != 3 || res.Jobs[0].FirstStart != 150 {
		t.Fatalf("cycles %d skipped %d completed %d A started %d", res.Cycles, res.CyclesSkipped, res.JobsCompleted, res.Jobs[0].FirstStart)
	}
}

// TestFairShareDeviationIsExactlyRepeatable: the fair-share total sums
// many projects' floats; equal input must give the same bits (a sum in map
// order differs in its last bits from run to run).
func TestFairShareDeviationIsExactlyRepeatable(t *testing.T) {
	jobs := randomJobs(11, 300)
	for i := range jobs {
		jobs[i].Project = fmt.Sprintf("proj-%02d", i%23)
	}
	opts := sim.Options{Cluster: cluster(t, 4, 8), Model: sim.DefaultModel()}
	opts.Model.Sample = 60
	var first float64
	for run := 0; run < 8; run++ {
		res, err := sim.Run(jobs, mustBaseline(t, baseline.NomadNative), opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.FairShare) != 23 || res.FairShareDeviation <= 0 {
			t.Fatalf("fair share over %d projects, deviation %v", len(res.FairShare), res.FairShareDeviation)
		}
		if run == 0 {
			first = res.FairShareDeviation
		} else if math.Float64bits(res.FairShareDeviation) != math.Float64bits(first) {
			t.Fatalf("run %d: deviation %v, first run %v", run, res.FairShareDeviation, first)
		}
	}
}

// TestPriorityOrder: one node of 4 GPUs held by A until 100. B (normal)
// and then C (critical) wait for the whole node. nomad-native and backfill
// take evaluations in priority order and start C at 100, B after it;
// fifo-gang starts B first.
func TestPriorityOrder(t *testing.T) {
	jobs := []trace.Job{
		job("A", 0, 100, 4, "normal", 0),
		job("B", 1, 50, 4, "normal", 0),
		job("C", 2, 50, 4, "critical", 0),
	}
	opts := sim.Options{Cluster: cluster(t, 1, 4), Model: model()}
	cases := map[string]map[string]int64{
		baseline.NomadNative: {"C": 100, "B": 150},
		baseline.Backfill:    {"C": 100, "B": 150},
		baseline.FIFOGang:    {"B": 100, "C": 150},
	}
	for name, want := range cases {
		_, st := starts(t, jobs, mustBaseline(t, name), opts)
		for id, w := range want {
			if st[id] != w {
				t.Errorf("%s: %s started at %d, want %d", name, id, st[id], w)
			}
		}
	}
}

// TestCheckpointDuringGrace: a checkpoint taken inside the grace period is
// kept. Checkpoint every 100s, grace 50s, restart 20s; H preempts L at 280;
// L checkpoints at 300, stops at 330 losing 30s; H runs 330..380; L
// restarts, reloads until 400 and does its last 700s: done at 1100.
func TestCheckpointDuringGrace(t *testing.T) {
	m := model()
	m.CheckpointInterval, m.RestartCost, m.Grace = 100, 20, 50
	jobs := []trace.Job{
		job("L", 0, 1000, 1, "scavenger", 0),
		job("H", 280, 50, 1, "critical", 0),
	}
	res, err := sim.Run(jobs, scripted{}, sim.Options{Cluster: cluster(t, 1, 1), Model: m})
	if err != nil {
		t.Fatal(err)
	}
	if res.Preemptions != 1 || res.MakespanS != 1100 || res.WaitS["critical"].P50 != 50 {
		t.Fatalf("preemptions %d makespan %d critical wait %v", res.Preemptions, res.MakespanS, res.WaitS["critical"].P50)
	}
	if !near(res.LostGPUHours*3600, 30+20) || !near(res.DeliveredGPUHours*3600, 1050) {
		t.Fatalf("lost %v delivered %v GPU-s", res.LostGPUHours*3600, res.DeliveredGPUHours*3600)
	}
	// L's completion time 1100, H's 100 (weights scavenger 1, critical 8).
	if !near(res.WeightedJCTS, (1100+8*100.0)/9) {
		t.Fatalf("weighted JCT %v", res.WeightedJCTS)
	}
}

// TestFreeAtSubmit: with Options.FreeAtSubmit each job's result keeps the
// GPUs free in the cluster and on its emptiest node when it arrived,
// before any decision on it: what tells a job that found the cluster full
// from one that found room. Without it they read -1.
func TestFreeAtSubmit(t *testing.T) {
	jobs := []trace.Job{
		job("A", 0, 100, 4, "normal", 0),
		job("B", 10, 100, 3, "normal", 0),
		job("C", 20, 100, 1, "normal", 0),
		job("D", 30, 100, 1, "normal", 0),
		job("E", 500, 10, 2, "normal", 0),
	}
	res, err := sim.Run(jobs, mustBaseline(t, baseline.FIFOGang), sim.Options{Cluster: cluster(t, 2, 4), Model: model(), FreeAtSubmit: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]int{"A": {8, 4}, "B": {4, 4}, "C": {1, 1}, "D": {0, 0}, "E": {8, 4}}
	for _, j := range res.Jobs {
		if got := [2]int{j.FreeAtSubmit, j.WidestFreeAtSubmit}; got != want[j.ID] {
			t.Errorf("%s found %d free, %d on its emptiest node; want %v", j.ID, got[0], got[1], want[j.ID])
		}
	}
	off, err := sim.Run(jobs, mustBaseline(t, baseline.FIFOGang), sim.Options{Cluster: cluster(t, 2, 4), Model: model()})
	if err != nil {
		t.Fatal(err)
	}
	if j := off.Jobs[0]; j.FreeAtSubmit != -1 || j.WidestFreeAtSubmit != -1 {
		t.Errorf("not recording, A found %d / %d free, want -1 / -1", j.FreeAtSubmit, j.WidestFreeAtSubmit)
	}
	if d := res.Jobs[3]; d.FirstStart <= d.Submit {
		t.Errorf("D started at %d on a full cluster at %d", d.FirstStart, d.Submit)
	}
}

// TestSaveOnSignal: one GPU; checkpoint every 100s, restart 20s, grace
// 10s; L (1000s) runs from 0 and H (50s) arrives at 250 and preempts it.
// Jobs that never save on the signal (SaveOnSignal 0), or that need
// longer than the grace to save (15s), lose the 50s since L's checkpoint
// at 200 and the 10s of grace (and the 20s restart), and H starts when
// the grace ends, at 260. A job that saves in 5s keeps its 250s of
// work and exits once saved: H starts at 255, L loses the 5s it spent
// saving (and the restart) and ends at 305 + 20 + 750.
func TestSaveOnSignal(t *testing.T) {
	for _, c := range []struct {
		save           int64
		lost, makespan int64
		wait           float64
	}{
		{save: 0, lost: 80, makespan: 1130, wait: 10},
		{save: 15, lost: 80, makespan: 1130, wait: 10},
		{save: 5, lost: 25, makespan: 1075, wait: 5},
	} {
		m := model()
		m.CheckpointInterval, m.RestartCost, m.Grace, m.SaveOnSignal = 100, 20, 10, c.save
		jobs := []trace.Job{
			job("L", 0, 1000, 1, "scavenger", 0),
			job("H", 250, 50, 1, "critical", 0),
		}
		res, err := sim.Run(jobs, scripted{}, sim.Options{Cluster: cluster(t, 1, 1), Model: m})
		if err != nil {
			t.Fatal(err)
		}
		if res.Preemptions != 1 || !near(res.LostGPUHours*3600, float64(c.lost)) || res.MakespanS != c.makespan || res.WaitS["critical"].P50 != c.wait {
			t.Errorf("save %ds: preemptions %d, lost %v GPU-s, makespan %d, critical wait %v; want 1, %d, %d, %v",
				c.save, res.Preemptions, res.LostGPUHours*3600, res.MakespanS, res.WaitS["critical"].P50, c.lost, c.makespan, c.wait)
		}
	}
	if err := (sim.Model{SaveOnSignal: -1, Interval: 10, Sample: 10}).Validate(); err == nil || !strings.Contains(err.Error(), "save on signal must not be negative") {
		t.Errorf("a negative SaveOnSignal: %v", err)
	}
}

// TestHungRunNeverSavesOnSignal: L hangs within its first run (the
// idleness model, every job hanging once at 10-90% of its work) and is
// preempted after that by H: a hung task does not answer its signal, so
// a model where jobs save on it within 5s changes nothing: L loses the
// same work and H waits the whole 10s grace.
func TestHungRunNeverSavesOnSignal(t *testing.T) {
	var lost []float64
	for _, save := range []int64{0, 5} {
		m := model()
		m.CheckpointInterval, m.RestartCost, m.Grace, m.SaveOnSignal = 100, 20, 10, save
		jobs := []trace.Job{
			job("L", 0, 1000, 1, "scavenger", 0),
			job("H", 950, 50, 1, "critical", 0),
		}
		res, err := sim.Run(jobs, scripted{}, sim.Options{Cluster: cluster(t, 1, 1), Model: m, Idle: sim.IdleModel{HangShare: 1, Seed: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Preemptions != 1 || res.WaitS["critical"].P50 != 10 {
			t.Errorf("save %ds: preemptions %d, critical wait %v; want 1 and the whole grace, 10", save, res.Preemptions, res.WaitS["critical"].P50)
		}
		lost = append(lost, res.LostGPUHours)
	}
	if !near(lost[0], lost[1]) {
		t.Errorf("lost %v GPU-s without saving, %v with: a hung run saved on its signal", lost[0]*3600, lost[1]*3600)
	}
}
