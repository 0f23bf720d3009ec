package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/impact-sched/nomad-impact/auth"
	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
)

const queueHelp = `Usage: impact queue [options]

  Shows the jobs the impact scheduler manages: waiting jobs first, in the
  order they will be admitted (highest impact score first), then jobs whose
  impact_* meta is invalid (parked until fixed), then jobs being admitted
  and running. For running jobs UTIL is the latest mean utilisation of
  their GPUs (from the device stats the leader polls; "-" when unknown) and
  IDLE how long it has stayed below their tier's idle threshold, marked
  "idle" once that lasted the tier's idle duration and "hung" when every
  allocation is idle at once. NEEDS is the run time the scheduler expects
  the job to need from the start of a run, by which it orders a tier
  (shortest first) and backfills: impact_walltime less the work earlier
  runs saved (impact_progress); "-" when unknown. Reads GET /v1/queue
  of an impact agent; a standby agent answers too, with the view it
  computed but does not act on (it polls no stats, so it shows no
  utilisation).

Options:

  -address=<addr>   The impact agent's HTTP address. Defaults to the
                    IMPACT_ADDR environment variable, else %s.
  -json             Print the agent's JSON answer (filtered by -waiting),
                    for scripts.
  -waiting          Only list jobs still parked: waiting and invalid ones.
` + authHelp

func queueCommand() Command { return queueCmd(os.Getenv) }

func queueCmd(getenv func(string) string) Command {
	return Command{
		Synopsis: "List the impact scheduler's queue (table, or -json)",
		Run: func(args []string, stdout, stderr io.Writer) int {
			fs := flag.NewFlagSet("queue", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			address := fs.String("address", "", "")
			asJSON := fs.Bool("json", false, "")
			waiting := fs.Bool("waiting", false, "")
			if code, done := parseFlags(fs, args, stdout, stderr, fmt.Sprintf(queueHelp, agentapi.DefaultAddress)); done {
				return code
			}
			if fs.NArg() > 0 {
				fmt.Fprintf(stderr, "impact queue: unexpected argument %q (see impact queue -h)\n", fs.Arg(0))
				return 1
			}
			c, err := agentClient(*address, getenv)
			if err != nil {
				fmt.Fprintf(stderr, "impact queue: %v\n", err)
				return 1
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			q, err := c.Queue(ctx)
			if err != nil {
				fmt.Fprintf(stderr, "impact queue: %v\n", err)
				return 1
			}
			if *waiting {
				kept := q.Jobs[:0]
				for _, e := range q.Jobs {
					if e.State == agentapi.StateWaiting || e.State == agentapi.StateInvalid {
						kept = append(kept, e)
					}
				}
				q.Jobs = kept
			}
			if *asJSON {
				return printJSON(stdout, stderr, q)
			}
			printQueue(stdout, q)
			return 0
		},
	}
}

func printQueue(w io.Writer, q agentapi.Queue) {
	role := "leader"
	if !q.Leader {
		role = "standby (view computed, not acted on)"
	}
	fmt.Fprintf(w, "Cluster: %d/%d healthy GPUs allocated, %d jobs waiting for %d GPUs (as of %s, %s)\n\n",
		q.Cluster.AllocatedGPUs, q.Cluster.HealthyGPUs, q.Cluster.WaitingJobs, q.Cluster.WaitingGPUs,
		q.GeneratedAt.UTC().Format(time.RFC3339), role)
	if len(q.Jobs) == 0 {
		fmt.Fprintln(w, "No managed jobs.")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "POS\tJOB\tSTATE\tTIER\tPROJECT\tGPUS\tALLOCS\tSCORE\tWAITED\tNEEDS\tUTIL\tIDLE\tREASON")
	for _, e := range q.Jobs {
		pos := "-"
		if e.Position > 0 {
			pos = fmt.Sprint(e.Position)
		}
		waited := "-"
		if e.State == agentapi.StateWaiting || e.State == agentapi.StateInvalid {
			waited = formatDuration(time.Duration(e.WaitSeconds * float64(time.Second)))
		}
		reason := e.Summary
		if reason == "" {
			reason = e.Reason
		}
		if len(e.Errors) > 0 {
			reason = "invalid meta: " + strings.Join(e.Errors, "; ")
		}
		needs := "-"
		if left := e.Left(); left > 0 {
			needs = formatDuration(left)
		}
		util, idle := utilColumns(e)
		if e.IdleNote != "" {
			reason = strings.TrimPrefix(strings.TrimSuffix(reason, ".")+"; "+e.IdleNote, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%.2f\t%s\t%s\t%s\t%s\t%s\n",
			pos, jobName(e), e.State, dash(e.Tier), dash(e.Project), e.GPUs, e.Allocations, e.Score, waited, needs, util, idle, dash(reason))
	}
	tw.Flush()
}

// utilColumns formats a running job's utilisation and idle time.
func utilColumns(e agentapi.Entry) (util, idle string) {
	if e.Utilization == nil {
		return "-", "-"
	}
	util = fmt.Sprintf("%.0f%%", *e.Utilization)
	idle = "-"
	if e.IdleSeconds > 0 {
		idle = formatDuration(time.Duration(e.IdleSeconds * float64(time.Second)))
	}
	switch {
	case e.Hung:
		idle += " hung"
	case e.Idle:
		idle += " idle"
	}
	return util, idle
}

// parseFlags parses flags that may come before or after positional
// arguments ("impact explain JOB -json" works as people type it). done is
// true when the command must return code now (help or a flag error).
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer, help string) (code int, done bool) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				io.WriteString(stdout, help)
				return 0, true
			}
			fmt.Fprintf(stderr, "impact %s: %v\n\n%s", fs.Name(), err, help)
			return 1, true
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	// Re-parse only the positionals so fs.Args() returns them.
	_ = fs.Parse(append([]string{"--"}, positional...))
	return 0, false
}

