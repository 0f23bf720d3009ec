package cli

import (
	"fmt"
	"io"
)

// queueCommand is a placeholder until the queue subcommand lands.
func queueCommand() Command {
	return Command{
		Synopsis: "(not built yet)",
		Run: func(_ []string, _, stderr io.Writer) int {
			fmt.Fprintln(stderr, "impact queue: not implemented yet")
			return 1
		},
	}
}
