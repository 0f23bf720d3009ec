package driver

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/auth"
	"github.com/impact-sched/nomad-impact/driver/executor"
	"github.com/impact-sched/nomad-impact/gang"
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
every setting is described in the package documentation of driver/ and in
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

// Main is the whole impact-exec binary:
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
func Main(args []string, stdout, stderr io.Writer) int {
	banner := fmt.Sprintf("%s %s: Nomad task driver with gang barrier, rendezvous env and checkpoint-aware stop\n", pluginName, version.String())
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
		case "gang-join":
			return gangJoinMain(args[1:], stdout, stderr)
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
	nomadAddr := fs.String("nomad-addr", os.Getenv("NOMAD_ADDR"), "Nomad's HTTP API: its JWKS verifies workload identities, its ACLs the tokens of stop and reads (default $NOMAD_ADDR)")
	audience := fs.String("audience", "impact", "the audience (aud) members' workload identities must carry")
	nomadCA := fs.String("nomad-ca-cert", os.Getenv("NOMAD_CACERT"), "CA file for TLS to Nomad (default $NOMAD_CACERT)")
	nomadCert := fs.String("nomad-client-cert", os.Getenv("NOMAD_CLIENT_CERT"), "client certificate for mTLS to Nomad")
	nomadKey := fs.String("nomad-client-key", os.Getenv("NOMAD_CLIENT_KEY"), "client key for mTLS to Nomad")
	tlsCert := fs.String("tls-cert", "", "serve https with this certificate")
	tlsKey := fs.String("tls-key", "", "key of -tls-cert")
	tlsClientCA := fs.String("tls-client-ca", "", "require client certificates signed by this CA (mTLS)")
	dev := fs.Bool("dev", false, "development mode: NO authentication, anyone who reaches the port may join, stop or read any gang; loopback addresses only")
	devRemote := fs.Bool("dev-remote", false, "with -dev, allow a non-loopback -listen address (unauthenticated on the network!)")
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: impact-exec gang-server -nomad-addr URL [options]
       impact-exec gang-server -dev [-listen 127.0.0.1:PORT]

Serves the gang rendezvous endpoint (/v1/gang/) until SIGINT or SIGTERM.
Members must present their task's Nomad workload identity (the task needs
`+gang.IdentityHint("impact")+`);
stop needs a Nomad ACL token that may submit-job in the gang's namespace.
-dev serves without any authentication, on loopback only.

`)
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
	opts, err := gangServerOptions(gangServerFlags{listen: *listen, nomadAddr: *nomadAddr, audience: *audience,
		nomadCA: *nomadCA, nomadCert: *nomadCert, nomadKey: *nomadKey, tlsCert: *tlsCert, tlsKey: *tlsKey,
		tlsClientCA: *tlsClientCA, dev: *dev, devRemote: *devRemote}, logger)
	if err != nil {
		fmt.Fprintf(stderr, "impact-exec gang-server: %v\n", err)
		return 2
	}
	srv, err := gang.StartServerWith(*listen, gang.RegistryConfig{DefaultTTL: *ttl}, opts, logger)
	if err != nil {
		logger.Error("cannot start", "error", err)
		return 1
	}
	if *dev {
		logger.Warn("DEVELOPMENT MODE: no authentication; anyone who reaches this address can join, stop or read any gang", "url", srv.URL+gang.PathPrefix)
	} else {
		logger.Info("serving rendezvous", "url", srv.URL+gang.PathPrefix, "nomad", *nomadAddr, "audience", *audience)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	<-sigs
	_ = srv.Close()
	return 0
}

type gangServerFlags struct {
	listen, nomadAddr, audience  string
	nomadCA, nomadCert, nomadKey string
	tlsCert, tlsKey, tlsClientCA string
	dev, devRemote               bool
}

// gangServerOptions checks the flags and builds the server's
// authentication (NomadAuth, or none in -dev) and TLS.
func gangServerOptions(f gangServerFlags, logger hclog.Logger) (gang.ServerOptions, error) {
	var opts gang.ServerOptions
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return opts, errors.New("-tls-cert and -tls-key must be set together")
	}
	if f.tlsClientCA != "" && f.tlsCert == "" {
		return opts, errors.New("-tls-client-ca needs -tls-cert and -tls-key")
	}
	if f.tlsCert != "" {
		cfg, err := auth.ServerTLS(f.tlsCert, f.tlsKey, f.tlsClientCA)
		if err != nil {
			return opts, err
		}
		opts.TLS = cfg
	}
	if f.dev {
		if !f.devRemote && !auth.LoopbackListen(f.listen) {
			return opts, fmt.Errorf("-dev serves without authentication, so it listens on loopback only; %q is not a loopback address (add -dev-remote to serve it to the network anyway, or run without -dev against Nomad)", f.listen)
		}
		opts.Auth = gang.DevNoAuth{}
		return opts, nil
	}
	if f.devRemote {
		return opts, errors.New("-dev-remote only applies with -dev")
	}
	if f.nomadAddr == "" {
		return opts, errors.New("set -nomad-addr (or NOMAD_ADDR): members are authenticated with Nomad workload identities, checked against Nomad's JWKS; or -dev for an unauthenticated development server on loopback")
	}
	var tlsCfg *tls.Config
	if f.nomadCA != "" || f.nomadCert != "" {
		c, err := auth.ClientTLS(f.nomadCA, f.nomadCert, f.nomadKey, "", false)
		if err != nil {
			return opts, fmt.Errorf("TLS to Nomad: %w", err)
		}
		tlsCfg = c
	}
	hc, base, err := auth.HTTPClient(f.nomadAddr, tlsCfg, 10*time.Second)
	if err != nil {
		return opts, fmt.Errorf("-nomad-addr: %w", err)
	}
	ids, err := auth.NewIdentityVerifier(auth.IdentityConfig{JWKSURL: base + "/.well-known/jwks.json", HTTP: hc, Audience: f.audience, Logger: logger})
	if err != nil {
		return opts, err
	}
	acl, err := auth.NewACLChecker(auth.ACLConfig{Address: f.nomadAddr, HTTP: hc, Logger: logger})
	if err != nil {
		return opts, err
	}
	opts.Auth = &gang.NomadAuth{Identities: ids, ACL: acl}
	return opts, nil
}
