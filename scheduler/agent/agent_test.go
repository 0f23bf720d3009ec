package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/nomad"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// testClock is a settable clock shared by the fake Nomad and the agents,
// so min runtimes and ages are controlled by the test, not the wall.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock() *testClock {
	return &testClock{now: time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func testPolicy(t testing.TB) *policy.Policy {
	t.Helper()
	p := policy.Default()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

type runningAgent struct {
	a      *Agent
	exec   *fakeExec
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func startAgent(t testing.TB, n *fakeNomad, clk *testClock, name string, pol *policy.Policy) *runningAgent {
	t.Helper()
	ex := &fakeExec{n: n, agent: name}
	opts := fakeOptions(t, n, ex, clk.Now)
	opts.Policy, opts.Interval, opts.Debounce, opts.SaveEvery = pol, 40*time.Millisecond, 2*time.Millisecond, time.Nanosecond
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ra := &runningAgent{a: a, exec: ex, cancel: cancel, done: make(chan error, 1)}
	go func() { ra.done <- a.Run(ctx) }()
	t.Cleanup(ra.stop)
	return ra
}

// fakeOptions are Options with one fakeExec behind every port; tests
// replace what they exercise.
func fakeOptions(t testing.TB, n *fakeNomad, ex *fakeExec, clock func() time.Time) Options {
	return Options{
		Name: ex.agent, ParkingPool: "impact-queue", DefaultPool: "gpu", Interval: 20 * time.Millisecond,
		Policy: testPolicy(t), Model: n.model(), Executor: ex, Explainer: ex, Elector: ex, State: ex, Pools: ex,
		Logger: hclog.NewNullLogger(), Clock: clock,
	}
}

// runTestAgent builds an agent from opts and runs it until the test ends
// (the cleanup waits for Run to return).
func runTestAgent(t testing.TB, opts Options) *Agent {
	t.Helper()
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return a
}

func (r *runningAgent) stop() {
	r.once.Do(func() {
		r.cancel()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			panic("agent did not stop")
		}
	})
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitCycles waits until each agent has run k more cycles, so that a check
// that something did not happen covers real cycles, not a guessed sleep.
func waitCycles(t testing.TB, k uint64, agents ...*Agent) {
	t.Helper()
	for _, a := range agents {
		c0 := a.health.cycles.Load()
		waitFor(t, fmt.Sprintf("%d more cycles of %s", k, a.opts.Name), func() bool { return a.health.cycles.Load() >= c0+k })
	}
}

func gpuGroup(name string, count, gpus int) cluster.TaskGroup {
	return cluster.TaskGroup{Name: name, Count: count, GPUs: gpus}
}

func tier(t string) map[string]string { return map[string]string{"impact_tier": t} }

func TestJobsAdmittedInImpactOrder(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-1", 8, 2, "gpu")
	// Submitted in the opposite order of their impact: FIFO would start
	// the scavenger first.
	n.submit("sweep", tier("scavenger"), gpuGroup("w", 1, 8))
	clk.Advance(time.Second)
	n.submit("finetune", tier("normal"), gpuGroup("w", 1, 8))
	clk.Advance(time.Second)
	n.submit("paper", tier("high"), gpuGroup("w", 1, 8))

	ra := startAgent(t, n, clk, "a1", testPolicy(t))
	var order []string
	for _, want := range []string{"default/paper", "default/finetune", "default/sweep"} {
		waitFor(t, want+" admitted", func() bool { return n.registerCount(want) == 1 })
		order = append(order, want)
		clk.Advance(time.Minute)
		n.finish(want)
	}
	got := ra.exec.admissionsOrder()
	if strings.Join(got, ",") != strings.Join(order, ",") {
		t.Errorf("admission order %v, want %v", got, order)
	}
	for _, id := range order {
		if c := n.registerCount(id); c != 1 {
			t.Errorf("%s admitted %d times", id, c)
		}
	}
}

func TestGangAdmittedWhole(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-1", 4, 1, "gpu")
	n.addNode("node-2", 4, 1, "gpu")
	n.submit("gang", tier("high"), gpuGroup("workers", 2, 4))
	ra := startAgent(t, n, clk, "a1", testPolicy(t))
	waitFor(t, "gang admitted", func() bool { return n.registerCount("default/gang") == 1 })
	snap := n.store.Snapshot()
	allocs := snap.JobAllocs("default/gang")
	if len(allocs) != 2 {
		t.Fatalf("gang has %d allocations, want both", len(allocs))
	}
	if allocs[0].NodeID == allocs[1].NodeID {
		t.Errorf("both 4-GPU members on one 4-GPU node: %v", allocs)
	}
	// One admission carrying both members, not two partial ones.
	var adms int
	ra.exec.mu.Lock()
	plans := append([]*engine.Plan(nil), ra.exec.plans...)
	ra.exec.mu.Unlock()
	for _, p := range plans {
		for _, a := range p.Admissions {
			adms++
			if len(a.Groups) != 1 || len(a.Groups[0].Allocs) != 2 {
				t.Errorf("admission not whole: %+v", a)
			}
		}
	}
	if adms != 1 {
		t.Errorf("%d admissions, want 1", adms)
	}
	waitFor(t, "running explanation", func() bool {
		e, ok := ra.a.Explain("", "gang")
		return ok && e.State == agentapi.StateRunning && len(e.Nodes["workers"]) == 2
	})
}

func TestCriticalPreemptsScavenger(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-1", 8, 1, "gpu")
	n.submit("sweep", map[string]string{"impact_tier": "scavenger", "impact_checkpoint_signal": "SIGUSR1", "impact_grace": "5s"},
		gpuGroup("w", 1, 8))
	ra := startAgent(t, n, clk, "a1", testPolicy(t))
	waitFor(t, "scavenger admitted", func() bool { return n.registerCount("default/sweep") == 1 })
	clk.Advance(time.Hour) // past every min runtime
	n.submit("incident", tier("critical"), gpuGroup("w", 1, 8))

	waitFor(t, "critical admitted", func() bool { return n.registerCount("default/incident") == 1 })
	n.mu.Lock()
	sig := append([]string(nil), n.signals["default/sweep"]...)
	n.mu.Unlock()
	if len(sig) != 1 || sig[0] != "SIGUSR1" {
		t.Errorf("scavenger got signals %v, want one SIGUSR1 before its stop", sig)
	}
	if st, _ := n.jobState("default/sweep"); st != cluster.JobQueued {
		t.Errorf("scavenger state %v, want back in the queue", st)
	}
	waitFor(t, "scavenger explained as preempted", func() bool {
		e, ok := ra.a.Explain("", "sweep")
		return ok && e.State == agentapi.StateWaiting && e.PreemptedBy == "default/incident"
	})
	waitFor(t, "preemption explanation variable", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		e, ok := n.explained["default/sweep"]
		return ok && e.PreemptedBy == "default/incident"
	})
}

func TestExplanationWrittenAndBadMetaStaysParked(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-1", 8, 1, "gpu")
	n.submit("typo", map[string]string{"impact_tier": "urgent"}, gpuGroup("w", 1, 1))
	n.submit("big", tier("normal"), gpuGroup("w", 1, 16))
	ra := startAgent(t, n, clk, "a1", testPolicy(t))
	waitFor(t, "explanations written", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return len(n.explained) == 2
	})
	n.mu.Lock()
	typo := n.explained["default/typo"]
	big := n.explained["default/big"]
	n.mu.Unlock()
	if typo.State != agentapi.StateInvalid || typo.Decision != DecisionNone || len(typo.Errors) == 0 ||
		!strings.Contains(typo.Errors[0], "urgent") {
		t.Errorf("bad meta explanation: %+v", typo)
	}
	if big.State == agentapi.StateRunning || big.Decision == DecisionAdmit || big.Reason == "" {
		t.Errorf("a 16-GPU job on an 8-GPU cluster must wait with a reason: %+v", big)
	}
	waitCycles(t, 3, ra.a)
	if n.registerCount("default/typo") != 0 {
		t.Error("job with bad meta was admitted")
	}
	q := ra.a.Queue()
	if !q.Leader || len(q.Jobs) != 2 || q.Cluster.HealthyGPUs != 8 {
		t.Errorf("queue view: %+v", q)
	}
	// A stable queue does not rewrite Variables every cycle.
	ex := ra.exec
	_ = ex
}

func TestEnforceIndexConflictIsRetried(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-1", 8, 1, "gpu")
	n.submit("job", tier("normal"), gpuGroup("w", 1, 4))
	// Move the job's index behind the model's back: the agent's next
	// admission carries a stale index until the model catches up.
	pol := testPolicy(t)
	staleOnce := sync.Once{}
	ex := &conflictExec{fakeExec: &fakeExec{n: n, agent: "a1"}, before: func() {
		staleOnce.Do(func() { n.userUpdateSilently("default/job") })
	}}
	opts := fakeOptions(t, n, ex.fakeExec, clk.Now)
	opts.Policy, opts.Executor, opts.Debounce = pol, ex, time.Millisecond
	runTestAgent(t, opts)
	waitFor(t, "admission after the conflict", func() bool { return n.registerCount("default/job") == 1 })
	ex.mu.Lock()
	skipped := ex.skipped
	ex.mu.Unlock()
	if skipped == 0 {
		t.Error("the stale admission was not reported as skipped")
	}
}

// conflictExec runs a hook before each Apply and counts skipped actions.
type conflictExec struct {
	*fakeExec
	before  func()
	mu      sync.Mutex
	skipped int
}

func (c *conflictExec) Apply(ctx context.Context, plan *engine.Plan, snap *cluster.Snapshot) (nomad.ApplyReport, error) {
	c.before()
	rep, err := c.fakeExec.Apply(ctx, plan, snap)
	c.mu.Lock()
	c.skipped += len(rep.Skipped)
	c.mu.Unlock()
	return rep, err
}

// userUpdateSilently changes the job's index without telling watchers at
// once, so the plan already decided carries the old index.
func (f *fakeNomad) userUpdateSilently(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, _ := f.store.Snapshot().Job(id)
	c := *j
	f.index += 10
	c.ModifyIndex = f.index
	_ = f.store.UpsertJob(&c)
	go func() {
		time.Sleep(5 * time.Millisecond)
		f.mu.Lock()
		f.changed()
		f.mu.Unlock()
	}()
}

func TestTwoAgentsOneLeaderFailoverWithoutDoubleAdmission(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-1", 8, 1, "gpu")
	pol := testPolicy(t)
	a1 := startAgent(t, n, clk, "a1", pol)
	a2 := startAgent(t, n, clk, "a2", pol)
	waitFor(t, "a leader", func() bool { return a1.a.IsLeader() || a2.a.IsLeader() })
	waitCycles(t, 2, a1.a, a2.a)
	if a1.a.IsLeader() && a2.a.IsLeader() {
		t.Fatal("two leaders")
	}
	leader, standby := a1, a2
	if a2.a.IsLeader() {
		leader, standby = a2, a1
	}
	n.submit("first", tier("high"), gpuGroup("w", 1, 4))
	waitFor(t, "first admitted", func() bool { return n.registerCount("default/first") == 1 })
	// The standby computes the same view but never acts.
	waitFor(t, "standby view", func() bool {
		e, ok := standby.a.Explain("default", "first")
		return ok && e.State == agentapi.StateRunning && !e.Leader
	})
	standby.exec.mu.Lock()
	if len(standby.exec.plans) != 0 {
		t.Errorf("standby applied %d plans", len(standby.exec.plans))
	}
	standby.exec.mu.Unlock()
	waitFor(t, "durable state saved", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.state != nil && n.state.UsageAt.Equal(clk.Now())
	})

	// The leader dies: the standby takes over and continues.
	leader.stop()
	waitFor(t, "standby takes over", func() bool { return standby.a.IsLeader() })
	n.submit("second", tier("normal"), gpuGroup("w", 1, 4))
	waitFor(t, "second admitted by the new leader", func() bool { return n.registerCount("default/second") == 1 })
	waitCycles(t, 3, standby.a)
	for _, id := range []string{"default/first", "default/second"} {
		if c := n.registerCount(id); c != 1 {
			t.Errorf("%s admitted %d times", id, c)
		}
	}
	if got := standby.a.Health(); !got.Leader || got.Status != agentapi.StatusOK {
		t.Errorf("new leader health: %+v", got)
	}
}

