package cli

import (
	"fmt"
	"io"
)

// explainCommand is a placeholder until the explain subcommand lands.
func explainCommand() Command {
	return Command{
		Synopsis: "(not built yet)",
		Run: func(_ []string, _, stderr io.Writer) int {
			fmt.Fprintln(stderr, "impact explain: not implemented yet")
			return 1
		},
	}
}
