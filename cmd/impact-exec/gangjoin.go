package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/impact-sched/nomad-impact/driver"
	"github.com/impact-sched/nomad-impact/gang"
)

// gangJoinUsage is gang-join's -h.
const gangJoinUsage = `usage: impact-exec gang-join [options]

Joins this allocation's gang at the impact rendezvous endpoint, waits until
every member has joined, writes the rendezvous env (WORLD_SIZE, RANK,
NODE_RANK, NNODES, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
IMPACT_GANG_ID, IMPACT_GANG_EPOCH) to -out and exits 0. Meant as a prestart
lifecycle task (raw_exec or exec) beside a main task of any driver, whose
template { source = "../alloc/impact/gang.env" env = true } then gives the
main task that env. It reads the Nomad task env (NOMAD_ALLOC_ID,
NOMAD_JOB_ID, ...) and presents the task's workload identity
(secrets/nomad_<identity>.jwt, identity { file = true }).

Exit codes: 0 the gang is complete and -out written; 1 the barrier timed
out, the gang failed or was stopped, or the join was refused; 2 bad usage.

`

// gangJoin is `impact-exec gang-join` (driver.GangJoin).
func gangJoin(args []string, stdout, stderr io.Writer) int {
	env := environ()
	opts, code := parseGangJoinFlags(args, env, stderr)
	if code >= 0 {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	a, err := driver.GangJoin(ctx, opts, env, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "impact-exec gang-join: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "gang %s (epoch %d) complete: rank %d of %d, node rank %d of %d, master %s:%d; env written to %s\n",
		a.Gang, a.Generation, a.Rank, a.WorldSize, a.NodeRank, a.NNodes, a.MasterAddr, a.MasterPort, opts.Out)
	return 0
}

func environ() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// parseGangJoinFlags returns the options, or an exit code >= 0 when the
// command should end (help, bad usage).
func parseGangJoinFlags(args []string, env map[string]string, stderr io.Writer) (driver.GangJoinOptions, int) {
	var o driver.GangJoinOptions
	fs := flag.NewFlagSet("gang-join", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Addr, "addr", cmp.Or(env["IMPACT_RENDEZVOUS_ADDR"], env["IMPACT_ADDR"]), "base URL of the rendezvous endpoint: the impact agent, or impact-exec gang-server (default $IMPACT_RENDEZVOUS_ADDR, else $IMPACT_ADDR)")
	defOut := ""
	if d := env["NOMAD_ALLOC_DIR"]; d != "" {
		defOut = filepath.Join(d, driver.GangEnvFile)
	}
	fs.StringVar(&o.Out, "out", defOut, "file the rendezvous env is written to (default $NOMAD_ALLOC_DIR/"+driver.GangEnvFile+")")
	fs.StringVar(&o.Name, "name", "", "narrows the gang to \"<namespace>:<job>:<name>\" (default: the whole job is one gang)")
	fs.IntVar(&o.Size, "size", 0, "members of the gang; 0 = the job's allocation count, asked of the rendezvous server")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "barrier timeout")
	fs.DurationVar(&o.Heartbeat, "heartbeat", 5*time.Second, "heartbeat period while waiting (the member's TTL is 3x)")
	fs.StringVar(&o.PortLabel, "port-label", "", "group port whose address and port are MASTER_ADDR/MASTER_PORT when this member is rank 0")
	fs.IntVar(&o.MasterPort, "master-port", 29500, "MASTER_PORT without -port-label")
	fs.StringVar(&o.Advertise, "advertise", "", "MASTER_ADDR without -port-label (default: the local address that routes to the rendezvous server)")
	fs.StringVar(&o.NodeID, "node-id", env["IMPACT_NODE_ID"], "this member's node, which NODE_RANK and NNODES count (pass \"${node.unique.id}\"; default $IMPACT_NODE_ID, else the host name)")
	fs.StringVar(&o.Identity, "identity", gang.IdentityName, "name of the task's workload identity presented to the endpoint (secrets/nomad_<name>.jwt, else NOMAD_TOKEN_<name>)")
	fs.StringVar(&o.CACert, "ca-cert", env["IMPACT_CACERT"], "CA file verifying an https endpoint (default $IMPACT_CACERT)")
	fs.StringVar(&o.ClientCert, "client-cert", "", "client certificate for an endpoint that wants mTLS")
	fs.StringVar(&o.ClientKey, "client-key", "", "key of -client-cert")
	fs.Usage = func() {
		fmt.Fprint(stderr, gangJoinUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, 0
		}
		return o, 2
	}
	bad := func(format string, a ...any) (driver.GangJoinOptions, int) {
		fmt.Fprintf(stderr, "impact-exec gang-join: "+format+"\n", a...)
		return o, 2
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q", fs.Arg(0))
	}
	if err := o.Validate(); err != nil {
		return bad("%v", err)
	}
	if o.NodeID == "" {
		if h, err := os.Hostname(); err == nil {
			o.NodeID = h
		}
	}
	return o, -1
}
