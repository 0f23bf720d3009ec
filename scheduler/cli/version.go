package cli

import (
	"fmt"
	"io"
)

// Version is set at build time with -ldflags "-X ...cli.Version=...".
var Version = "0.1.0-dev"

func versionCommand() Command {
	return Command{
		Synopsis: "Print the version",
		Run: func(_ []string, stdout, _ io.Writer) int {
			fmt.Fprintf(stdout, "impact %s\n", Version)
			return 0
		},
	}
}
