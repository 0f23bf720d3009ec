package agent

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	consul "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
)

// ConsulConfig is what the registrar needs from the agent config.
type ConsulConfig struct {
	Address     string // host:port or URL of the local Consul agent
	Token       string
	ServiceName string
	// ServiceID distinguishes this agent among several of the same service.
	ServiceID string
	// Advertise is host:port where Consul (and clients) reach the API.
	Advertise     string
	CheckInterval string // Go duration, e.g. "10s"
	// TLS makes the health check use https (the API has http.tls_*).
	TLS bool
}

// deregisterCriticalAfter is how long Consul keeps this agent's entry
// once its check is critical: Consul's minimum, so that a leader killed
// without deregistering does not stay in the catalog with its leader tag
// for long. A live agent whose entry was reaped while it was degraded is
// registered again by its reconciler (consul_reconcile.go).
const deregisterCriticalAfter = "1m"

// consulTimeout bounds every request to Consul.
const consulTimeout = 10 * time.Second

// Registrar registers the agent as a Consul service with an HTTP health
// check on /v1/health, so operators and load balancers find the API
// through Consul DNS/catalog. The service carries the tag "leader" or
// "standby", updated on leadership changes, so `leader.impact-scheduler`
// resolves to the agent that acts.
//
// The registrar keeps what the agent wants registered (Register,
// SetLeader); Reconcile compares it with what Consul holds and repairs
// the difference, so a failed tag change or a Consul that restarted empty
// heals at the next reconciliation.
type Registrar struct {
	client *consul.Client
	cfg    ConsulConfig
	host   string
	port   int
	log    hclog.Logger

	// kick wakes the reconciler when the wanted registration changed.
	kick chan struct{}
	// active: the agent wants to be registered (Register ran, Deregister
	// did not).
	active atomic.Bool

	mu sync.Mutex
	// leader: the tag the agent wants.
	leader bool
	// healthy, when set, gives the check's initial status at
	// registration (Consul otherwise starts it critical until its first
	// probe, up to a check interval later).
	healthy func() bool

	// smu guards state apart from mu, so health never waits on a request
	// to Consul in flight.
	smu   sync.Mutex
	state consulState
}

// consulState is the outcome of the last registration attempt or
// reconciliation.
type consulState struct {
	// inSync: Consul held (or was just given) what the agent wants.
	inSync bool
	// err is the last failure (nil after a success); drift what the last
	// reconciliation found different before repairing it.
	err   error
	drift string
	// checked is when Consul last answered.
	checked time.Time
}

// NewRegistrar builds a registrar; nothing is sent until Register.
func NewRegistrar(cfg ConsulConfig, log hclog.Logger) (*Registrar, error) {
	host, portS, err := net.SplitHostPort(cfg.Advertise)
	if err != nil {
		return nil, fmt.Errorf("consul: advertise address %q: %w", cfg.Advertise, err)
	}
	port, err := strconv.Atoi(portS)
	if err != nil {
		return nil, fmt.Errorf("consul: advertise port %q: %w", portS, err)
	}
	cc := consul.DefaultNonPooledConfig()
	if cfg.Address != "" {
		cc.Address = cfg.Address
	}
	if cfg.Token != "" {
		cc.Token = cfg.Token
	}
	// Every call is bounded: health and leadership changes wait on the
	// registrar, and a hung Consul must not hang them.
	hc, err := consul.NewHttpClient(cc.Transport, cc.TLSConfig)
	if err != nil {
		return nil, fmt.Errorf("consul http client: %w", err)
	}
	hc.Timeout = consulTimeout
	cc.HttpClient = hc
	client, err := consul.NewClient(cc)
	if err != nil {
		return nil, fmt.Errorf("consul client: %w", err)
	}
	if cfg.ServiceID == "" {
		cfg.ServiceID = cfg.ServiceName + "-" + cfg.Advertise
	}
	return &Registrar{client: client, cfg: cfg, host: host, port: port, log: log,
		kick: make(chan struct{}, 1)}, nil
}

func tagFor(leader bool) string {
	if leader {
		return "leader"
	}
	return "standby"
}

func (r *Registrar) checkID() string { return r.cfg.ServiceID + "-health" }

