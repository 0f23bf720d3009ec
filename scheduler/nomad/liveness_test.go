package nomad

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"pgregory.net/rapid"

	"github.com/impact-sched/nomad-impact/device/topology"
	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/internal/nomadfake"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// TestPropertyAdapterLiveness is the engine's TestPropertyLiveness one
// level up: no job may hold a pool hostage once the plans are carried out
// by the real Executor on Nomad (nomadfake, with its own scheduler placing
// the pinned allocations) and the model is the real Watcher's, fed by the
// event stream.
//
// A random cluster (1-8 nodes of 4 or 8 GPUs in one or two NVLink
// islands, published as impact-gpu does by island or by model, in two
// pools) lives through a few cycles of random jobs (gangs of one or two
// groups, counts, GPUs per allocation, impact_topology, distinct_hosts on
// the job or a group, device constraints, tiers, preemptibility, a
// checkpoint signal, a short impact_grace, run times) and random events
// (jobs completing, a member failing, a node lost and back, a node's
// client failing what it is given and healing, a purge).
// Each cycle is run synchronously: the fake clock moves one step, the
// executor's background preemptions settle (each is either done or
// waiting out its grace), events happen, the engine decides on the
// watcher's snapshot once it has caught up with the fake's index, the
// executor applies the plan, the preemptions settle again and
// CheckDeadlines runs; then:
//
//  1. a job alone in its empty pool that fits it (a fresh engine admits
//     it there) is running within liveRunWithin cycles;
//  2. every job the plan says is preempting names victims, and each is
//     really being stopped: the executor has its preemption under way
//     (signalled, waiting out its grace) or Nomad has stopped it;
//  3. no GPU is held for a preemptor without a stop in flight: one of
//     its victims still had allocations when the cycle was decided, or
//     is still being stopped;
//  4. "cannot be placed ... even with no other work running" is never
//     said of a job that a fresh engine admits on its empty pool alone;
//  5. free GPUs do not stay idle beyond one cycle while a waiting job
//     fits them (a fresh engine admits it alone on what is left free) and
//     nothing reserves them (no reservation or preemption in the plan, no
//     stop in flight or admission waiting to start in the pool).
//
// Each check starts a fake Nomad, a watcher and an executor, so the
// default number of checks (rapid's 100) keeps to a few cycles each to
// stay well within make test on two cores (about 15s under -race). Run it
// longer with more checks and, for longer histories, more cycles each:
//
//	go test -race -count=1 -run TestPropertyAdapterLiveness ./scheduler/nomad/ -rapid.checks=1000 -liveness.cycles=40
//
// A failure prints the minimal case rapid shrank it to and the seed
// (-rapid.seed=N replays it); -rapid.v shows each check.
func TestPropertyAdapterLiveness(t *testing.T) {
	var tally liveTally
	rapid.Check(t, func(rt *rapid.T) {
		w := newAdapterWorld(rt)
		w.tally = &tally
		defer w.close()
		cycles := rapid.IntRange(2, max(2, *liveMaxCycles)).Draw(rt, "cycles")
		for c := range cycles {
			w.cycle(rt, c)
		}
	})
	// What the checks went through, to see the properties were exercised.
	t.Logf("cycles %d, admissions %d, preemptions %d, requeues %d, rollbacks %d, preempting explanations %d, never-fits parks %d, lone jobs %d",
		tally.cycles, tally.admitted, tally.preempted, tally.requeued, tally.rolledBack, tally.preempting, tally.neverFits, tally.alone)
}

// liveTally counts what the property's checks exercised.
type liveTally struct {
	cycles, admitted, preempted, requeued, rolledBack, preempting, neverFits, alone int
}

const (
	// liveStep is the fake time between two cycles.
	liveStep = 10 * time.Second
	// liveRunWithin: a job alone in its empty pool that fits it runs
	// within this many cycles of being so.
	liveRunWithin = 3
	// liveSettle bounds (in real time) the wait for Nomad, the watcher
	// and the executor to settle.
	liveSettle = 10 * time.Second
)