func TestLockLossStopsActing(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-1", 8, 1, "gpu")
	pol := testPolicy(t)
	a1 := startAgent(t, n, clk, "a1", pol)
	waitFor(t, "leader", func() bool { return a1.a.IsLeader() })
	// The lock expires and another agent takes it at once.
	n.stealLock("someone-else")
	waitFor(t, "step down", func() bool { return !a1.a.IsLeader() })
	n.submit("job", tier("high"), gpuGroup("w", 1, 1))
	waitCycles(t, 3, a1.a)
	if n.registerCount("default/job") != 0 {
		t.Error("an agent that lost the lock admitted a job")
	}
	if e, ok := a1.a.Explain("", "job"); !ok || e.Leader || e.Position != 1 {
		t.Errorf("standby still explains: %+v %v", e, ok)
	}
}

func TestNewLeaderResumesUsage(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-1", 8, 1, "gpu")
	// A job the old leader requeued twice for hanging: the count goes on
	// (max_requeues holds across leaders), and it is saved again.
	n.submit("hung", tier("high"), gpuGroup("w", 1, 1))
	n.state = &DurableState{Usage: map[string]float64{"olmo": 100}, UsageAt: clk.Now(), Requeues: map[string]int{"default/hung": 2}, Leader: "old"}
	ra := startAgent(t, n, clk, "a1", testPolicy(t))
	waitFor(t, "leader", func() bool { return ra.a.IsLeader() })
	waitFor(t, "usage re-saved by the new leader", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.state.Leader == "a1"
	})
	n.mu.Lock()
	got, requeues := n.state.Usage["olmo"], n.state.Requeues
	n.mu.Unlock()
	if got < 99 || got > 100.0001 {
		t.Errorf("usage after failover %.3f, want the saved 100 (decayed by ~0)", got)
	}
	if requeues["default/hung"] != 2 || len(requeues) != 1 {
		t.Errorf("requeue counts after failover %v, want default/hung: 2", requeues)
	}
	// The engine belongs to the agent's loop: read it once the loop ended
	// (reading it under a running cycle is a data race).
	ra.stop()
	if m := ra.a.cycle.engine.Memory(clk.Now()); m.Requeues["default/hung"] != 2 {
		t.Errorf("new leader's engine requeue counts %v, want default/hung: 2", m.Requeues)
	}
}

