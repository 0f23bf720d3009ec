package agent

import (
	"fmt"
	"net"
	"strconv"
	"sync"

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

// Registrar registers the agent as a Consul service with an HTTP health
// check on /v1/health, so operators and load balancers find the API
// through Consul DNS/catalog. The service carries the tag "leader" or
// "standby", updated on leadership changes, so `leader.impact-scheduler`
// resolves to the agent that acts.
type Registrar struct {
	client *consul.Client
	cfg    ConsulConfig
	host   string
	port   int
	log    hclog.Logger

	mu         sync.Mutex
	registered bool
	leader     bool
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
	client, err := consul.NewClient(cc)
	if err != nil {
		return nil, fmt.Errorf("consul client: %w", err)
	}
	if cfg.ServiceID == "" {
		cfg.ServiceID = cfg.ServiceName + "-" + cfg.Advertise
	}
	return &Registrar{client: client, cfg: cfg, host: host, port: port, log: log}, nil
}

func (r *Registrar) registration(leader bool) *consul.AgentServiceRegistration {
	tag := "standby"
	if leader {
		tag = "leader"
	}
	return &consul.AgentServiceRegistration{
		ID:      r.cfg.ServiceID,
		Name:    r.cfg.ServiceName,
		Tags:    []string{tag},
		Address: r.host,
		Port:    r.port,
		Meta:    map[string]string{"api": "/v1"},
		Check: &consul.AgentServiceCheck{
			CheckID:  r.cfg.ServiceID + "-health",
			Name:     "impact agent health",
			HTTP:     r.scheme() + r.cfg.Advertise + "/v1/health",
			Method:   "GET",
			Interval: r.cfg.CheckInterval,
			Timeout:  "5s",
			// A crashed agent that never deregistered is removed eventually.
			DeregisterCriticalServiceAfter: "30m",
		},
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

// Register registers (or re-registers) the service.
func (r *Registrar) Register() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.client.Agent().ServiceRegister(r.registration(r.leader)); err != nil {
		return fmt.Errorf("consul: registering %s: %w", r.cfg.ServiceID, err)
	}
	r.registered = true
	r.log.Info("registered in consul", "service", r.cfg.ServiceName, "id", r.cfg.ServiceID)
	return nil
}

// SetLeader updates the leader/standby tag when it changed.
func (r *Registrar) SetLeader(leader bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.leader == leader || !r.registered {
		r.leader = leader
		return nil
	}
	if err := r.client.Agent().ServiceRegister(r.registration(leader)); err != nil {
		return fmt.Errorf("consul: updating tags of %s: %w", r.cfg.ServiceID, err)
	}
	r.leader = leader
	return nil
}

// Deregister removes the service; called on shutdown.
func (r *Registrar) Deregister() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.registered {
		return nil
	}
	if err := r.client.Agent().ServiceDeregister(r.cfg.ServiceID); err != nil {
		return fmt.Errorf("consul: deregistering %s: %w", r.cfg.ServiceID, err)
	}
	r.registered = false
	r.log.Info("deregistered from consul", "id", r.cfg.ServiceID)
	return nil
}

func (r *Registrar) scheme() string {
	if r.cfg.TLS {
		return "https://"
	}
	return "http://"
}
