package driver

// `impact-exec gang-join` (GangJoin here; its flags are in cmd/impact-exec):
// the gang barrier for a task of any driver (docker, exec, raw_exec,
// podman...). It runs as a prestart lifecycle task of each allocation of a
// gang job, joins the gang with that task's workload identity, waits until
// every member has joined and writes the rendezvous env (the variables
// impact-exec gives its own tasks) to a file in the allocation directory.
// Nomad then starts the main task, whose env template reads that file (see
// driver/README.md, "Gangs for any driver").

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/impact-sched/nomad-impact/auth"
	"github.com/impact-sched/nomad-impact/gang"
)

// GangEnvFile is where gang-join writes the rendezvous env by default,
// relative to the allocation directory (NOMAD_ALLOC_DIR): every task of
// the allocation sees it (a docker task at /alloc/impact/gang.env), and a
// template of the main task reads it as source = "../alloc/impact/gang.env".
const GangEnvFile = "impact/gang.env"

// GangJoinOptions are gang-join's settings (its flags).
type GangJoinOptions struct {
	Addr       string        // rendezvous base URL
	Out        string        // env file
	Name       string        // narrows the gang: <ns>:<job>:<name>
	Size       int           // members; 0 = the job's allocation count
	Timeout    time.Duration // barrier timeout
	Heartbeat  time.Duration // heartbeat period while waiting (TTL = 3x)
	PortLabel  string        // group port that is MASTER_ADDR/PORT at rank 0
	MasterPort int           // MASTER_PORT without a port label
	Advertise  string        // MASTER_ADDR without a port label
	NodeID     string        // the member's node (NODE_RANK counts them)
	Identity   string        // workload identity name
	CACert     string
	ClientCert string
	ClientKey  string
}

// Validate says what is wrong with the options, naming gang-join's flags.
func (o GangJoinOptions) Validate() error {
	switch {
	case o.Addr == "":
		return errors.New("no rendezvous endpoint: pass -addr http(s)://<impact agent>:4680 (or set IMPACT_RENDEZVOUS_ADDR)")
	case o.Out == "":
		return errors.New("no -out and no NOMAD_ALLOC_DIR: run it as a task of the job (a prestart lifecycle task), or pass -out")
	case o.Size < 0:
		return errors.New("-size must be >= 0")
	case o.Timeout <= 0:
		return errors.New("-timeout must be positive")
	case o.Heartbeat <= 0:
		return errors.New("-heartbeat must be positive")
	case (o.ClientCert == "") != (o.ClientKey == ""):
		return errors.New("-client-cert and -client-key go together")
	}
	return checkURL("-addr", o.Addr)
}

// gangJoinRequest builds the member's join from the Nomad task env.
func gangJoinRequest(o GangJoinOptions, env map[string]string) (gangID, member string, req gang.JoinRequest, err error) {
	ns := firstNonEmpty(env["NOMAD_NAMESPACE"], "default")
	job := env["NOMAD_JOB_ID"]
	allocID, task := env["NOMAD_ALLOC_ID"], env["NOMAD_TASK_NAME"]
	if job == "" || allocID == "" || task == "" {
		return "", "", req, errors.New("not in a Nomad task: NOMAD_JOB_ID, NOMAD_ALLOC_ID and NOMAD_TASK_NAME must be set (run gang-join as a task of the job)")
	}
	gangID = ns + ":" + job
	if o.Name != "" {
		gangID += ":" + o.Name
	}
	allocIndex := 0
	if v := env["NOMAD_ALLOC_INDEX"]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return "", "", req, fmt.Errorf("NOMAD_ALLOC_INDEX %q is not an index", v)
		}
		allocIndex = n
	}
	host, port := "", o.MasterPort
	if o.PortLabel != "" {
		host = env["NOMAD_IP_"+o.PortLabel]
		p := env["NOMAD_HOST_PORT_"+o.PortLabel]
		if host == "" || p == "" {
			return "", "", req, fmt.Errorf("-port-label %q: the group has no such port (no NOMAD_IP_%s / NOMAD_HOST_PORT_%s in the task env)", o.PortLabel, o.PortLabel, o.PortLabel)
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return "", "", req, fmt.Errorf("-port-label %q: port %q: %w", o.PortLabel, p, err)
		}
		port = n
	}
	if port <= 0 || port > 65535 {
		return "", "", req, fmt.Errorf("master port must be in 1..65535, got %d", port)
	}
	host = firstNonEmpty(host, o.Advertise)
	if host == "" {
		host = localAddrFor(o.Addr)
	}
	member = gang.MemberID(allocID, task)
	req = gang.JoinRequest{
		Size: o.Size, Namespace: ns, JobID: job, AllocID: allocID, AllocName: env["NOMAD_ALLOC_NAME"],
		AllocIndex: allocIndex, Group: env["NOMAD_GROUP_NAME"], Task: task,
		NodeID: firstNonEmpty(o.NodeID, host), NodeName: o.NodeID,
		Addr: host, Port: port, TTL: (3 * o.Heartbeat).String(),
	}
	return gangID, member, req, req.Validate()
}