func (r *Registrar) healthURL() string { return r.scheme() + r.cfg.Advertise + "/v1/health" }

func (r *Registrar) registration(leader bool) *consul.AgentServiceRegistration {
	check := &consul.AgentServiceCheck{
		CheckID:  r.checkID(),
		Name:     "impact agent health",
		HTTP:     r.healthURL(),
		Method:   "GET",
		Interval: r.cfg.CheckInterval,
		Timeout:  "5s",
		// A crashed agent that never deregistered is removed soon.
		DeregisterCriticalServiceAfter: deregisterCriticalAfter,
	}
	if r.healthy != nil && r.healthy() {
		// Findable at once (impact-exec asks for passing instances), not
		// after Consul's first probe.
		check.Status = consul.HealthPassing
	}
	return &consul.AgentServiceRegistration{
		ID:      r.cfg.ServiceID,
		Name:    r.cfg.ServiceName,
		Tags:    []string{tagFor(leader)},
		Address: r.host,
		Port:    r.port,
		Meta:    map[string]string{"api": "/v1"},
		Check:   check,
	}
}

// SetAdvertise changes the registered address before Register; the
// service uses it when it listens on port 0 and learns its port late.
func (r *Registrar) SetAdvertise(addr string) error {
	host, portS, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("consul: advertise address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portS)
	if err != nil {
		return fmt.Errorf("consul: advertise port %q: %w", portS, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.host, r.port, r.cfg.Advertise = host, port, addr
	return nil
}

// SetHealthSource gives the registrar the agent's own health, used as the
// check's status at (re-)registration.
func (r *Registrar) SetHealthSource(healthy func() bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.healthy = healthy
}

// Register registers (or re-registers) the service. From now on the
// registration is wanted: a failure is left to Reconcile to repair.
func (r *Registrar) Register() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.active.Store(true)
	if err := r.registerLocked("registering"); err != nil {
		return err
	}
	r.log.Info("registered in consul", "service", r.cfg.ServiceName, "id", r.cfg.ServiceID, "tag", tagFor(r.leader))
	return nil
}

func (r *Registrar) registerLocked(what string) error {
	err := r.client.Agent().ServiceRegister(r.registration(r.leader))
	r.record(err, "")
	if err != nil {
		return fmt.Errorf("consul: %s %s: %w", what, r.cfg.ServiceID, err)
	}
	return nil
}

// record keeps the outcome of an attempt: err its failure, drift what
// was found different from the wanted registration ("" when nothing was,
// or it was not looked at).
func (r *Registrar) record(err error, drift string) {
	r.smu.Lock()
	defer r.smu.Unlock()
	r.state.err = err
	r.state.inSync = err == nil
	if drift != "" || err == nil {
		r.state.drift = drift
	}
	if err == nil {
		r.state.checked = time.Now()
	}
}

// SetLeader records the tag the agent wants and, when registered, sends
// it to Consul at once. The wanted tag is kept even when Consul refuses:
// the reconciler retries until Consul holds it.
func (r *Registrar) SetLeader(leader bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leader == leader && r.status().inSync {
		return nil
	}
	r.leader = leader
	if !r.active.Load() {
		return nil
	}
	err := r.registerLocked("updating the tag of")
	if err != nil {
		r.record(err, "tag "+tagFor(leader)+" not yet in consul")
		r.wake()
	}
	return err
}

// wake asks the reconciler for an early pass.
func (r *Registrar) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Deregister removes the service; called on shutdown.
func (r *Registrar) Deregister() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.active.Swap(false) {
		return nil
	}
	if err := r.client.Agent().ServiceDeregister(r.cfg.ServiceID); err != nil {
		var se consul.StatusError
		if errors.As(err, &se) && se.Code == 404 {
			return nil
		}
		return fmt.Errorf("consul: deregistering %s: %w", r.cfg.ServiceID, err)
	}
	r.log.Info("deregistered from consul", "id", r.cfg.ServiceID)
	return nil
}

func (r *Registrar) scheme() string {
	if r.cfg.TLS {
		return "https://"
	}
	return "http://"
}

// sameTags reports whether Consul holds exactly the wanted tag.
func sameTags(have []string, want string) bool {
	return slices.Equal(have, []string{want})
}
