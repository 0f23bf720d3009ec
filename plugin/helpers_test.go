package plugin_test

import (
	"os"
	"os/exec"
	"strings"

	"github.com/impact-sched/nomad-impact/plugin"
)

// execBare runs a plugin binary without the handshake environment, as an
// operator running it by hand would.
func execBare(bin string) (string, error) {
	cmd := exec.Command(bin)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, plugin.MagicCookieKey+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
