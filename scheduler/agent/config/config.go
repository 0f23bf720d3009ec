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
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/nomad"
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

// Nomad is how the agent reaches Nomad's HTTP API: the adapter's own
// connection config (address, token, region, namespace, TLS files), as the
// file, the environment and flags set it, plus TLSSkipVerify, which is read
// instead of nomad.Config.Insecure because "not set" must differ from false
// when the sources are merged. Config.NomadClient gives the config to
// connect with.
type Nomad struct {
	nomad.Config
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
	// Debounce collects a burst of Nomad events into one cycle.
	Debounce time.Duration
	// AdmissionDeadline is how long an admitted gang has to be fully
	// running before it is rolled back into the parking pool.
	AdmissionDeadline time.Duration
}

// HA is leader election and durable state.
type HA struct {
	// LockTTL is the TTL of the Nomad Variables lock; a dead leader is
	// replaced after at most about this long.
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
		Nomad: Nomad{Config: nomad.Config{Address: DefaultNomadAddress, Namespace: "default"}},
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

// NomadClient is the connection config for nomad.NewClient, with Insecure
// set from TLSSkipVerify.
func (c *Config) NomadClient() nomad.Config {
	n := c.Nomad.Config
	n.Insecure = c.SkipVerify()
	return n
}

// FieldError is one invalid field, with where its value came from.
type FieldError struct {
	Origin string // "impact.hcl:12", "env NOMAD_ADDR", "flag -config", "default"
	Field  string // "nomad.address"
	Msg    string
}

func (e *FieldError) Error() string {
	if e.Origin == "" {
		return fmt.Sprintf("%s: %s", e.Field, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", e.Origin, e.Field, e.Msg)
}

var logLevels = map[string]bool{"trace": true, "debug": true, "info": true, "warn": true, "error": true, "off": true}

// Validate checks the merged config and returns every problem at once (one
// *FieldError per line, reachable with errors.As), so an operator fixes them
// in one pass.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Origin: c.origins[field], Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	for _, check := range []func(badFunc){c.checkNomad, c.checkPools, c.checkCycle, c.checkState, c.checkHTTP, c.checkAuth, c.checkConsul} {
		check(bad)
	}
	sort.SliceStable(errs, func(i, j int) bool {
		return errs[i].(*FieldError).Field < errs[j].(*FieldError).Field
	})
	return joinErrs(errs)
}

// badFunc reports one invalid field.
type badFunc func(field, format string, args ...any)

// checkNomad checks the connection to Nomad.
func (c *Config) checkNomad(bad badFunc) {
	if c.Nomad.Address == "" {
		bad("nomad.address", "must be set (an http://, https:// or unix:// URL)")
	} else if u, err := url.Parse(c.Nomad.Address); err != nil {
		bad("nomad.address", "not a URL: %v", err)
	} else {
		switch u.Scheme {
		case "http", "https":
			if u.Host == "" {
				bad("nomad.address", "%q has no host", c.Nomad.Address)
			}
		case "unix":
		default:
			bad("nomad.address", "%q: scheme must be http, https or unix", c.Nomad.Address)
		}
	}
	if (c.Nomad.ClientCert == "") != (c.Nomad.ClientKey == "") {
		f := "nomad.client_key"
		if c.Nomad.ClientCert == "" {
			f = "nomad.client_cert"
		}
		bad(f, "client_cert and client_key must be set together")
	}
}

// checkPools checks the parking and default pools.
func (c *Config) checkPools(bad badFunc) {
	if c.ParkingPool == "" {
		bad("parking_pool", "must be set")
	}
	if c.DefaultPool == "" {
		bad("default_pool", "must be set")
	}
	if c.ParkingPool != "" && c.ParkingPool == c.DefaultPool {
		bad("default_pool", "must differ from parking_pool %q: admitted jobs would never leave the queue", c.ParkingPool)
	}
	for _, p := range []struct{ field, v string }{{"parking_pool", c.ParkingPool}, {"default_pool", c.DefaultPool}} {
		if p.v == "all" {
			bad(p.field, `"all" is reserved by Nomad`)
		}
	}
}

// checkCycle checks the cycle's timing.
func (c *Config) checkCycle(bad badFunc) {
	if c.Cycle.Interval <= 0 {
		bad("cycle.interval", "must be positive, got %s", c.Cycle.Interval)
	}
	if c.Cycle.Debounce < 0 {
		bad("cycle.debounce", "must not be negative, got %s", c.Cycle.Debounce)
	}
	if c.Cycle.Interval > 0 && c.Cycle.Debounce >= c.Cycle.Interval {
		bad("cycle.debounce", "%s must be shorter than cycle.interval %s", c.Cycle.Debounce, c.Cycle.Interval)
	}
	if c.Cycle.AdmissionDeadline <= 0 {
		bad("cycle.admission_deadline", "must be positive, got %s", c.Cycle.AdmissionDeadline)
	}
}

// checkState checks the leader lock, the state prefix, the device stats poll and the policy file.
func (c *Config) checkState(bad badFunc) {
	// Nomad refuses lock TTLs outside [10s, 24h] (seen on Nomad 2.0.6:
	// "TTL must be between 10 seconds and 24 hours").
	if c.HA.LockTTL < 10*time.Second || c.HA.LockTTL > 24*time.Hour {
		bad("ha.lock_ttl", "must be between 10s and 24h (Nomad's limits for a Variables lock), got %s", c.HA.LockTTL)
	}
	if c.HA.StatePrefix == "" || strings.HasPrefix(c.HA.StatePrefix, "/") || strings.HasSuffix(c.HA.StatePrefix, "/") {
		bad("ha.state_prefix", "%q must be a non-empty Variables path without leading or trailing '/'", c.HA.StatePrefix)
	}
	if c.DeviceStatsEnabled() && c.DeviceStats.NodeTimeout > c.DeviceStats.Interval {
		bad("device_stats.node_timeout", "%s must not exceed device_stats.interval %s", c.DeviceStats.NodeTimeout, c.DeviceStats.Interval)
	}
	if c.PolicyFile == "" {
		bad("policy", "must name the policy file (tiers, projects, preemption limits)")
	}
}

// checkHTTP checks the API's listener and TLS.
func (c *Config) checkHTTP(bad badFunc) {
	if c.HTTP.Listen == "" {
		bad("http.listen", "must be set (host:port)")
	} else if _, _, err := net.SplitHostPort(c.HTTP.Listen); err != nil {
		bad("http.listen", "%q is not host:port: %v", c.HTTP.Listen, err)
	}
	if c.HTTP.Advertise != "" {
		if _, _, err := net.SplitHostPort(c.HTTP.Advertise); err != nil {
			bad("http.advertise", "%q is not host:port: %v", c.HTTP.Advertise, err)
		}
	}
	if c.HTTP.UIURL != "" {
		if u, err := url.Parse(c.HTTP.UIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("http.ui_url", "%q is not an http:// or https:// URL with a host", c.HTTP.UIURL)
		}
	}
	if (c.HTTP.TLSCert == "") != (c.HTTP.TLSKey == "") {
		f := "http.tls_key"
		if c.HTTP.TLSCert == "" {
			f = "http.tls_cert"
		}
		bad(f, "tls_cert and tls_key must be set together")
	}
	if c.HTTP.TLSClientCA != "" && c.HTTP.TLSCert == "" {
		bad("http.tls_client_ca", "needs http.tls_cert and http.tls_key (mutual TLS is TLS first)")
	}
}

// checkAuth checks who may call the API, and the log level.
func (c *Config) checkAuth(bad badFunc) {
	if !oneOf(c.Auth.Read, "auto", "token", "open") {
		bad("auth.read", "%q: must be auto, token or open", c.Auth.Read)
	}
	if !oneOf(c.Auth.Metrics, "open", "token") {
		bad("auth.metrics", "%q: must be open or token", c.Auth.Metrics)
	}
	switch {
	case !oneOf(c.Auth.Gang, "identity", "open"):
		bad("auth.gang", "%q: must be identity or open", c.Auth.Gang)
	case c.Auth.Gang == "open" && !loopbackListen(c.HTTP.Listen):
		bad("auth.gang", `"open" lets anyone who reaches the API join or stop any gang: it is for development, with http.listen on a loopback address, not %q`, c.HTTP.Listen)
	}
	if c.Auth.IdentityAudience == "" {
		bad("auth.identity_audience", "must not be empty")
	}
	if !logLevels[strings.ToLower(c.LogLevel)] {
		bad("log_level", "%q: must be one of trace, debug, info, warn, error, off", c.LogLevel)
	}
}

// checkConsul checks the Consul registration, when enabled.
func (c *Config) checkConsul(bad badFunc) {
	if c.ConsulEnabled() {
		if c.Consul.Address == "" {
			bad("consul.address", "must be set when consul is enabled")
		}
		if c.Consul.ServiceName == "" {
			bad("consul.service_name", "must not be empty")
		}
		if c.Consul.CheckInterval < time.Second {
			bad("consul.check_interval", "must be at least 1s, got %s", c.Consul.CheckInterval)
		}
		if c.HTTP.Advertise == "" {
			if h, _, err := net.SplitHostPort(c.HTTP.Listen); err == nil && (h == "" || h == "0.0.0.0" || h == "::") {
				bad("http.advertise", "must be set when http.listen %q is a wildcard: Consul needs an address to check", c.HTTP.Listen)
			}
		}
	}
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

func oneOf(v string, allowed ...string) bool {
	for _, a := range allowed {
		if v == a {
			return true
		}
	}
	return false
}

// loopbackListen reports whether a host:port listens on loopback only.
func loopbackListen(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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