func TestCycleErrorsMakeHealthDegraded(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-1", 8, 1, "gpu")
	n.failApply = 1000
	ra := startAgent(t, n, clk, "a1", testPolicy(t))
	waitFor(t, "degraded", func() bool {
		h := ra.a.Health()
		return h.Status == agentapi.StatusDegraded && strings.Contains(h.LastCycleError, "nomad unreachable")
	})
	n.mu.Lock()
	n.failApply = 0
	n.mu.Unlock()
	waitFor(t, "recovered", func() bool { return ra.a.Health().Status == agentapi.StatusOK })
}

type failingPools struct {
	mu sync.Mutex
	n  int
}

func (f *failingPools) EnsureNodePool(context.Context, string, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	return errors.New("Permission denied")
}

func (f *failingPools) tries() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func TestParkingPoolFailureIsFatalAfterRetries(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	ex := &fakeExec{n: n, agent: "a1"}
	fp := &failingPools{}
	realNow := func() time.Time { return time.Now() }
	a, err := New(Options{Name: "a1", ParkingPool: "impact-queue", DefaultPool: "gpu", Policy: testPolicy(t),
		Model: n.model(), Executor: ex, Explainer: ex, Elector: ex, State: ex, Pools: fp,
		PoolRetryFor: 300 * time.Millisecond, Clock: realNow})
	if err != nil {
		t.Fatal(err)
	}
	err = a.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), `creating parking pool "impact-queue": Permission denied`) {
		t.Errorf("want a clear pool error, got %v", err)
	}
	if fp.tries() < 2 {
		t.Errorf("pool creation tried %d times, want retries", fp.tries())
	}
}

