// Package cli implements the `impact` command line: one file per
// subcommand, each a constructor returning a Command. Keeping the dispatch
// table in one function (not package-level state) lets tests build their
// own set of commands.
package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// Command is one `impact` subcommand.
type Command struct {
	// Synopsis is the one-line description shown by `impact --help`.
	Synopsis string
	// Run executes the subcommand with its arguments (after the name) and
	// returns the process exit code.
	Run func(args []string, stdout, stderr io.Writer) int
}

// Commands returns the subcommands of `impact`, by name.
func Commands() map[string]Command {
	return map[string]Command{
		"agent":      agentCommand(),
		"queue":      queueCommand(),
		"explain":    explainCommand(),
		"sim":        simCommand(),
		"robustness": robustnessCommand(),
		"version":    versionCommand(),
	}
}

// Run dispatches args to a subcommand and returns the exit code.
func Run(args []string, stdout, stderr io.Writer) int {
	cmds := Commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout, cmds)
		if len(args) == 0 {
			return 1
		}
		return 0
	}
	if args[0] == "-version" || args[0] == "--version" {
		args[0] = "version"
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "impact: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return 1
	}
	return cmd.Run(args[1:], stdout, stderr)
}

func usage(w io.Writer, cmds map[string]Command) {
	names := make([]string, 0, len(cmds))
	width := 0
	for n := range cmds {
		names = append(names, n)
		width = max(width, len(n))
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("Usage: impact <command> [options]\n\n")
	b.WriteString("Impact-aware GPU scheduling for HashiCorp Nomad.\n\nCommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, n, cmds[n].Synopsis)
	}
	b.WriteString("\nRun 'impact <command> -h' for a command's options.\n")
	io.WriteString(w, b.String())
}
