package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/internal/version"
	"github.com/impact-sched/nomad-impact/scheduler/agent"
	"github.com/impact-sched/nomad-impact/scheduler/agent/config"
)

const agentHelp = `Usage: impact agent [options]

  Runs the impact scheduler next to Nomad. Jobs submitted to the parking
  node pool (default "impact-queue", created at start) wait there until the
  scheduler admits them in order of impact, whole gangs at once, on
  well-connected GPUs, preempting less important work when it pays off.

  The agent watches Nomad's event stream, decides on a timer and after
  events, and serves its view over HTTP (/v1/health, /v1/queue,
  /v1/explain/<job>, /metrics, and the task driver's /v1/gang/). It polls
  the clients' GPU device stats for the utilisation metrics (device_stats).
  Run two or more for high availability: one leads (a Nomad Variables lock),
  the others stand by with a warm model; one takes over at once when the
  leader stops cleanly, and after about three ha.lock_ttl when it dies.
  SIGINT or SIGTERM stops the agent: preemptions under way finish (up to
  30s), then it releases the lock.

  Settings come from, lowest to highest precedence: defaults, the
  environment (NOMAD_ADDR, NOMAD_TOKEN, NOMAD_REGION, NOMAD_NAMESPACE,
  NOMAD_CACERT, NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY, NOMAD_TLS_SERVER_NAME,
  NOMAD_SKIP_VERIFY, CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN), the -config
  files in order, then the flags below. See example/impact.hcl.

Options:

  -config=<path>          An HCL config file; repeat to merge several.
  -policy=<path>          The scheduling policy file (overrides "policy").
  -nomad-address=<url>    Nomad's HTTP API (overrides nomad.address).
  -http-listen=<addr>     host:port of the agent's API (overrides http.listen).
  -default-pool=<pool>    Pool of admitted jobs without impact_pool
                          (overrides default_pool).
  -name=<name>            This agent's name among several (default: host name).
  -log-level=<level>      trace, debug, info, warn, error or off.
  -log-json               Log JSON lines.
  -check                  Load and validate the configuration and policy,
                          print every effective setting with where it came
                          from (tokens redacted), and exit without
                          contacting Nomad.

  Exit status: 0 after a clean stop (or a valid -check), 1 on invalid
  configuration, a start-up failure (such as the parking pool that cannot be
  created) or an unrecoverable error.
`

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func agentCommand() Command {
	return Command{
		Synopsis: "Run the impact scheduler service next to Nomad",
		Run: func(args []string, stdout, stderr io.Writer) int {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runAgent(ctx, args, os.Getenv, stdout, stderr)
		},
	}
}

// runAgent is the agent command with its environment and lifetime
// injected, for tests.
func runAgent(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var files multiFlag
	fs.Var(&files, "config", "")
	check := fs.Bool("check", false, "")
	flagPaths := map[string]string{
		"policy":        "policy",
		"nomad-address": "nomad.address",
		"http-listen":   "http.listen",
		"name":          "name",
		"default-pool":  "default_pool",
		"log-level":     "log_level",
	}
	values := map[string]*string{}
	for name := range flagPaths {
		values[name] = fs.String(name, "", "")
	}
	logJSON := fs.Bool("log-json", false, "")
	if code, done := parseFlags(fs, args, stdout, stderr, agentHelp); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "impact agent: unexpected argument %q (see impact agent -h)\n", fs.Arg(0))
		return 1
	}
	flags := &config.Config{}
	var flagErr error
	fs.Visit(func(f *flag.Flag) {
		if path, ok := flagPaths[f.Name]; ok && flagErr == nil {
			flagErr = flags.SetFlag(path, f.Name, *values[f.Name])
		}
		if f.Name == "log-json" && flagErr == nil {
			flagErr = flags.SetFlag("log_json", "log-json", fmt.Sprint(*logJSON))
		}
	})
	if flagErr != nil {
		fmt.Fprintf(stderr, "impact agent: %v\n", flagErr)
		return 1
	}
	cfg, err := config.Load(files, getenv, flags)
	if cfg != nil && cfg.PolicyFile != "" {
		// The policy file's problems with the config's, at once.
		if _, perr := cfg.LoadPolicy(); perr != nil {
			err = config.JoinErrors(err, perr)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "impact agent: invalid configuration:\n%s\n", indent(err.Error()))
		return 1
	}
	logger := hclog.New(&hclog.LoggerOptions{
		Name:       "impact",
		Level:      hclog.LevelFromString(cfg.LogLevel),
		JSONFormat: cfg.JSONLogs(),
		Output:     stderr,
	})
	svc, err := agent.NewService(cfg, version.String(), logger)
	if err != nil {
		fmt.Fprintf(stderr, "impact agent: %v\n", err)
		return 1
	}
	if *check {
		printConfig(stdout, cfg)
		return 0
	}
	logger.Info("starting", "version", version.String(), "nomad", cfg.Nomad.Address, "parking_pool", cfg.ParkingPool,
		"policy", cfg.PolicyFile, "listen", cfg.HTTP.Listen)
	if err := svc.Run(ctx); err != nil {
		logger.Error("agent stopped", "error", err)
		return 1
	}
	logger.Info("stopped")
	return 0
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// printConfig shows the effective configuration and where each value came
// from, with secrets redacted. Unset settings are left out.
func printConfig(w io.Writer, cfg *config.Config) {
	fmt.Fprintln(w, "Configuration is valid. Effective settings:")
	for _, st := range cfg.Settings() {
		if st.Value == "" {
			continue
		}
		origin := st.Origin
		if origin == "" {
			origin = "derived"
		}
		fmt.Fprintf(w, "  %-26s %-40s (%s)\n", st.Path, st.Value, origin)
	}
}