// Stopping the agent while it still retries the parking pool (Nomad down
// at start-up) is a clean stop: Run returns nil, so a SIGTERM then does not
// exit 1.
func TestStopDuringStartUpIsClean(t *testing.T) {
	n := newFakeNomad(time.Now)
	ex := &fakeExec{n: n, agent: "a1"}
	fp := &failingPools{}
	opts := fakeOptions(t, n, ex, time.Now)
	opts.Pools, opts.PoolRetryFor = fp, time.Hour
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitFor(t, "a failed pool attempt", func() bool { return fp.tries() > 0 })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after a stop during start-up: %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the stop")
	}
}

func TestNewRequiresPorts(t *testing.T) {
	_, err := New(Options{})
	if err == nil || !strings.Contains(err.Error(), "Executor") || !strings.Contains(err.Error(), "Policy") {
		t.Errorf("want missing ports named, got %v", err)
	}
}

// neverElected campaigns forever and sees no holder: an election that is
// broken (say, a token without write on the lock path).
type neverElected struct{ *fakeExec }

func (neverElected) Campaign(ctx context.Context) (<-chan struct{}, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (neverElected) Holder(context.Context) (string, error) { return "", nil }

func TestHealthNamesLeaderAndReportsNone(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-1", 8, 1, "gpu")
	n.mu.Lock()
	n.lockOwner = "impact-2"
	n.mu.Unlock()
	ra := startAgent(t, n, clk, "a1", testPolicy(t))
	waitFor(t, "leader named", func() bool {
		h := ra.a.Health()
		return h.LeaderName == "impact-2" && !h.Leader && h.Status == agentapi.StatusOK
	})

	ex := &fakeExec{n: n, agent: "a3"}
	el := neverElected{ex}
	opts := fakeOptions(t, n, ex, clk.Now)
	opts.Elector, opts.NoLeaderGrace = el, 50*time.Millisecond
	a := runTestAgent(t, opts)
	waitFor(t, "no-leader problem", func() bool {
		h := a.Health()
		return h.Status == agentapi.StatusDegraded && len(h.Problems) == 1 &&
			strings.Contains(h.Problems[0], "no agent has held the leader lock")
	})
}

// recoveringExec fails Recover a number of times, like a leader that cannot
// yet read the previous leader's intents.
type recoveringExec struct {
	*fakeExec
	mu       sync.Mutex
	failures int
	calls    int
}

func (r *recoveringExec) Recover(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.failures > 0 {
		r.failures--
		return errors.New("reading intents: 500")
	}
	return nil
}

func TestNoActionBeforeRecoverSucceeds(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-1", 8, 1, "gpu")
	n.submit("job", tier("high"), gpuGroup("w", 1, 4))
	ex := &recoveringExec{fakeExec: &fakeExec{n: n, agent: "a1"}, failures: 3}
	opts := fakeOptions(t, n, ex.fakeExec, clk.Now)
	opts.Executor, opts.Interval = ex, 10*time.Millisecond
	a := runTestAgent(t, opts)
	waitFor(t, "admitted after recovery", func() bool { return n.registerCount("default/job") == 1 })
	ex.mu.Lock()
	calls := ex.calls
	ex.mu.Unlock()
	if calls != 4 {
		t.Errorf("Recover called %d times, want 3 failures then 1 success", calls)
	}
	// Every plan decided before recovery was shown, not applied: the first
	// applied plan is the one carrying the admission.
	ex.fakeExec.mu.Lock()
	first := ex.fakeExec.plans[0]
	ex.fakeExec.mu.Unlock()
	if len(first.Admissions) != 1 {
		t.Errorf("first applied plan %+v, want the admission", first)
	}
	// Recover runs once per term, not every cycle: a few more cycles as
	// leader do not call it again.
	waitCycles(t, 3, a)
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if ex.calls != 4 {
		t.Errorf("Recover called again after success: %d calls", ex.calls)
	}
}

// A preemption whose Apply failed never started: the engine must plan it
// afresh next cycle instead of waiting for victims that are not stopping.
func TestFailedPreemptionIsPlannedAgain(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-1", 8, 1, "gpu")
	n.submit("sweep", map[string]string{"impact_tier": "scavenger", "impact_grace": "5s"}, gpuGroup("w", 1, 8))
	startAgent(t, n, clk, "a1", testPolicy(t))
	waitFor(t, "scavenger admitted", func() bool { return n.registerCount("default/sweep") == 1 })
	clk.Advance(time.Hour) // past every min runtime

	n.mu.Lock()
	n.failApply = 1 // the cycle that plans the preemption fails to act
	n.mu.Unlock()
	n.submit("incident", tier("critical"), gpuGroup("w", 1, 8))
	waitFor(t, "the failed apply", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.failApply == 0
	})
	waitFor(t, "critical admitted after the preemption is retried", func() bool {
		return n.registerCount("default/incident") == 1
	})
	if st, _ := n.jobState("default/sweep"); st != cluster.JobQueued {
		t.Errorf("scavenger state %v, want preempted back into the queue", st)
	}
}

