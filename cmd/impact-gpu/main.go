// Command impact-gpu is the nomad-impact device plugin: NVIDIA GPUs with
// their NVLink/NUMA topology, health and stats, for a Nomad client. Nomad
// starts it from its plugin directory; run by hand it explains how to
// install it (and -version prints its version).
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/device"
	"github.com/impact-sched/nomad-impact/internal/version"
	"github.com/impact-sched/nomad-impact/plugin"
)

const usage = `This binary is a Nomad device plugin: a Nomad client starts it, it is not
meant to be run by hand. To use it, copy it into the client's plugin_dir and
add to the agent's configuration:

  plugin "impact-gpu" {
    config {
      backend  = "nvml"    # or "fake", with fake_topology = "<file>"
      group_by = "model"   # one device group per model (the default)
    }
  }

Jobs then ask for GPUs with device "nvidia/gpu" { count = N }. Every setting
is described in example/agent.hcl of the nomad-impact sources.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	banner := fmt.Sprintf("%s %s: Nomad device plugin for NVIDIA GPUs (topology, health, stats)\n", device.PluginName, version.String())
	if len(args) == 1 {
		switch args[0] {
		case "-version", "--version", "version":
			fmt.Fprint(stdout, banner)
			return 0
		case "-h", "-help", "--help", "help":
			fmt.Fprint(stdout, banner+"\n"+usage)
			return 0
		}
	}
	if os.Getenv(plugin.MagicCookieKey) != plugin.MagicCookieValue {
		// Not started by Nomad: go-plugin would print a generic refusal;
		// say what this is and how to install it instead.
		fmt.Fprint(stderr, banner+"\n"+usage)
		return 1
	}
	// JSON on the original stderr: the Nomad client re-logs these lines
	// with their level (go-plugin swaps os.Stderr once serving starts).
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, JSONFormat: true, Output: stderr})
	p := device.New(logger)
	defer p.Shutdown()
	if err := plugin.ServeDevice(p, plugin.ServeOptions{Logger: logger}); err != nil {
		fmt.Fprintln(stderr, "impact-gpu:", err)
		return 1
	}
	return 0
}
