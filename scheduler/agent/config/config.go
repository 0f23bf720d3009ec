// Package config is the `impact agent` configuration: an HCL file, the
// NOMAD_* / CONSUL_HTTP_* environment and command-line flags, combined with
// the Default -> Merge -> Validate pattern.
//
// Precedence, lowest to highest: built-in defaults, the environment, the
// config file(s) in the order given, command-line flags. The file beats the
// environment on purpose: a service's config file is the operator's explicit,
// reviewed statement of where it connects, while the environment is ambient
// (a shell with NOMAD_ADDR exported for the nomad CLI must not silently
// redirect a configured scheduler). The environment still fills every field
// the file leaves out, so a minimal file (or none) works with the variables
// the nomad CLI uses, including the NOMAD_ADDR/NOMAD_TOKEN that Nomad's
// workload identity injects when the agent itself runs as a Nomad job.
//
// Every field remembers where its value came from (file:line, environment
// variable, flag or default), so a validation error names the exact place to
// fix.
package config

import (
	"net"
	"strings"
	"time"
)

// Defaults that operators see documented in example/impact.hcl.
const (
	DefaultNomadAddress      = "http://127.0.0.1:4646"
	DefaultParkingPool       = "impact-queue"
	DefaultTargetPool        = "default"
	DefaultCycleInterval     = 10 * time.Second
	DefaultCycleDebounce     = 500 * time.Millisecond
	DefaultAdmissionDeadline = 5 * time.Minute
	DefaultHTTPListen        = "127.0.0.1:4680"
	DefaultLogLevel          = "info"
	DefaultConsulService     = "impact-scheduler"
	DefaultConsulAddress     = "127.0.0.1:8500"
	DefaultLockTTL           = 15 * time.Second
	DefaultStatePrefix       = "impact"
	DefaultStatsInterval     = 15 * time.Second
	DefaultStatsNodeTimeout  = 5 * time.Second
	DefaultAuthRead          = "auto"
	DefaultAuthMetrics       = "open"
	DefaultAuthGang          = "identity"
	DefaultIdentityAudience  = "impact"
	DefaultTokenCacheTTL     = 30 * time.Second
)

// Config is the complete, merged configuration of one `impact agent`.
type Config struct {
	Nomad  Nomad
	Consul Consul
	HTTP   HTTP
	Cycle  Cycle
	HA     HA
	// DeviceStats is the GPU utilisation poll.
	DeviceStats DeviceStats
	// Auth is who may call the API (see scheduler/agent's threat model).
	Auth Auth

	// ParkingPool is the node pool (with no nodes) that managed jobs are
	// submitted to; the agent creates it at start-up.
	ParkingPool string
	// DefaultPool is where an admitted job runs when its meta names no
	// impact_pool.
	DefaultPool string
	// PolicyFile is the path of the scheduling policy (tiers, projects,
	// aging, preemption limits). Relative paths are resolved against the
	// directory of the config file that set them.
	PolicyFile string
	// LogLevel is one of trace, debug, info, warn, error.
	LogLevel string
	// LogJSON switches the log to JSON lines.
	LogJSON *bool
	// Name identifies this agent among several (leader election, logs);
	// defaults to the host name.
	Name string

	// origins maps a field path (as written in the file, e.g.
	// "nomad.address") to where its current value came from.
	origins map[string]string
}

// Nomad is how the agent reaches Nomad's HTTP API (address, token,
// region, namespace, TLS files), as the file, the environment and flags
// set it. The agent turns it into the adapter's connection config; this
// package does not import the adapter, so that the simulator, which reads
// an agent config's cycle block, links none of it. TLSSkipVerify is a
// pointer because "not set" must differ from false when the sources are
// merged.
type Nomad struct {
	// Address of a Nomad agent's HTTP API, e.g. https://nomad.service:4646.
	Address string
	// Token is the ACL token (secret ID).
	Token string
	// Region and Namespace the scheduler works in.
	Region    string
	Namespace string
	// TLS: CA certificate file, client certificate and key files (mTLS),
	// and the server name to verify.
	CACert        string
	ClientCert    string
	ClientKey     string
	TLSServerName string
	TLSSkipVerify *bool
}

