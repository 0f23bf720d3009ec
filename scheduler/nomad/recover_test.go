package nomad

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// intentsPath is where the executor's intents live in the fake (the
// Variables API path of StateConfig's default prefix).
const intentsPath = "/v1/var/impact/state/intents/"

// A leader that dies between deciding and acting is stood for by its
// context ending right after a write reached Nomad (the fake's AfterNext):
// the write is done, its answer is lost and nothing after it reaches
// Nomad. The next leader's Recover must finish or undo what it left.
func TestCrashBetweenDecidingAndActing(t *testing.T) {
	t.Run("admission recorded, never registered", func(t *testing.T) {
		e := newEnv(t, 2)
		e.register(gpuJob("a", nil, [2]int{2, 4}))
		e.startWatcher(WatcherConfig{})
		s := e.waitFor("job", func(s *cluster.Snapshot) bool { return s.NumJobs() == 1 })
		registers := countRegisters(e.fake)
		x := e.executor(nil)
		ctx, die := context.WithCancel(context.Background())
		e.fake.AfterNext("PUT", intentsPath, "", die)
		res := x.Apply(ctx, &engine.Plan{Admissions: []engine.Admission{admission(t, s, "a")}})
		if res.Failed["default/a"] == nil || len(res.Admitted) != 0 {
			t.Fatalf("apply = %+v, want the admission cut short", res)
		}
		if in, _ := x.st.Intent(context.Background(), "default/a"); in == nil || in.Phase != PhaseDecided {
			t.Fatalf("test setup: intent %+v, want the decided one written before the crash", in)
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
		ctx, die := context.WithCancel(context.Background())
		e.fake.AfterNext("PUT", "/v1/jobs", "", die)
		adm := admission(t, s, "b")
		x.Apply(ctx, &engine.Plan{Admissions: []engine.Admission{adm}})
		if in, _ := x.st.Intent(context.Background(), "default/b"); in == nil || in.Phase != PhaseDecided || !pinnedAPI(e.fake.Job("b")) {
			t.Fatalf("test setup: intent %+v, want the job registered and its intent still decided", in)
		}
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
	t.Run("a move in its grace: the new leader knows where it restarts", func(t *testing.T) {
		var p engine.Preemption
		e, _ := crashAfterSignal(t, func(e *env) engine.Preemption {
			p = preemption(e, "v", time.Hour)
			p.MovedTo = []engine.AllocPlacement{{NodeID: "node-1", GPUs: []string{"GPU-1-3"}}}
			p.PreemptorGPUs = []engine.AllocPlacement{{NodeID: "node-0", GPUs: []string{"GPU-0-0", "GPU-0-1"}}}
			return p
		})
		y := e.executor(nil)
		yctx, stop := context.WithCancel(context.Background())
		defer func() { stop(); y.Wait() }()
		if err := y.Recover(yctx); err != nil {
			t.Fatal(err)
		}
		got := y.PreemptionsUnderway()
		if len(got) != 1 || got[0].JobID != p.JobID || got[0].Preemptor != p.Preemptor ||
			!reflect.DeepEqual(got[0].MovedTo, p.MovedTo) || !reflect.DeepEqual(got[0].PreemptorGPUs, p.PreemptorGPUs) {
			t.Fatalf("underway after recovery = %+v, want %+v", got, p)
		}
	})
	t.Run("preemption signalled, never parked", func(t *testing.T) {
		e, x := crashAfterSignal(t, func(e *env) engine.Preemption { return preemption(e, "v", 10*time.Millisecond) })
		if j := e.fake.Job("v"); *j.NodePool == parking {
			t.Fatal("crash point not reached")
		}
		if in, _ := x.st.Intent(context.Background(), "default/v"); in == nil || in.Phase != PhaseSignalled {
			t.Fatalf("test setup: intent %+v, want the signalled one written before the crash", in)
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

// crashAfterSignal runs job v, then a leader that dies right after the
// signalled phase of v's preemption (made by p) reached Nomad; it returns
// the environment and that leader's executor, stopped.
func crashAfterSignal(t *testing.T, p func(*env) engine.Preemption) (*env, *Executor) {
	t.Helper()
	e := newEnv(t, 2)
	e.register(gpuJob("v", nil, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	x := e.executor(nil)
	admitAndRun(t, e, x, "v")
	ctx, die := context.WithCancel(context.Background())
	e.fake.AfterNext("PUT", intentsPath, "signalled_at", die) // the signalled phase written
	x.Apply(ctx, &engine.Plan{Preemptions: []engine.Preemption{p(e)}})
	x.Wait()
	return e, x
}
