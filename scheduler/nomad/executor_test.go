package nomad

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/internal/nomadfake"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (e *env) executor(clk *fakeClock) *Executor {
	cfg := ExecutorConfig{ParkingPool: parking, AdmitDeadline: time.Minute, PollInterval: 5 * time.Millisecond}
	if clk != nil {
		cfg.Clock = clk.Now
	}
	if e.w != nil {
		cfg.Snapshot = e.w.Snapshot
	}
	return NewExecutor(e.c, NewStateStore(e.c, StateConfig{}, e.log), cfg, e.log)
}

// admission builds the plan of a two-node gang: one allocation of 4 GPUs
// on island 1 of node-0 and of node-1.
func admission(t *testing.T, s *cluster.Snapshot, job string) engine.Admission {
	t.Helper()
	j, ok := s.Job(cluster.JobKey("default", job))
	if !ok {
		t.Fatalf("job %s not in model", job)
	}
	var allocs []engine.AllocPlacement
	for _, nid := range []string{"node-0", "node-1"} {
		n, _ := s.Node(nid)
		var ids []string
		for _, g := range n.GPUs {
			if g.Island == 1 {
				ids = append(ids, g.ID)
			}
		}
		allocs = append(allocs, engine.AllocPlacement{NodeID: nid, GPUs: ids})
	}
	return engine.Admission{JobID: j.ID, ModifyIndex: j.ModifyIndex, Pool: "gpu",
		Groups: []engine.GroupPlacement{{Group: "g0", Allocs: allocs}}}
}

// countRegisters counts, from now on, the registrations of each job.
func countRegisters(f *nomadfake.Server) func(job string) int {
	var mu sync.Mutex
	n := map[string]int{}
	f.OnRegister(func(j *api.Job) {
		mu.Lock()
		n[*j.ID]++
		mu.Unlock()
	})
	return func(job string) int {
		mu.Lock()
		defer mu.Unlock()
		return n[job]
	}
}

func TestAdmitPinsGangToPlannedNodesAndIsland(t *testing.T) {
	e := newEnv(t, 3)
	e.register(gpuJob("gang", map[string]string{"impact_tier": "high"}, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	s := e.waitFor("job", func(s *cluster.Snapshot) bool { return s.NumJobs() == 1 })
	x := e.executor(nil)
	res := x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{admission(t, s, "gang")}})
	if len(res.Admitted) != 1 || len(res.Failed) != 0 {
		t.Fatalf("apply = %+v", res)
	}
	job := e.fake.Job("gang")
	if *job.NodePool != "gpu" {
		t.Errorf("pool = %s", *job.NodePool)
	}
	var pin, distinct bool
	for _, c := range job.TaskGroups[0].Constraints {
		if c.LTarget == PinTarget && c.Operand == "set_contains_any" && c.RTarget == "node-0,node-1" {
			pin = true
		}
		if c.Operand == "distinct_hosts" {
			distinct = true
		}
	}
	if !pin || !distinct {
		t.Errorf("constraints = %+v, want pin to node-0,node-1 and distinct_hosts", job.TaskGroups[0].Constraints)
	}
	allocs := e.fake.Allocations("gang")
	nodes := map[string]bool{}
	for _, a := range allocs {
		nodes[a.NodeID] = true
		if a.ClientStatus != "running" {
			t.Errorf("alloc %s %s", a.ID, a.ClientStatus)
		}
		devs := a.AllocatedResources.Tasks["trainer"].Devices
		if len(devs) != 1 || !strings.Contains(devs[0].Name, "island 1") {
			t.Errorf("alloc on %s got %+v, want the planned island 1", a.NodeID, devs)
		}
		// Exactly the planned GPUs (the device pin), not just the island.
		var want []string
		for _, ap := range admission(t, s, "gang").Groups[0].Allocs {
			if ap.NodeID == a.NodeID {
				want = ap.GPUs
			}
		}
		if got := slices.Sorted(slices.Values(devs[0].DeviceIDs)); !slices.Equal(got, want) {
			t.Errorf("alloc on %s got GPUs %v, want the planned %v", a.NodeID, got, want)
		}
	}
	if len(allocs) != 2 || !nodes["node-0"] || !nodes["node-1"] {
		t.Errorf("allocations on %v, want node-0 and node-1", nodes)
	}
	if in, _ := x.st.Intent(context.Background(), cluster.JobKey("default", "gang")); in == nil || in.Phase != PhaseRegistered {
		t.Errorf("intent after admission = %+v", in)
	}
	if rolled := x.CheckDeadlines(context.Background()); len(rolled) != 0 {
		t.Errorf("rolled back %v", rolled)
	}
	if in, _ := x.st.Intent(context.Background(), cluster.JobKey("default", "gang")); in != nil {
		t.Errorf("intent kept after the gang started: %+v", in)
	}
	if n := x.PinMismatches(); n != 0 {
		t.Errorf("%d pin mismatches reading back what Nomad allocated, want 0", n)
	}
	// A read-back that disagrees with the pins is counted, per node.
	var started []string
	for _, a := range allocs {
		started = append(started, a.ID)
	}
	x.checkPins(context.Background(), &Intent{JobID: cluster.JobKey("default", "gang"),
		PinnedGPUs: map[string][]string{"node-0": {"not-this-gpu"}}}, started)
	if n := x.PinMismatches(); n != 2 {
		t.Errorf("%d pin mismatches after a wrong read-back (node-0 differs, node-1 unplanned), want 2", n)
	}
	// The model now shows the job running with its gang.
	e.waitFor("running gang", func(s *cluster.Snapshot) bool {
		j, ok := s.Job(cluster.JobKey("default", "gang"))
		return ok && j.State == cluster.JobRunning && len(s.JobAllocs(j.ID)) == 2
	})
}

