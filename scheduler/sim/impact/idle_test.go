package impact

import (
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/baseline"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// Under the idleness model a hung job holds its GPUs until its walltime
// under a baseline (which never reclaims), while the impact policy's
// requeue idle action stops it once it has been idle for 30m (plus the
// 60s grace) and reruns it, which does not hang.
func TestHungJobReclaimedOnlyByImpact(t *testing.T) {
	const dur, wall = 7200, 4 * 7200
	j := tj("h", 0, dur, 8, "normal", true)
	j.Walltime = wall
	jobs := []trace.Job{j}
	o := opts(t, 1)
	o.Idle = sim.IdleModel{HangShare: 1, Seed: 3}

	fifo, err := baseline.New(baseline.FIFOGang)
	if err != nil {
		t.Fatal(err)
	}
	base, err := sim.Run(jobs, fifo, o)
	if err != nil {
		t.Fatal(err)
	}
	// The hang falls at 10-90% of the work: held idle from there to the
	// walltime end, on 8 GPUs.
	lo, hi := 8*float64(wall-0.9*dur)/3600, 8*float64(wall-0.1*dur)/3600
	if base.HungRuns != 1 || base.Reclaims != 0 || base.HungKilled != 1 || base.IdleHeldGPUHours < lo || base.IdleHeldGPUHours > hi {
		t.Fatalf("baseline: hung %d reclaims %d killed %d idle %.2f GPU-h (want %.2f..%.2f)",
			base.HungRuns, base.Reclaims, base.HungKilled, base.IdleHeldGPUHours, lo, hi)
	}

	imp, err := sim.Run(jobs, newSched(t), o)
	if err != nil {
		t.Fatal(err)
	}
	// Detected 30m after the first 0% sample (taken within a tick of the
	// hang), then the grace: at most 30m + 60s + 2 ticks idle.
	if imp.HungRuns != 1 || imp.Reclaims != 1 || imp.HungKilled != 0 || imp.Preemptions != 0 {
		t.Fatalf("impact: hung %d reclaims %d killed %d preemptions %d", imp.HungRuns, imp.Reclaims, imp.HungKilled, imp.Preemptions)
	}
	if min, max := 8*float64(1800+60)/3600, 8*float64(1800+60+20)/3600; imp.IdleHeldGPUHours < min || imp.IdleHeldGPUHours > max {
		t.Fatalf("impact held %.3f GPU-h idle, want %.3f..%.3f", imp.IdleHeldGPUHours, min, max)
	}
	if imp.JobsCompleted != 1 || base.JobsCompleted != 1 {
		t.Fatalf("completed: impact %d baseline %d", imp.JobsCompleted, base.JobsCompleted)
	}
	// Reclaiming bought time: the job finishes sooner than under the
	// baseline, which waited for the walltime kill.
	if imp.Jobs[0].Finish >= base.Jobs[0].Finish {
		t.Fatalf("impact finished at %d, baseline at %d", imp.Jobs[0].Finish, base.Jobs[0].Finish)
	}
}

// With the model off nothing hangs and the idle policy never acts.
func TestNoIdlenessNoReclaims(t *testing.T) {
	jobs := []trace.Job{tj("a", 0, 3600, 8, "normal", true), tj("b", 10, 3600, 8, "scavenger", true)}
	res, err := sim.Run(jobs, newSched(t), opts(t, 1))
	if err != nil {
		t.Fatal(err)
	}
	if res.HungRuns != 0 || res.Reclaims != 0 || res.IdleHeldGPUHours != 0 {
		t.Fatalf("hung %d reclaims %d idle %.2f", res.HungRuns, res.Reclaims, res.IdleHeldGPUHours)
	}
}