// liveMaxCycles bounds the cycles of one check.
var liveMaxCycles = flag.Int("liveness.cycles", 12, "TestPropertyAdapterLiveness: the most cycles one check runs")

type adapterWorld struct {
	pol    *policy.Policy
	eng    *engine.Engine
	fake   *nomadfake.Server
	c      *Client
	w      *Watcher
	x      *Executor
	st     *StateStore
	clock  *fakeClock
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	logs   *syncBuffer

	nodes []*api.Node
	down  map[string]bool
	// failing: nodes whose client fails the allocations it is given.
	failing map[string]bool
	seq     int
	// runFor: how long each job runs once all its allocations run.
	runFor map[string]time.Duration
	// aloneFor: cycles in a row each job was alone in its empty pool and
	// fitted it, without running.
	aloneFor map[string]int
	// idle: jobs that waited at the last cycle while the GPUs left free
	// fitted them and nothing reserved them.
	idle map[string]bool
	// history: what each cycle decided, for failure messages.
	history []string
	tally   *liveTally
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) tail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	str := s.b.String()
	if len(str) > n {
		str = "..." + str[len(str)-n:]
	}
	return str
}

func newAdapterWorld(rt *rapid.T) *adapterWorld {
	pol := policy.Default()
	pol.Preemption.MinRuntime = time.Duration(rapid.IntRange(0, 2).Draw(rt, "minrt")) * liveStep
	pol.Gangs.MissingMemberGrace = time.Duration(rapid.IntRange(0, 2).Draw(rt, "gangGrace")) * liveStep
	pol.Backfill.Reservations = rapid.IntRange(0, 2).Draw(rt, "reservations")
	eng, err := engine.New(pol, engine.WithDefaultPool("gpu"))
	if err != nil {
		rt.Fatalf("engine: %v", err)
	}
	clock := &fakeClock{t: time.Now().Truncate(time.Second)}
	f := nomadfake.New(nomadfake.Options{HeartbeatInterval: 50 * time.Millisecond})
	f.SetClock(clock.Now)
	if rapid.Bool().Draw(rt, "exitOnSignal") {
		// Trainers checkpoint on the signal and exit with the requeue code.
		f.SetExitOnSignal(true)
		f.SetSignalExitCode(jobspec.DefaultRequeueExitCode)
	}
	logs := &syncBuffer{}
	logger := hclog.New(&hclog.LoggerOptions{Name: "liveness", Level: hclog.Info, Output: logs})
	w := &adapterWorld{pol: pol, eng: eng, fake: f, clock: clock, logs: logs, down: map[string]bool{}, failing: map[string]bool{},
		runFor: map[string]time.Duration{}, aloneFor: map[string]int{}, idle: map[string]bool{}}
	nodes := rapid.IntRange(1, 8).Draw(rt, "nodes")
	for i := range nodes {
		gpus := rapid.SampledFrom([]int{4, 8}).Draw(rt, "gpus")
		islands := rapid.IntRange(1, 2).Draw(rt, "islands")
		by := rapid.SampledFrom([]topology.GroupBy{topology.ByModel, topology.ByIsland}).Draw(rt, "groupBy")
		pool := "gpu"
		if rapid.IntRange(0, 4).Draw(rt, "otherPool") == 0 {
			pool = "other"
		}
		n, err := nomadfake.TopologyNodeBy(fmt.Sprintf("node-%d", i), fmt.Sprintf("gpu%d", i), pool, islands, gpus/islands, by)
		if err != nil {
			f.Close()
			rt.Fatalf("node: %v", err)
		}
		f.UpsertNode(n)
		w.nodes = append(w.nodes, n)
	}
	c, err := NewClient(Config{Address: f.URL()}, logger)
	if err != nil {
		f.Close()
		rt.Fatalf("client: %v", err)
	}
	w.c = c
	w.ctx, w.cancel = context.WithCancel(context.Background())
	if err := c.EnsureNodePool(w.ctx, parking, "parking"); err != nil {
		w.close()
		rt.Fatalf("parking pool: %v", err)
	}
	w.w = NewWatcher(c, WatcherConfig{ParkingPool: parking, MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond,
		IdleTimeout: 2 * time.Second}, logger)
	w.done = make(chan struct{})
	go func() {
		defer close(w.done)
		_ = w.w.Run(w.ctx)
	}()
	select {
	case <-w.w.Ready():
	case <-time.After(liveSettle):
		w.close()
		rt.Fatalf("watcher not ready")
	}
	w.st = NewStateStore(c, StateConfig{}, logger)
	// PlacementWait off: each cycle waits for the watcher to catch up
	// with the fake anyway.
	w.x = NewExecutor(c, w.st, ExecutorConfig{ParkingPool: parking, AdmitDeadline: 6 * liveStep, BlockedGrace: 3 * liveStep,
		PollInterval: 10 * time.Millisecond, PlacementWait: -1, Clock: clock.Now, Snapshot: w.w.Snapshot}, logger)
	return w
}

