package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/nomad"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// Options configure an Agent. Model, Executor, Explainer, Elector, State,
// Pools and Policy are required; the rest have defaults.
type Options struct {
	Name        string // this agent among several; logs and durable state
	Version     string
	Namespace   string // the namespace jobs are explained in by default
	ParkingPool string
	DefaultPool string
	Interval    time.Duration // timer: a cycle at least this often
	Debounce    time.Duration // collects a burst of events into one cycle
	// SaveEvery bounds how often the leader writes durable state.
	SaveEvery time.Duration
	// NoLeaderGrace is how long a standby tolerates seeing no lock holder
	// before health reports it (default 45s: three default lock TTLs).
	NoLeaderGrace time.Duration
	// HolderCheckEvery bounds how often a standby asks who holds the
	// leader lock (default 5s, a third of the default lock TTL): each ask
	// is one request to Nomad, and cycles run far more often than that.
	HolderCheckEvery time.Duration
	// ShutdownWait bounds how long Run waits for background actions on
	// exit (default 30s).
	ShutdownWait time.Duration
	// PoolRetryFor is how long start-up retries creating the parking pool
	// (default 2 minutes).
	PoolRetryFor time.Duration

	Policy    *policy.Policy
	Model     Model
	Executor  Executor
	Explainer Explainer
	Elector   Elector
	State     StateStore
	Pools     PoolManager
	// Utilization, when set, is polled every StatsInterval (default 15s)
	// for the utilisation metrics.
	Utilization   UtilizationSource
	StatsInterval time.Duration
	// Registrar, when set, registers the agent in Consul.
	Registrar *Registrar
	Metrics   *Metrics
	Logger    hclog.Logger
	// Clock is injected for tests; default time.Now.
	Clock func() time.Time
	// OnCycle, when set, is called after every cycle (tests, benchmarks).
	OnCycle func(CycleResult)
}

// CycleResult summarises one cycle.
type CycleResult struct {
	At       time.Time
	Leader   bool
	Plan     *engine.Plan
	Report   nomad.ApplyReport
	Decide   time.Duration
	Duration time.Duration
	Err      error
}

// Agent is one `impact agent` process.
type Agent struct {
	opts Options
	log  hclog.Logger
	clk  func() time.Time

	// Loggers of the components, named once.
	cycleLog, leaderLog, stateLog, explainLog, statsLog hclog.Logger

	engine *engine.Engine // owned by the loop goroutine
	cycles atomic.Uint64
	leader atomic.Bool
	view   atomic.Pointer[view]

	mu          sync.Mutex
	lastCycle   time.Time
	lastErr     error
	electionErr error
	history     map[string]jobHistory // job ID -> what the agent last did to it
	written     map[string]string     // job ID -> last explanation written (digest)
	preemptions map[string]nomad.PreemptionRecord
	// rollbacks counts a job's admissions rolled back in a row, for the
	// back-off before the next (see deferRolledBack).
	rollbacks map[string]int
	// requeues counts a job's incomplete-gang requeues in a row (kept while
	// it is in the model), for the back-off of deferRequeued.
	requeues map[string]int
	// Explanation writes run in the background (see writeExplanations):
	// explainQueue is what is left to write, most important first;
	// explainBusy the jobs being written now (job ID -> digest);
	// explainWorkers the writers of term explainTerm still running.
	explainQueue   []explainItem
	explainBusy    map[string]string
	explainWorkers int
	explainTerm    uint64
	explainWG      sync.WaitGroup
	swept          bool // this term's sweep of stale explanations started
	// timeline is each job's history of state changes (loop goroutine
	// only; see addHistory).
	timeline       map[string][]agentapi.Event
	lastSave       time.Time
	wake           chan struct{}
	leadership     chan leadershipChange
	pendingSince   time.Time // first model update not yet consumed by a cycle
	resignOnce     sync.Once
	leaderCancel   context.CancelFunc
	leaderCtx      context.Context
	leaderAcquired time.Time
	recovered      bool // this term's Recover succeeded
	holder         string
	holderErr      error
	holderChecked  time.Time // clock time of the last holder check; zero: check next cycle
	noLeaderSince  time.Time // wall clock; zero while some agent holds the lock
	consulErr      error     // last Consul registration error; nil once registered

	// utilPolls: device stats polls not yet handed to the engine (idle.go).
	utilMu    sync.Mutex
	utilPolls []utilPoll
}

type leadershipChange struct {
	gained bool
	lost   <-chan struct{}
}

// jobHistory is the agent's memory of its last action on a job, so that a
// running job's explanation still says where it was placed and when.
type jobHistory struct {
	Decision string
	At       time.Time
	Nodes    map[string][]string
	// Admitted is the engine's explanation of the admission (score,
	// placement, warnings), shown while the job runs.
	Admitted    *engine.Explanation
	PreemptedBy string
	Reason      string
}

