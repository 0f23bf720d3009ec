package nomad

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/internal/nomadfake"
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
			// A second plan naming the same victim does not start twice:
			// it waits behind the first (SkipDeferred), which leaves
			// nothing of the job running, so it is dropped (one record
			// below, not two).
			if res := x.Apply(context.Background(), &engine.Plan{Preemptions: []engine.Preemption{preemption(e, "victim", grace)}}); len(res.Skipped) != 1 || res.Skipped[cluster.JobKey("default", "victim")] != SkipDeferred {
				t.Errorf("second preemption = %+v, want deferred", res)
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

// A gang whose named members complete during the grace is not done while
// Nomad runs another allocation of it: the replacement of a member lost
// with its node, blocked on the pins until the members' completion frees
// their GPUs, then placed. Taken for done (the contract's "every task
// exited 0" read off the named allocations only), the job was left with
// that replacement running and nobody stopping it; a whole-gang requeue
// the engine ordered for it meanwhile was skipped as already under way,
// and the next preemptor that claimed its GPUs waited on it for good
// (TestPropertyAdapterLiveness: "says it stops default/j04, which Nomad
// runs on and nobody stops"). It is requeued whole instead: parked, the
// replacement stopped. The fake clock keeps the grace from running out,
// so only the members' completion ends the wait.
func TestPreemptedGangWithLiveReplacementIsRequeued(t *testing.T) {
	e, x, key, member := gangWithLostMember(t)
	if live := liveAllocIDs(e, "victim"); len(live) != 1 || live[0] != member {
		t.Fatalf("live allocations %v, want only the member %s (the replacement blocked)", live, member)
	}

	// The engine preempts what its snapshot holds: the one member.
	preemptMember(t, x, key, member)

	// The member completes within the grace; Nomad places the replacement
	// on the GPUs it freed (the fake does so before FinishAlloc returns).
	if err := e.fake.FinishAlloc(member, false); err != nil {
		t.Fatal(err)
	}
	live := liveAllocIDs(e, "victim")
	if len(live) != 1 || live[0] == member {
		t.Fatalf("live allocations %v, want Nomad's replacement of the lost member", live)
	}
	x.Wait()

	assertRequeuedWhole(t, e, x, key)
	if got := x.PreemptionOutcomes(); got[OutcomeCompleted] != 0 || got[OutcomeStopped] != 1 {
		t.Errorf("outcomes = %v, want one %s and none %s", got, OutcomeStopped, OutcomeCompleted)
	}
	if o := x.Outcome(key); !strings.Contains(o, "preempted for default/urgent") {
		t.Errorf("outcome note = %q, want a preemption", o)
	}
}

// A stop the engine orders for a job while the job's preemption is
// ending is not lost. The preemption read its victim done (its one
// running member completed in the grace, the replacement of the member
// lost with node-0 still blocked) and is deleting its intent when node-0
// comes back and Nomad places that replacement; a cycle then orders the
// gang requeued whole (the replacement stopped first). Apply skipped that
// requeue as already under way behind the preemption, which then ended
// with the job taken for complete: the replacement ran on, unmanaged,
// while the engine held the requeue in flight for its TTL (15 minutes
// past the grace), so a preemptor claiming those GPUs waited that long.
// The requeue is deferred instead and carried out once the preemption
// ends, the job still running the replacement: stopped, parked, requeued
// whole. The fake runs the cycle inside the intent's deletion (AfterNext:
// done, the answer not yet back to the executor), and its clock never
// moves, so no grace runs out.
func TestStopDeferredBehindAnEndingPreemptionIsCarriedOut(t *testing.T) {
	e, x, key, member := gangWithLostMember(t)
	// node-1 is made ineligible, so that the member's completion there
	// does not let Nomad place the replacement at once.
	if err := e.fake.SetNodeStatus("node-1", "ready", false); err != nil {
		t.Fatal(err)
	}
	preemptMember(t, x, key, member)

	// The window: the preemption has read the job done and deletes its
	// intent; node-0 comes back, Nomad places the replacement, and the
	// next cycle orders the gang requeued whole.
	var replacement string
	var res ApplyReport
	e.fake.AfterNext("DELETE", intentsPath, "", func() {
		if err := e.fake.SetNodeStatus("node-0", "ready", true); err != nil {
			t.Error(err)
			return
		}
		live := liveAllocIDs(e, "victim")
		if len(live) != 1 || live[0] == member {
			t.Errorf("live allocations %v, want Nomad's replacement of the lost member", live)
			return
		}
		replacement = live[0]
		r := engine.Preemption{Stop: engine.Stop{JobID: key, Allocs: []string{replacement}, GPUs: 4, Grace: time.Minute,
			CheckpointSignal: "SIGUSR1"}, Replacements: []string{replacement},
			Reason: "gang incomplete: a replacement runs; stopped whole and requeued"}
		res = x.Apply(context.Background(), &engine.Plan{Requeues: []engine.Preemption{r}})
	})
	if err := e.fake.FinishAlloc(member, false); err != nil {
		t.Fatal(err)
	}
	x.Wait()
	if t.Failed() {
		return
	}

	if res.Skipped[key] != SkipDeferred || len(res.Requeued) != 0 {
		t.Errorf("requeue ordered during the preemption: report %+v, want it deferred (%q)", res, SkipDeferred)
	}
	t.Logf("the replacement was %s", replacement)
	assertRequeuedWhole(t, e, x, key)
	if o := x.Outcome(key); !strings.Contains(o, "requeued whole") {
		t.Errorf("outcome note = %q, want the requeue's", o)
	}
}

// A stop ordered while the job's admission still waits for its gang to
// run (CheckDeadlines has not seen every member running: here node-1's
// client holds its member pending, as one still pulling its image) is
// deferred behind the admission, not dropped. The engine sees the gang's
// allocations as Nomad places them and may choose it as a victim (past
// its min runtime, young for a headroom's tiers). When the admission
// ends done the gang runs on, and the stop is carried out (signalled,
// parked, stopped, recorded); when it is rolled back, parked and stopped,
// the stop is dropped (no record). Before, the stop was skipped as under
// way and lost: the gang ran on while the engine held the stop in flight
// until its TTL and the preemptor waited. The fake clock moves only when
// the test moves it (no deadline passes unless told), and the tasks exit
// on the signal with the requeue code, so no grace is waited out.
func TestStopDeferredBehindAPendingAdmission(t *testing.T) {
	for _, done := range []bool{true, false} {
		t.Run(map[bool]string{true: "admission done: carried out", false: "admission rolled back: dropped"}[done], func(t *testing.T) {
			e := newEnv(t, 2)
			e.fake.SetExitOnSignal(true)
			e.fake.SetSignalExitCode(jobspec.DefaultRequeueExitCode)
			e.fake.SetClientBehavior("node-1", nomadfake.ClientHold)
			e.register(gpuJob("victim", map[string]string{"impact_tier": "scavenger"}, [2]int{2, 4}))
			e.startWatcher(WatcherConfig{})
			// One clock for both: the requeue code's exit is read from
			// events the fake stamps, against the preemption's decision.
			clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
			e.fake.SetClock(clk.Now)
			x := e.executor(clk)
			admitAndRun(t, e, x, "victim")
			key := cluster.JobKey("default", "victim")
			if !x.Busy(key) {
				t.Fatal("test setup: the admission is not waiting for its gang")
			}
			e.waitFor("both members placed", func(s *cluster.Snapshot) bool { return len(s.JobAllocs(key)) == 2 })

			ctx := context.Background()
			res := x.Apply(ctx, &engine.Plan{Preemptions: []engine.Preemption{preemption(e, "victim", time.Minute)}})
			if res.Skipped[key] != SkipDeferred || len(res.Preempted) != 0 {
				t.Errorf("preemption ordered during the admission: report %+v, want it deferred (%q)", res, SkipDeferred)
			}
			// One stop waits per job: a later one is skipped.
			if res := x.Apply(ctx, &engine.Plan{Preemptions: []engine.Preemption{preemption(e, "victim", time.Minute)}}); res.Skipped[key] != SkipUnderway {
				t.Errorf("second preemption = %+v, want skipped (%q)", res, SkipUnderway)
			}
			if done {
				e.fake.StartPending("node-1")
				if rolled := x.CheckDeadlines(ctx); len(rolled) != 0 {
					t.Fatalf("rolled back %v, want the admission done", rolled)
				}
			} else {
				clk.Add(2 * time.Minute)
				if rolled := x.CheckDeadlines(ctx); len(rolled) != 1 || rolled[0] != key {
					t.Fatalf("rolled back %v, want %s", rolled, key)
				}
			}
			waitStops(t, x)

			assertRequeuedWhole(t, e, x, key)
			recs, err := x.st.Preemptions(ctx, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			o := x.Outcome(key)
			if done {
				if len(recs) != 1 || recs[0].Preemptor != "default/urgent" {
					t.Errorf("preemption records = %+v, want one for default/urgent", recs)
				}
				if sig := e.fake.Signals(); len(sig) != 2 {
					t.Errorf("signals = %+v, want the checkpoint signal to both members", sig)
				}
				if !strings.Contains(o, "preempted for default/urgent") {
					t.Errorf("outcome note = %q, want the preemption's", o)
				}
			} else {
				if len(recs) != 0 || len(e.fake.Signals()) != 0 {
					t.Errorf("preemption records %+v, signals %+v: want the stop dropped after the rollback", recs, e.fake.Signals())
				}
				if !strings.Contains(o, "admission rolled back") {
					t.Errorf("outcome note = %q, want the rollback's", o)
				}
			}
		})
	}
}

// waitStops waits (10s at most) for the executor's background stops to
// end: with a fake clock a stop that is not told its victim ended would
// wait out its grace for ever.
func waitStops(t *testing.T, x *Executor) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		x.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the executor's stops did not end within 10s")
	}
}

