package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func writeFile(t *testing.T, name, src string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const fullConfig = `
name         = "impact-1"
parking_pool = "queue"
default_pool = "gpu"
policy       = "policy.hcl"
log_level    = "debug"
log_json     = true

nomad {
  address     = "https://nomad.example:4646"
  token       = "secret"
  namespace   = "research"
  region      = "eu"
  ca_cert     = "/etc/nomad/ca.pem"
  client_cert = "/etc/nomad/cli.pem"
  client_key  = "/etc/nomad/cli-key.pem"
}

cycle {
  interval           = "30s"
  debounce           = "2s"
  admission_deadline = "10m"
}

http {
  listen    = "0.0.0.0:4680"
  advertise = "10.0.0.5:4680"
}

consul {
  address      = "127.0.0.1:8500"
  service_name = "impact"
}

ha {
  lock_ttl     = "20s"
  state_prefix = "impact/prod"
}
`

func TestLoadFullFile(t *testing.T) {
	p := writeFile(t, "impact.hcl", fullConfig)
	c, err := Load([]string{p}, env(nil), nil)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"name", c.Name, "impact-1"},
		{"parking", c.ParkingPool, "queue"},
		{"default pool", c.DefaultPool, "gpu"},
		{"policy resolved next to the config", c.PolicyFile, filepath.Join(filepath.Dir(p), "policy.hcl")},
		{"log", c.LogLevel, "debug"},
		{"json", c.JSONLogs(), true},
		{"addr", c.Nomad.Address, "https://nomad.example:4646"},
		{"token", c.Nomad.Token, "secret"},
		{"ns", c.Nomad.Namespace, "research"},
		{"region", c.Nomad.Region, "eu"},
		{"ca", c.Nomad.CACert, "/etc/nomad/ca.pem"},
		{"interval", c.Cycle.Interval, 30 * time.Second},
		{"debounce", c.Cycle.Debounce, 2 * time.Second},
		{"deadline", c.Cycle.AdmissionDeadline, 10 * time.Minute},
		{"listen", c.HTTP.Listen, "0.0.0.0:4680"},
		{"advertise", c.AdvertiseAddr(), "10.0.0.5:4680"},
		{"consul on", c.ConsulEnabled(), true},
		{"consul svc", c.Consul.ServiceName, "impact"},
		{"lock ttl", c.HA.LockTTL, 20 * time.Second},
		{"prefix", c.HA.StatePrefix, "impact/prod"},
		{"origin", c.Origin("nomad.token"), p + ":11"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: got %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	if r := c.Redacted(); r.Nomad.Token != "<redacted>" || c.Nomad.Token != "secret" {
		t.Errorf("Redacted: got %q (original %q)", r.Nomad.Token, c.Nomad.Token)
	}
}

func TestDefaultsOnlyNeedPolicy(t *testing.T) {
	c, err := Load(nil, env(nil), nil)
	if err == nil {
		t.Fatal("expected an error without a policy file")
	}
	if !strings.Contains(err.Error(), "policy: must name the policy file") {
		t.Errorf("error %q does not name the policy field", err)
	}
	flags := &Config{}
	if err := flags.SetFlag("policy", "policy", "/etc/impact/policy.hcl"); err != nil {
		t.Fatal(err)
	}
	c, err = Load(nil, env(nil), flags)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if c.Nomad.Address != DefaultNomadAddress || c.ParkingPool != DefaultParkingPool ||
		c.Cycle.Interval != DefaultCycleInterval || c.ConsulEnabled() {
		t.Errorf("unexpected defaults: %+v", c)
	}
	if c.Origin("nomad.address") != "default" || c.Origin("policy") != "flag -policy" {
		t.Errorf("origins: address %q policy %q", c.Origin("nomad.address"), c.Origin("policy"))
	}
}

// The documented precedence: defaults < environment < file < flags.
func TestPrecedence(t *testing.T) {
	p := writeFile(t, "impact.hcl", `
policy = "/p.hcl"
nomad { address = "http://file:4646" }
`)
	e := env(map[string]string{
		"NOMAD_ADDR":        "http://env:4646",
		"NOMAD_TOKEN":       "env-token",
		"NOMAD_SKIP_VERIFY": "true",
		"NOMAD_NAMESPACE":   "envns",
	})
	c, err := Load([]string{p}, e, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Nomad.Address != "http://file:4646" {
		t.Errorf("file must beat env: got %s", c.Nomad.Address)
	}
	if c.Nomad.Token != "env-token" || c.Origin("nomad.token") != "env NOMAD_TOKEN" {
		t.Errorf("env must fill what the file leaves out: %q from %q", c.Nomad.Token, c.Origin("nomad.token"))
	}
	if !c.SkipVerify() || c.Nomad.Namespace != "envns" {
		t.Errorf("env skip verify/namespace not applied: %v %q", c.SkipVerify(), c.Nomad.Namespace)
	}
	flags := &Config{}
	if err := flags.SetFlag("nomad.address", "address", "http://flag:4646"); err != nil {
		t.Fatal(err)
	}
	c, err = Load([]string{p}, e, flags)
	if err != nil {
		t.Fatal(err)
	}
	if c.Nomad.Address != "http://flag:4646" || c.Origin("nomad.address") != "flag -address" {
		t.Errorf("flag must beat file: %s from %s", c.Nomad.Address, c.Origin("nomad.address"))
	}
	// Later files override earlier ones.
	p2 := writeFile(t, "override.hcl", `nomad { address = "http://second:4646" }`)
	c, err = Load([]string{p, p2}, e, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Nomad.Address != "http://second:4646" || !strings.HasSuffix(c.Origin("nomad.address"), "override.hcl:1") {
		t.Errorf("second file: %s from %s", c.Nomad.Address, c.Origin("nomad.address"))
	}
}

func TestParseErrorsNameFileLineField(t *testing.T) {
	cases := []struct {
		name string
		src  string
		want []string
	}{
		{"syntax", "nomad {\n  address = \n}", []string{"bad.hcl:2"}},
		{"unknown top-level", "policy = \"p\"\nfoo = 1\n", []string{"bad.hcl:2: foo: unknown setting"}},
		{"unknown in block", "nomad {\n  adress = \"http://x\"\n}\n", []string{"bad.hcl:2: nomad.adress: unknown setting"}},
		{"unknown block", "\n\nnomda {\n}\n", []string{"bad.hcl:3: nomda: unknown block"}},
		{"duplicate block", "cycle {}\ncycle {}\n", []string{"bad.hcl:2: cycle: duplicate block (first at line 1)"}},
		{"label", "nomad \"x\" {}\n", []string{"bad.hcl:1: nomad: takes no labels"}},
		{"bad duration", "cycle {\n  interval = \"ten seconds\"\n}\n", []string{"bad.hcl:2: cycle.interval:", "is not a duration"}},
		{"zero duration", "cycle {\n  debounce = \"0s\"\n}\n", []string{"bad.hcl:2: cycle.debounce:", "must be positive"}},
		{"number not string", "parking_pool = 3\n", []string{"bad.hcl:1: parking_pool: must be a string, got number"}},
		{"bool not string", "log_json = \"yes\"\n", []string{"bad.hcl:1: log_json: must be true or false"}},
		{"empty string", "nomad {\n token = \"\"\n}\n", []string{"bad.hcl:2: nomad.token: must not be empty"}},
		{"variables", "policy = var.x\n", []string{"bad.hcl:1: policy:"}},
		{"stats enabled not bool", "device_stats {\n  enabled = \"no\"\n}\n", []string{"bad.hcl:2: device_stats.enabled: must be true or false"}},
		{"several at once", "foo = 1\nbar = 2\n", []string{"bad.hcl:2: bar: unknown setting", "bad.hcl:1: foo: unknown setting"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.src), "bad.hcl")
			if err == nil {
				t.Fatal("expected an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestValidateErrors(t *testing.T) {
	cases := []struct {
		name string
		src  string
		env  map[string]string
		want []string
	}{
		{"bad scheme", "policy = \"p\"\nnomad {\n  address = \"ftp://x\"\n}\n", nil,
			[]string{"bad.hcl:3: nomad.address:", "scheme must be http, https or unix"}},
		{"bad env address", "policy = \"p\"\n", map[string]string{"NOMAD_ADDR": "localhost"},
			[]string{"env NOMAD_ADDR: nomad.address:"}},
		{"cert without key", "policy = \"p\"\nnomad {\n  client_cert = \"c.pem\"\n}\n", nil,
			[]string{"nomad.client_key: client_cert and client_key must be set together"}},
		{"same pools", "policy = \"p\"\nparking_pool = \"gpu\"\ndefault_pool = \"gpu\"\n", nil,
			[]string{"bad.hcl:3: default_pool: must differ from parking_pool"}},
		{"debounce above interval", "policy = \"p\"\ncycle {\n  interval = \"1s\"\n  debounce = \"2s\"\n}\n", nil,
			[]string{"bad.hcl:4: cycle.debounce:", "must be shorter than cycle.interval"}},
		{"bad listen", "policy = \"p\"\nhttp {\n  listen = \"4680\"\n}\n", nil,
			[]string{"bad.hcl:3: http.listen:", "not host:port"}},
		{"log level", "policy = \"p\"\nlog_level = \"loud\"\n", nil,
			[]string{"bad.hcl:2: log_level:", "must be one of"}},
		{"consul wildcard", "policy = \"p\"\nhttp {\n  listen = \"0.0.0.0:4680\"\n}\nconsul {}\n", nil,
			[]string{"http.advertise: must be set when http.listen"}},
		{"short ttl", "policy = \"p\"\nha {\n  lock_ttl = \"100ms\"\n}\n", nil,
			[]string{"bad.hcl:3: ha.lock_ttl: must be between 10s and 24h"}},
		{"prefix slash", "policy = \"p\"\nha {\n  state_prefix = \"/impact\"\n}\n", nil,
			[]string{"bad.hcl:3: ha.state_prefix:"}},
		{"stats timeout above interval", "policy = \"p\"\ndevice_stats {\n  interval     = \"2s\"\n  node_timeout = \"3s\"\n}\n", nil,
			[]string{"bad.hcl:4: device_stats.node_timeout: 3s must not exceed device_stats.interval 2s"}},
		{"ui url without scheme", "policy = \"p\"\nhttp {\n  ui_url = \"impact.example:4680\"\n}\n", nil,
			[]string{"bad.hcl:3: http.ui_url:", "not an http:// or https:// URL with a host"}},
		{"bad env bool", "policy = \"p\"\n", map[string]string{"NOMAD_SKIP_VERIFY": "maybe"},
			[]string{"env NOMAD_SKIP_VERIFY: nomad.tls_skip_verify: not a boolean"}},
		{"tls cert without key", "policy = \"p\"\nhttp {\n  tls_cert = \"c.pem\"\n}\n", nil,
			[]string{"http.tls_key: tls_cert and tls_key must be set together"}},
		{"client CA without TLS", "policy = \"p\"\nhttp {\n  tls_client_ca = \"ca.pem\"\n}\n", nil,
			[]string{"bad.hcl:3: http.tls_client_ca: needs http.tls_cert and http.tls_key"}},
		{"auth modes", "policy = \"p\"\nauth {\n  read = \"maybe\"\n  metrics = \"secret\"\n  gang = \"none\"\n}\n", nil,
			[]string{"bad.hcl:3: auth.read: \"maybe\": must be auto, token or open", "bad.hcl:4: auth.metrics:", "bad.hcl:5: auth.gang: \"none\": must be identity or open"}},
		{"open gang on the network", "policy = \"p\"\nhttp {\n  listen = \"0.0.0.0:4680\"\n}\nauth {\n  gang = \"open\"\n}\n", nil,
			[]string{"bad.hcl:6: auth.gang:", "for development, with http.listen on a loopback address, not \"0.0.0.0:4680\""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "bad.hcl")
			if err := os.WriteFile(p, []byte(tc.src), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load([]string{p}, env(tc.env), nil)
			if err == nil {
				t.Fatal("expected an error")
			}
			msg := strings.ReplaceAll(err.Error(), p, "bad.hcl")
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Errorf("error %T does not unwrap to *FieldError", err)
			}
		})
	}
}

func TestConsulBlockEnables(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want bool
	}{
		{"policy = \"p\"\n", false},
		{"policy = \"p\"\nconsul {}\n", true},
		{"policy = \"p\"\nconsul {\n  enabled = false\n}\n", false},
	} {
		c, err := Parse([]byte(tc.src), "c.hcl")
		if err != nil {
			t.Fatal(err)
		}
		got := Default().Merge(c)
		if got.ConsulEnabled() != tc.want {
			t.Errorf("%q: consul enabled %v, want %v", tc.src, got.ConsulEnabled(), tc.want)
		}
	}
}

func TestMergeDoesNotAlias(t *testing.T) {
	a := Default()
	b := &Config{}
	tr := true
	b.LogJSON = &tr
	m := a.Merge(b)
	*b.LogJSON = false
	if !m.JSONLogs() {
		t.Error("Merge must copy pointer fields, not alias them")
	}
	if a.JSONLogs() {
		t.Error("Merge must not modify its receiver")
	}
}

// The example config shipped for operators must load, and it promises
// that every setting it leaves active shows the default: check that, so the
// comments stay true when a default changes.
func TestExampleConfigLoads(t *testing.T) {
	p := filepath.Join("..", "..", "..", "example", "impact.hcl")
	c, err := Load([]string{p}, env(nil), nil)
	if err != nil {
		t.Fatalf("example/impact.hcl: %v", err)
	}
	fc, err := ParseFile(p)
	if err != nil {
		t.Fatal(err)
	}
	def := Default()
	dfields := def.fields()
	for i, f := range fc.fields() {
		if f.isZero() || f.path == "policy" {
			continue
		}
		d := dfields[i]
		if d.isZero() {
			t.Errorf("example sets %s, which has no default", f.path)
			continue
		}
		if got, want := fieldString(f), fieldString(d); got != want {
			t.Errorf("example sets %s = %s, but the default is %s", f.path, got, want)
		}
	}
	if want := filepath.Join(filepath.Dir(p), "policy.hcl"); c.PolicyFile != want {
		t.Errorf("policy %q, want %q", c.PolicyFile, want)
	}
	if _, err := os.Stat(c.PolicyFile); err != nil {
		t.Errorf("the example's policy file: %v", err)
	}
}

func fieldString(f field) string {
	c := &Config{}
	dst := c.fields()
	for i := range dst {
		if dst[i].path == f.path {
			dst[i].copyFrom(f)
			return c.Settings()[i].Value
		}
	}
	return ""
}

// The pages are linked at ui_url, else at the advertised (or listen)
// address, and not at all when only a wildcard is known.
func TestUIBase(t *testing.T) {
	for _, tc := range []struct{ listen, advertise, uiURL, want string }{
		{"127.0.0.1:4680", "", "", "http://127.0.0.1:4680"},
		{"0.0.0.0:4680", "10.0.0.5:4680", "", "http://10.0.0.5:4680"},
		{"0.0.0.0:4680", "", "", ""},
		{"[::]:4680", "", "", ""},
		{"0.0.0.0:4680", "10.0.0.5:4680", "https://impact.example.com/", "https://impact.example.com"},
	} {
		c := &Config{HTTP: HTTP{Listen: tc.listen, Advertise: tc.advertise, UIURL: tc.uiURL}}
		if got := c.UIBase(); got != tc.want {
			t.Errorf("UIBase(listen %q, advertise %q, ui_url %q) = %q, want %q", tc.listen, tc.advertise, tc.uiURL, got, tc.want)
		}
	}
}

// Issue 36: an unknown setting or block gets a "did you mean", as the
// policy file's do (HCL's threshold): the closest name of its block, else
// the same name in another block.
func TestUnknownSettingSuggests(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"top-level typo", "polcy = \"p\"\n", `bad.hcl:1: polcy: unknown setting; did you mean "policy"?`},
		{"typo in a block", "cycle {\n  intervall = \"5s\"\n}\n", `bad.hcl:2: cycle.intervall: unknown setting; did you mean "interval"?`},
		{"setting of a block at the top", "listen = \"127.0.0.1:1\"\n", `bad.hcl:1: listen: unknown setting; did you mean http.listen?`},
		{"block typo", "nomda {}\n", `bad.hcl:1: nomda: unknown block; expected one of auth, consul, cycle, device_stats, ha, http, nomad; did you mean "nomad"?`},
		{"nothing close", "frobnicate = 1\n", "bad.hcl:1: frobnicate: unknown setting"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.src), "bad.hcl")
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error %q, want %q", err, tc.want)
			}
		})
	}
}

