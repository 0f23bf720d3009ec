package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
)

const explainHelp = `Usage: impact explain [options] JOB

  Explains what the impact scheduler decided about one job and why: its
  place in the queue, its impact score and the terms it is made of, the
  reason it waits, in one sentence and then in full (or where it was
  placed: nodes, and the GPU IDs pinned to each allocation with their
  NVLink islands; or what preempted it), any problem with its impact_*
  meta, and the changes of its state the agent saw. Reads GET
  /v1/explain/JOB of an impact agent; the same is on the agent's page
  /ui/job/NAMESPACE/JOB and (numbers rounded) in the Nomad Variable
  nomad/jobs/JOB/impact.

Options:

  -address=<addr>     The impact agent's HTTP address. Defaults to the
                      IMPACT_ADDR environment variable, else %s.
  -namespace=<ns>     The job's Nomad namespace (default: the agent's).
  -json               Print the agent's JSON answer, for scripts.
` + authHelp

func explainCommand() Command { return explainCmd(os.Getenv) }

func explainCmd(getenv func(string) string) Command {
	return Command{
		Synopsis: "Explain the scheduler's decision about a job (table, or -json)",
		Run: func(args []string, stdout, stderr io.Writer) int {
			fs := flag.NewFlagSet("explain", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			address := fs.String("address", "", "")
			namespace := fs.String("namespace", "", "")
			asJSON := fs.Bool("json", false, "")
			help := fmt.Sprintf(explainHelp, agentapi.DefaultAddress)
			if code, done := parseFlags(fs, args, stdout, stderr, help); done {
				return code
			}
			if fs.NArg() != 1 {
				fmt.Fprintf(stderr, "impact explain: want exactly one JOB, got %d arguments\n\n%s", fs.NArg(), help)
				return 1
			}
			c, err := agentClient(*address, getenv)
			if err != nil {
				fmt.Fprintf(stderr, "impact explain: %v\n", err)
				return 1
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			e, err := c.Explain(ctx, *namespace, fs.Arg(0))
			if err != nil {
				fmt.Fprintf(stderr, "impact explain: %v\n", err)
				return 1
			}
			if *asJSON {
				return printJSON(stdout, stderr, e)
			}
			printExplanation(stdout, e)
			return 0
		},
	}
}

func printExplanation(w io.Writer, e agentapi.Explanation) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("Job", e.Namespace+"/"+e.Job)
	state := e.State
	if e.Position > 0 {
		state = fmt.Sprintf("%s (position %d in the queue)", e.State, e.Position)
	}
	row("State", state)
	row("Tier", dash(e.Tier))
	row("Project", dash(e.Project))
	row("GPUs", fmt.Sprintf("%d in %d allocation(s)", e.GPUs, e.Allocations))
	since := "-"
	if !e.Since.IsZero() {
		since = e.Since.UTC().Format(time.RFC3339)
		if e.State == agentapi.StateWaiting || e.State == agentapi.StateInvalid {
			since += fmt.Sprintf(" (waiting %s)", formatDuration(time.Duration(e.WaitSeconds*float64(time.Second))))
		}
	}
	row("Since", since)
	row("Decision", dash(e.Decision))
	if e.Summary != "" {
		row("Summary", e.Summary)
	}
	row("Reason", dash(e.Reason))
	if e.PreemptedBy != "" {
		row("Preempted by", e.PreemptedBy)
	}
	if len(e.Victims) > 0 {
		row("Preempts", strings.Join(e.Victims, ", "))
	}
	if len(e.Nodes) > 0 {
		groups := make([]string, 0, len(e.Nodes))
		for g := range e.Nodes {
			groups = append(groups, g)
		}
		sort.Strings(groups)
		for i, g := range groups {
			k := ""
			if i == 0 {
				k = "Placement"
			}
			row(k, g+": "+strings.Join(e.Nodes[g], ", "))
		}
	}
	for i, p := range e.Placement {
		k := ""
		if i == 0 {
			k = "Pinned"
		}
		row(k, fmt.Sprintf("%s on %s: %s", p.Group, p.Node, gpuList(p.GPUs, p.Islands)))
	}
	for i, w := range e.Warnings {
		k := ""
		if i == 0 {
			k = "Warning"
		}
		row(k, w)
	}
	role := "leader"
	if !e.Leader {
		role = "standby"
	}
	row("Decided", e.GeneratedAt.UTC().Format(time.RFC3339)+" by the "+role)
	tw.Flush()

	fmt.Fprintf(w, "\nImpact score %.3f", e.Score)
	if len(e.Terms) == 0 {
		fmt.Fprintln(w)
	} else {
		fmt.Fprintln(w, " =")
		tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		for _, t := range e.Terms {
			fmt.Fprintf(tw, "  %s\t%+9.3f\t%s\n", t.Name, t.Value, t.Detail)
		}
		tw.Flush()
	}
	if len(e.Errors) > 0 {
		fmt.Fprintln(w, "\nThe job stays parked until its impact_* meta is fixed:")
		for _, msg := range e.Errors {
			fmt.Fprintf(w, "  - %s\n", msg)
		}
	}
	if len(e.History) > 0 {
		fmt.Fprintln(w, "\nHistory (changes this agent saw):")
		tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		for _, h := range e.History {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", h.At.UTC().Format(time.RFC3339), h.State, h.Decision, h.Summary)
		}
		tw.Flush()
	}
}

// gpuList renders GPU IDs with their islands: "GPU-a, GPU-b (island 0),
// GPU-c (island 1)", each island named once, after its last GPU.
func gpuList(ids []string, islands []int) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(id)
		if i < len(islands) && (i+1 == len(ids) || i+1 >= len(islands) || islands[i+1] != islands[i]) {
			fmt.Fprintf(&b, " (island %d)", islands[i])
		}
	}
	return b.String()
}
