package config

import (
	"strconv"

	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// envVars maps the environment variables the nomad and consul CLIs read to
// the settings they fill. NOMAD_SKIP_VERIFY and CONSUL_HTTP_SSL are booleans.
var envVars = []struct{ name, path string }{
	{"NOMAD_ADDR", "nomad.address"},
	{"NOMAD_TOKEN", "nomad.token"},
	{"NOMAD_REGION", "nomad.region"},
	{"NOMAD_NAMESPACE", "nomad.namespace"},
	{"NOMAD_CACERT", "nomad.ca_cert"},
	{"NOMAD_CLIENT_CERT", "nomad.client_cert"},
	{"NOMAD_CLIENT_KEY", "nomad.client_key"},
	{"NOMAD_TLS_SERVER_NAME", "nomad.tls_server_name"},
	{"NOMAD_SKIP_VERIFY", "nomad.tls_skip_verify"},
	{"CONSUL_HTTP_ADDR", "consul.address"},
	{"CONSUL_HTTP_TOKEN", "consul.token"},
}

// FromEnv returns the partial Config the environment sets, read through
// getenv (os.Getenv in production, a map in tests). A boolean variable that
// does not parse is reported, not ignored.
func FromEnv(getenv func(string) string) (*Config, error) {
	c := &Config{}
	var errs []error
	for _, e := range envVars {
		v := getenv(e.name)
		if v == "" {
			continue
		}
		f, _ := c.field(e.path)
		if f.b != nil {
			b, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, &FieldError{Origin: "env " + e.name, Field: e.path, Msg: "not a boolean: " + strconv.Quote(v)})
				continue
			}
			*f.b = &b
		} else {
			*f.s = v
		}
		c.setOrigin(e.path, "env "+e.name)
	}
	return c, joinErrs(errs)
}

// Load is the usual sequence: defaults, then the environment, then each
// file in order, then flags (a partial Config the CLI built), validated.
// Every problem is reported at once: the environment's, every file's, and
// the validation's. While a source has errors, validation reports only
// values some source set (a setting missing because its file did not
// parse is not also reported missing). On error the merged Config is
// returned too: not valid, but it says which policy file the sources name
// and where (for LoadPolicy's check).
func Load(files []string, getenv func(string) string, flags *Config) (*Config, error) {
	c := Default()
	var errs []error
	env, err := FromEnv(getenv)
	if err != nil {
		errs = append(errs, err)
	}
	c = c.Merge(env)
	for _, f := range files {
		fc, err := ParseFile(f)
		if err != nil {
			errs = append(errs, err)
		}
		if fc != nil {
			c = c.Merge(fc)
		}
	}
	c = c.Merge(flags)
	parsed := len(errs) == 0
	reported := map[string]bool{}
	for _, e := range flatten(errs) {
		if fe, ok := e.(*FieldError); ok {
			reported[fe.Field] = true
		}
	}
	for _, e := range flatten([]error{c.Validate()}) {
		fe, ok := e.(*FieldError)
		if parsed || ok && !reported[fe.Field] && fe.Origin != "" && fe.Origin != "default" {
			errs = append(errs, e)
		}
	}
	return c, joinErrs(flatten(errs))
}

// flatten lists the errors of errs, each multiError's one by one.
func flatten(errs []error) []error {
	var out []error
	for _, err := range errs {
		switch e := err.(type) {
		case nil:
		case multiError:
			out = append(out, flatten(e)...)
		default:
			out = append(out, err)
		}
	}
	return out
}

// LoadPolicy loads the policy file the config names. An error says where
// the config named it (file and line, flag or environment), so that a
// missing or broken policy file is traced back to the setting to fix.
func (c *Config) LoadPolicy() (*policy.Policy, error) {
	pol, err := policy.Load(c.PolicyFile)
	if err != nil {
		return nil, &FieldError{Origin: c.Origin("policy"), Field: "policy", Msg: err.Error()}
	}
	return pol, nil
}

// JoinErrors joins configuration errors one per line, as Load reports
// them (nil when there is none).
func JoinErrors(errs ...error) error { return joinErrs(flatten(errs)) }

// SetFlag records a command-line flag's value on a partial Config, with the
// flag's name as its origin.
func (c *Config) SetFlag(path, flagName, value string) error {
	f, ok := c.field(path)
	if !ok {
		return &FieldError{Origin: "flag -" + flagName, Field: path, Msg: "unknown setting"}
	}
	if err := assignString(f, value); err != nil {
		return &FieldError{Origin: "flag -" + flagName, Field: path, Msg: err.Error()}
	}
	c.setOrigin(path, "flag -"+flagName)
	return nil
}
