package cli

import "github.com/impact-sched/nomad-impact/scheduler/sim/simcmd"

// simCommand is `impact sim`, the trace simulator (scheduler/sim/simcmd).
func simCommand() Command {
	return Command{Synopsis: simcmd.Synopsis, Run: simcmd.Main}
}