// Consul is the optional service registration. It is enabled when an
// address is configured (in the file, or CONSUL_HTTP_ADDR together with a
// consul block).
type Consul struct {
	Enabled     *bool
	Address     string
	Token       string
	ServiceName string
	// CheckInterval is how often Consul polls /v1/health.
	CheckInterval time.Duration
}

// HTTP is the agent's own API listener.
type HTTP struct {
	Listen string
	// Advertise is the address registered in Consul; defaults to Listen.
	Advertise string
	// UIURL is the address people open the agent's pages (/ui/) at, as
	// the explanation Variables link them ("http://impact.example:4680");
	// defaults to http://<advertise address>, none when that is a wildcard.
	UIURL string
	// TLSCert and TLSKey serve the API over https; with TLSClientCA every
	// client must present a certificate signed by that CA (mutual TLS).
	TLSCert     string
	TLSKey      string
	TLSClientCA string
}

// TLS reports whether the API is served over https.
func (h HTTP) TLS() bool { return h.TLSCert != "" }

// Auth is who may call the API.
type Auth struct {
	// Read guards /v1/queue and /v1/explain: "auto" (a Nomad ACL token
	// when Nomad has ACLs enabled, showing the namespaces it may read-job
	// in), "token" (always), "open" (anyone).
	Read string
	// Metrics guards /metrics: "open" or "token" (any valid Nomad ACL token).
	Metrics string
	// Gang guards /v1/gang/: "identity" (workload identities and ACL
	// tokens) or "open" (development only: loopback listen addresses).
	Gang string
	// IdentityAudience is the aud that impact-exec's workload identity
	// must carry (identity { aud = [...] }).
	IdentityAudience string
	// TokenCacheTTL is how long Nomad's answer about a token is reused: a
	// revoked token works for at most this long.
	TokenCacheTTL time.Duration
}

// Cycle controls when the scheduler decides.
type Cycle struct {
	// Interval is the timer: a cycle runs at least this often.
	Interval time.Duration
	// Debounce is the longest a Nomad event waits for a cycle: an event
	// opens a window (four times the last cycle's own cost, at least
	// 20ms, at most Debounce, so a small queue is decided on almost at
	// once) and the events inside it are collected into one cycle at its
	// end.
	Debounce time.Duration
	// AdmissionDeadline is how long an admitted gang has to be fully
	// running before it is rolled back into the parking pool.
	AdmissionDeadline time.Duration
}

// HA is leader election and durable state.
type HA struct {
	// LockTTL is the TTL of the Nomad Variables lock. A dead leader is
	// replaced after its lease goes unrenewed for 10s
	// (nomad.DefaultTakeoverAfter), or, without a lease, when Nomad frees
	// the lock: 2 x LockTTL plus the lock delay after its last renewal.
	LockTTL time.Duration
	// StatePrefix is the Nomad Variables path prefix for the leader lock
	// and durable state.
	StatePrefix string
}

// DeviceStats controls the poll of the clients' GPU device stats (the
// utilisation metrics).
type DeviceStats struct {
	// Enabled turns the poll on (default true).
	Enabled *bool
	// Interval is how often every ready node with GPUs is asked.
	Interval time.Duration
	// NodeTimeout bounds the request for one node.
	NodeTimeout time.Duration
}

// Default returns the built-in defaults. Fields that have no sensible
// default (token, TLS files, policy file) stay empty.
func Default() *Config {
	enabled := true
	c := &Config{
		Nomad: Nomad{Address: DefaultNomadAddress, Namespace: "default"},
		Consul: Consul{
			ServiceName:   DefaultConsulService,
			Address:       DefaultConsulAddress,
			CheckInterval: 10 * time.Second,
		},
		HTTP: HTTP{Listen: DefaultHTTPListen},
		Auth: Auth{Read: DefaultAuthRead, Metrics: DefaultAuthMetrics, Gang: DefaultAuthGang,
			IdentityAudience: DefaultIdentityAudience, TokenCacheTTL: DefaultTokenCacheTTL},
		Cycle: Cycle{
			Interval:          DefaultCycleInterval,
			Debounce:          DefaultCycleDebounce,
			AdmissionDeadline: DefaultAdmissionDeadline,
		},
		HA:          HA{LockTTL: DefaultLockTTL, StatePrefix: DefaultStatePrefix},
		DeviceStats: DeviceStats{Enabled: &enabled, Interval: DefaultStatsInterval, NodeTimeout: DefaultStatsNodeTimeout},
		ParkingPool: DefaultParkingPool,
		DefaultPool: DefaultTargetPool,
		LogLevel:    DefaultLogLevel,
	}
	for _, f := range c.fields() {
		if !f.isZero() {
			c.setOrigin(f.path, "default")
		}
	}
	return c
}

