package impact

import (
	"os"
	"testing"

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

func opts(t *testing.T, nodes int) sim.Options {
	t.Helper()
	cl, err := sim.UniformCluster(nodes, 8, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	m := sim.DefaultModel()
	m.Cycle, m.Grace, m.RestartCost, m.CheckpointInterval = 10, 60, 120, 1800
	return sim.Options{Cluster: cl, Model: m}
}

// TestCriticalPreemptsScavenger: a scavenger job fills the node; a
// critical job arriving after the scavenger's minimum runtime (30m) makes
// the engine preempt it. The critical job starts once the grace period
// (60s) has passed, at the next cycle.
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
	starts := map[string]sim.JobResult{}
	for _, j := range res.Jobs {
		starts[j.ID] = j
	}
	// Decided at the 2400 tick, stopped at 2460, admitted at the 2460 tick.
	if got := starts["crit"].FirstStart; got != 2460 {
		t.Fatalf("critical started at %d, want 2460", got)
	}
	// The scavenger checkpointed at 1800, lost the 660s after it and pays
	// the 120s restart, on 8 GPUs.
	if want := (660.0 + 120) * 8 / 3600; res.LostGPUHours < want-1e-9 || res.LostGPUHours > want+1e-9 {
		t.Fatalf("lost %v GPU-h, want %v", res.LostGPUHours, want)
	}
}

// TestNonPreemptibleIsNeverPreempted: the same with a non-preemptible
// occupant: the critical job waits for it to end.
func TestNonPreemptibleIsNeverPreempted(t *testing.T) {
	jobs := []trace.Job{
		tj("high", 0, 7200, 8, "high", false),
		tj("crit", 2400, 600, 4, "critical", false),
	}
	res, err := sim.Run(jobs, newSched(t), opts(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	if res.Preemptions != 0 || res.PreemptionsIssued != 0 {
		t.Fatalf("preempted a non-preemptible job")
	}
	for _, j := range res.Jobs {
		if j.ID == "crit" && j.FirstStart != 7200 {
			t.Fatalf("critical started at %d, want 7200", j.FirstStart)
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
	res, err := sim.Run(jobs, newSched(t), opts(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range res.Jobs {
		// 1800 is a cycle tick: preempted then, started after the grace.
		if j.ID == "crit" && j.FirstStart != 1860 {
			t.Fatalf("critical started at %d, want 1860", j.FirstStart)
		}
	}
	if res.Preemptions != 1 {
		t.Fatalf("preemptions %d", res.Preemptions)
	}
}

// TestGangsAreAllOrNothing: a 16-GPU gang on two nodes, one of them busy:
// nomad-native holds the free node idle; impact places nothing until both
// fit, and never leaves GPUs idle in a partial gang.
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
	for _, j := range impactRes.Jobs {
		// The small job uses the free node while the gang cannot start.
		if j.ID == "small" && j.FirstStart != 120 {
			t.Fatalf("impact started small at %d, want 120", j.FirstStart)
		}
		if j.ID == "gang" && j.FirstStart < 3600 {
			t.Fatalf("impact started the gang at %d, before the busy node was free", j.FirstStart)
		}
	}
}

// TestExamplePolicyMatchesBuiltin keeps example/sim/policy.hcl, the file
// people read, equal to the policy the simulator runs by default.
func TestExamplePolicyMatchesBuiltin(t *testing.T) {
	b, err := os.ReadFile("../../../example/sim/policy.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != string(DefaultPolicyHCL) {
		t.Fatal("example/sim/policy.hcl differs from scheduler/sim/impact/policy.hcl")
	}
}