// Issue 36: every problem of the sources is reported at once, in each
// file's line order: the environment's, every file's, the validation's of
// values that were set, and (LoadPolicy) a missing policy file named with
// the config line that names it. A setting missing only because its file
// did not parse is not also reported missing.
func TestLoadReportsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.hcl")
	b := filepath.Join(dir, "b.hcl")
	if err := os.WriteFile(a, []byte("policy = \"missing-policy.hcl\"\nlog_level = \"loud\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte("cycle {\n  intervall = \"5s\"\n}\npolcy = \"x\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load([]string{a, b}, env(map[string]string{"NOMAD_SKIP_VERIFY": "maybe"}), nil)
	if err == nil || c == nil {
		t.Fatalf("want the merged config and an error, got %v, %v", c, err)
	}
	_, perr := c.LoadPolicy()
	msg := strings.ReplaceAll(JoinErrors(err, perr).Error(), dir+"/", "")
	want := []string{
		"env NOMAD_SKIP_VERIFY: nomad.tls_skip_verify: not a boolean",
		`b.hcl:2: cycle.intervall: unknown setting; did you mean "interval"?`,
		`b.hcl:4: polcy: unknown setting; did you mean "policy"?`,
		`a.hcl:2: log_level: "loud": must be one of`,
		"a.hcl:1: policy: read policy file: open missing-policy.hcl: no such file or directory",
	}
	lines := strings.Split(msg, "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(lines), len(want), msg)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("problem %d: %q, want %q...", i+1, lines[i], w)
		}
	}
	var fe *FieldError
	if !errors.As(perr, &fe) || fe.Origin != a+":1" || fe.Field != "policy" {
		t.Errorf("policy error %#v should name %s:1 and the policy setting", perr, a)
	}
	// A file that does not parse does not make its settings "missing".
	_, err = Load([]string{b}, env(nil), nil)
	if err == nil || strings.Contains(err.Error(), "must name the policy file") {
		t.Errorf("unparsed file: %v", err)
	}
}