// Origin says where the value of a field (by its file path, e.g.
// "nomad.token") came from: "default", "env NOMAD_TOKEN", "impact.hcl:4",
// "flag -log-level", or "" when it is unset.
func (c *Config) Origin(path string) string {
	return c.origins[path]
}

func (c *Config) setOrigin(path, origin string) {
	if c.origins == nil {
		c.origins = map[string]string{}
	}
	c.origins[path] = origin
}

// Merge returns c overridden by every field that o sets (non-zero), keeping
// each field's origin. Neither input is modified.
func (c *Config) Merge(o *Config) *Config {
	out := c.clone()
	if o == nil {
		return out
	}
	src := o.fields()
	dst := out.fields()
	for i, f := range src {
		if f.isZero() {
			continue
		}
		dst[i].copyFrom(f)
		if org := o.origins[f.path]; org != "" {
			out.setOrigin(f.path, org)
		}
	}
	return out
}

func (c *Config) clone() *Config {
	out := *c
	if c.LogJSON != nil {
		v := *c.LogJSON
		out.LogJSON = &v
	}
	if c.Nomad.TLSSkipVerify != nil {
		v := *c.Nomad.TLSSkipVerify
		out.Nomad.TLSSkipVerify = &v
	}
	if c.Consul.Enabled != nil {
		v := *c.Consul.Enabled
		out.Consul.Enabled = &v
	}
	if c.DeviceStats.Enabled != nil {
		v := *c.DeviceStats.Enabled
		out.DeviceStats.Enabled = &v
	}
	out.origins = make(map[string]string, len(c.origins))
	for k, v := range c.origins {
		out.origins[k] = v
	}
	return &out
}

// ConsulEnabled reports whether Consul registration is on.
func (c *Config) ConsulEnabled() bool {
	return c.Consul.Enabled != nil && *c.Consul.Enabled
}

// DeviceStatsEnabled reports whether GPU device stats are polled.
func (c *Config) DeviceStatsEnabled() bool {
	return c.DeviceStats.Enabled == nil || *c.DeviceStats.Enabled
}

// JSONLogs reports whether logs are JSON lines.
func (c *Config) JSONLogs() bool { return c.LogJSON != nil && *c.LogJSON }

// SkipVerify reports whether TLS verification of Nomad is disabled.
func (c *Config) SkipVerify() bool {
	return c.Nomad.TLSSkipVerify != nil && *c.Nomad.TLSSkipVerify
}

// UIBase is the URL the agent's pages are linked at (no trailing slash):
// http.ui_url, else http(s)://<AdvertiseAddr> (https with http.tls_*);
// "" when that host is a
// wildcard, which nobody can open.
func (c *Config) UIBase() string {
	if c.HTTP.UIURL != "" {
		return strings.TrimRight(c.HTTP.UIURL, "/")
	}
	h, _, err := net.SplitHostPort(c.AdvertiseAddr())
	if err != nil || h == "" || h == "0.0.0.0" || h == "::" {
		return ""
	}
	scheme := "http://"
	if c.HTTP.TLS() {
		scheme = "https://"
	}
	return scheme + c.AdvertiseAddr()
}

// AdvertiseAddr is the host:port other processes (Consul) reach the API on.
func (c *Config) AdvertiseAddr() string {
	if c.HTTP.Advertise != "" {
		return c.HTTP.Advertise
	}
	return c.HTTP.Listen
}

// Redacted returns a copy safe to log or print: tokens are replaced.
func (c *Config) Redacted() *Config {
	out := c.clone()
	if out.Nomad.Token != "" {
		out.Nomad.Token = "<redacted>"
	}
	if out.Consul.Token != "" {
		out.Consul.Token = "<redacted>"
	}
	return out
}