func TestAdmitLosesToConcurrentUserUpdate(t *testing.T) {
	e := newEnv(t, 2)
	e.register(gpuJob("edited", nil, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	s := e.waitFor("job", func(s *cluster.Snapshot) bool { return s.NumJobs() == 1 })
	adm := admission(t, s, "edited")
	// The user edits the job after the snapshot the plan was made on.
	if _, err := e.fake.UpdateJob("edited", func(j *api.Job) { j.Meta = map[string]string{"impact_tier": "critical"} }); err != nil {
		t.Fatal(err)
	}
	x := e.executor(nil)
	res := x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{adm}})
	if conflicts(res) != 1 || len(res.Admitted) != 0 {
		t.Fatalf("apply = %+v, want a conflict", res)
	}
	if j := e.fake.Job("edited"); *j.NodePool != parking || j.Meta["impact_tier"] != "critical" {
		t.Errorf("user's update lost: pool %s meta %v", *j.NodePool, j.Meta)
	}
	// The race inside the register itself: Nomad answers HTTP 500 with
	// its EnforceIndex text (as recorded from the real agent).
	s = e.waitFor("new index", func(s *cluster.Snapshot) bool {
		j, _ := s.Job(cluster.JobKey("default", "edited"))
		return j != nil && j.Spec.Tier == "critical"
	})
	adm = admission(t, s, "edited")
	e.fake.FailNext("PUT", "/v1/jobs", 500, "Enforcing job modify index 44: job exists with conflicting job modify index: 45")
	res = x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{adm}})
	if conflicts(res) != 1 {
		t.Fatalf("apply = %+v, want a conflict", res)
	}
	if in, _ := x.st.Intent(context.Background(), adm.JobID); in != nil {
		t.Errorf("intent left after a conflict: %+v", in)
	}
	if len(e.fake.Allocations("edited")) != 0 {
		t.Errorf("conflicting admission placed allocations")
	}
	// The next cycle, on the fresh index, admits it.
	res = x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{adm}})
	if len(res.Admitted) != 1 {
		t.Fatalf("retry = %+v", res)
	}
}

