package nomad

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

func TestCrashBetweenDecidingAndActing(t *testing.T) {
	t.Run("admission recorded, never registered", func(t *testing.T) {
		e := newEnv(t, 2)
		e.register(gpuJob("a", nil, [2]int{2, 4}))
		e.startWatcher(WatcherConfig{})
		s := e.waitFor("job", func(s *cluster.Snapshot) bool { return s.NumJobs() == 1 })
		registers := countRegisters(e.fake)
		x := e.executor(nil)
		x.crashAt = "admit:after-intent"
		res := x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{admission(t, s, "a")}})
		if !errors.Is(res.Failed["default/a"], errCrashed) {
			t.Fatalf("apply = %+v", res)
		}
		// A new leader starts.
		y := e.executor(nil)
		if err := y.Recover(context.Background()); err != nil {
			t.Fatal(err)
		}
		if in, _ := y.st.Intent(context.Background(), "default/a"); in != nil {
			t.Errorf("stale intent kept: %+v", in)
		}
		if j := e.fake.Job("a"); *j.NodePool != parking || registers("a") != 0 {
			t.Fatalf("job touched: pool %s, %d registers", *j.NodePool, registers("a"))
		}
		if res := y.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{admission(t, s, "a")}}); len(res.Admitted) != 1 {
			t.Fatalf("re-decided admission = %+v", res)
		}
		if n := registers("a"); n != 1 {
			t.Errorf("job registered %d times, want once", n)
		}
	})
	t.Run("registered, intent not updated", func(t *testing.T) {
		e := newEnv(t, 2)
		e.register(gpuJob("b", nil, [2]int{2, 4}))
		e.startWatcher(WatcherConfig{})
		s := e.waitFor("job", func(s *cluster.Snapshot) bool { return s.NumJobs() == 1 })
		registers := countRegisters(e.fake)
		x := e.executor(nil)
		x.crashAt = "admit:after-register"
		adm := admission(t, s, "b")
		x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{adm}})
		y := e.executor(nil)
		if err := y.Recover(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !y.Busy("default/b") {
			t.Errorf("registered admission not adopted")
		}
		// Even a stale plan re-admitting it does nothing: the job is busy
		// and its index moved on.
		res := y.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{adm}})
		if len(res.Admitted) != 0 {
			t.Errorf("admitted twice: %+v", res)
		}
		if n := registers("b"); n != 1 {
			t.Errorf("registered %d times, want once", n)
		}
		y.CheckDeadlines(context.Background())
		if in, _ := y.st.Intent(context.Background(), "default/b"); in != nil {
			t.Errorf("intent left after the gang started: %+v", in)
		}
		if len(e.fake.Allocations("b")) != 2 {
			t.Errorf("allocs = %d, want the whole gang", len(e.fake.Allocations("b")))
		}
	})
	t.Run("preemption signalled, never parked", func(t *testing.T) {
		e := newEnv(t, 2)
		e.register(gpuJob("v", nil, [2]int{2, 4}))
		e.startWatcher(WatcherConfig{})
		x := e.executor(nil)
		admitAndRun(t, e, x, "v")
		x.crashAt = "preempt:after-signal"
		x.Apply(context.Background(), &engine.Plan{Preemptions: []engine.Preemption{preemption(e, "v", 10*time.Millisecond)}})
		x.Wait()
		if j := e.fake.Job("v"); *j.NodePool == parking {
			t.Fatal("crash point not reached")
		}
		y := e.executor(nil)
		if err := y.Recover(context.Background()); err != nil {
			t.Fatal(err)
		}
		y.Wait()
		job := e.fake.Job("v")
		if *job.NodePool != parking || pinnedAPI(job) {
			t.Errorf("half-preempted job not parked: pool %s", *job.NodePool)
		}
		for _, a := range e.fake.Allocations("v") {
			if a.ClientStatus == "running" {
				t.Errorf("alloc %s left running", a.ID)
			}
		}
		if n := len(e.fake.Signals()); n != 2 {
			t.Errorf("signals = %d, want 2 (not re-sent on recovery)", n)
		}
		if in, _ := y.st.Intent(context.Background(), "default/v"); in != nil {
			t.Errorf("intent left: %+v", in)
		}
	})
}
