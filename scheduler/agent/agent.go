package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
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
	// Debounce is the longest an event waits for a cycle: an event opens
	// a window (debounceCostFactor times the last cycle's own cost, at
	// least debounceFloor, at most Debounce) and the events inside it are
	// decided on together at its end.
	Debounce time.Duration
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
	// ReconcileEvery is how often the agent checks what it keeps in Nomad
	// (the parking pool, the durable state) against what it wants
	// (nomad_reconcile.go; default 10s, checked at the end of a cycle).
	ReconcileEvery time.Duration

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
	// onCycle, when set, is called after every cycle. Only the package's
	// tests and benchmarks set it (unexported: no production caller).
	onCycle func(cycleResult)
}

// Agent is one `impact agent` process: a short composition of parts with
// one job each, which Run wires together.
//
//   - leadership (leader.go): the election: campaigns for the lock, holds
//     the term's context, asks at a bounded rate who leads (standbys),
//     keeps Consul's leader tag;
//   - cycler (cycle.go): one cycle: recovery (a term's first), snapshot,
//     engine.Decide, Apply while leading; record.go what the executor did
//     (history, back-offs, what the engine must forget); gangs.go a gang's
//     life (runs in a row that lost a member, durable and reset by a whole
//     run; back-off; impact_max_failures; gangs ended failed as explain
//     shows them); view.go the view /v1/queue, /v1/explain and the pages
//     serve;
//   - durable (state.go): the durable state, loaded into the engine's
//     memory when a term starts, the previous leader's intents recovered
//     before the term acts, saved while leading;
//   - explainWriter (explainer.go): the explanation Variables, written in
//     the background, deleted when a job leaves for good, swept once per
//     term;
//   - health (health.go): what /v1/health reports;
//   - utilQueue: the device stats poller (utilization.go) and its samples
//     queued for the engine (idle.go);
//   - nomadState (nomad_reconcile.go): what the agent keeps in Nomad (the
//     parking pool, the durable state, the lease), checked at the end of a
//     cycle every ReconcileEvery and written again when lost;
//   - the Agent itself: startup.go (the parking pool, the Consul
//     deregistration) and consul_reconcile.go (the Consul registration,
//     compared with Consul's copy and repaired at every check interval).
//
// The loop goroutine (loop) runs cycles and leadership changes one at a
// time; the parts other goroutines reach (leadership, explainWriter,
// health, the view, the stats queue) have their own locks.
type Agent struct {
	opts     Options
	log      hclog.Logger
	statsLog hclog.Logger

	lead    *leadership
	state   *durable
	explain *explainWriter
	health  *health
	cycle   *cycler
	util    *utilQueue
	nomad   *nomadState
}

// New validates the options and builds an agent; nothing runs until Run.
func New(opts Options) (*Agent, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	log := opts.Logger
	a := &Agent{
		opts: opts, log: log, statsLog: log.Named("devicestats"),
		lead:  newLeadership(opts, log.Named("leader")),
		state: newDurable(opts, log.Named("state")),
		health: &health{name: opts.Name, version: opts.Version, noLeaderGrace: opts.NoLeaderGrace,
			consul: opts.Registrar},
		util:  &utilQueue{},
		nomad: newNomadState(opts, log.Named("reconcile")),
	}
	a.health.nomad = a.nomad
	if a.cycle, err = newCycler(opts, log.Named("cycle")); err != nil {
		return nil, err
	}
	a.explain = newExplainWriter(opts.Explainer, a.cycle.view.Load, opts.Metrics, log.Named("explain"))
	a.cycle.lead, a.cycle.state, a.cycle.explain, a.cycle.health, a.cycle.util = a.lead, a.state, a.explain, a.health, a.util
	a.cycle.nomad = a.nomad
	a.state.timeline = func() map[string][]agentapi.Event { return a.cycle.timeline }
	return a, nil
}

// withDefaults checks the required options and fills in the others.
func (o Options) withDefaults() (Options, error) {
	var missing []string
	for name, ok := range map[string]bool{
		"Policy": o.Policy != nil, "Model": o.Model != nil, "Executor": o.Executor != nil,
		"Explainer": o.Explainer != nil, "Elector": o.Elector != nil, "State": o.State != nil,
		"Pools": o.Pools != nil,
	} {
		if !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return o, fmt.Errorf("agent: missing options %v", missing)
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	orDefault(&o.Interval, 10*time.Second)
	orDefault(&o.NoLeaderGrace, 45*time.Second)
	orDefault(&o.HolderCheckEvery, 5*time.Second)
	orDefault(&o.ShutdownWait, 30*time.Second)
	orDefault(&o.PoolRetryFor, 2*time.Minute)
	orDefault(&o.ReconcileEvery, 10*time.Second)
	orDefault(&o.StatsInterval, 15*time.Second)
	orDefault(&o.SaveEvery, 30*time.Second)
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.Metrics == nil {
		m, err := NewMetrics()
		if err != nil {
			return o, err
		}
		o.Metrics = m
	}
	return o, nil
}

func orDefault(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

// Metrics returns the agent's metrics (for the HTTP API).
func (a *Agent) Metrics() *Metrics { return a.opts.Metrics }

// IsLeader reports whether this agent currently acts.
func (a *Agent) IsLeader() bool { return a.lead.leader.Load() }

// Run runs the agent until ctx ends: creates the parking pool, registers
// in Consul, starts the watcher, the election and the stats poller, and
// runs cycles. On return the agent has resigned leadership and
// deregistered from Consul.
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
		// Deferred before wg.Wait below, so the reconciler has stopped
		// when it deregisters.
		defer a.deregister(r)
		r.SetHealthSource(a.healthyApartFromConsul)
		goWG(&wg, func() { a.reconcileConsul(ctx, r) })
	}
	watchErr := make(chan error, 1)
	goWG(&wg, func() {
		if err := a.opts.Model.Run(ctx); err != nil && ctx.Err() == nil {
			watchErr <- err
			cancel()
		}
	})
	goWG(&wg, func() { a.lead.campaign(ctx) })
	if a.opts.Utilization != nil {
		goWG(&wg, func() { a.pollUtilization(ctx) })
	}
	err := a.loop(ctx)
	a.stepDown()
	cancel()
	wg.Wait()
	a.shutdown()
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

func goWG(wg *sync.WaitGroup, f func()) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		f()
	}()
}