func TestAdmissionDeadlineRollsBackHalfPlacedGang(t *testing.T) {
	e := newEnv(t, 2)
	e.fake.SetClientBehavior("node-1", nomadfake.ClientHold)
	e.register(gpuJob("slow", nil, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	s := e.waitFor("job", func(s *cluster.Snapshot) bool { return s.NumJobs() == 1 })
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	x := e.executor(clk)
	if res := x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{admission(t, s, "slow")}}); len(res.Admitted) != 1 {
		t.Fatalf("apply = %+v", res)
	}
	if rolled := x.CheckDeadlines(context.Background()); len(rolled) != 0 {
		t.Fatalf("rolled back before the deadline: %v", rolled)
	}
	if !x.Busy(cluster.JobKey("default", "slow")) {
		t.Errorf("pending admission not busy")
	}
	clk.Add(2 * time.Minute)
	rolled := x.CheckDeadlines(context.Background())
	if len(rolled) != 1 {
		t.Fatalf("rolled = %v, want the half-placed gang", rolled)
	}
	job := e.fake.Job("slow")
	if *job.NodePool != parking || pinnedAPI(job) {
		t.Errorf("after rollback pool %s pinned %v", *job.NodePool, pinnedAPI(job))
	}
	for _, a := range e.fake.Allocations("slow") {
		if a.DesiredStatus != "stop" {
			t.Errorf("alloc %s on %s still desired %s", a.ID, a.NodeID, a.DesiredStatus)
		}
	}
	if !strings.Contains(x.Outcome(cluster.JobKey("default", "slow")), "rolled back") {
		t.Errorf("outcome = %q", x.Outcome(cluster.JobKey("default", "slow")))
	}
	e.waitFor("parked again", func(s *cluster.Snapshot) bool {
		j, ok := s.Job(cluster.JobKey("default", "slow"))
		return ok && j.State == cluster.JobQueued
	})
}

// A register whose answer is lost (and the job cannot be read back) may
// have placed the gang: the executor keeps watching the job, so a gang
// that does not fully start is still rolled back at the deadline.
func TestAdmitWithUnknownOutcomeIsWatched(t *testing.T) {
	e := newEnv(t, 2)
	e.fake.SetClientBehavior("node-1", nomadfake.ClientHold)
	e.register(gpuJob("lost", nil, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	s := e.waitFor("job", func(s *cluster.Snapshot) bool { return s.NumJobs() == 1 })
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	x := e.executor(clk)
	e.fake.FailAfterNext("PUT", "/v1/jobs", 503, "connection reset")
	for range 3 { // every read-back attempt fails
		e.fake.FailNextOnceLost("GET", "/v1/job/lost", 503, "connection reset")
	}
	res := x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{admission(t, s, "lost")}})
	key := cluster.JobKey("default", "lost")
	if res.Failed[key] == nil || !strings.Contains(res.Failed[key].Error(), "outcome unknown") {
		t.Fatalf("apply = %+v, want a failure with an unknown outcome", res)
	}
	if !pinnedAPI(e.fake.Job("lost")) {
		t.Fatal("test setup: the register did not take effect")
	}
	if !x.Busy(key) {
		t.Fatal("admission with an unknown outcome is not watched")
	}
	if rolled := x.CheckDeadlines(context.Background()); len(rolled) != 0 {
		t.Fatalf("rolled back before the deadline: %v", rolled)
	}
	clk.Add(2 * time.Minute)
	if rolled := x.CheckDeadlines(context.Background()); len(rolled) != 1 || rolled[0] != key {
		t.Fatalf("rolled = %v, want the half-placed gang", rolled)
	}
	if job := e.fake.Job("lost"); *job.NodePool != parking || pinnedAPI(job) {
		t.Errorf("after rollback pool %s pinned %v", *job.NodePool, pinnedAPI(job))
	}
	if x.Busy(key) {
		t.Error("still busy after the rollback")
	}
}

