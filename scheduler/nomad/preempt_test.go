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

func admitAndRun(t *testing.T, e *env, x *Executor, job string) {
	t.Helper()
	s := e.waitFor("job "+job, func(s *cluster.Snapshot) bool {
		_, ok := s.Job(cluster.JobKey("default", job))
		return ok
	})
	if res := x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{admission(t, s, job)}}); len(res.Admitted) != 1 {
		t.Fatalf("admit %s: %+v", job, res)
	}
	x.CheckDeadlines(context.Background())
}

func preemption(e *env, job string, grace time.Duration) engine.Preemption {
	var ids []string
	for _, a := range e.fake.Allocations(job) {
		ids = append(ids, a.ID)
	}
	return engine.Preemption{Stop: engine.Stop{JobID: cluster.JobKey("default", job), Allocs: ids, GPUs: 8, Grace: grace,
		CheckpointSignal: "SIGUSR1"}, Preemptor: "default/urgent", Reason: "critical job needs 8 GPUs"}
}

func TestPreemptSignalsWaitsGraceParksAndStops(t *testing.T) {
	for _, exits := range []bool{false, true} {
		t.Run(map[bool]string{false: "grace runs out", true: "tasks exit early with the requeue code"}[exits], func(t *testing.T) {
			e := newEnv(t, 2)
			e.fake.SetExitOnSignal(exits)
			e.fake.SetSignalExitCode(jobspec.DefaultRequeueExitCode)
			e.register(gpuJob("victim", map[string]string{"impact_tier": "scavenger"}, [2]int{2, 4}))
			e.startWatcher(WatcherConfig{})
			x := e.executor(nil)
			admitAndRun(t, e, x, "victim")
			// Where the tasks exit on the signal the grace is long, so an
			// early end is told from a waited-out grace on a loaded machine.
			grace := 300 * time.Millisecond
			if exits {
				grace = 30 * time.Second
			}
			start := time.Now()
			res := x.Apply(context.Background(), &engine.Plan{Preemptions: []engine.Preemption{preemption(e, "victim", grace)}})
			if len(res.Preempted) != 1 {
				t.Fatalf("apply = %+v", res)
			}
			// A second plan naming the same victim does not start twice.
			if res := x.Apply(context.Background(), &engine.Plan{Preemptions: []engine.Preemption{preemption(e, "victim", grace)}}); len(res.Skipped) != 1 {
				t.Errorf("second preemption = %+v, want skipped", res)
			}
			x.Wait()
			took := time.Since(start)
			if !exits && took < grace {
				t.Errorf("parked after %v, before the grace of %v", took, grace)
			}
			if exits && took >= grace {
				t.Errorf("tasks exited at once but parking waited %v", took)
			}
			sig := e.fake.Signals()
			if len(sig) != 2 || sig[0].Signal != "SIGUSR1" {
				t.Errorf("signals = %+v, want SIGUSR1 to both allocations", sig)
			}
			job := e.fake.Job("victim")
			if *job.NodePool != parking || pinnedAPI(job) || *job.Status != "pending" {
				t.Errorf("victim pool %s pinned %v status %s", *job.NodePool, pinnedAPI(job), *job.Status)
			}
			if q := e.fake.Queued("victim")["g0"]; q != 2 {
				t.Errorf("queued = %d, want 2 (requeued with its identity)", q)
			}
			for _, a := range e.fake.Allocations("victim") {
				if a.ClientStatus == "running" {
					t.Errorf("alloc %s still running", a.ID)
				}
			}
			recs, err := x.st.Preemptions(context.Background(), time.Time{})
			if err != nil || len(recs) != 1 || recs[0].Preemptor != "default/urgent" {
				t.Errorf("records = %+v, %v", recs, err)
			}
			if in, _ := x.st.Intent(context.Background(), cluster.JobKey("default", "victim")); in != nil {
				t.Errorf("intent left: %+v", in)
			}
			e.waitFor("victim queued", func(s *cluster.Snapshot) bool {
				j, ok := s.Job(cluster.JobKey("default", "victim"))
				return ok && j.State == cluster.JobQueued && len(s.JobAllocs(j.ID)) == 0
			})
		})
	}
}

