// Command impact-exec is the impact-exec Nomad task driver plugin (package
// driver) and its helpers: the per-task supervisor, exec-in, a standalone
// rendezvous server and gang-join. A Nomad client starts it from its
// plugin directory; run by hand it explains how to install it (-h also
// lists its subcommands).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/driver"
	"github.com/impact-sched/nomad-impact/driver/executor"
	"github.com/impact-sched/nomad-impact/internal/version"
	"github.com/impact-sched/nomad-impact/plugin"
)

// usage is what `impact-exec -h` prints, and what a run by hand (not
// started by a Nomad client) prints to stderr.
const usage = `This binary is a Nomad task driver plugin: a Nomad client starts it, it is
not meant to be run by hand. To use it, copy it into the client's plugin_dir
and add to the agent's configuration:

  plugin "impact-exec" {
    config {
      rendezvous_addr = "http://<impact agent>:4680"  # or consul_service
    }
  }

Jobs then use driver = "impact-exec" with config { command, args, gang {...} };
every setting is described in driver/README.md and in
example/jobs/distributed-training.nomad.hcl of the nomad-impact sources.

Subcommands:
  impact-exec supervise DIR
        run one task from its state dir DIR; the driver starts one per task
  impact-exec exec-in SPEC -- ARGV...
        run an exec command (script check, nomad alloc exec) inside its
        task's cgroups on cgroup v1; the driver starts it
  impact-exec gang-server -nomad-addr URL [-listen 127.0.0.1:4690] [-ttl 30s]
        a standalone rendezvous server (clusters without an impact agent),
        serving /v1/gang/ until SIGINT or SIGTERM; members authenticate with
        their Nomad workload identity (see gang-server -h)
  impact-exec gang-server -dev [-listen 127.0.0.1:4690]
        the same without authentication, for development: loopback only
  impact-exec gang-join [-addr URL] [-port-label L] [-node-id ID] ...
        the gang barrier for a task of any driver (docker, exec, raw_exec):
        run as a prestart task, it waits for every member of the job and
        writes the rendezvous env to $NOMAD_ALLOC_DIR/impact/gang.env for
        the main task's env template (see gang-join -h)
  impact-exec -version
        print the version
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole impact-exec binary:
//
//	impact-exec                      serve the task driver to a Nomad client
//	impact-exec supervise DIR        run one task (started by the driver)
//	impact-exec exec-in SPEC -- ARGV an exec command in its task's v1
//	                                 cgroups (started by the driver)
//	impact-exec gang-server -nomad-addr URL [-listen ADDR] [-ttl 30s] ...
//	                                 standalone rendezvous server (clusters
//	                                 without an impact agent), authenticated
//	                                 with Nomad workload identities and ACLs
//	impact-exec gang-join [...]      the gang barrier as a prestart task of
//	                                 a job of any driver: writes the
//	                                 rendezvous env for the main task
//	impact-exec gang-server -dev     the same without authentication, on
//	                                 loopback only (development, tests)
//	impact-exec -h | -version        help, version
//
// Run by hand without a subcommand it explains itself instead of serving
// (go-plugin would only print a generic refusal). It returns the process
// exit code.
func run(args []string, stdout, stderr io.Writer) int {
	banner := fmt.Sprintf("%s %s: Nomad task driver with gang barrier, rendezvous env and checkpoint-aware stop\n", driver.PluginName, version.String())
	if len(args) > 0 {
		switch args[0] {
		case "supervise":
			if len(args) != 2 {
				fmt.Fprintln(stderr, "usage: impact-exec supervise DIR")
				return 2
			}
			logger := hclog.New(&hclog.LoggerOptions{Name: driver.PluginName, Output: stderr, Level: hclog.Info})
			return executor.Supervise(args[1], logger)
		case "gang-server":
			return gangServer(args[1:], stderr)
		case "exec-in":
			return execIn(args[1:], stderr)
		case "gang-join":
			return gangJoin(args[1:], stdout, stderr)
		case "-h", "-help", "--help", "help":
			fmt.Fprint(stdout, banner+"\n"+usage)
			return 0
		case "-version", "--version", "version":
			fmt.Fprint(stdout, banner)
			return 0
		default:
			fmt.Fprintf(stderr, "impact-exec: unknown argument %q\n\n%s", args[0], usage)
			return 2
		}
	}
	if os.Getenv(plugin.MagicCookieKey) != plugin.MagicCookieValue {
		fmt.Fprint(stderr, banner+"\n"+usage)
		return 1
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "impact-exec: locating own binary: %v\n", err)
		return 1
	}
	// JSON on the original stderr: the Nomad client re-logs these lines
	// with their level (go-plugin swaps os.Stderr once serving starts).
	logger := hclog.New(&hclog.LoggerOptions{Name: driver.PluginName, Output: stderr, Level: hclog.Debug, JSONFormat: true})
	if err := plugin.ServeDriver(driver.New(logger, exe), plugin.ServeOptions{Logger: logger}); err != nil {
		fmt.Fprintf(stderr, "impact-exec: %v\n", err)
		return 1
	}
	return 0
}

// execIn is `impact-exec exec-in SPEC -- ARGV...` (driver.ExecIn); it
// returns only on failure (exit status 126, 2 for bad usage).
func execIn(args []string, stderr io.Writer) int {
	if len(args) < 3 || args[1] != "--" {
		fmt.Fprintln(stderr, "usage: impact-exec exec-in SPEC -- ARGV... (started by the driver)")
		return 2
	}
	err := driver.ExecIn(args[0], args[2:])
	if errors.Is(err, driver.ErrExecInSpec) {
		fmt.Fprintf(stderr, "impact-exec exec-in: %v\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "impact-exec: %v\n", err)
	return 126
}