// New validates the options and builds an agent; nothing runs until Run.
func New(opts Options) (*Agent, error) {
	var missing []string
	for name, ok := range map[string]bool{
		"Policy": opts.Policy != nil, "Model": opts.Model != nil, "Executor": opts.Executor != nil,
		"Explainer": opts.Explainer != nil, "Elector": opts.Elector != nil, "State": opts.State != nil,
		"Pools": opts.Pools != nil,
	} {
		if !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("agent: missing options %v", missing)
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Interval <= 0 {
		opts.Interval = 10 * time.Second
	}
	if opts.NoLeaderGrace <= 0 {
		opts.NoLeaderGrace = 45 * time.Second
	}
	if opts.HolderCheckEvery <= 0 {
		opts.HolderCheckEvery = 5 * time.Second
	}
	if opts.ShutdownWait <= 0 {
		opts.ShutdownWait = 30 * time.Second
	}
	if opts.PoolRetryFor <= 0 {
		opts.PoolRetryFor = 2 * time.Minute
	}
	if opts.StatsInterval <= 0 {
		opts.StatsInterval = 15 * time.Second
	}
	if opts.SaveEvery <= 0 {
		opts.SaveEvery = 30 * time.Second
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.Metrics == nil {
		m, err := NewMetrics()
		if err != nil {
			return nil, err
		}
		opts.Metrics = m
	}
	log := opts.Logger
	a := &Agent{
		opts:        opts,
		log:         log,
		clk:         opts.Clock,
		cycleLog:    log.Named("cycle"),
		leaderLog:   log.Named("leader"),
		stateLog:    log.Named("state"),
		explainLog:  log.Named("explain"),
		statsLog:    log.Named("devicestats"),
		history:     map[string]jobHistory{},
		timeline:    map[string][]agentapi.Event{},
		written:     map[string]string{},
		explainBusy: map[string]string{},
		preemptions: map[string]nomad.PreemptionRecord{},
		rollbacks:   map[string]int{},
		requeues:    map[string]int{},
		wake:        make(chan struct{}, 1),
		leadership:  make(chan leadershipChange, 2),
	}
	eng, err := a.newEngine(nil)
	if err != nil {
		return nil, err
	}
	a.engine = eng
	a.view.Store(&view{queue: agentapi.Queue{Jobs: []agentapi.Entry{}}, explain: map[string]agentapi.Explanation{}})
	return a, nil
}

func (a *Agent) newEngine(m *engine.Memory) (*engine.Engine, error) {
	opts := []engine.Option{engine.WithLogger(a.log), engine.WithDefaultPool(a.opts.DefaultPool)}
	if m != nil {
		opts = append(opts, engine.WithMemory(*m))
	}
	e, err := engine.New(a.opts.Policy, opts...)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return e, nil
}

// Metrics returns the agent's metrics (for the HTTP API).
func (a *Agent) Metrics() *Metrics { return a.opts.Metrics }

// IsLeader reports whether this agent currently acts.
func (a *Agent) IsLeader() bool { return a.leader.Load() }

// Trigger asks for a cycle as soon as possible (tests, admin).
func (a *Agent) Trigger() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Run runs the agent until ctx ends: creates the parking pool, starts the
// watcher and the election, and runs cycles. On return the agent has
// resigned leadership and deregistered from Consul.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	if err := a.ensurePool(ctx); err != nil {
		if ctx.Err() != nil {
			// Stopped during start-up (SIGTERM while Nomad was slow or
			// down): a clean stop, not a failure.
			return nil
		}
		return err
	}
	var wg sync.WaitGroup
	if r := a.opts.Registrar; r != nil {
		// Deferred before wg.Wait runs in the body's end, so the retry
		// below has stopped when it deregisters.
		defer func() {
			if err := r.Deregister(); err != nil {
				a.log.Error("consul deregistration failed", "error", err)
			}
		}()
		if err := r.Register(); err != nil {
			// Not fatal: scheduling works without Consul. Health reports
			// it, and registration is retried until it succeeds.
			a.log.Error("consul registration failed; retrying in the background", "error", err)
			a.setConsulErr(err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				a.retryRegister(ctx, r)
			}()
		}
	}

	watchErr := make(chan error, 1)
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := a.opts.Model.Run(ctx); err != nil && ctx.Err() == nil {
			watchErr <- err
			cancel()
		}
	}()
	go func() {
		defer wg.Done()
		a.campaign(ctx)
	}()
	if a.opts.Utilization != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.pollUtilization(ctx)
		}()
	}

	err := a.loop(ctx)
	a.stepDown()
	cancel()
	wg.Wait()
	// Explanation writers end with the leader context stepDown cancelled.
	a.explainWG.Wait()
	if w, ok := a.opts.Executor.(Waiter); ok {
		// Let preemptions under way finish (signal, grace, stop), within
		// bounds: what is left stays as an intent for the next leader.
		done := make(chan struct{})
		go func() { w.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(a.opts.ShutdownWait):
			a.log.Warn("shutting down with actions still under way; the next leader resumes them", "waited", a.opts.ShutdownWait)
		}
	}
	// Release the lock with a fresh context: ours is done.
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	if rerr := a.opts.Elector.Resign(rctx); rerr != nil {
		a.leaderLog.Warn("resigning leadership failed; a standby takes over after the lock TTL", "error", rerr)
	}
	select {
	case werr := <-watchErr:
		return fmt.Errorf("watching nomad: %w", werr)
	default:
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// retryRegister retries the Consul registration with backoff (1s doubling
// to 1m) until it succeeds or ctx ends: Consul down at start-up must not
// leave the agent out of the catalog until its next restart.
func (a *Agent) retryRegister(ctx context.Context, r *Registrar) {
	backoff := time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		err := r.Register()
		a.setConsulErr(err)
		if err == nil {
			return
		}
		a.log.Warn("consul registration failed, retrying", "error", err, "backoff", backoff)
		backoff = min(backoff*2, time.Minute)
	}
}

func (a *Agent) setConsulErr(err error) {
	a.mu.Lock()
	a.consulErr = err
	a.mu.Unlock()
}

