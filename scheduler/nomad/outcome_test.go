package nomad

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// withRestart gives every group of j a restart block (attempts, mode
// "fail") and, with noReschedule, `reschedule { attempts = 0 }`: the
// example job's lifecycle blocks.
func withRestart(j *api.Job, attempts int, noReschedule bool) *api.Job {
	for _, tg := range j.TaskGroups {
		mode, interval, delay := "fail", 24*time.Hour, time.Second
		tg.RestartPolicy = &api.RestartPolicy{Attempts: &attempts, Mode: &mode, Interval: &interval, Delay: &delay}
		if noReschedule {
			zero, no := 0, false
			tg.ReschedulePolicy = &api.ReschedulePolicy{Attempts: &zero, Unlimited: &no}
		}
	}
	return j
}

// The outcome contract holds under every restart policy: 0 = complete, the
// requeue code = requeued, anything else = stopped (and requeued). With
// `restart { attempts = 0 }` a task exiting 75 fails its allocation at
// once; it was counted "stopped" when the outcome skipped terminal
// allocations before reading their exit code.
func TestPreemptionOutcomeUnderEveryRestartPolicy(t *testing.T) {
	for _, tc := range []struct {
		attempts int // -1: Nomad's default (no restart block)
		code     int
		want     string
	}{
		{-1, 0, OutcomeCompleted},
		{-1, 75, OutcomeRequeued},
		{-1, 1, OutcomeStopped},
		{0, 0, OutcomeCompleted},
		{0, 75, OutcomeRequeued},
		{0, 1, OutcomeStopped},
		{0, 137, OutcomeStopped},
	} {
		t.Run(fmt.Sprintf("attempts=%d/exit=%d", tc.attempts, tc.code), func(t *testing.T) {
			e := newEnv(t, 2)
			e.fake.SetExitOnSignal(true)
			e.fake.SetSignalExitCode(tc.code)
			j := gpuJob("victim", map[string]string{"impact_tier": "scavenger"}, [2]int{2, 4})
			if tc.attempts >= 0 {
				withRestart(j, tc.attempts, true)
			}
			e.register(j)
			e.startWatcher(WatcherConfig{})
			x := e.executor(nil)
			admitAndRun(t, e, x, "victim")
			// A grace far longer than the test: an outcome other than
			// "stopped" must be read as soon as the tasks exit.
			grace := 200 * time.Millisecond
			if tc.want != OutcomeStopped {
				grace = time.Minute
			}
			if res := x.Apply(context.Background(), &engine.Plan{Preemptions: []engine.Preemption{preemption(e, "victim", grace)}}); len(res.Preempted) != 1 {
				t.Fatalf("apply = %+v", res)
			}
			x.Wait()
			got := x.PreemptionOutcomes()
			if got[tc.want] != 1 || len(got) != 1 {
				t.Errorf("outcomes = %v, want one %q", got, tc.want)
			}
			if tc.attempts == 0 && tc.code != 0 {
				for _, a := range e.fake.Allocations("victim") {
					if a.ClientStatus == "running" {
						t.Errorf("allocation %s running again: restart attempts 0 must not restart it", a.ID)
					}
				}
			}
		})
	}
}