// rollbackExec is a fakeExec whose Nomad never starts job "stuck": each
// admission of it comes back rolled back, as the executor reports a gang
// that missed its deadline.
type rollbackExec struct {
	*fakeExec
	mu       sync.Mutex
	attempts int
}

func (r *rollbackExec) Apply(ctx context.Context, plan *engine.Plan, snap *cluster.Snapshot) (nomad.ApplyReport, error) {
	rest := *plan
	rest.Admissions = nil
	var stuck bool
	for _, adm := range plan.Admissions {
		if adm.JobID == "default/stuck" {
			stuck = true
			continue
		}
		rest.Admissions = append(rest.Admissions, adm)
	}
	rep, err := r.fakeExec.Apply(ctx, &rest, snap)
	if stuck {
		r.mu.Lock()
		r.attempts++
		r.mu.Unlock()
		rep.RolledBack = append(rep.RolledBack, "default/stuck")
	}
	return rep, err
}

func (r *rollbackExec) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts
}

// A job Nomad cannot start is retried with a back-off that doubles with
// each rollback in a row (30s, 1m, ...), not at once in a loop, and the
// explanation says it is held back.
func TestRolledBackAdmissionBacksOff(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-1", 8, 1, "gpu")
	n.submit("stuck", tier("high"), gpuGroup("w", 1, 4))
	ex := &rollbackExec{fakeExec: &fakeExec{n: n, agent: "a1"}}
	opts := fakeOptions(t, n, ex.fakeExec, clk.Now)
	opts.Executor, opts.Interval = ex, 5*time.Millisecond
	a := runTestAgent(t, opts)

	waitFor(t, "first admission attempt", func() bool { return ex.count() == 1 })
	waitCycles(t, 5, a)
	if got := ex.count(); got != 1 {
		t.Fatalf("%d admission attempts before the back-off ended, want 1", got)
	}
	waitFor(t, "explanation says it is held back", func() bool {
		e, ok := a.Explain("", "stuck")
		return ok && strings.Contains(e.Reason, "held back until") && strings.Contains(e.Reason, "rolled back 1 time")
	})

	clk.Advance(31 * time.Second) // first back-off: 30s
	waitFor(t, "second attempt after 30s", func() bool { return ex.count() == 2 })
	clk.Advance(31 * time.Second) // second back-off: 1m, not over yet
	waitCycles(t, 5, a)
	if got := ex.count(); got != 2 {
		t.Fatalf("%d attempts 31s into a 1m back-off, want 2", got)
	}
	clk.Advance(30 * time.Second)
	waitFor(t, "third attempt after 1m", func() bool { return ex.count() == 3 })
}