// ensurePool creates the parking pool, retrying for a while: at start-up
// (make dev, a node reboot) Nomad may come up after the agent. A pool that
// still cannot be created after PoolRetryFor is an error the operator must
// see (usually a token without node_pool write).
func (a *Agent) ensurePool(ctx context.Context) error {
	deadline := a.clk().Add(a.opts.PoolRetryFor)
	backoff := 250 * time.Millisecond
	for {
		err := a.opts.Pools.EnsureNodePool(ctx, a.opts.ParkingPool,
			"impact scheduler parking pool: jobs wait here (no nodes) until admitted")
		if err == nil {
			a.log.Info("parking pool ready", "pool", a.opts.ParkingPool)
			return nil
		}
		if ctx.Err() != nil || !a.clk().Before(deadline) {
			return fmt.Errorf("creating parking pool %q: %w", a.opts.ParkingPool, err)
		}
		a.log.Warn("creating parking pool failed, retrying", "pool", a.opts.ParkingPool, "error", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return fmt.Errorf("creating parking pool %q: %w", a.opts.ParkingPool, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// campaign runs the election until ctx ends, reporting changes to the loop.
func (a *Agent) campaign(ctx context.Context) {
	backoff := 500 * time.Millisecond
	for ctx.Err() == nil {
		lost, err := a.opts.Elector.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			a.mu.Lock()
			a.electionErr = err
			a.mu.Unlock()
			a.leaderLog.Warn("campaign failed, retrying", "error", err, "backoff", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		backoff = 500 * time.Millisecond
		a.mu.Lock()
		a.electionErr = nil
		a.mu.Unlock()
		select {
		case a.leadership <- leadershipChange{gained: true, lost: lost}:
		case <-ctx.Done():
			return
		}
		select {
		case <-lost:
		case <-ctx.Done():
			return
		}
		select {
		case a.leadership <- leadershipChange{gained: false}:
		case <-ctx.Done():
			return
		}
	}
}

// loop is the scheduling loop: one goroutine owns the engine, so cycles
// never overlap.
func (a *Agent) loop(ctx context.Context) error {
	ticker := time.NewTicker(a.opts.Interval)
	defer ticker.Stop()
	var debounce *time.Timer
	var debounceC <-chan time.Time
	updated := a.opts.Model.Updated()
	for {
		select {
		case <-ctx.Done():
			if debounce != nil {
				debounce.Stop()
			}
			return ctx.Err()
		case ch := <-a.leadership:
			if ch.gained {
				a.becomeLeader(ctx, ch.lost)
			} else {
				a.stepDown()
			}
			a.cycle(ctx)
		case <-updated:
			a.mu.Lock()
			if a.pendingSince.IsZero() {
				a.pendingSince = a.clk()
			}
			a.mu.Unlock()
			if a.opts.Debounce <= 0 {
				a.cycle(ctx)
				continue
			}
			if debounce == nil {
				debounce = time.NewTimer(a.opts.Debounce)
				debounceC = debounce.C
			}
		case <-debounceC:
			debounce, debounceC = nil, nil
			a.cycle(ctx)
		case <-ticker.C:
			a.cycle(ctx)
		case <-a.wake:
			a.cycle(ctx)
		}
	}
}

// becomeLeader loads durable state and restarts the engine from it, so
// fair-share memory survives the leader change.
func (a *Agent) becomeLeader(ctx context.Context, lost <-chan struct{}) {
	lctx, lcancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-lost:
			lcancel()
		case <-lctx.Done():
		}
	}()
	st, ok, err := a.opts.State.LoadState(lctx)
	switch {
	case err != nil:
		// Acting without the saved usage would reorder the queue; keep
		// the standby's own usage, which watched the same cluster.
		a.stateLog.Error("loading durable state failed; continuing with this agent's own fair-share memory", "error", err)
	case ok:
		m := memoryFrom(st, a.clk())
		if eng, err := a.newEngine(&m); err != nil {
			a.stateLog.Error("restoring engine", "error", err)
		} else {
			a.engine = eng
		}
		a.mu.Lock()
		for k, v := range st.Preemptions {
			a.preemptions[k] = v
		}
		a.mu.Unlock()
		a.stateLog.Info("resumed from durable state", "saved_by", st.Leader, "projects", len(st.Usage),
			"preemptions", len(st.Preemptions))
	default:
		a.stateLog.Info("no durable state yet; starting fresh")
	}
	a.mu.Lock()
	a.leaderCtx, a.leaderCancel = lctx, lcancel
	a.leaderAcquired = a.clk()
	a.recovered = false
	a.lastSave = time.Time{}
	// Explanations written by the previous leader may differ: rewrite.
	a.written = map[string]string{}
	a.resetExplainLocked()
	a.mu.Unlock()
	a.leader.Store(true)
	a.opts.Metrics.RecordLeader(true)
	if r := a.opts.Registrar; r != nil {
		if err := r.SetLeader(true); err != nil {
			a.leaderLog.Warn("updating consul tag", "error", err)
		}
	}
	a.leaderLog.Info("acquired leadership", "agent", a.opts.Name)
}

func (a *Agent) stepDown() {
	a.mu.Lock()
	cancel := a.leaderCancel
	a.leaderCancel, a.leaderCtx = nil, nil
	if cancel != nil {
		a.resetExplainLocked()
		// A fresh standby learns who leads now at its next cycle.
		a.holderChecked = time.Time{}
	}
	a.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	a.leader.Store(false)
	a.opts.Metrics.RecordLeader(false)
	if r := a.opts.Registrar; r != nil {
		if err := r.SetLeader(false); err != nil {
			a.leaderLog.Warn("updating consul tag", "error", err)
		}
	}
	a.leaderLog.Info("lost leadership; standing by", "agent", a.opts.Name)
}

// leaderContext returns the context bounding this term's actions, or nil
// when not leading.
func (a *Agent) leaderContext() context.Context {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.leaderCtx == nil || a.leaderCtx.Err() != nil {
		return nil
	}
	return a.leaderCtx
}

// cycle runs one scheduling cycle.
func (a *Agent) cycle(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	start := a.clk()
	wallStart := time.Now()
	res := CycleResult{At: start}
	a.mu.Lock()
	lag := time.Duration(0)
	if !a.pendingSince.IsZero() {
		lag = start.Sub(a.pendingSince)
		a.pendingSince = time.Time{}
	}
	a.mu.Unlock()

	st := a.opts.Model.Status()
	a.opts.Metrics.RecordEvents(lag, st)
	if !st.Synced {
		// Deciding on a partial model could admit out of order; health
		// reports the state, and the first sync triggers a cycle.
		a.cycleLog.Debug("skipping cycle: model not synced with nomad yet", "status", st.Err)
		return
	}
	snap := a.opts.Model.Snapshot()
	a.feedUtilization()
	t0 := time.Now()
	plan := a.engine.Decide(snap, start)
	res.Decide = time.Since(t0)
	res.Plan = plan

	lctx := a.leaderContext()
	res.Leader = lctx != nil
	if lctx == nil {
		a.checkHolder(ctx)
	}
	if lctx != nil {
		if err := a.recover(lctx); err != nil {
			// Acting before the previous leader's intents are settled
			// could admit a job twice: decide, show, but do not act.
			res.Err = err
			lctx = nil
		}
	}
	if lctx != nil {
		rep, err := a.opts.Executor.Apply(lctx, plan, snap)
		res.Report = rep
		if err != nil {
			res.Err = fmt.Errorf("applying plan: %w", err)
		}
		a.record(plan, snap, rep, start)
		a.forgetUnapplied(plan, &rep)
		a.deferRolledBack(snap, rep.RolledBack, start)
		a.deferRequeued(snap, plan, rep.Requeued, start)
	} else {
		// A standby (or a leader not yet recovered) decides but does not
		// act: nothing it planned is under way.
		a.forgetUnapplied(plan, nil)
	}
	v := buildView(snap, plan, a.historySnapshot(), start, res.Leader, a.opts.Policy)
	a.addHistory(v, start)
	a.view.Store(v)
	a.opts.Metrics.RecordCluster(v.stats)
	a.opts.Metrics.RecordIdle(plan.Running, res.Leader)
	if lctx != nil {
		a.writeExplanations(lctx, v)
		// What the executor did is saved at once; usage alone only every
		// SaveEvery.
		acted := len(res.Report.Admitted)+len(res.Report.Preempted)+len(res.Report.Requeued)+len(res.Report.RolledBack)+len(res.Report.Reclaimed) > 0
		a.saveState(lctx, start, acted)
	}
	a.finish(res, wallStart)
}

// Back-off after a rolled-back admission: the first retry waits
// rollbackBackoff, each further one in a row twice as long, up to
// maxRollbackBackoff.
const (
	rollbackBackoff    = 30 * time.Second
	maxRollbackBackoff = 30 * time.Minute
)

// deferRolledBack hands rolled-back admissions back to the engine and holds
// them off for a back-off that doubles with each rollback in a row. A job
// Nomad cannot place although the model says it fits (CPU, memory, a
// constraint the model does not read) would otherwise be admitted again at
// once, rolled back at its deadline, and so on, holding GPUs all along.
// The count is kept while the job is in the model (a job that left it,
// stopped or purged, starts afresh if submitted again).
func (a *Agent) deferRolledBack(snap *cluster.Snapshot, rolledBack []string, now time.Time) {
	for id := range a.rollbacks {
		if _, ok := snap.Job(id); !ok {
			delete(a.rollbacks, id)
			a.engine.Forget(id) // drops its deferral with it
		}
	}
	for _, id := range rolledBack {
		a.engine.Forget(id)
		a.rollbacks[id]++
		n := a.rollbacks[id]
		wait := maxRollbackBackoff
		if n <= 16 {
			wait = min(maxRollbackBackoff, rollbackBackoff<<(n-1))
		}
		a.engine.Defer(id, now.Add(wait), fmt.Sprintf("its admission was rolled back %d time(s) in a row (Nomad did not start the whole gang); retrying with back-off", n))
		a.cycleLog.Info("admission rolled back; holding the job back", "job", id, "rollbacks", n, "retry_after", wait)
	}
}

// deferRequeued holds back a gang requeued whole because a member went
// missing, from its second requeue in a row on: a lost node is ridden out
// by one requeue (run again at once, elsewhere), but a job whose member
// fails every time it runs would otherwise be requeued and re-admitted in
// a loop, holding GPUs. The wait is rollbackBackoff doubling up to
// maxRollbackBackoff; the count is kept while the job is in the model.
func (a *Agent) deferRequeued(snap *cluster.Snapshot, plan *engine.Plan, requeued []string, now time.Time) {
	for id := range a.requeues {
		if _, ok := snap.Job(id); !ok {
			delete(a.requeues, id)
		}
	}
	update := map[string]bool{}
	for _, r := range plan.Requeues {
		update[r.JobID] = r.Update
	}
	for _, id := range requeued {
		if update[id] {
			continue // a user's update, not a broken gang
		}
		a.requeues[id]++
		n := a.requeues[id]
		if n < 2 {
			continue
		}
		wait := maxRollbackBackoff
		if n <= 17 {
			wait = min(maxRollbackBackoff, rollbackBackoff<<(n-2))
		}
		a.engine.Defer(id, now.Add(wait), fmt.Sprintf("its gang was requeued %d times in a row (a member lost, failed or stopped); retrying with back-off", n))
		a.cycleLog.Info("gang requeued again; holding the job back", "job", id, "requeues", n, "retry_after", wait)
	}
}

// memoryFrom rebuilds the engine's memory from durable state: the decayed
// usage, the idle requeue counts, and the preemption budget spent in the
// last hour from the preemption records (the engine caps work lost per
// sliding hour).
func memoryFrom(st DurableState, now time.Time) engine.Memory {
	m := engine.Memory{UsageAt: st.UsageAt, Usage: st.Usage, LastCycle: st.UsageAt, Requeues: st.Requeues}
	for _, r := range st.Preemptions {
		if now.Sub(r.At) < time.Hour && r.LostGPUHours > 0 {
			m.Losses = append(m.Losses, engine.Loss{At: r.At, GPUHours: r.LostGPUHours})
		}
	}
	sort.Slice(m.Losses, func(i, j int) bool { return m.Losses[i].At.Before(m.Losses[j].At) })
	return m
}

// forgetUnapplied tells the engine which planned actions were not carried
// out (not leading, recovery pending, EnforceIndex conflict, failure), so
// it queues those jobs again and frees their GPUs next cycle instead of
// holding them for its admission TTL, and so a preemption that never
// started is planned afresh (and its lost-work budget given back) rather
// than waited on. rep is nil when nothing was applied. Preemptions that
// started, or were skipped because an earlier cycle already did them, are
// under way and must not be forgotten.
func (a *Agent) forgetUnapplied(plan *engine.Plan, rep *nomad.ApplyReport) {
	var admitted, underway map[string]bool
	if rep != nil {
		admitted = setOf(rep.Admitted)
		underway = setOf(append(slices.Clip(rep.Preempted), rep.Requeued...))
		for id := range rep.Skipped {
			underway[id] = true
		}
	}
	for _, adm := range plan.Admissions {
		if !admitted[adm.JobID] {
			a.engine.Forget(adm.JobID)
		}
	}
	for _, p := range append(slices.Clip(plan.Preemptions), plan.Requeues...) {
		if !underway[p.JobID] {
			a.engine.Forget(p.JobID)
		}
	}
	var reclaimed map[string]bool
	if rep != nil {
		reclaimed = setOf(rep.Reclaimed)
		for id := range rep.Skipped {
			reclaimed[id] = true
		}
	}
	for _, r := range plan.Reclaims {
		if !reclaimed[r.JobID] {
			a.engine.Forget(r.JobID)
		}
	}
}

// checkHolder asks the elector who leads (standbys only), so health can
// name the leader and report a cluster where nobody does. It asks at most
// once every HolderCheckEvery: every standby runs a cycle on each model
// update, and asking on each would add one request to Nomad per cycle per
// standby for an answer that changes at most once per lock TTL.
func (a *Agent) checkHolder(ctx context.Context) {
	hr, ok := a.opts.Elector.(HolderReporter)
	if !ok {
		return
	}
	now := a.clk()
	a.mu.Lock()
	last := a.holderChecked
	if !last.IsZero() && now.Sub(last) < a.opts.HolderCheckEvery && !now.Before(last) {
		a.mu.Unlock()
		return
	}
	a.holderChecked = now
	a.mu.Unlock()
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	h, err := hr.Holder(hctx)
	if err == nil && h == a.opts.Name && !a.leader.Load() {
		// The lock's holder item names this agent, which does not lead:
		// it lost the lock without releasing it (Nomad was restarted or
		// unreachable, its renewals failed). Nobody leads until another
		// agent takes the lock; a scheduler token does not see the lock
		// itself, only this item, which stays until overwritten.
		h = ""
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.holder, a.holderErr = h, err
	if err == nil && h != "" {
		a.noLeaderSince = time.Time{}
	} else if a.noLeaderSince.IsZero() {
		a.noLeaderSince = time.Now()
	}
}

// recover runs the executor's Recover once per leadership term.
func (a *Agent) recover(ctx context.Context) error {
	r, ok := a.opts.Executor.(Recoverer)
	if !ok {
		return nil
	}
	a.mu.Lock()
	done := a.recovered
	a.mu.Unlock()
	if done {
		return nil
	}
	if err := r.Recover(ctx); err != nil {
		return fmt.Errorf("recovering the previous leader's intents (not acting until it succeeds): %w", err)
	}
	a.mu.Lock()
	a.recovered = true
	a.mu.Unlock()
	if ur, ok := a.opts.Executor.(UnderwayReporter); ok {
		now := a.clk()
		for _, p := range ur.PreemptionsUnderway() {
			a.engine.Preempting(p.JobID, p.Allocs, now, p.Grace)
		}
	}
	a.leaderLog.Info("recovered the previous leader's intents")
	return nil
}

func (a *Agent) finish(res CycleResult, wallStart time.Time) {
	res.Duration = time.Since(wallStart)
	a.cycles.Add(1)
	a.mu.Lock()
	a.lastCycle = res.At
	a.lastErr = res.Err
	a.mu.Unlock()
	a.opts.Metrics.RecordCycle(res.Decide, res.Duration, res.Err != nil)
	if res.Err != nil && errors.Is(res.Err, context.Canceled) {
		a.cycleLog.Debug("cycle interrupted", "error", res.Err)
	} else if res.Err != nil {
		a.cycleLog.Warn("cycle failed", "error", res.Err)
	} else if res.Leader && res.Plan != nil && (len(res.Plan.Admissions) > 0 || len(res.Plan.Preemptions) > 0) {
		a.cycleLog.Info("cycle", "leader", res.Leader, "admissions", len(res.Plan.Admissions),
			"preemptions", len(res.Plan.Preemptions), "queued", len(res.Plan.Queue), "decide", res.Decide)
	} else {
		a.cycleLog.Trace("cycle", "leader", res.Leader, "queued", lenQueue(res.Plan), "decide", res.Decide)
	}
	if a.opts.OnCycle != nil {
		a.opts.OnCycle(res)
	}
}

func lenQueue(p *engine.Plan) int {
	if p == nil {
		return 0
	}
	return len(p.Queue)
}

// record updates the agent's memory and metrics from what the executor did.
func (a *Agent) record(plan *engine.Plan, snap *cluster.Snapshot, rep nomad.ApplyReport, now time.Time) {
	admitted := setOf(rep.Admitted)
	preempted := setOf(rep.Preempted)
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, adm := range plan.Admissions {
		if !admitted[adm.JobID] {
			continue
		}
		nodes := map[string][]string{}
		for _, g := range adm.Groups {
			nodes[g.Group] = g.Nodes()
		}
		a.history[adm.JobID] = jobHistory{Decision: DecisionAdmit, At: now, Nodes: nodes, Admitted: plan.Explanations[adm.JobID]}
		tier := ""
		waited := time.Duration(0)
		if j, ok := snap.Job(adm.JobID); ok {
			tier = a.opts.Policy.TierOf(j.Spec).Name
			waited = now.Sub(j.Submit)
		}
		a.opts.Metrics.RecordAdmission(tier, waited)
	}
	requeued := setOf(rep.Requeued)
	for _, p := range plan.Requeues {
		if !requeued[p.JobID] {
			continue
		}
		a.history[p.JobID] = jobHistory{Decision: DecisionRequeued, At: now, Reason: p.Reason}
		if p.Update {
			a.cycleLog.Info("replacing a running job its user re-submitted", "job", p.JobID)
			continue
		}
		a.opts.Metrics.RecordGangRequeue()
		a.cycleLog.Warn("requeuing an incomplete gang whole", "job", p.JobID, "reason", p.Reason)
	}
	for _, p := range plan.Preemptions {
		if !preempted[p.JobID] {
			continue
		}
		a.history[p.JobID] = jobHistory{Decision: "preempted", At: now, PreemptedBy: p.Preemptor, Reason: p.Reason}
		a.preemptions[p.JobID] = nomad.PreemptionRecord{JobID: p.JobID, Preemptor: p.Preemptor, At: now, GPUs: p.GPUs,
			LostGPUHours: p.LostGPUHours, Reason: p.Reason}
		tier := ""
		if j, ok := snap.Job(p.JobID); ok {
			tier = a.opts.Policy.TierOf(j.Spec).Name
		}
		a.opts.Metrics.RecordPreemption(tier, p.LostGPUHours)
		if p.Idle {
			a.opts.Metrics.RecordReclaimed(p.ReclaimedGPUHours)
		}
	}
	reclaimed := setOf(rep.Reclaimed)
	for _, r := range plan.Reclaims {
		if !reclaimed[r.JobID] {
			continue
		}
		// Where it ran stays known: its last explanation says it.
		a.history[r.JobID] = jobHistory{Decision: DecisionReclaimed, At: now, Reason: r.Reason, Nodes: a.history[r.JobID].Nodes}
		a.opts.Metrics.RecordReclaimed(r.ReclaimedGPUHours)
	}
	a.opts.Metrics.RecordHeadroom(plan.Headroom)
	for range rep.RolledBack {
		a.opts.Metrics.RecordRollback()
	}
	a.opts.Metrics.RecordPinMismatches(rep.PinMismatches)
	for id, err := range rep.Failed {
		a.cycleLog.Error("action failed", "job", id, "error", err)
		a.opts.Metrics.RecordActionError("apply")
	}
	for id, why := range rep.Skipped {
		a.cycleLog.Debug("action skipped", "job", id, "reason", why)
	}
	// Forget jobs that left the model, and old preemption records.
	for id := range a.history {
		if _, ok := snap.Job(id); !ok {
			delete(a.history, id) // a.written: writeExplanations deletes its Variable
		}
	}
	for id, r := range a.preemptions {
		if now.Sub(r.At) > 24*time.Hour {
			delete(a.preemptions, id)
		}
	}
}

func (a *Agent) historySnapshot() map[string]jobHistory {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]jobHistory, len(a.history))
	for k, v := range a.history {
		out[k] = v
	}
	return out
}

// Bounds on explanation writes. Each write is one HTTP round trip to
// Nomad; after a leader change every job's Variable is rewritten, so with
// thousands of queued jobs writing them inline would hold up the cycle (and
// admissions) for minutes. Writes therefore run in the background, at most
// explainConcurrency at a time, and each cycle queues at most
// explainPerCycle of them; the rest are queued by later cycles.
const (
	explainConcurrency = 8
	explainPerCycle    = 512
)

// explainItem is one explanation waiting to be written, or (forget) one
// job's Variable to delete because the job left for good.
type explainItem struct {
	id     string
	e      agentapi.Explanation
	digest string
	forget bool
}

// digestGone marks a forget item in explainBusy.
const digestGone = "gone"

// resetExplainLocked drops the pending writes of the ending term; its
// writers stop with the term's context and record nothing. a.mu is held.
func (a *Agent) resetExplainLocked() {
	a.explainTerm++
	a.explainQueue = nil
	a.explainWorkers = 0
	a.explainBusy = map[string]string{}
	a.swept = false
}

// explainOrder returns the explanations that need writing, most important
// first: jobs whose written Variable is out of date before jobs never
// written this term (a changed decision matters more than a first copy),
// each in queue order (waiting jobs by position, then the others). Only
// decision-relevant fields count as a change (not the wait time), so a
// stable queue costs no writes. At most limit items are returned.
func explainOrder(v *view, written, busy map[string]string, limit int) []explainItem {
	var changed, fresh []explainItem
	seen := make(map[string]bool, len(v.explain))
	add := func(id string) {
		if seen[id] {
			return
		}
		seen[id] = true
		e, ok := v.explain[id]
		if !ok {
			return
		}
		if (e.State == agentapi.StateRunning || e.State == agentapi.StateAdmitting) && len(e.Nodes) == 0 {
			// Admitted before this agent led and no allocation placed
			// yet: the previous leader's Variable says more (score,
			// placement) than this agent knows. Once allocations run,
			// their nodes are known and it is rewritten.
			return
		}
		d := digest(e)
		if written[id] == d {
			return
		}
		if b, ok := busy[id]; ok && b == d {
			return // being written as it is
		}
		it := explainItem{id: id, e: e, digest: d}
		if written[id] != "" {
			changed = append(changed, it)
		} else {
			fresh = append(fresh, it)
		}
	}
	for _, q := range v.queue.Jobs {
		add(cluster.JobKey(q.Namespace, q.Job))
	}
	// Jobs the queue does not list (none today), in a stable order.
	rest := make([]string, 0)
	for id := range v.explain {
		if !seen[id] {
			rest = append(rest, id)
		}
	}
	sort.Strings(rest)
	for _, id := range rest {
		add(id)
	}
	out := append(changed, fresh...)
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// writeExplanations hands the explanations that changed to background
// writers and returns at once: the cycle's duration does not depend on how
// many jobs there are or how slow Nomad answers. Each cycle replaces the
// pending list with its own (newer explanations, current order); a job is
// never written by two writers at once, so an older copy cannot land
// after a newer one.
//
// A job this term wrote that left the model (completed, stopped, purged)
// has its Variable deleted, first; once per term, the explanations of
// jobs that left before (while no agent led, or under an earlier leader)
// are swept.
func (a *Agent) writeExplanations(ctx context.Context, v *view) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var gone []explainItem
	for id := range a.written {
		if _, ok := v.explain[id]; !ok && a.explainBusy[id] != digestGone {
			gone = append(gone, explainItem{id: id, digest: digestGone, forget: true})
		}
	}
	sort.Slice(gone, func(i, k int) bool { return gone[i].id < gone[k].id })
	a.explainQueue = append(gone, explainOrder(v, a.written, a.explainBusy, explainPerCycle)...)
	if j, ok := a.opts.Explainer.(ExplanationJanitor); ok && !a.swept {
		a.swept = true
		a.explainWG.Add(1)
		go a.sweepExplanations(ctx, j)
	}
	for a.explainWorkers < explainConcurrency && a.explainWorkers < len(a.explainQueue) {
		a.explainWorkers++
		a.explainWG.Add(1)
		go a.explainWorker(ctx, a.explainTerm)
	}
}

// nextExplainLocked takes the first pending item whose job is not being
// written now. a.mu is held.
func (a *Agent) nextExplainLocked() (explainItem, bool) {
	for i, it := range a.explainQueue {
		if _, busy := a.explainBusy[it.id]; busy {
			continue
		}
		a.explainQueue = append(a.explainQueue[:i:i], a.explainQueue[i+1:]...)
		return it, true
	}
	return explainItem{}, false
}

// explainWorker writes pending explanations until none is left, the term
// ends, or ctx ends.
func (a *Agent) explainWorker(ctx context.Context, term uint64) {
	defer a.explainWG.Done()
	for {
		a.mu.Lock()
		if a.explainTerm != term {
			a.mu.Unlock()
			return
		}
		it, ok := a.nextExplainLocked()
		if !ok || ctx.Err() != nil {
			a.explainWorkers--
			a.mu.Unlock()
			return
		}
		a.explainBusy[it.id] = it.digest
		a.mu.Unlock()

		var err error
		if it.forget {
			if j, ok := a.opts.Explainer.(ExplanationJanitor); ok {
				err = j.ForgetExplanation(ctx, it.id)
			}
		} else {
			err = a.opts.Explainer.WriteExplanation(ctx, it.e)
		}

		a.mu.Lock()
		if a.explainTerm == term {
			delete(a.explainBusy, it.id)
			switch {
			case err != nil:
			case it.forget:
				delete(a.written, it.id)
			default:
				a.written[it.id] = it.digest
			}
		}
		a.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			a.explainLog.Warn("writing explanation", "job", it.id, "error", err)
			a.opts.Metrics.RecordActionError("explain")
		}
	}
}

// sweepExplanations deletes, once per term, the explanations of jobs that
// are no longer managed; it asks the newest view at each Variable.
func (a *Agent) sweepExplanations(ctx context.Context, j ExplanationJanitor) {
	defer a.explainWG.Done()
	n, err := j.SweepExplanations(ctx, func(id string) bool {
		_, ok := a.view.Load().explain[id]
		return ok
	})
	switch {
	case err != nil && ctx.Err() == nil:
		a.explainLog.Warn("sweeping explanations of jobs that left", "deleted", n, "error", err)
		a.opts.Metrics.RecordActionError("explain")
	case n > 0:
		a.explainLog.Info("deleted explanations of jobs that left", "count", n)
	}
}

// addHistory appends to each job's timeline the changes of its state or
// decision this cycle shows, keeps the last agentapi.MaxHistory, forgets
// the jobs that left, and hands each explanation its timeline. Called by
// the loop goroutine only, before the view is stored.
func (a *Agent) addHistory(v *view, now time.Time) {
	for id := range a.timeline {
		if _, ok := v.explain[id]; !ok {
			delete(a.timeline, id)
		}
	}
	for id, e := range v.explain {
		tl := a.timeline[id]
		if n := len(tl); n == 0 || tl[n-1].State != e.State || tl[n-1].Decision != e.Decision {
			tl = append(tl, agentapi.Event{At: now, State: e.State, Decision: e.Decision, Summary: e.Summary})
			if len(tl) > agentapi.MaxHistory {
				tl = append([]agentapi.Event(nil), tl[len(tl)-agentapi.MaxHistory:]...)
			}
			a.timeline[id] = tl
		}
		e.History = append([]agentapi.Event(nil), tl...)
		v.explain[id] = e
	}
}

// saveState writes durable state at most every SaveEvery (or when forced).
func (a *Agent) saveState(ctx context.Context, now time.Time, force bool) {
	a.mu.Lock()
	due := force || a.lastSave.IsZero() || now.Sub(a.lastSave) >= a.opts.SaveEvery
	if !due {
		a.mu.Unlock()
		return
	}
	st := DurableState{
		Usage:       a.engine.Usage().Values(now),
		UsageAt:     now,
		Preemptions: copyMap(a.preemptions),
		Requeues:    a.engine.Memory(now).Requeues,
		Leader:      a.opts.Name,
	}
	a.mu.Unlock()
	if err := a.opts.State.SaveState(ctx, st); err != nil {
		if ctx.Err() == nil {
			a.stateLog.Warn("saving durable state", "error", err)
			a.opts.Metrics.RecordActionError("state")
		}
		return
	}
	a.mu.Lock()
	a.lastSave = now
	a.mu.Unlock()
}

func copyMap[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func setOf(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// Health implements ViewSource.
func (a *Agent) Health() agentapi.Health {
	st := a.opts.Model.Status()
	a.mu.Lock()
	defer a.mu.Unlock()
	h := agentapi.Health{
		Status:     agentapi.StatusOK,
		Name:       a.opts.Name,
		Version:    a.opts.Version,
		Leader:     a.leader.Load(),
		Cycles:     a.cycles.Load(),
		EventIndex: st.Index,
	}
	if !a.lastCycle.IsZero() {
		t := a.lastCycle
		h.LastCycle = &t
	}
	if a.lastErr != nil {
		h.LastCycleError = a.lastErr.Error()
	}
	if !st.Synced {
		msg := "not synced with nomad"
		if st.Err != nil {
			msg += ": " + st.Err.Error()
		}
		h.Problems = append(h.Problems, msg)
	} else if st.Err != nil {
		h.Problems = append(h.Problems, "nomad event stream: "+st.Err.Error())
	}
	if a.electionErr != nil {
		h.Problems = append(h.Problems, "leader election: "+a.electionErr.Error())
	}
	if a.consulErr != nil {
		h.Problems = append(h.Problems, "consul registration (retrying): "+a.consulErr.Error())
	}
	if h.Leader {
		h.LeaderName = a.opts.Name
	} else {
		h.LeaderName = a.holder
		if !a.noLeaderSince.IsZero() && time.Since(a.noLeaderSince) > a.opts.NoLeaderGrace {
			msg := fmt.Sprintf("no agent has held the leader lock for %s", time.Since(a.noLeaderSince).Round(time.Second))
			if a.holderErr != nil {
				msg += ": " + a.holderErr.Error()
			}
			h.Problems = append(h.Problems, msg)
		}
	}
	if a.lastErr != nil && h.Leader {
		h.Problems = append(h.Problems, "last cycle failed: "+a.lastErr.Error())
	}
	if len(h.Problems) > 0 {
		h.Status = agentapi.StatusDegraded
	}
	return h
}

// Queue implements ViewSource.
func (a *Agent) Queue() agentapi.Queue { return a.view.Load().queue }

// Explain implements ViewSource.
func (a *Agent) Explain(namespace, job string) (agentapi.Explanation, bool) {
	if namespace == "" {
		namespace = a.opts.Namespace
	}
	e, ok := a.view.Load().explain[cluster.JobKey(namespace, job)]
	return e, ok
}

// GangSize answers package gang's size question: the total allocation
// count of a managed job's GPU groups.
func (a *Agent) GangSize(_ context.Context, namespace, jobID string) (int, error) {
	snap := a.opts.Model.Snapshot()
	j, ok := snap.Job(cluster.JobKey(namespace, jobID))
	if !ok {
		return 0, fmt.Errorf("job %s/%s is not managed by the impact scheduler", namespace, jobID)
	}
	n := 0
	for _, g := range j.Groups {
		n += g.Count
	}
	return n, nil
}
