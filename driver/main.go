package driver

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/driver/executor"
	"github.com/impact-sched/nomad-impact/driver/gang"
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
every setting is described in the package documentation of driver/ and in
example/jobs/distributed-training.nomad.hcl of the nomad-impact sources.

Subcommands:
  impact-exec supervise DIR
        run one task from its state dir DIR; the driver starts one per task
  impact-exec exec-in SPEC -- ARGV...
        run an exec command (script check, nomad alloc exec) inside its
        task's cgroups on cgroup v1; the driver starts it
  impact-exec gang-server [-listen 127.0.0.1:4690] [-ttl 30s]
        a standalone rendezvous server (tests, clusters without an impact
        agent), serving /v1/gang/ until SIGINT or SIGTERM
  impact-exec -version
        print the version
`

// Main is the whole impact-exec binary:
//
//	impact-exec                      serve the task driver to a Nomad client
//	impact-exec supervise DIR        run one task (started by the driver)
//	impact-exec exec-in SPEC -- ARGV an exec command in its task's v1
//	                                 cgroups (started by the driver)
//	impact-exec gang-server [-listen 127.0.0.1:4690] [-ttl 30s]
//	                                 standalone rendezvous server (tests, e2e,
//	                                 clusters without an impact agent)
//	impact-exec -h | -version        help, version
//
// Run by hand without a subcommand it explains itself instead of serving
// (go-plugin would only print a generic refusal). It returns the process
// exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	banner := fmt.Sprintf("%s %s: Nomad task driver with gang barrier, rendezvous env and checkpoint-aware stop\n", pluginName, pluginVersion)
	if len(args) > 0 {
		switch args[0] {
		case "supervise":
			if len(args) != 2 {
				fmt.Fprintln(stderr, "usage: impact-exec supervise DIR")
				return 2
			}
			logger := hclog.New(&hclog.LoggerOptions{Name: pluginName, Output: stderr, Level: hclog.Info})
			return executor.Supervise(args[1], logger)
		case "gang-server":
			return gangServer(args[1:], stderr)
		case "exec-in":
			return execInMain(args[1:], stderr)
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
	logger := hclog.New(&hclog.LoggerOptions{Name: pluginName, Output: stderr, Level: hclog.Debug, JSONFormat: true})
	if err := plugin.ServeDriver(New(logger, exe), plugin.ServeOptions{Logger: logger}); err != nil {
		fmt.Fprintf(stderr, "impact-exec: %v\n", err)
		return 1
	}
	return 0
}

func gangServer(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("gang-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:4690", "address to listen on")
	ttl := fs.Duration("ttl", 30*time.Second, "default member TTL")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: impact-exec gang-server [-listen ADDR] [-ttl D]\n\nServes the gang rendezvous endpoint (/v1/gang/) until SIGINT or SIGTERM.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "impact-exec gang-server: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "gang-server", Output: stderr, Level: hclog.Debug})
	srv, err := gang.StartServer(*listen, gang.RegistryConfig{DefaultTTL: *ttl}, logger)
	if err != nil {
		logger.Error("cannot start", "error", err)
		return 1
	}
	logger.Info("serving rendezvous", "url", srv.URL+gang.PathPrefix)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	<-sigs
	_ = srv.Close()
	return 0
}
