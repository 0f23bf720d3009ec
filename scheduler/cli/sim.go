package cli

import (
	"fmt"
	"io"
)

// simCommand is a placeholder until the sim subcommand lands.
func simCommand() Command {
	return Command{
		Synopsis: "(not built yet)",
		Run: func(_ []string, _, stderr io.Writer) int {
			fmt.Fprintln(stderr, "impact sim: not implemented yet")
			return 1
		},
	}
}
