package cli

import (
	"fmt"
	"io"
)

// agentCommand is a placeholder until the agent subcommand lands.
func agentCommand() Command {
	return Command{
		Synopsis: "(not built yet)",
		Run: func(_ []string, _, stderr io.Writer) int {
			fmt.Fprintln(stderr, "impact agent: not implemented yet")
			return 1
		},
	}
}
