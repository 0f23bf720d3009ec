package nomadagent

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// ImpactConfig is an `impact agent` configuration for the e2e suites: the
// settings they share (parking pool impact-queue, default pool default, a
// 1s cycle with a 100ms debounce, a 10s lock), with what a suite changes.
type ImpactConfig struct {
	Name      string // the agent's name
	Policy    string // the policy file, as the config names it
	NomadAddr string
	Listen    string // host:port of the agent's HTTP API
	LogLevel  string // "debug" when empty
	// Cycle is the whole cycle block; the shared one when empty.
	Cycle string
	// Extra is appended: more blocks (device_stats, consul...).
	Extra string
}

// defaultCycle decides quickly, so the suites' waits stay short.
const defaultCycle = `cycle {
  interval           = "1s"
  debounce           = "100ms"
  admission_deadline = "1m"
}
`

// HCL is the configuration file's text.
func (c ImpactConfig) HCL() string {
	return fmt.Sprintf(`
name         = %q
policy       = %q
parking_pool = "impact-queue"
default_pool = "default"
log_level    = %q
nomad {
  address = %q
}
%shttp {
  listen = %q
}
ha {
  lock_ttl     = "10s"
  state_prefix = "impact"
}
`, c.Name, c.Policy, cmp.Or(c.LogLevel, "debug"), c.NomadAddr, cmp.Or(c.Cycle, defaultCycle), c.Listen) + c.Extra
}

// WriteImpactConfig writes c into dir as <name>.hcl and returns its path.
func WriteImpactConfig(t testing.TB, dir string, c ImpactConfig) string {
	t.Helper()
	path := filepath.Join(dir, c.Name+".hcl")
	if err := os.WriteFile(path, []byte(c.HCL()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
