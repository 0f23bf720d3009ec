package main

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
	"github.com/impact-sched/nomad-impact/gang"
)

// gangServer is `impact-exec gang-server`: a standalone rendezvous server
// (gang.StartServerWith) until SIGINT or SIGTERM.
func gangServer(args []string, stderr io.Writer) int {
	f, code := parseGangServerFlags(args, stderr)
	if code >= 0 {
		return code
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: "gang-server", Output: stderr, Level: hclog.Debug})
	opts, err := gangServerOptions(f, logger)
	if err != nil {
		fmt.Fprintf(stderr, "impact-exec gang-server: %v\n", err)
		return 2
	}
	srv, err := gang.StartServerWith(f.listen, gang.RegistryConfig{DefaultTTL: f.ttl}, opts, logger)
	if err != nil {
		logger.Error("cannot start", "error", err)
		return 1
	}
	if f.dev {
		logger.Warn("DEVELOPMENT MODE: no authentication; anyone who reaches this address can join, stop or read any gang", "url", srv.URL+gang.PathPrefix)
	} else {
		logger.Info("serving rendezvous", "url", srv.URL+gang.PathPrefix, "nomad", f.nomadAddr, "audience", f.audience)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	<-sigs
	_ = srv.Close()
	return 0
}

// gangServerFlags are gang-server's flags.
type gangServerFlags struct {
	listen, nomadAddr, audience  string
	nomadCA, nomadCert, nomadKey string
	tlsCert, tlsKey, tlsClientCA string
	dev, devRemote               bool
	ttl                          time.Duration
}

// parseGangServerFlags returns the flags, or an exit code >= 0 when the
// command should end (help, bad usage).
func parseGangServerFlags(args []string, stderr io.Writer) (gangServerFlags, int) {
	var f gangServerFlags
	fs := flag.NewFlagSet("gang-server", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.listen, "listen", "127.0.0.1:4690", "address to listen on")
	fs.DurationVar(&f.ttl, "ttl", 30*time.Second, "default member TTL")
	fs.StringVar(&f.nomadAddr, "nomad-addr", os.Getenv("NOMAD_ADDR"), "Nomad's HTTP API: its JWKS verifies workload identities, its ACLs the tokens of stop and reads (default $NOMAD_ADDR)")
	fs.StringVar(&f.audience, "audience", "impact", "the audience (aud) members' workload identities must carry")
	fs.StringVar(&f.nomadCA, "nomad-ca-cert", os.Getenv("NOMAD_CACERT"), "CA file for TLS to Nomad (default $NOMAD_CACERT)")
	fs.StringVar(&f.nomadCert, "nomad-client-cert", os.Getenv("NOMAD_CLIENT_CERT"), "client certificate for mTLS to Nomad")
	fs.StringVar(&f.nomadKey, "nomad-client-key", os.Getenv("NOMAD_CLIENT_KEY"), "client key for mTLS to Nomad")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "serve https with this certificate")
	fs.StringVar(&f.tlsKey, "tls-key", "", "key of -tls-cert")
	fs.StringVar(&f.tlsClientCA, "tls-client-ca", "", "require client certificates signed by this CA (mTLS)")
	fs.BoolVar(&f.dev, "dev", false, "development mode: NO authentication, anyone who reaches the port may join, stop or read any gang; loopback addresses only")
	fs.BoolVar(&f.devRemote, "dev-remote", false, "with -dev, allow a non-loopback -listen address (unauthenticated on the network!)")
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
			return f, 0
		}
		return f, 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "impact-exec gang-server: unexpected argument %q\n", fs.Arg(0))
		return f, 2
	}
	return f, -1
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