// The outcome contract: a victim whose tasks all exit 0 within the grace
// (or before a signal-less preemption looks) has done its work: it is not
// parked, not stopped, not recorded as preempted, and Nomad completes it.
func TestPreemptedJobThatExitsZeroCompletes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		signal string
		grace  time.Duration
		exit   func(e *env)
	}{
		{name: "exits 0 on the checkpoint signal", signal: "SIGUSR1", grace: 5 * time.Second,
			exit: func(e *env) { e.fake.SetExitOnSignal(true) }},
		{name: "finished on its own before a preemption without signal", grace: 0,
			exit: func(e *env) {
				for _, a := range e.fake.Allocations("victim") {
					if err := e.fake.ExitTasks(a.ID, 0); err != nil {
						e.t.Fatal(err)
					}
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 2)
			e.register(gpuJob("victim", map[string]string{"impact_tier": "scavenger"}, [2]int{2, 4}))
			e.startWatcher(WatcherConfig{})
			x := e.executor(nil)
			admitAndRun(t, e, x, "victim")
			registers := countRegisters(e.fake)
			before := registers("victim")
			tc.exit(e)
			p := preemption(e, "victim", tc.grace)
			p.CheckpointSignal = tc.signal
			start := time.Now()
			if res := x.Apply(context.Background(), &engine.Plan{Preemptions: []engine.Preemption{p}}); len(res.Preempted) != 1 {
				t.Fatalf("apply = %+v", res)
			}
			x.Wait()
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("took %v; the tasks had exited, nothing to wait for", took)
			}
			if n := registers("victim") - before; n != 0 {
				t.Errorf("%d re-registers of a job that finished; it must not be requeued", n)
			}
			job := e.fake.Job("victim")
			if *job.NodePool == parking || *job.Status != "dead" {
				t.Errorf("job pool %s status %s, want it left in its pool and dead (complete)", *job.NodePool, *job.Status)
			}
			if q := e.fake.Queued("victim")["g0"]; q != 0 {
				t.Errorf("queued = %d, want 0", q)
			}
			for _, a := range e.fake.Allocations("victim") {
				if a.ClientStatus != "complete" || a.DesiredStatus != "run" {
					t.Errorf("alloc %s %s/%s, want complete and never stopped", a.ID, a.ClientStatus, a.DesiredStatus)
				}
			}
			if recs, _ := x.st.Preemptions(context.Background(), time.Time{}); len(recs) != 0 {
				t.Errorf("records = %+v, want none (no work was lost)", recs)
			}
			if in, _ := x.st.Intent(context.Background(), cluster.JobKey("default", "victim")); in != nil {
				t.Errorf("intent left: %+v", in)
			}
			if got := x.PreemptionOutcomes(); got[OutcomeCompleted] != 1 || len(got) != 1 {
				t.Errorf("outcomes = %v, want one completed", got)
			}
			if o := x.Outcome("default/victim"); !strings.Contains(o, "complete, not requeued") {
				t.Errorf("outcome note = %q", o)
			}
		})
	}
}

// A task that exits with a requeue code other than the default is not
// taken for a requeue unless the job's code says so; one exiting with the
// job's own impact_requeue_exit_code ends the wait at once.
func TestPreemptRequeueExitCode(t *testing.T) {
	for _, tc := range []struct {
		name     string
		code     int // the job's requeue code (0: default)
		exit     int // what the tasks exit with on the signal
		wantWait bool
	}{
		{name: "own code ends the wait", code: 42, exit: 42},
		{name: "default code when the job sets another is a restart", code: 42, exit: jobspec.DefaultRequeueExitCode, wantWait: true},
		{name: "default code", exit: jobspec.DefaultRequeueExitCode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 2)
			e.fake.SetExitOnSignal(true)
			e.fake.SetSignalExitCode(tc.exit)
			e.register(gpuJob("victim", map[string]string{"impact_tier": "scavenger"}, [2]int{2, 4}))
			e.startWatcher(WatcherConfig{})
			x := e.executor(nil)
			admitAndRun(t, e, x, "victim")
			grace := 600 * time.Millisecond
			if !tc.wantWait {
				grace = 30 * time.Second // an early end stays far from it under load
			}
			p := preemption(e, "victim", grace)
			p.RequeueExitCode = tc.code
			start := time.Now()
			x.Apply(context.Background(), &engine.Plan{Preemptions: []engine.Preemption{p}})
			x.Wait()
			took := time.Since(start)
			if tc.wantWait && took < grace {
				t.Errorf("parked after %v, before the grace of %v", took, grace)
			}
			if !tc.wantWait && took >= grace {
				t.Errorf("the tasks exited with the requeue code but parking waited %v", took)
			}
			if job := e.fake.Job("victim"); *job.NodePool != parking || *job.Status != "pending" {
				t.Errorf("victim pool %s status %s, want requeued", *job.NodePool, *job.Status)
			}
			want := OutcomeRequeued
			if tc.wantWait {
				want = OutcomeStopped
			}
			if got := x.PreemptionOutcomes(); got[want] != 1 {
				t.Errorf("outcomes = %v, want one %s", got, want)
			}
		})
	}
}
