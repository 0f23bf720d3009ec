package nomad

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// A preemption the engine withdraws within its grace (its preemptor no
// longer waits) ends with the victim running on: not parked, not
// stopped, not recorded as preempted, and its note says so. A withdrawal
// for another preemptor, or one that comes after the preemption ended,
// changes nothing.
func TestWithdrawnPreemptionLeavesTheVictimRunning(t *testing.T) {
	victim := cluster.JobKey("default", "victim")
	cases := []struct {
		name string
		// grace of the preemption; preemptor the withdrawal names;
		// afterEnd: withdraw once the preemption has ended.
		grace     time.Duration
		preemptor string
		afterEnd  bool
		runsOn    bool
	}{
		{"within the grace", 30 * time.Second, "default/urgent", false, true},
		{"for another preemptor", 300 * time.Millisecond, "default/other", false, false},
		{"after the preemption ended", 300 * time.Millisecond, "default/urgent", true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 2)
			e.register(gpuJob("victim", map[string]string{"impact_tier": "scavenger"}, [2]int{2, 4}))
			e.startWatcher(WatcherConfig{})
			x := e.executor(nil)
			admitAndRun(t, e, x, "victim")
			start := time.Now()
			if res := x.Apply(context.Background(), &engine.Plan{Preemptions: []engine.Preemption{preemption(e, "victim", tc.grace)}}); len(res.Preempted) != 1 {
				t.Fatalf("apply = %+v", res)
			}
			if tc.afterEnd {
				x.Wait()
			} else {
				waitTrue(t, "the checkpoint signal", 10*time.Second, func() bool { return len(e.fake.Signals()) == 2 })
			}
			w := engine.Withdrawal{JobID: victim, Preemptor: tc.preemptor, Reason: "preemption withdrawn within its grace: " + tc.preemptor + ", preempted for, no longer waits"}
			res := x.Apply(context.Background(), &engine.Plan{Withdrawals: []engine.Withdrawal{w}})
			x.Wait()
			if tc.runsOn {
				if len(res.Withdrawing) != 1 || len(res.Skipped) != 0 {
					t.Errorf("withdrawal = %+v", res)
				}
				if took := time.Since(start); took >= tc.grace {
					t.Errorf("the withdrawn preemption ended after %v, not before its grace of %v", took, tc.grace)
				}
			} else if res.Skipped[victim] != SkipNotUnderway {
				t.Errorf("withdrawal = %+v, want skipped: %s", res, SkipNotUnderway)
			}
			running := 0
			for _, a := range e.fake.Allocations("victim") {
				if a.ClientStatus == "running" && a.DesiredStatus == "run" {
					running++
				}
			}
			job := e.fake.Job("victim")
			parked := *job.NodePool == parking
			recs, err := x.st.Preemptions(context.Background(), time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.runsOn {
				if running != 2 || parked || len(recs) != 0 {
					t.Errorf("withdrawn: %d allocations running, parked %v, %d preemptions recorded; want 2, false, 0", running, parked, len(recs))
				}
				if o := x.Outcome(victim); !strings.Contains(o, "withdrawn within its grace") || !strings.Contains(o, "runs on") {
					t.Errorf("outcome = %q", o)
				}
				if n := x.PreemptionOutcomes()[OutcomeWithdrawn]; n != 1 {
					t.Errorf("withdrawn outcomes = %d, want 1", n)
				}
			} else if running != 0 || !parked || len(recs) != 1 {
				t.Errorf("not withdrawn: %d allocations running, parked %v, %d preemptions recorded; want 0, true, 1", running, parked, len(recs))
			}
			if in, _ := x.st.Intent(context.Background(), victim); in != nil {
				t.Errorf("intent left: %+v", in)
			}
		})
	}
}

// A withdrawal that comes once a task of the victim has exited with its
// requeue code (it saved its work on the signal and asked to be
// requeued) is too late: the preemption goes on, the job is parked and
// the preemption recorded, as if never withdrawn. The executor's lock is
// held while the tasks exit and the withdrawal is marked, so that its
// preemption sees both at once, whichever it looks at first.
func TestWithdrawalAfterTheVictimExitedIsTooLate(t *testing.T) {
	victim := cluster.JobKey("default", "victim")
	e := newEnv(t, 2)
	e.fake.SetSignalExitCode(jobspec.DefaultRequeueExitCode)
	e.register(gpuJob("victim", map[string]string{"impact_tier": "scavenger"}, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	x := e.executor(nil)
	admitAndRun(t, e, x, "victim")
	if res := x.Apply(context.Background(), &engine.Plan{Preemptions: []engine.Preemption{preemption(e, "victim", 30*time.Second)}}); len(res.Preempted) != 1 {
		t.Fatalf("apply = %+v", res)
	}
	waitTrue(t, "the checkpoint signal", 10*time.Second, func() bool { return len(e.fake.Signals()) == 2 })
	x.mu.Lock()
	for _, a := range e.fake.Allocations("victim") {
		if err := e.fake.ExitTasks(a.ID, jobspec.DefaultRequeueExitCode); err != nil {
			x.mu.Unlock()
			t.Fatal(err)
		}
	}
	x.underway[victim].withdraw = "preemption withdrawn within its grace"
	x.mu.Unlock()
	x.Wait()
	if job := e.fake.Job("victim"); *job.NodePool != parking {
		t.Errorf("victim in pool %s, want parked in %s", *job.NodePool, parking)
	}
	if recs, err := x.st.Preemptions(context.Background(), time.Time{}); err != nil || len(recs) != 1 {
		t.Errorf("preemption records %+v, %v; want one", recs, err)
	}
	if o := x.PreemptionOutcomes(); o[OutcomeRequeued] != 1 || o[OutcomeWithdrawn] != 0 {
		t.Errorf("outcomes %v, want one requeued, none withdrawn", o)
	}
}
