package config

import (
	"fmt"
	"time"
)

// field is one setting, addressed by its path in the file. The table below
// is the single list Merge, Default and the origin bookkeeping walk, so a
// new setting is added in one place.
type field struct {
	path string
	s    *string
	d    *time.Duration
	b    **bool
}

func (f field) isZero() bool {
	switch {
	case f.s != nil:
		return *f.s == ""
	case f.d != nil:
		return *f.d == 0
	default:
		return *f.b == nil
	}
}

func (f field) copyFrom(o field) {
	switch {
	case f.s != nil:
		*f.s = *o.s
	case f.d != nil:
		*f.d = *o.d
	default:
		v := **o.b
		*f.b = &v
	}
}

// fields lists every setting of c in a fixed order.
func (c *Config) fields() []field {
	s := func(p string, v *string) field { return field{path: p, s: v} }
	d := func(p string, v *time.Duration) field { return field{path: p, d: v} }
	b := func(p string, v **bool) field { return field{path: p, b: v} }
	return []field{
		s("nomad.address", &c.Nomad.Address),
		s("nomad.token", &c.Nomad.Token),
		s("nomad.region", &c.Nomad.Region),
		s("nomad.namespace", &c.Nomad.Namespace),
		s("nomad.ca_cert", &c.Nomad.CACert),
		s("nomad.client_cert", &c.Nomad.ClientCert),
		s("nomad.client_key", &c.Nomad.ClientKey),
		s("nomad.tls_server_name", &c.Nomad.TLSServerName),
		b("nomad.tls_skip_verify", &c.Nomad.TLSSkipVerify),
		b("consul.enabled", &c.Consul.Enabled),
		s("consul.address", &c.Consul.Address),
		s("consul.token", &c.Consul.Token),
		s("consul.service_name", &c.Consul.ServiceName),
		d("consul.check_interval", &c.Consul.CheckInterval),
		s("http.listen", &c.HTTP.Listen),
		s("http.advertise", &c.HTTP.Advertise),
		s("http.ui_url", &c.HTTP.UIURL),
		s("http.tls_cert", &c.HTTP.TLSCert),
		s("http.tls_key", &c.HTTP.TLSKey),
		s("http.tls_client_ca", &c.HTTP.TLSClientCA),
		s("auth.read", &c.Auth.Read),
		s("auth.metrics", &c.Auth.Metrics),
		s("auth.gang", &c.Auth.Gang),
		s("auth.identity_audience", &c.Auth.IdentityAudience),
		d("auth.token_cache_ttl", &c.Auth.TokenCacheTTL),
		d("cycle.interval", &c.Cycle.Interval),
		d("cycle.debounce", &c.Cycle.Debounce),
		d("cycle.admission_deadline", &c.Cycle.AdmissionDeadline),
		d("ha.lock_ttl", &c.HA.LockTTL),
		s("ha.state_prefix", &c.HA.StatePrefix),
		b("device_stats.enabled", &c.DeviceStats.Enabled),
		d("device_stats.interval", &c.DeviceStats.Interval),
		d("device_stats.node_timeout", &c.DeviceStats.NodeTimeout),
		s("parking_pool", &c.ParkingPool),
		s("default_pool", &c.DefaultPool),
		s("policy", &c.PolicyFile),
		s("log_level", &c.LogLevel),
		b("log_json", &c.LogJSON),
		s("name", &c.Name),
	}
}

// field looks a setting up by path.
func (c *Config) field(path string) (field, bool) {
	for _, f := range c.fields() {
		if f.path == path {
			return f, true
		}
	}
	return field{}, false
}

// Setting is one effective setting, for `impact agent -check`.
type Setting struct {
	Path   string // as written in the file, e.g. "nomad.address"
	Value  string // "" when unset; tokens are "<redacted>"
	Origin string // see Origin
}

// Settings lists every setting in file order, secrets redacted, so that
// -check shows all of them (a new setting appears without touching the
// CLI).
func (c *Config) Settings() []Setting {
	r := c.Redacted()
	fs := r.fields()
	out := make([]Setting, 0, len(fs))
	for _, f := range fs {
		s := Setting{Path: f.path, Origin: r.Origin(f.path)}
		switch {
		case f.isZero():
		case f.s != nil:
			s.Value = *f.s
		case f.d != nil:
			s.Value = f.d.String()
		default:
			s.Value = fmt.Sprint(**f.b)
		}
		out = append(out, s)
	}
	return out
}