// gangWithLostMember admits and runs a scavenger gang of two 4-GPU
// members on two nodes, then takes node-0 down: its member is lost and
// its replacement blocked (pinned to node-0 and to the GPUs node-1's
// member holds). It returns the member left on node-1. The executor's
// clock never moves, so no grace runs out.
func gangWithLostMember(t *testing.T) (e *env, x *Executor, key, member string) {
	t.Helper()
	e = newEnv(t, 2)
	e.register(gpuJob("victim", map[string]string{"impact_tier": "scavenger"}, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	x = e.executor(&fakeClock{t: time.Unix(1_800_000_000, 0)})
	admitAndRun(t, e, x, "victim")
	key = cluster.JobKey("default", "victim")
	if err := e.fake.SetNodeStatus("node-0", "down", false); err != nil {
		t.Fatal(err)
	}
	s := e.waitFor("the member on node-0 lost", func(s *cluster.Snapshot) bool {
		as := s.JobAllocs(key)
		return len(as) == 1 && as[0].NodeID == "node-1"
	})
	return e, x, key, s.JobAllocs(key)[0].ID
}

// preemptMember applies the engine's preemption of the gang's one
// running member for a critical job, and waits until it is signalled.
func preemptMember(t *testing.T, x *Executor, key, member string) {
	t.Helper()
	p := engine.Preemption{Stop: engine.Stop{JobID: key, Allocs: []string{member}, GPUs: 4, Grace: time.Minute,
		CheckpointSignal: "SIGUSR1"}, Preemptor: "default/urgent", Reason: "critical job needs 4 GPUs"}
	if res := x.Apply(context.Background(), &engine.Plan{Preemptions: []engine.Preemption{p}}); len(res.Preempted) != 1 {
		t.Fatalf("apply = %+v", res)
	}
	waitPhase(t, x, key, PhaseSignalled)
}

// assertRequeuedWhole checks, once the executor's stops of the victim
// have ended, that nothing of it runs, that it is parked and unpinned
// (requeued whole), and that the executor holds neither its intent nor
// its claim.
func assertRequeuedWhole(t *testing.T, e *env, x *Executor, key string) {
	t.Helper()
	if got := liveAllocIDs(e, "victim"); len(got) != 0 {
		t.Errorf("allocations %v of the victim still run, not stopped: nobody manages them", got)
	}
	if job := e.fake.Job("victim"); *job.NodePool != parking || pinnedAPI(job) {
		t.Errorf("victim in pool %s (pinned %v), want parked: requeued whole", *job.NodePool, pinnedAPI(job))
	}
	if in, _ := x.st.Intent(context.Background(), key); in != nil {
		t.Errorf("intent left: %+v", in)
	}
	if x.Busy(key) {
		t.Errorf("%s still claimed after its stops ended", key)
	}
}

// liveAllocIDs lists the allocations of a job the fake still wants
// running (desired status run, not terminal).
func liveAllocIDs(e *env, job string) []string {
	var out []string
	for _, a := range e.fake.Allocations(job) {
		if a.DesiredStatus == "run" && !terminalStatus(a.ClientStatus) {
			out = append(out, a.ID)
		}
	}
	return out
}

// waitPhase waits (5s at most) until the job's intent reaches phase.
func waitPhase(t *testing.T, x *Executor, jobID, phase string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		in, err := x.st.Intent(context.Background(), jobID)
		if err == nil && in != nil && in.Phase == phase {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("intent of %s = %+v (%v), want phase %s", jobID, in, err, phase)
		}
		time.Sleep(5 * time.Millisecond)
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
			p.Progress, p.ProgressOnSignal = time.Hour, 90*time.Minute
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
			// The work saved, by the outcome: at the signal when a task
			// exited with the requeue code, else to the last checkpoint.
			wantProgress := "1h30m0s"
			if tc.wantWait {
				wantProgress = "1h0m0s"
			}
			if got := e.fake.Job("victim").Meta[jobspec.MetaProgress]; got != wantProgress {
				t.Errorf("parked job's %s = %q, want %q", jobspec.MetaProgress, got, wantProgress)
			}
			if d := e.fake.Job("victim").UI.Description; !strings.Contains(d, "Work saved so far: "+wantProgress) {
				t.Errorf("description %q does not say the work saved", d)
			}
		})
	}
}

// A stop that knows of no work saved leaves the job's impact_progress as
// it is: a value its user gave, or an earlier park wrote, is not lost.
func TestParkWithoutProgressKeepsTheJobsOwn(t *testing.T) {
	e := newEnv(t, 2)
	e.register(gpuJob("victim", map[string]string{"impact_tier": "scavenger", "impact_progress": "20m"}, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	x := e.executor(nil)
	admitAndRun(t, e, x, "victim")
	p := preemption(e, "victim", 50*time.Millisecond)
	x.Apply(context.Background(), &engine.Plan{Preemptions: []engine.Preemption{p}})
	x.Wait()
	job := e.fake.Job("victim")
	if *job.NodePool != parking {
		t.Fatalf("victim in pool %s, want parked", *job.NodePool)
	}
	if got := job.Meta[jobspec.MetaProgress]; got != "20m" {
		t.Fatalf("parked job's %s = %q, want the job's own 20m", jobspec.MetaProgress, got)
	}
	if d := job.UI.Description; strings.Contains(d, "Work saved") {
		t.Fatalf("description %q speaks of work saved it does not know", d)
	}
}
