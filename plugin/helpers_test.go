package plugin_test

import (
	"os"
	"os/exec"

	"google.golang.org/protobuf/proto"
	"strings"
)

// execBare runs a plugin binary without the handshake environment.
func execBare(bin string) (string, error) {
	cmd := exec.Command(bin)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NOMAD_PLUGIN_MAGIC_COOKIE=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func protoUnmarshalOptions() proto.UnmarshalOptions { return proto.UnmarshalOptions{} }
