// Command impact-gpu is the nomad-impact device plugin: NVIDIA GPUs with
// their NVLink/NUMA topology, health and stats, for a Nomad client. Nomad
// starts it from its plugin directory; it is not meant to be run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/device"
	"github.com/impact-sched/nomad-impact/plugin"
)

func main() {
	// JSON on the original stderr: the Nomad client re-logs these lines
	// with their level (go-plugin swaps os.Stderr once serving starts).
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, JSONFormat: true, Output: os.Stderr})
	p := device.New(logger, device.Options{})
	defer p.Shutdown()
	if err := plugin.ServeDevice(p, plugin.ServeOptions{Logger: logger}); err != nil {
		fmt.Fprintln(os.Stderr, "impact-gpu:", err)
		os.Exit(1)
	}
}
