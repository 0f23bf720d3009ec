package driver

import (
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

// Main is the whole impact-exec binary:
//
//	impact-exec                      serve the task driver to a Nomad client
//	impact-exec supervise DIR        run one task (started by the driver)
//	impact-exec gang-server [-listen 127.0.0.1:4690] [-ttl 30s]
//	                                 standalone rendezvous server (tests, e2e,
//	                                 clusters without an impact agent)
//
// It returns the process exit code.
func Main(args []string, stderr io.Writer) int {
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
		case "-h", "-help", "--help", "help":
			fmt.Fprintln(stderr, "impact-exec: Nomad task driver plugin (run by a Nomad client); subcommands: supervise DIR, gang-server")
			return 0
		}
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "impact-exec: locating own binary: %v\n", err)
		return 1
	}
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
	if err := fs.Parse(args); err != nil {
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
