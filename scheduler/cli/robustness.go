package cli

import "github.com/impact-sched/nomad-impact/scheduler/sim/robust"

// robustnessCommand is `impact robustness`, the simulator's robustness
// suite (scheduler/sim/robust).
func robustnessCommand() Command {
	return Command{Synopsis: robust.Synopsis, Run: robust.Main}
}
