package cli

import (
	"fmt"
	"io"

	"github.com/impact-sched/nomad-impact/internal/version"
)

// versionCommand is `impact version` (also `impact -version` and
// `impact --version`, as the plugins answer): the one version of impact,
// impact-gpu and impact-exec (internal/version).
func versionCommand() Command {
	return Command{
		Synopsis: "Print the version (also -version, --version)",
		Run: func(_ []string, stdout, _ io.Writer) int {
			fmt.Fprintf(stdout, "impact %s\n", version.String())
			return 0
		},
	}
}
