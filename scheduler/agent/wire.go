package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/auth"
	"github.com/impact-sched/nomad-impact/gang"
	"github.com/impact-sched/nomad-impact/scheduler/agent/config"
	"github.com/impact-sched/nomad-impact/scheduler/nomad"
)

// This file builds a Service from a config: the agent, its ports wired to
// the concrete adapter in scheduler/nomad (adapters.go), the Consul
// registration and the HTTP API.

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
	pol, err := cfg.LoadPolicy()
	if err != nil {
		return nil, err
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
		// What the agent keeps in Nomad is checked once per cycle
		// interval at most (10s by default).
		ReconcileEvery: cfg.Cycle.Interval,
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
	client, err := nomad.NewClient(nomadClientConfig(cfg), logger)
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
		PageURL:             jobPageURL(cfg.UIBase()),
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
		ParkingPool:  cfg.ParkingPool,
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

// nomadClientConfig is the adapter's connection config from the agent's
// nomad settings.
func nomadClientConfig(cfg *config.Config) nomad.Config {
	n := cfg.Nomad
	return nomad.Config{Address: n.Address, Token: n.Token, Region: n.Region, Namespace: n.Namespace,
		CACert: n.CACert, ClientCert: n.ClientCert, ClientKey: n.ClientKey, TLSServerName: n.TLSServerName,
		Insecure: cfg.SkipVerify()}
}

// jobPageURL gives the agent's page of a job by its key, for the link the
// executor writes in the job's description; nil without a page base.
func jobPageURL(base string) func(string) string {
	if base == "" {
		return nil
	}
	return func(key string) string {
		ns, id, ok := strings.Cut(key, "/")
		if !ok {
			ns, id = "default", key
		}
		return base + JobPagePath(ns, id)
	}
}