// shutdown waits for the background work of the last term, within
// bounds, and releases the leader lock.
func (a *Agent) shutdown() {
	// Explanation writers end with the term's context stepDown cancelled.
	a.explain.wait()
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
	a.lead.resign()
}

// The debounce window is debounceCostFactor times the last cycle's own
// cost, at least debounceFloor, at most Options.Debounce.
const (
	debounceCostFactor = 4
	debounceFloor      = 20 * time.Millisecond
)

// loop is the scheduling loop: one goroutine runs cycles and leadership
// changes, so cycles never overlap.
func (a *Agent) loop(ctx context.Context) error {
	ticker := time.NewTicker(a.opts.Interval)
	defer ticker.Stop()
	var debounce *time.Timer
	var debounceC <-chan time.Time
	// An event starts the debounce window; the events inside it are
	// decided on together at its end. The window is debounceCostFactor
	// times the last cycle's own cost, at least debounceFloor and at most
	// Debounce: with a small queue a cycle costs a millisecond or two and
	// a job that fits is admitted about debounceFloor after Nomad told of
	// it, while a large queue still bounds the share of the agent's time
	// spent deciding (to about 1/(1+debounceCostFactor)).
	window := a.opts.Debounce
	run := func() {
		cost := a.cycle.run(ctx)
		window = min(a.opts.Debounce, max(debounceFloor, debounceCostFactor*cost))
	}
	updated := a.opts.Model.Updated()
	for {
		select {
		case <-ctx.Done():
			if debounce != nil {
				debounce.Stop()
			}
			return ctx.Err()
		case ch := <-a.lead.changes:
			if ch.gained {
				a.becomeLeader(ctx, ch.lost)
			} else {
				a.stepDown()
			}
			run()
		case <-updated:
			a.cycle.updated()
			if a.opts.Debounce <= 0 {
				run()
			} else if debounce == nil {
				debounce = time.NewTimer(window)
				debounceC = debounce.C
			}
		case <-debounceC:
			debounce, debounceC = nil, nil
			run()
		case <-ticker.C:
			run()
		}
	}
}

// becomeLeader starts a term: the durable state is loaded into a fresh
// engine (so fair-share memory survives the leader change) before the term
// is published, and every explanation is written again.
func (a *Agent) becomeLeader(ctx context.Context, lost <-chan struct{}) {
	lctx, cancel := a.lead.start(ctx, lost)
	a.nomad.newTerm()
	if m, ok := a.state.load(lctx); ok {
		if err := a.cycle.restore(&m); err != nil {
			a.state.log.Error("restoring engine", "error", err)
		}
		a.cycle.mergeTimeline(a.state.takeTimeline())
	}
	a.cycle.holdBackGangs(a.opts.Clock())
	a.explain.newTerm()
	a.lead.won(lctx, cancel)
}

// stepDown ends the term, if any: its pending explanation writes are
// dropped and its context cancelled.
func (a *Agent) stepDown() {
	if !a.lead.leading() {
		return
	}
	a.explain.endTerm()
	a.lead.stepDown()
}

// Health implements ViewSource.
func (a *Agent) Health() agentapi.Health {
	return a.health.report(a.opts.Model.Status(), a.lead.status(), time.Now(), true)
}

// healthyApartFromConsul says whether health would be ok if Consul held
// the wanted registration: the check's status when the registrar
// registers again.
func (a *Agent) healthyApartFromConsul() bool {
	return a.health.report(a.opts.Model.Status(), a.lead.status(), time.Now(), false).Status == agentapi.StatusOK
}

// Queue implements ViewSource.
func (a *Agent) Queue() agentapi.Queue { return a.cycle.view.Load().queue }

// Explain implements ViewSource.
func (a *Agent) Explain(namespace, job string) (agentapi.Explanation, bool) {
	if namespace == "" {
		namespace = a.opts.Namespace
	}
	e, ok := a.cycle.view.Load().explain[cluster.JobKey(namespace, job)]
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