// underwayExec recovers at once and reports the preemptions a previous
// leader left under way.
type underwayExec struct {
	*fakeExec
	underway []engine.Preemption
}

func (u *underwayExec) Recover(context.Context) error { return nil }

func (u *underwayExec) PreemptionsUnderway() []engine.Preemption { return u.underway }

// TestFirstPlanOfATermKnowsPreemptionsUnderway: a previous leader
// preempted victim for incident (its grace runs for an hour); the new
// leader's first plan must already know (recovery comes before the
// decision), so incident waits for victim instead of preempting other
// too, and victim is not preempted a second time.
func TestFirstPlanOfATermKnowsPreemptionsUnderway(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-1", 8, 1, "gpu")
	n.addNode("node-2", 8, 1, "gpu")
	scav := map[string]string{"impact_tier": "scavenger", "impact_grace": "1h"}
	n.submit("victim", scav, gpuGroup("w", 1, 8))
	n.submit("other", scav, gpuGroup("w", 1, 8))
	n.mu.Lock()
	for i, id := range []string{"default/victim", "default/other"} {
		j, _ := n.store.Snapshot().Job(id)
		c := *j
		c.State = cluster.JobRunning
		if err := n.store.UpsertJob(&c); err != nil {
			t.Fatal(err)
		}
		node := fmt.Sprintf("node-%d", i+1)
		var gpus []string
		for g := range 8 {
			gpus = append(gpus, fmt.Sprintf("%s-gpu%d", node, g))
		}
		if err := n.store.UpsertAlloc(&cluster.Alloc{ID: "a-" + id, JobID: id, Group: "w", NodeID: node, GPUs: gpus, Start: clk.Now().Add(-2 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	n.changed()
	n.mu.Unlock()
	n.submit("incident", tier("critical"), gpuGroup("w", 1, 8))
	ex := &underwayExec{fakeExec: &fakeExec{n: n, agent: "a1"}, underway: []engine.Preemption{
		{Stop: engine.Stop{JobID: "default/victim", Allocs: []string{"a-default/victim"}, GPUs: 8, Grace: time.Hour}, Preemptor: "default/incident"}}}
	opts := fakeOptions(t, n, ex.fakeExec, clk.Now)
	opts.Executor = ex
	a := runTestAgent(t, opts)
	waitCycles(t, 3, a)
	ex.fakeExec.mu.Lock()
	defer ex.fakeExec.mu.Unlock()
	if len(ex.fakeExec.plans) == 0 {
		t.Fatal("no plan applied")
	}
	for i, p := range ex.fakeExec.plans {
		if len(p.Preemptions) != 0 {
			t.Errorf("applied plan %d preempts %+v: the preemption under way was not known when it was decided", i, p.Preemptions)
		}
	}
	if n.stops["default/other"] != 0 || n.stops["default/victim"] != 0 {
		t.Errorf("stops %v, want none: incident waits for victim", n.stops)
	}
}

// An event is decided on within a window of a few times the last cycle's
// cost (at least 20ms), not after the whole Debounce: with a small queue
// a job that fits is admitted about as soon as Nomad tells of it (issue
// 39). Debounce and Interval here are far longer than the test waits.
func TestEventDecidedWithinCostWindow(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-1", 8, 2, "gpu")
	ex := &fakeExec{n: n, agent: "a1"}
	opts := fakeOptions(t, n, ex, clk.Now)
	opts.Interval, opts.Debounce = time.Hour, 10*time.Minute
	var cycles atomic.Int64
	opts.onCycle = func(cycleResult) { cycles.Add(1) }
	a := runTestAgent(t, opts)
	waitFor(t, "leader and a first cycle", func() bool { return a.IsLeader() && cycles.Load() > 0 })
	start := time.Now()
	n.submit("fits", tier("normal"), gpuGroup("w", 1, 1))
	waitFor(t, "the job admitted", func() bool { return n.registerCount("default/fits") == 1 })
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("admitted %v after the event; want within a few cycle costs", took)
	}
}