// GangJoin runs the barrier of the task whose Nomad task env is env and
// writes the env file o.Out, saying how far it got on progress. The member is then
// reported done to the rendezvous server (its part, the rendezvous, is
// over): nothing of it heartbeats afterwards, and once every member has
// done so the gang is done, so a requeued run starts a new generation.
// Failures of the running gang are the impact agent's to handle: it
// requeues a gang that lost a member whole, whatever the driver.
func GangJoin(ctx context.Context, o GangJoinOptions, env map[string]string, progress io.Writer) (gang.Assignment, error) {
	if err := o.Validate(); err != nil {
		return gang.Assignment{}, err
	}
	// A file left by an earlier attempt of this task must not be read as
	// this one's.
	if err := os.Remove(o.Out); err != nil && !errors.Is(err, os.ErrNotExist) {
		return gang.Assignment{}, fmt.Errorf("removing the old %s: %w", o.Out, err)
	}
	gangID, member, req, err := gangJoinRequest(o, env)
	if err != nil {
		return gang.Assignment{}, err
	}
	client, err := gangJoinClient(o, env)
	if err != nil {
		return gang.Assignment{}, err
	}
	fmt.Fprintf(progress, "joining gang %s as %s (rendezvous %s, timeout %s)\n", gangID, member, o.Addr, o.Timeout)
	a, err := client.Barrier(ctx, gang.BarrierConfig{
		Gang: gangID, Member: member, Join: req, Timeout: o.Timeout, Heartbeat: o.Heartbeat,
		Progress: func(st gang.Status) {
			if st.Size > 0 {
				fmt.Fprintf(progress, "gang %s: %d of %d members arrived\n", gangID, st.Arrived, st.Size)
			}
		},
	})
	if err != nil {
		return gang.Assignment{}, err
	}
	if err := writeGangEnv(o.Out, a); err != nil {
		// Not reported as an exit: the member fails, its TTL ends it in
		// the registry, and the impact agent requeues the gang.
		return gang.Assignment{}, err
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := client.Exit(ectx, gangID, member, gang.ExitRequest{ExitCode: 0, Reason: "gang-join: rendezvous env written"}); err != nil {
		// The env is written: the main task may start. The member then
		// ends in the registry when its TTL passes.
		fmt.Fprintf(progress, "warning: could not report the end of the rendezvous to the server: %v\n", err)
	}
	return a, nil
}

func gangJoinClient(o GangJoinOptions, env map[string]string) (*gang.Client, error) {
	hc := &http.Client{}
	if o.CACert != "" || o.ClientCert != "" {
		cfg, err := auth.ClientTLS(o.CACert, o.ClientCert, o.ClientKey, "", false)
		if err != nil {
			return nil, fmt.Errorf("rendezvous TLS: %w", err)
		}
		hc.Transport = &http.Transport{TLSClientConfig: cfg}
	}
	c, err := gang.NewClient(o.Addr, hc)
	if err != nil {
		return nil, err
	}
	file := ""
	if d := env["NOMAD_SECRETS_DIR"]; d != "" {
		file = filepath.Join(d, "nomad_"+o.Identity+".jwt")
	}
	label := "NOMAD_TOKEN_" + o.Identity
	return c.WithCredential(gang.IdentityCredential{File: file, Env: env[label], Label: label}), nil
}

// GangEnv renders an assignment as the env file gang-join writes: one
// KEY="value" line per variable, sorted, values JSON-escaped, which is the
// format Nomad parses for a template with env = true (go-envparse).
func GangEnv(a gang.Assignment) []byte {
	env := a.Env()
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteString("# Written by impact-exec gang-join: the rendezvous of this allocation's gang.\n")
	for _, k := range keys {
		var v bytes.Buffer
		enc := json.NewEncoder(&v)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(env[k])
		fmt.Fprintf(&b, "%s=%s\n", k, bytes.TrimSpace(v.Bytes()))
	}
	return b.Bytes()
}

// writeGangEnv writes the env file atomically (a reader sees the whole
// file or none), readable by the main task's user.
func writeGangEnv(path string, a gang.Assignment) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("writing the rendezvous env: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".gang.env-*")
	if err != nil {
		return fmt.Errorf("writing the rendezvous env: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(GangEnv(a))
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("writing the rendezvous env %s: %w", path, err)
	}
	return nil
}
