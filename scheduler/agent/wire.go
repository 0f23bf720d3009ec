package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/auth"
	"github.com/impact-sched/nomad-impact/gang"
	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/agent/config"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/nomad"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// This file wires the ports to the concrete adapter in scheduler/nomad.
// Each adapter is a thin translation; the behaviour lives in the nomad
// package (and is tested there against nomadfake) or in the agent loop.

// Service is a runnable `impact agent`: the agent, its HTTP API and the
// Nomad adapter, built from a validated config.
type Service struct {
	Agent  *Agent
	Config *config.Config
	log    hclog.Logger
	srv    *http.Server

	listening chan struct{}
	addr      string
	registrar *Registrar
	explain   *explainAdapter
}

// NewService builds everything from cfg; nothing connects until Run.
func NewService(cfg *config.Config, version string, logger hclog.Logger) (*Service, error) {
	pol, err := policy.Load(cfg.PolicyFile)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	name := agentName(cfg)
	metrics, err := NewMetrics()
	if err != nil {
		return nil, err
	}
	ad, err := newAdapters(cfg, name, metrics, logger)
	if err != nil {
		return nil, err
	}
	reg, err := newRegistrar(cfg, name, logger)
	if err != nil {
		return nil, err
	}
	a, err := New(Options{
		Name: name, Version: version, Namespace: cfg.Nomad.Namespace,
		ParkingPool: cfg.ParkingPool, DefaultPool: cfg.DefaultPool,
		Interval: cfg.Cycle.Interval, Debounce: cfg.Cycle.Debounce,
		Policy: pol, Model: ad.model, Executor: ad.exec, Explainer: ad.explain, Elector: ad.elector,
		State: ad.state, Pools: ad.client, Registrar: reg,
		Utilization: ad.util, StatsInterval: cfg.DeviceStats.Interval,
		Metrics: metrics, Logger: logger,
		// A crashed leader's lock takes about three TTLs to free (measured
		// on Nomad 2.0.6); report "no leader" only past that.
		NoLeaderGrace: 4 * cfg.HA.LockTTL,
		// The holder changes at most once per lock TTL; asking twice per
		// TTL keeps the named leader fresh at a bounded request rate.
		HolderCheckEvery: cfg.HA.LockTTL / 2,
	})
	if err != nil {
		return nil, err
	}
	srv, err := newHTTPServer(cfg, a, metrics, ad.client.Address(), logger)
	if err != nil {
		return nil, err
	}
	return &Service{Agent: a, Config: cfg, log: logger, srv: srv,
		listening: make(chan struct{}), registrar: reg, explain: ad.explain}, nil
}

// agentName is the configured name, else <host>-<listen address>.
func agentName(cfg *config.Config) string {
	if cfg.Name != "" {
		return cfg.Name
	}
	host, _ := os.Hostname()
	return host + "-" + cfg.HTTP.Listen
}

// adapters are the agent's ports, wired to scheduler/nomad.
type adapters struct {
	client  *nomad.Client
	model   *watcherModel
	exec    *executorAdapter
	explain *explainAdapter
	elector *electorAdapter
	state   *stateAdapter
	util    UtilizationSource // nil without device stats
}

func newAdapters(cfg *config.Config, name string, metrics *Metrics, logger hclog.Logger) (*adapters, error) {
	client, err := nomad.NewClient(cfg.NomadClient(), logger)
	if err != nil {
		return nil, fmt.Errorf("nomad client: %w", err)
	}
	watcher := nomad.NewWatcher(client, nomad.WatcherConfig{ParkingPool: cfg.ParkingPool}, logger)
	state := nomad.NewStateStore(client, nomad.StateConfig{Prefix: cfg.HA.StatePrefix + "/state"}, logger)
	exec := nomad.NewExecutor(client, state, nomad.ExecutorConfig{
		ParkingPool:         cfg.ParkingPool,
		AdmitDeadline:       cfg.Cycle.AdmissionDeadline,
		Snapshot:            watcher.Snapshot,
		OnPreemptionOutcome: metrics.RecordPreemptionOutcome,
	}, logger)
	elector := nomad.NewElector(client, nomad.ElectorConfig{
		Path: cfg.HA.StatePrefix + "/leader", HolderID: name, TTL: cfg.HA.LockTTL,
	}, logger)
	ad := &adapters{
		client: client, model: &watcherModel{w: watcher}, exec: &executorAdapter{x: exec},
		explain: &explainAdapter{w: nomad.NewExplainWriter(client, logger), pageBase: cfg.UIBase()},
		elector: &electorAdapter{el: elector}, state: &stateAdapter{st: state},
	}
	if cfg.DeviceStatsEnabled() {
		ad.util = &statsAdapter{r: nomad.NewDeviceStatsReader(client, nomad.DeviceStatsConfig{NodeTimeout: cfg.DeviceStats.NodeTimeout}, logger)}
	}
	return ad, nil
}

