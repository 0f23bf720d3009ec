package config

import (
	"fmt"
	"net"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/auth"
)

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

// bothOrNeither reports a certificate set without its key, or a key
// without its certificate, on the one that is missing.
func bothOrNeither(bad badFunc, block, certName, cert, keyName, key string) {
	switch {
	case cert != "" && key == "":
		bad(block+"."+keyName, "%s and %s must be set together", certName, keyName)
	case cert == "" && key != "":
		bad(block+"."+certName, "%s and %s must be set together", certName, keyName)
	}
}

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
	bothOrNeither(bad, "nomad", "client_cert", c.Nomad.ClientCert, "client_key", c.Nomad.ClientKey)
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
	bothOrNeither(bad, "http", "tls_cert", c.HTTP.TLSCert, "tls_key", c.HTTP.TLSKey)
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
	case c.Auth.Gang == "open" && !auth.LoopbackListen(c.HTTP.Listen):
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

func oneOf(v string, allowed ...string) bool {
	for _, a := range allowed {
		if v == a {
			return true
		}
	}
	return false
}