// A lost register answer followed by one failed read-back is settled by
// the next read: the job was registered, so it is admitted.
func TestAdmitLostAnswerSettledByReadBack(t *testing.T) {
	e := newEnv(t, 2)
	e.register(gpuJob("lost", nil, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	s := e.waitFor("job", func(s *cluster.Snapshot) bool { return s.NumJobs() == 1 })
	x := e.executor(nil)
	e.fake.FailAfterNext("PUT", "/v1/jobs", 503, "connection reset")
	e.fake.FailNextOnceLost("GET", "/v1/job/lost", 503, "connection reset")
	res := x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{admission(t, s, "lost")}})
	if len(res.Admitted) != 1 || len(res.Failed) != 0 {
		t.Fatalf("apply = %+v, want the job admitted", res)
	}
	if in, _ := x.st.Intent(context.Background(), cluster.JobKey("default", "lost")); in == nil || in.Phase != PhaseRegistered {
		t.Fatalf("intent = %+v, want one in phase registered", in)
	}
}

// Apply waits for the model to show admitted jobs' allocations once for
// the whole plan (PlacementWait in all), not once per admission.
func TestApplyWaitsForPlacementOncePerPlan(t *testing.T) {
	e := newEnv(t, 2)
	jobs := []string{"w1", "w2", "w3"}
	for _, id := range jobs {
		e.register(gpuJob(id, nil, [2]int{2, 4}))
	}
	e.startWatcher(WatcherConfig{})
	s := e.waitFor("jobs", func(s *cluster.Snapshot) bool { return s.NumJobs() == len(jobs) })
	x := e.executor(nil)
	// A model that never shows the allocations: every admission waits.
	x.cfg.Snapshot = func() *cluster.Snapshot { return s }
	x.cfg.PlacementWait = time.Second
	var plan engine.Plan
	for _, id := range jobs {
		plan.Admissions = append(plan.Admissions, admission(t, s, id))
	}
	start := time.Now()
	res := x.Apply(context.Background(), &plan)
	took := time.Since(start)
	if len(res.Admitted) != len(jobs) {
		t.Fatalf("apply = %+v", res)
	}
	if took < time.Second || took > 2500*time.Millisecond {
		t.Errorf("Apply took %v; want about PlacementWait (1s) for the whole plan, not 1s per admission", took)
	}
}

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
	return engine.Preemption{JobID: cluster.JobKey("default", job), Allocs: ids, GPUs: 8, Grace: grace,
		CheckpointSignal: "SIGUSR1", Preemptor: "default/urgent", Reason: "critical job needs 8 GPUs"}
}