// newRegistrar builds the Consul registration (nil when Consul is off).
func newRegistrar(cfg *config.Config, name string, logger hclog.Logger) (*Registrar, error) {
	if !cfg.ConsulEnabled() {
		return nil, nil
	}
	return NewRegistrar(ConsulConfig{
		Address: cfg.Consul.Address, Token: cfg.Consul.Token, ServiceName: cfg.Consul.ServiceName,
		ServiceID: cfg.Consul.ServiceName + "-" + name, Advertise: cfg.AdvertiseAddr(), TLS: cfg.HTTP.TLS(),
		CheckInterval: cfg.Consul.CheckInterval.String(),
	}, logger.Named("consul"))
}

// newHTTPServer builds the API server: the agent's views, /metrics, the
// gang endpoints, who may call them, and TLS. nomadAddress is the Nomad
// client's address (NOMAD_ADDR when the file does not say).
func newHTTPServer(cfg *config.Config, a *Agent, metrics *Metrics, nomadAddress string, logger hclog.Logger) (*http.Server, error) {
	apiAuth, gangAuth, err := newAuth(cfg, logger)
	if err != nil {
		return nil, err
	}
	var tlsCfg *tls.Config
	if cfg.HTTP.TLS() {
		if tlsCfg, err = auth.ServerTLS(cfg.HTTP.TLSCert, cfg.HTTP.TLSKey, cfg.HTTP.TLSClientCA); err != nil {
			return nil, fmt.Errorf("http: %w", err)
		}
	}
	registry := gang.NewRegistry(gang.RegistryConfig{SizeResolver: a.GangSize})
	handler := NewHandler(a, HandlerOptions{
		Metrics:      metrics.Handler(),
		Gang:         gang.NewHandlerWith(registry, gangAuth, logger),
		Auth:         apiAuth,
		NomadAddress: nomadAddress,
	}, logger.Named("http"))
	return &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsCfg}, nil
}

// Run serves the API and runs the agent until ctx ends. The listener is
// opened first, so a port clash fails at once rather than after start-up.
func (s *Service) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.Config.HTTP.Listen)
	if err != nil {
		// Whoever waits on Listening must not wait forever.
		close(s.listening)
		return fmt.Errorf("http listen %s: %w", s.Config.HTTP.Listen, err)
	}
	s.addr = ln.Addr().String()
	if s.srv.TLSConfig != nil {
		ln = tls.NewListener(ln, s.srv.TLSConfig)
	}
	close(s.listening)
	if s.registrar != nil && s.Config.HTTP.Advertise == "" && strings.HasSuffix(s.Config.HTTP.Listen, ":0") {
		if err := s.registrar.SetAdvertise(s.addr); err != nil {
			ln.Close()
			return err
		}
	}
	if s.Config.HTTP.UIURL == "" && s.Config.HTTP.Advertise == "" && strings.HasSuffix(s.Config.HTTP.Listen, ":0") {
		// The port is known only now; the agent (and its explanation
		// writers) starts below.
		s.explain.pageBase = "http://" + s.addr
	}
	s.log.Info("serving the impact API", "address", s.addr, "pages", s.explain.pageBase+"/ui/")
	serveErr := make(chan error, 1)
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			serveErr <- err
		}
		close(serveErr)
	}()
	runErr := s.Agent.Run(ctx)
	shctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(shctx)
	if err := <-serveErr; err != nil && runErr == nil {
		runErr = fmt.Errorf("http server: %w", err)
	}
	return runErr
}

// Listening is closed once the API listens, or once Run failed to listen;
// Addr is then its address (useful with http.listen = "127.0.0.1:0"), or
// "" after the failure.
func (s *Service) Listening() <-chan struct{} { return s.listening }

// Addr is the API's listen address ("" when listening failed), once
// Listening is closed.
func (s *Service) Addr() string {
	<-s.listening
	return s.addr
}

