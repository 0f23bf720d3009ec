package config

import (
	"strconv"
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
func Load(files []string, getenv func(string) string, flags *Config) (*Config, error) {
	c := Default()
	env, err := FromEnv(getenv)
	if err != nil {
		return nil, err
	}
	c = c.Merge(env)
	for _, f := range files {
		fc, err := ParseFile(f)
		if err != nil {
			return nil, err
		}
		c = c.Merge(fc)
	}
	c = c.Merge(flags)
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

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