func (w *adapterWorld) close() {
	w.cancel()
	if w.x != nil {
		w.x.Wait()
	}
	if w.done != nil {
		<-w.done
	}
	w.fake.Close()
}

func (w *adapterWorld) fatalf(rt *rapid.T, format string, args ...any) {
	rt.Helper()
	rt.Fatalf("%s\n--- cycles:\n%s\n--- log tail:\n%s", fmt.Sprintf(format, args...), strings.Join(w.history, "\n"), w.logs.tail(3000))
}

// cycle runs one scheduling cycle and checks it.
func (w *adapterWorld) cycle(rt *rapid.T, n int) {
	w.clock.Add(liveStep)
	w.settle(rt)
	w.events(rt)
	w.catchUp(rt)
	snap := w.w.Snapshot()
	now := w.clock.Now()
	plan := w.eng.Decide(snap, now)
	w.record(n, snap, plan)
	rep := w.x.Apply(w.ctx, plan)
	w.tally.cycles++
	w.tally.admitted += len(rep.Admitted)
	w.tally.preempted += len(rep.Preempted)
	w.tally.requeued += len(rep.Requeued)
	w.forgetUnapplied(plan, rep)
	w.settle(rt)
	rolled := w.x.CheckDeadlines(w.ctx)
	for _, id := range rolled {
		w.tally.rolledBack++
		w.eng.Forget(id)
		w.history = append(w.history, "  rolled back "+id+": "+w.x.Outcome(id))
	}
	w.catchUp(rt)
	w.check(rt, snap, plan, rolled, w.w.Snapshot())
}

// forgetUnapplied tells the engine of the plan's actions the executor did
// not start, as the agent does (agent/record.go).
func (w *adapterWorld) forgetUnapplied(plan *engine.Plan, rep ApplyReport) {
	admitted := map[string]bool{}
	for _, id := range rep.Admitted {
		admitted[id] = true
	}
	underway := map[string]bool{}
	for _, id := range append(slices.Clip(rep.Preempted), rep.Requeued...) {
		underway[id] = true
	}
	for _, id := range rep.Reclaimed {
		underway[id] = true
	}
	for id := range rep.Skipped {
		underway[id] = true
	}
	for _, a := range plan.Admissions {
		if !admitted[a.JobID] {
			w.eng.Forget(a.JobID)
		}
	}
	for _, p := range append(slices.Clip(plan.Preemptions), plan.Requeues...) {
		if !underway[p.JobID] {
			w.eng.Forget(p.JobID)
		}
	}
	for _, r := range plan.Reclaims {
		if !underway[r.JobID] {
			w.eng.Forget(r.JobID)
		}
	}
	for id, err := range rep.Failed {
		w.history = append(w.history, fmt.Sprintf("  apply failed %s: %v", id, err))
	}
}

