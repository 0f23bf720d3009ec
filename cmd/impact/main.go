// Command impact is the impact scheduler: the agent that runs beside Nomad,
// its operator CLI (queue, explain) and the trace simulator.
package main

import (
	"os"

	"github.com/impact-sched/nomad-impact/scheduler/cli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:], os.Stdout, os.Stderr))
}