// newAuth builds who may call the API from cfg.Auth: Nomad ACL tokens for
// reads (and /metrics with auth.metrics = "token"), workload identities
// and ACL tokens for /v1/gang/ (or nothing with auth.gang = "open"). Both
// ask the Nomad the agent talks to, over the same TLS.
func newAuth(cfg *config.Config, logger hclog.Logger) (APIAuth, gang.Authorizer, error) {
	tlsCfg, err := auth.ClientTLS(cfg.Nomad.CACert, cfg.Nomad.ClientCert, cfg.Nomad.ClientKey, cfg.Nomad.TLSServerName, cfg.SkipVerify())
	if err != nil {
		return nil, nil, fmt.Errorf("auth: TLS to Nomad: %w", err)
	}
	hc, base, err := auth.HTTPClient(cfg.Nomad.Address, tlsCfg, 10*time.Second)
	if err != nil {
		return nil, nil, fmt.Errorf("auth: %w", err)
	}
	log := logger.Named("auth")
	acl, err := auth.NewACLChecker(auth.ACLConfig{Address: cfg.Nomad.Address, HTTP: hc, Region: cfg.Nomad.Region,
		CacheTTL: cfg.Auth.TokenCacheTTL, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	apiAuth := &NomadAPIAuth{ACL: acl, Read: cfg.Auth.Read, MetricsToken: cfg.Auth.Metrics == "token",
		AgentToken: cfg.Nomad.Token, Logger: log}
	if cfg.Auth.Gang == "open" {
		log.Warn("auth.gang = open: the gang rendezvous is unauthenticated (development only)")
		return apiAuth, gang.DevNoAuth{}, nil
	}
	ids, err := auth.NewIdentityVerifier(auth.IdentityConfig{JWKSURL: base + "/.well-known/jwks.json", HTTP: hc,
		Audience: cfg.Auth.IdentityAudience, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	return apiAuth, &gang.NomadAuth{Identities: ids, ACL: acl}, nil
}

// watcherModel adapts nomad.Watcher to Model.
type watcherModel struct{ w *nomad.Watcher }

func (m *watcherModel) Run(ctx context.Context) error { return m.w.Run(ctx) }
func (m *watcherModel) Snapshot() *cluster.Snapshot   { return m.w.Snapshot() }
func (m *watcherModel) Updated() <-chan struct{}      { return m.w.Changes() }
func (m *watcherModel) Status() ModelStatus {
	return watcherStatus(m.w.Ready(), m.w.Stats(), time.Now())
}

// streamDownAfter is how long the event stream may be disconnected before
// health reports it (reconnects within this are routine).
const streamDownAfter = 30 * time.Second

func watcherStatus(ready <-chan struct{}, st nomad.WatcherStats, now time.Time) ModelStatus {
	ms := ModelStatus{Index: st.LastIndex, EventsApplied: st.EventsApplied, Resyncs: st.Resyncs,
		Reconnects: st.Reconnects, ApplyLatency: st.ApplyLatency}
	select {
	case <-ready:
		ms.Synced = true
	default:
	}
	if !st.Connected && !st.LastEventAt.IsZero() && now.Sub(st.LastEventAt) > streamDownAfter {
		ms.Err = fmt.Errorf("event stream disconnected since %s (reconnecting)", st.LastEventAt.UTC().Format(time.RFC3339))
	}
	if !ms.Synced && ms.Err == nil {
		ms.Err = errors.New("waiting for the first full sync")
	}
	return ms
}

// executorAdapter adapts nomad.Executor to Executor, Recoverer and Waiter.
// Each Apply first checks the deadlines of earlier admissions, so a gang
// that did not fully start is rolled back within one cycle of its deadline.
type executorAdapter struct {
	x *nomad.Executor
	// mismatches is the executor's PinMismatches at the last report.
	mismatches uint64
}

func (e *executorAdapter) Apply(ctx context.Context, plan *engine.Plan, _ *cluster.Snapshot) (nomad.ApplyReport, error) {
	rolled := e.x.CheckDeadlines(ctx)
	rep := e.x.Apply(ctx, plan)
	rep.RolledBack = rolled
	if n := e.x.PinMismatches(); n > e.mismatches {
		rep.PinMismatches = int(n - e.mismatches)
		e.mismatches = n
	}
	return rep, ctx.Err()
}

func (e *executorAdapter) Recover(ctx context.Context) error { return e.x.Recover(ctx) }
func (e *executorAdapter) PreemptionsUnderway() []engine.Preemption {
	return e.x.PreemptionsUnderway()
}
func (e *executorAdapter) Wait() { e.x.Wait() }

// explainAdapter writes the agent's explanation through nomad.ExplainWriter
// as VariableItems: the Variable says what /v1/explain says, in the same
// words, and links the job's page on the agent.
type explainAdapter struct {
	w        *nomad.ExplainWriter
	pageBase string // config UIBase(); "" leaves the page item out
}

func (e *explainAdapter) WriteExplanation(ctx context.Context, x agentapi.Explanation) error {
	page := ""
	if e.pageBase != "" {
		page = e.pageBase + JobPagePath(x.Namespace, x.Job)
	}
	return e.w.WriteItems(ctx, cluster.JobKey(x.Namespace, x.Job), VariableItems(x, page), x.GeneratedAt)
}

func (e *explainAdapter) ForgetExplanation(ctx context.Context, jobID string) error {
	return e.w.Forget(ctx, jobID)
}

func (e *explainAdapter) SweepExplanations(ctx context.Context, keep func(string) bool) (int, error) {
	return e.w.Sweep(ctx, keep)
}

// electorAdapter adapts nomad.Elector's Run(ctx, lead) to Campaign/Resign.
// The elector runs once in the background from the first Campaign; each
// term it wins is handed to the next Campaign call.
type electorAdapter struct {
	el *nomad.Elector

	once   sync.Once
	terms  chan (<-chan struct{})
	cancel context.CancelFunc
	done   chan struct{}
}

func (e *electorAdapter) start(ctx context.Context) {
	e.once.Do(func() {
		rctx, cancel := context.WithCancel(ctx)
		e.cancel = cancel
		e.terms = make(chan (<-chan struct{}))
		e.done = make(chan struct{})
		go func() {
			defer close(e.done)
			_ = e.el.Run(rctx, func(lctx context.Context) {
				select {
				case e.terms <- lctx.Done():
				case <-lctx.Done():
					return
				}
				<-lctx.Done()
			})
		}()
	})
}

func (e *electorAdapter) Campaign(ctx context.Context) (<-chan struct{}, error) {
	e.start(ctx)
	select {
	case lost := <-e.terms:
		return lost, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Holder names the agent holding the lock ("" when none).
func (e *electorAdapter) Holder(ctx context.Context) (string, error) { return e.el.Holder(ctx) }

// Resign stops the elector, which releases the lock if held.
func (e *electorAdapter) Resign(ctx context.Context) error {
	if e.cancel == nil {
		return nil
	}
	e.cancel()
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the elector to release the lock: %w", ctx.Err())
	}
}

// statsAdapter adapts nomad.DeviceStatsReader to UtilizationSource.
type statsAdapter struct{ r *nomad.DeviceStatsReader }

func (s *statsAdapter) GPUStats(ctx context.Context, nodeIDs []string) ([]GPUStat, map[string]error) {
	p := s.r.Poll(ctx, nodeIDs)
	out := make([]GPUStat, 0, len(p.GPUs))
	for _, g := range p.GPUs {
		st := GPUStat{NodeID: g.NodeID, DeviceID: g.DeviceID, Utilization: -1, MemoryUsedMiB: -1, MemoryTotalMiB: -1}
		if g.HasUtilization {
			st.Utilization = g.UtilizationPct
		}
		if g.HasMemory {
			st.MemoryUsedMiB, st.MemoryTotalMiB = g.MemoryUsedMiB, g.MemoryTotalMiB
		}
		out = append(out, st)
	}
	return out, p.Failed
}

// stateAdapter maps DurableState onto nomad.StateStore. Admission intents
// and preemption records are written by the executor itself (before it
// acts); the agent saves the fair-share usage and the idle requeue counts
// and reads the records back.
type stateAdapter struct {
	st *nomad.StateStore
	// savedRequeues is what SaveRequeues last stored (nil: nothing yet).
	savedRequeues map[string]int
}

func (s *stateAdapter) LoadState(ctx context.Context) (DurableState, bool, error) {
	usage, at, err := s.st.LoadUsage(ctx)
	if err != nil {
		return DurableState{}, false, err
	}
	recs, err := s.st.Preemptions(ctx, time.Now().Add(-24*time.Hour))
	if err != nil {
		return DurableState{}, false, err
	}
	requeues, err := s.st.LoadRequeues(ctx)
	if err != nil {
		return DurableState{}, false, err
	}
	ds := DurableState{Usage: usage, UsageAt: at, Preemptions: map[string]nomad.PreemptionRecord{}, Requeues: requeues}
	for _, r := range recs {
		ds.Preemptions[r.JobID] = r
	}
	return ds, !at.IsZero() || len(recs) > 0 || len(requeues) > 0, nil
}

// SaveState writes the usage, and the idle requeue counts when they
// changed since the last save (they change rarely; usage every save).
func (s *stateAdapter) SaveState(ctx context.Context, d DurableState) error {
	if err := s.st.SaveUsage(ctx, d.Usage, d.UsageAt); err != nil {
		return err
	}
	if s.savedRequeues != nil && maps.Equal(s.savedRequeues, d.Requeues) {
		return nil
	}
	if err := s.st.SaveRequeues(ctx, d.Requeues); err != nil {
		return err
	}
	s.savedRequeues = maps.Clone(d.Requeues)
	if s.savedRequeues == nil {
		s.savedRequeues = map[string]int{}
	}
	return nil
}
