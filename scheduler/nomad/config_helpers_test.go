package nomad

import (
	"fmt"
	"strconv"
	"strings"
)

// Test-only: the tests reach real Nomad agents through the nomad CLI's
// environment. The agent reads the same variables, with origins for its
// errors, in scheduler/agent/config.

// ConfigFromEnv reads the environment variables the nomad CLI honours
// (NOMAD_ADDR, NOMAD_TOKEN, NOMAD_REGION, NOMAD_NAMESPACE, NOMAD_CACERT,
// NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY, NOMAD_TLS_SERVER_NAME,
// NOMAD_SKIP_VERIFY). Pass os.LookupEnv. A NOMAD_SKIP_VERIFY that is not a
// boolean is an error, not silently false.
func ConfigFromEnv(lookup func(string) (string, bool)) (Config, error) {
	get := func(k string) string {
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	c := Config{
		Address:       get("NOMAD_ADDR"),
		Token:         get("NOMAD_TOKEN"),
		Region:        get("NOMAD_REGION"),
		Namespace:     get("NOMAD_NAMESPACE"),
		CACert:        get("NOMAD_CACERT"),
		ClientCert:    get("NOMAD_CLIENT_CERT"),
		ClientKey:     get("NOMAD_CLIENT_KEY"),
		TLSServerName: get("NOMAD_TLS_SERVER_NAME"),
	}
	if v := get("NOMAD_SKIP_VERIFY"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return Config{}, fmt.Errorf("NOMAD_SKIP_VERIFY=%q: not a boolean", v)
		}
		c.Insecure = b
	}
	return c, nil
}

// Merge returns c with every field that o sets replacing c's. The agent
// merges its config file over the environment, so an explicit setting in
// the file wins, as a CLI flag wins over the environment.
func (c Config) Merge(o Config) Config {
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&c.Address, o.Address)
	set(&c.Token, o.Token)
	set(&c.Region, o.Region)
	set(&c.Namespace, o.Namespace)
	set(&c.CACert, o.CACert)
	set(&c.ClientCert, o.ClientCert)
	set(&c.ClientKey, o.ClientKey)
	set(&c.TLSServerName, o.TLSServerName)
	if o.Insecure {
		c.Insecure = true
	}
	return c
}