// catchUp waits until the watcher has applied every event the fake has
// emitted.
func (w *adapterWorld) catchUp(rt *rapid.T) {
	deadline := time.Now().Add(liveSettle)
	for {
		last := uint64(0) // the last event of a topic the watcher follows
		for _, ev := range w.fake.Events() {
			switch ev.Topic {
			case "Job", "Allocation", "Node", "Evaluation":
				last = max(last, ev.Index)
			}
		}
		if w.w.Stats().LastIndex >= last {
			return
		}
		if time.Now().After(deadline) {
			w.fatalf(rt, "watcher at index %d, fake's last event at %d", w.w.Stats().LastIndex, last)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// settle waits until every preemption under way waits out its grace:
// signalled, with a grace that has not passed, and its victim not ended
// (the executor polls it). Anything else moves on by itself at once.
func (w *adapterWorld) settle(rt *rapid.T) {
	deadline := time.Now().Add(liveSettle)
	for {
		busy := ""
		for _, p := range w.x.PreemptionsUnderway() {
			if !w.waitingOutGrace(p.JobID) {
				busy = p.JobID
				break
			}
		}
		if busy == "" {
			return
		}
		if time.Now().After(deadline) {
			in, err := w.st.Intent(w.ctx, busy)
			w.fatalf(rt, "the executor's preemption of %s did not settle within %v (intent %+v, %v)", busy, liveSettle, in, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitingOutGrace: the preemption of the job is signalled and waits for
// the end of its grace, which has not come, while its victim runs on.
func (w *adapterWorld) waitingOutGrace(jobID string) bool {
	in, err := w.st.Intent(w.ctx, jobID)
	if err != nil || in == nil || in.Phase != PhaseSignalled || in.Signal == "" || in.Grace <= 0 ||
		!w.clock.Now().Before(in.SignalledAt.Add(in.Grace)) {
		return false
	}
	_, id := splitJobKey(jobID)
	live := map[string]*api.Allocation{}
	for _, a := range w.fake.Allocations(id) {
		live[a.ID] = a
	}
	code := fmt.Sprint(requeueCode(in))
	for _, aid := range in.Allocs {
		a := live[aid]
		if a == nil || terminalStatus(a.ClientStatus) || (a.ClientStatus == "complete" && a.DesiredStatus == "run") {
			continue
		}
		exited := false
		for _, ts := range a.TaskStates {
			for _, ev := range ts.Events {
				if ev.Type == "Terminated" && ev.Time >= in.Created.UnixNano() && ev.Details["exit_code"] == code {
					exited = true
				}
			}
		}
		if !exited {
			return true // one still runs: the grace goes on
		}
	}
	return false
}

// events draws what happens before a cycle: arrivals, completions,
// failures, a node lost or back, a purge.
func (w *adapterWorld) events(rt *rapid.T) {
	now := w.clock.Now()
	// Jobs whose every live allocation has run its time complete.
	byJob := map[string][]*api.Allocation{}
	for _, a := range w.fake.Allocations("") {
		if a.DesiredStatus == "run" && a.ClientStatus == "running" {
			byJob[a.JobID] = append(byJob[a.JobID], a)
		}
	}
	for _, id := range sortedKeys(byJob) {
		done := true
		for _, a := range byJob[id] {
			start := now
			for _, ts := range a.TaskStates {
				if !ts.StartedAt.IsZero() && ts.StartedAt.Before(start) {
					start = ts.StartedAt
				}
			}
			if now.Sub(start) < w.runFor[id] {
				done = false
			}
		}
		if done {
			for _, a := range byJob[id] {
				_ = w.fake.FinishAlloc(a.ID, false)
			}
			w.history = append(w.history, "  event: "+id+" completes")
		}
	}
	for range rapid.IntRange(0, 2).Draw(rt, "arrivals") {
		w.submit(rt)
	}
	switch rapid.IntRange(0, 9).Draw(rt, "event") {
	case 0: // a member fails
		var live []*api.Allocation
		for _, a := range w.fake.Allocations("") {
			if a.DesiredStatus == "run" && a.ClientStatus == "running" {
				live = append(live, a)
			}
		}
		if len(live) > 0 {
			a := rapid.SampledFrom(live).Draw(rt, "failed")
			_ = w.fake.FinishAlloc(a.ID, true)
			w.history = append(w.history, fmt.Sprintf("  event: %s's allocation %s (%s) fails", a.JobID, a.ID[:8], a.NodeID))
		}
	case 1: // a node is lost, or comes back
		n := rapid.SampledFrom(w.nodes).Draw(rt, "lost")
		status := "down"
		if w.down[n.ID] {
			status = "ready"
		}
		w.down[n.ID] = !w.down[n.ID]
		if err := w.fake.SetNodeStatus(n.ID, status, true); err != nil {
			w.fatalf(rt, "node status: %v", err)
		}
		w.history = append(w.history, "  event: node "+n.ID+" "+status)
	case 3: // a node's client starts failing the allocations it gets, or heals
		n := rapid.SampledFrom(w.nodes).Draw(rt, "failing")
		w.failing[n.ID] = !w.failing[n.ID]
		b, what := nomadfake.ClientRun, "heals"
		if w.failing[n.ID] {
			b, what = nomadfake.ClientFail, "fails new allocations"
		}
		w.fake.SetClientBehavior(n.ID, b)
		w.history = append(w.history, "  event: node "+n.ID+"'s client "+what)
	case 2: // a user purges a job, queued or running
		if jobs := w.fake.Jobs(); len(jobs) > 0 {
			j := rapid.SampledFrom(jobs).Draw(rt, "purged")
			if _, _, err := w.c.api.Jobs().Deregister(*j.ID, true, nil); err != nil {
				w.fatalf(rt, "purge %s: %v", *j.ID, err)
			}
			w.history = append(w.history, "  event: "+*j.ID+" purged")
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// submit registers a random job into the parking pool.
func (w *adapterWorld) submit(rt *rapid.T) {
	w.seq++
	id := fmt.Sprintf("j%02d", w.seq)
	meta := map[string]string{
		jobspec.MetaTier: rapid.SampledFrom([]string{"critical", "high", "normal", "scavenger"}).Draw(rt, "tier"),
		jobspec.MetaPool: rapid.SampledFrom([]string{"gpu", "gpu", "gpu", "other"}).Draw(rt, "pool"),
	}
	if p := rapid.SampledFrom([]string{"", "true", "false"}).Draw(rt, "preemptible"); p != "" {
		meta[jobspec.MetaPreemptible] = p
	}
	if tp := rapid.SampledFrom([]string{"", "nvlink", "node", "any"}).Draw(rt, "topology"); tp != "" {
		meta[jobspec.MetaTopology] = tp
	}
	if g := rapid.SampledFrom([]string{"", "0s", "1s", "15s"}).Draw(rt, "grace"); g != "" {
		meta[jobspec.MetaGrace] = g
	}
	if rapid.Bool().Draw(rt, "signal") {
		meta[jobspec.MetaCheckpointSignal] = "SIGUSR1"
	}
	run := time.Duration(rapid.IntRange(1, 12).Draw(rt, "run")) * liveStep
	if rapid.Bool().Draw(rt, "walltime") {
		meta[jobspec.MetaWalltime] = run.String()
	}
	j := api.NewBatchJob(id, id, "global", 50)
	pool := parking
	j.NodePool = &pool
	j.Meta = meta
	distinct := func() *api.Constraint { return &api.Constraint{Operand: "distinct_hosts", RTarget: "true"} }
	if rapid.IntRange(0, 3).Draw(rt, "distinct") == 0 {
		j.Constraints = append(j.Constraints, distinct())
	}
	devCons := rapid.SampledFrom([]string{"", "", "", "island_size", "nvlink"}).Draw(rt, "deviceConstraint")
	for g := range rapid.IntRange(1, 2).Draw(rt, "groups") {
		tg := api.NewTaskGroup(fmt.Sprintf("g%d", g), rapid.IntRange(1, 3).Draw(rt, "count"))
		if rapid.IntRange(0, 3).Draw(rt, "groupDistinct") == 0 {
			tg.Constraints = append(tg.Constraints, distinct())
		}
		task := api.NewTask("trainer", "raw_exec")
		cnt := uint64(rapid.SampledFrom([]int{1, 2, 3, 4, 8}).Draw(rt, "per"))
		dev := &api.RequestedDevice{Name: "nvidia/gpu", Count: &cnt}
		switch devCons {
		case "island_size":
			dev.Constraints = []*api.Constraint{{LTarget: "${device.attr.island_size}", Operand: ">=", RTarget: "4"}}
		case "nvlink":
			dev.Constraints = []*api.Constraint{{LTarget: "${device.attr.nvlink}", Operand: "=", RTarget: "true"}}
		}
		task.Resources = &api.Resources{Devices: []*api.RequestedDevice{dev}}
		tg.AddTask(task)
		j.AddTaskGroup(tg)
	}
	if _, _, err := w.c.api.Jobs().Register(j, nil); err != nil {
		w.fatalf(rt, "register %s: %v", id, err)
	}
	w.runFor[id] = run
	w.history = append(w.history, "  event: submit "+describeAPIJob(j))
}

func describeAPIJob(j *api.Job) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s meta=%v", *j.ID, j.Meta)
	if len(j.Constraints) > 0 {
		b.WriteString(" distinct_hosts")
	}
	for _, tg := range j.TaskGroups {
		dev := tg.Tasks[0].Resources.Devices[0]
		fmt.Fprintf(&b, " %s:%dx%d", *tg.Name, *tg.Count, *dev.Count)
		if len(tg.Constraints) > 0 {
			b.WriteString(" distinct")
		}
		for _, c := range dev.Constraints {
			fmt.Fprintf(&b, " [%s %s %s]", c.LTarget, c.Operand, c.RTarget)
		}
	}
	return b.String()
}

// record notes a cycle's snapshot and plan for failure messages.
func (w *adapterWorld) record(n int, snap *cluster.Snapshot, plan *engine.Plan) {
	var b strings.Builder
	fmt.Fprintf(&b, "cycle %d:", n)
	for _, nd := range snap.Nodes() {
		fmt.Fprintf(&b, "\n  node %s pool=%s ready=%v gpus=%d group_by=%s", nd.ID, nd.Pool, nd.Ready, len(nd.GPUs), nd.GroupBy)
	}
	for _, j := range snap.Jobs() {
		fmt.Fprintf(&b, "\n  job %s %s", j.ID, j.State)
		for _, a := range snap.JobAllocs(j.ID) {
			fmt.Fprintf(&b, " [%s %s gpus=%v stopping=%v]", a.ID[:8], a.NodeID, a.GPUs, a.Stopping)
		}
	}
	for _, id := range plan.Queue {
		ex := plan.Explanations[id]
		fmt.Fprintf(&b, "\n  plan %s %s victims=%v: %s", id, ex.Status, ex.Victims, ex.Reason)
	}
	for _, a := range plan.Admissions {
		fmt.Fprintf(&b, "\n  admit %s %+v", a.JobID, a.Groups)
	}
	for _, p := range append(slices.Clip(plan.Preemptions), plan.Requeues...) {
		fmt.Fprintf(&b, "\n  stop %s for %q grace=%v signal=%q", p.JobID, p.Preemptor, p.Grace, p.CheckpointSignal)
	}
	w.history = append(w.history, b.String())
}

// check holds one cycle (decided on snap, carried out; after is the model
// once the watcher caught up) against the properties.
func (w *adapterWorld) check(rt *rapid.T, snap *cluster.Snapshot, plan *engine.Plan, rolled []string, after *cluster.Snapshot) {
	underway := map[string]bool{}
	stoppingIn := map[string]bool{} // pools with a stop in flight
	poolOf := func(s *cluster.Snapshot, nodeID string) string {
		if n, ok := s.Node(nodeID); ok {
			return n.Pool
		}
		return ""
	}
	for _, p := range w.x.PreemptionsUnderway() {
		underway[p.JobID] = true
		for _, a := range snap.JobAllocs(p.JobID) {
			stoppingIn[poolOf(snap, a.NodeID)] = true
		}
	}
	for _, a := range after.Allocs() {
		if a.Stopping {
			stoppingIn[poolOf(after, a.NodeID)] = true
		}
	}
	// So are those of the plan's stops and of the rollbacks: what they
	// free after the decision is the next cycle's to give out.
	stopped := append(slices.Clip(plan.Preemptions), plan.Requeues...)
	for _, r := range plan.Reclaims {
		stopped = append(stopped, engine.Preemption{Stop: engine.Stop{JobID: r.JobID}})
	}
	for _, id := range rolled {
		stopped = append(stopped, engine.Preemption{Stop: engine.Stop{JobID: id}})
	}
	for _, p := range stopped {
		for _, a := range snap.JobAllocs(p.JobID) {
			stoppingIn[poolOf(snap, a.NodeID)] = true
		}
		if j, ok := snap.Job(p.JobID); ok {
			stoppingIn[poolName(j)] = true // a rollback of this cycle's admission
		}
	}
	// Admissions not yet fully running hold their GPUs in the engine.
	w.x.mu.Lock()
	for _, in := range w.x.pending {
		stoppingIn[in.Pool] = true
	}
	w.x.mu.Unlock()
	holding := false
	for _, ex := range plan.Explanations {
		if ex.Status == engine.StatusReserved || ex.Status == engine.StatusPreempting {
			holding = true
		}
	}
	idleNow := map[string]bool{}
	aloneNow := map[string]int{}
	defer func() { w.idle, w.aloneFor = idleNow, aloneNow }()
	for _, id := range plan.Queue {
		ex := plan.Explanations[id]
		j, ok := snap.Job(id)
		if !ok || j.SpecErr != nil {
			continue
		}
		pool := poolName(j)
		// (1) alone in its empty pool and fitting it: running soon.
		if w.aloneInEmptyPool(snap, j, pool) && w.fitsAlone(rt, snap, j, true) {
			w.tally.alone++
		}
		if w.aloneInEmptyPool(snap, j, pool) && w.fitsAlone(rt, snap, j, true) && !w.running(j.ID) && !w.clientsFailIn(snap, pool) {
			aloneNow[id] = w.aloneFor[id] + 1
			if aloneNow[id] > liveRunWithin {
				w.fatalf(rt, "%s has been alone in its empty pool %q, which fits it, for %d cycles and does not run (%s: %q)", id, pool, aloneNow[id], ex.Status, ex.Reason)
			}
		}
		switch ex.Status {
		case engine.StatusPreempting:
			// (2) and (3): the victims are really being stopped.
			w.tally.preempting++
			if len(ex.Victims) == 0 {
				w.fatalf(rt, "%s is preempting no gang (%q)", id, ex.Reason)
			}
			inFlight := false
			for _, v := range ex.Victims {
				if underway[v] || len(snap.JobAllocs(v)) > 0 {
					inFlight = true
				}
				if !underway[v] && w.liveInNomad(v, snap) {
					w.fatalf(rt, "%s says it stops %s, which Nomad runs on and nobody stops (%q)", id, v, ex.Reason)
				}
			}
			if !inFlight {
				w.fatalf(rt, "%s holds GPUs for a preemption with no stop in flight: victims %v all gone before the cycle (%q)", id, ex.Victims, ex.Reason)
			}
		case engine.StatusParked:
			// (4) never "never fits" when it fits the empty pool.
			if strings.Contains(ex.Reason, "even with no other work running") {
				w.tally.neverFits++
			}
			if strings.Contains(ex.Reason, "even with no other work running") && w.fitsAlone(rt, snap, j, true) {
				w.fatalf(rt, "%s is parked as never fitting (%q) but a fresh engine admits it on its empty pool", id, ex.Reason)
			}
		case engine.StatusWaiting:
			// (5) free GPUs not left idle beyond one cycle.
			if _, still := after.Job(id); !still || holding || stoppingIn[pool] || w.x.Busy(id) {
				continue
			}
			if aj, _ := after.Job(id); aj.State != cluster.JobQueued || !w.fitsAlone(rt, after, aj, false) {
				continue
			}
			idleNow[id] = true
			if w.idle[id] {
				w.fatalf(rt, "%s waits (%q) for a second cycle while the GPUs left free in pool %q fit it and nothing reserves them", id, ex.Reason, pool)
			}
		}
	}
}

// poolName is the pool a job asks for (impact_pool, else the default).
func poolName(j *cluster.Job) string {
	if j.Spec.Pool == "" {
		return "gpu"
	}
	return j.Spec.Pool
}

// running: the fake runs every allocation of the job's current version
// that it wants (the job is out of the parking pool, nothing queued).
func (w *adapterWorld) running(jobKey string) bool {
	_, id := splitJobKey(jobKey)
	j := w.fake.Job(id)
	if j == nil || *j.NodePool == parking {
		return false
	}
	live := 0
	for _, a := range w.fake.Allocations(id) {
		if a.DesiredStatus == "run" && (a.ClientStatus == "running" || a.ClientStatus == "complete") {
			live++
		}
	}
	want := 0
	for _, tg := range j.TaskGroups {
		want += *tg.Count
	}
	return live >= want
}

// clientsFailIn: a node of the pool fails what it is given (the job may
// be placed there and rolled back, again and again: the agent's back-off,
// not the engine, deals with that).
func (w *adapterWorld) clientsFailIn(snap *cluster.Snapshot, pool string) bool {
	for id, failing := range w.failing {
		if n, ok := snap.Node(id); ok && failing && n.Pool == pool {
			return true
		}
	}
	return false
}

// liveInNomad: some allocation of the victim that the cycle's snapshot
// held still runs in Nomad, not told to stop.
func (w *adapterWorld) liveInNomad(victim string, snap *cluster.Snapshot) bool {
	_, id := splitJobKey(victim)
	held := map[string]bool{}
	for _, a := range snap.JobAllocs(victim) {
		held[a.ID] = true
	}
	for _, a := range w.fake.Allocations(id) {
		if held[a.ID] && a.DesiredStatus == "run" && !terminalStatus(a.ClientStatus) {
			// Signalled and waiting out the grace counts as stopping.
			signalled := false
			for _, s := range w.fake.Signals() {
				if s.AllocID == a.ID {
					signalled = true
				}
			}
			if !signalled {
				return true
			}
		}
	}
	return false
}

// aloneInEmptyPool: no allocation on the pool's nodes and no other job
// queued for it or running in it.
func (w *adapterWorld) aloneInEmptyPool(snap *cluster.Snapshot, j *cluster.Job, pool string) bool {
	if j.State != cluster.JobQueued {
		return false
	}
	for _, a := range snap.Allocs() {
		if n, ok := snap.Node(a.NodeID); ok && n.Pool == pool {
			return false
		}
	}
	for _, o := range snap.Jobs() {
		if o.ID == j.ID {
			continue
		}
		if poolName(o) == pool {
			return false
		}
	}
	return true
}

// fitsAlone: does a fresh engine admit the job as the only queued job, on
// the snapshot's nodes, beside its running jobs (empty: with none)?
func (w *adapterWorld) fitsAlone(rt *rapid.T, snap *cluster.Snapshot, j *cluster.Job, empty bool) bool {
	var jobs []*cluster.Job
	var allocs []*cluster.Alloc
	if !empty {
		for _, o := range snap.Jobs() {
			if o.State == cluster.JobRunning && o.ID != j.ID {
				jobs = append(jobs, o)
			}
		}
		for _, a := range snap.Allocs() {
			if a.JobID != j.ID {
				allocs = append(allocs, a)
			}
		}
	}
	cp := *j
	cp.State = cluster.JobQueued
	one, err := cluster.Build(snap.Nodes(), append(jobs, &cp), allocs)
	if err != nil {
		w.fatalf(rt, "oracle snapshot: %v", err)
	}
	eng, err := engine.New(w.pol, engine.WithDefaultPool("gpu"))
	if err != nil {
		w.fatalf(rt, "oracle engine: %v", err)
	}
	plan := eng.Decide(one, w.clock.Now())
	for _, a := range plan.Admissions {
		if a.JobID == j.ID {
			return true
		}
	}
	return false
}