func TestPreemptSignalsWaitsGraceParksAndStops(t *testing.T) {
	for _, exits := range []bool{false, true} {
		t.Run(map[bool]string{false: "grace runs out", true: "tasks exit early with the requeue code"}[exits], func(t *testing.T) {
			e := newEnv(t, 2)
			e.fake.SetExitOnSignal(exits)
			e.fake.SetSignalExitCode(policy.DefaultRequeueExitCode)
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
		{name: "default code when the job sets another is a restart", code: 42, exit: policy.DefaultRequeueExitCode, wantWait: true},
		{name: "default code", exit: policy.DefaultRequeueExitCode},
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

func TestUnplaceableAdmissionRolledBackWithNomadsReason(t *testing.T) {
	e := newEnv(t, 2)
	// Someone else's job takes island 1 of node-0 outside the scheduler's
	// knowledge (the plan below is stale).
	e.register(gpuJob("gang", nil, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	s := e.waitFor("job", func(s *cluster.Snapshot) bool { return s.NumJobs() == 1 })
	adm := admission(t, s, "gang")
	for i := 0; i < 2; i++ {
		other := gpuJob(fmt.Sprintf("squatter-%d", i), nil, [2]int{1, 4})
		gpu := "gpu"
		other.NodePool = &gpu
		other.Constraints = []*api.Constraint{{LTarget: "${node.unique.id}", RTarget: "node-0", Operand: "="}}
		e.register(other)
	}
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	x := e.executor(clk)
	x.cfg.PlacementWait = -1
	if res := x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{adm}}); len(res.Admitted) != 1 {
		t.Fatalf("apply = %+v", res)
	}
	if rolled := x.CheckDeadlines(context.Background()); len(rolled) != 0 {
		t.Fatalf("rolled back within the blocked grace: %v", rolled)
	}
	clk.Add(45 * time.Second) // past BlockedGrace (30s), before AdmitDeadline (1m)
	rolled := x.CheckDeadlines(context.Background())
	if len(rolled) != 1 {
		t.Fatalf("rolled = %v", rolled)
	}
	out := x.Outcome(adm.JobID)
	if !strings.Contains(out, "Nomad could not place") || !strings.Contains(out, "devices") {
		t.Errorf("outcome = %q, want Nomad's reason (devices exhausted)", out)
	}
	if j := e.fake.Job("gang"); *j.NodePool != parking {
		t.Errorf("not parked again: %s", *j.NodePool)
	}
	for _, a := range e.fake.Allocations("gang") {
		if a.ClientStatus == "running" {
			t.Errorf("half-placed member %s still running on %s", a.ID, a.NodeID)
		}
	}
}

// Per-job notes stay bounded: the oldest are forgotten first, a note
// deleted and set again counts as new, and the newest are always kept.
func TestBoundedMap(t *testing.T) {
	n := newBounded[string](3)
	n.set("a", "1")
	n.set("b", "1")
	n.del("a")
	n.set("a", "2") // re-set: now the newest
	n.set("c", "1")
	n.set("b", "2") // updated, keeps its age
	n.set("d", "1") // over capacity: b, the oldest live note, goes
	get := func(k string) string { v, _ := n.get(k); return v }
	if _, ok := n.get("b"); ok || get("a") != "2" || get("c") != "1" || get("d") != "1" {
		t.Fatalf("notes = %v, want a, c, d kept and b forgotten", n.m)
	}
	for i := range 100 {
		n.set(fmt.Sprint("k", i), "x")
		if i%3 == 0 {
			n.del(fmt.Sprint("k", i))
		}
	}
	if len(n.m) > 3 || len(n.order) > 6 || get("k98") != "x" {
		t.Fatalf("after churn: %d notes, %d order entries, k98=%q", len(n.m), len(n.order), get("k98"))
	}
}

// The target pool is the plan's decision (the engine resolves impact_pool
// and the default pool): an admission without one is refused, even for a
// job whose meta names a pool, and the job stays parked with no intent.
func TestAdmitRefusesAPlanWithoutPool(t *testing.T) {
	e := newEnv(t, 2)
	e.register(gpuJob("nopool", map[string]string{policy.MetaPool: "gpu"}, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	s := e.waitFor("job", func(s *cluster.Snapshot) bool { return s.NumJobs() == 1 })
	adm := admission(t, s, "nopool")
	adm.Pool = ""
	x := e.executor(nil)
	res := x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{adm}})
	if err := res.Failed[adm.JobID]; err == nil || !strings.Contains(err.Error(), "no target pool") || len(res.Admitted) != 0 {
		t.Fatalf("apply = %+v, want the admission refused for naming no pool", res)
	}
	if j := e.fake.Job("nopool"); *j.NodePool != parking || pinnedAPI(j) {
		t.Errorf("job moved to pool %s (pinned %v) by a plan without a pool", *j.NodePool, pinnedAPI(j))
	}
	if in, _ := x.st.Intent(context.Background(), adm.JobID); in != nil {
		t.Errorf("intent left for a refused admission: %+v", in)
	}
}