// Environment of the agent client besides IMPACT_ADDR.
const (
	tokenEnv      = "IMPACT_TOKEN" // else NOMAD_TOKEN
	caCertEnv     = "IMPACT_CACERT"
	clientCertEnv = "IMPACT_CLIENT_CERT"
	clientKeyEnv  = "IMPACT_CLIENT_KEY"
)

// authHelp is the part of each reading command's help about credentials.
const authHelp = `
Environment:

  IMPACT_TOKEN, else NOMAD_TOKEN   Nomad ACL token sent to the agent (when
                    Nomad has ACLs, the agent shows only the namespaces it
                    may read jobs in).
  IMPACT_CACERT     CA file verifying an agent served over https; with
  IMPACT_CLIENT_CERT and IMPACT_CLIENT_KEY for an agent that asks for a
                    client certificate (http.tls_client_ca).
`

// agentClient is the client of the agent at -address (else IMPACT_ADDR),
// with the token and TLS settings of the environment.
func agentClient(flagAddr string, getenv func(string) string) (*agentapi.Client, error) {
	addr := flagAddr
	if addr == "" {
		addr = getenv(agentapi.AddressEnv)
	}
	var hc *http.Client
	if ca, cert, key := getenv(caCertEnv), getenv(clientCertEnv), getenv(clientKeyEnv); ca != "" || cert != "" || key != "" {
		cfg, err := auth.ClientTLS(ca, cert, key, "", false)
		if err != nil {
			return nil, fmt.Errorf("%s/%s/%s: %w", caCertEnv, clientCertEnv, clientKeyEnv, err)
		}
		hc = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	}
	c, err := agentapi.NewClient(addr, hc)
	if err != nil {
		return nil, err
	}
	tok := getenv(tokenEnv)
	if tok == "" {
		tok = getenv("NOMAD_TOKEN")
	}
	return c.WithToken(tok), nil
}

func printJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(stderr, "impact: encoding JSON: %v\n", err)
		return 1
	}
	return 0
}

func jobName(e agentapi.Entry) string {
	if e.Namespace == "" || e.Namespace == "default" {
		return e.Job
	}
	return e.Namespace + "/" + e.Job
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// formatDuration rounds to what a person wants to read: 45s, 12m30s, 3h20m, 2d4h.
func formatDuration(d time.Duration) string { return agentapi.FormatDuration(d) }
