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
	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

const explainHelp = `Usage: impact explain [options] JOB

  Explains what the impact scheduler decided about one job and why: its
  place in the queue, the engine's status for it, its impact score and
  the terms it is made of, the reason it waits, in one sentence and then
  in full, the nodes that could not take it and why, its reservation (or
  where it was placed: nodes, and the GPU IDs pinned to each allocation
  with their NVLink islands; or what preempted it, or what it preempts),
  any problem with its impact_* meta, and the changes of its state the
  agent saw. Reads GET /v1/explain/JOB of an impact agent (-json: the
  engine's own explanation is under "engine"); the same is on the agent's
  page /ui/job/NAMESPACE/JOB and (numbers rounded, the wait left out) in
  the Nomad Variable nomad/jobs/JOB/impact.

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
	rows := func(k string, vs []string) {
		for i, v := range vs {
			if i > 0 {
				k = ""
			}
			row(k, v)
		}
	}
	printFacts(row, e)
	x := e.Decided()
	rows("Rejected", rejectedLines(x.Rejected))
	if !x.ReservedUntil.IsZero() {
		until := x.ReservedUntil.UTC().Format(time.RFC3339)
		if x.ReservedUntilEstimated {
			until += " (estimated: running work without a walltime, by learned run times)"
		}
		if x.ReservedPreempts {
			until += " (running work it may preempt counted as freed once it may)"
		}
		row("Reserved until", until)
	}
	if e.PreemptedBy != "" {
		row("Preempted by", e.PreemptedBy)
	}
	if len(x.Victims) > 0 {
		row("Preempts", strings.Join(x.Victims, ", "))
	}
	rows("Placement", agentapi.NodeLines(e.Nodes, ", "))
	rows("Pinned", pinnedLines(x.Placement))
	rows("Warning", x.Warnings)
	role := "leader"
	if !e.Leader {
		role = "standby"
	}
	row("Decided", e.GeneratedAt.UTC().Format(time.RFC3339)+" by the "+role)
	tw.Flush()
	printScore(w, e)
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

// printFacts writes the job's entry: what it asks, where it stands, why.
func printFacts(row func(k, v string), e agentapi.Explanation) {
	row("Job", e.Namespace+"/"+e.Job)
	state := e.State
	if e.Position > 0 {
		state = fmt.Sprintf("%s (position %d in the queue)", e.State, e.Position)
	}
	row("State", state)
	row("Tier", dash(e.Tier))
	row("Project", dash(e.Project))
	row("GPUs", fmt.Sprintf("%d in %d allocation(s)", e.GPUs, e.Allocations))
	if run := e.RunLine(); run != "" {
		row("Run", run)
	}
	since := "-"
	if !e.Since.IsZero() {
		since = e.Since.UTC().Format(time.RFC3339)
		if e.State == agentapi.StateWaiting || e.State == agentapi.StateInvalid {
			since += fmt.Sprintf(" (waiting %s)", formatDuration(time.Duration(e.WaitSeconds*float64(time.Second))))
		}
	}
	row("Since", since)
	if !e.Submitted.IsZero() && !e.Submitted.Equal(e.Since) {
		row("Submitted", e.Submitted.UTC().Format(time.RFC3339)+" (first seen; requeues keep it)")
	}
	row("Decision", dash(e.Decision))
	if e.Engine != nil {
		row("Engine", string(e.Engine.Status))
	}
	if e.Summary != "" {
		row("Summary", e.Summary)
	}
	row("Reason", dash(e.Reason))
	if x := e.Decided(); x.Reason != "" && !strings.Contains(e.Reason, x.Reason) {
		row("Engine's reason", x.Reason)
	}
}

// printScore writes the impact score and its terms.
func printScore(w io.Writer, e agentapi.Explanation) {
	fmt.Fprintf(w, "\nImpact score %.3f", e.Score)
	terms := e.Terms()
	if len(terms) == 0 {
		fmt.Fprintln(w)
		return
	}
	fmt.Fprintln(w, " =")
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	for _, t := range terms {
		fmt.Fprintf(tw, "  %s\t%+9.3f\t%s\n", t.Name, t.Value, t.Detail)
	}
	tw.Flush()
}

// pinnedLines renders each planned allocation: its group, node and GPUs.
func pinnedLines(groups []engine.GroupPlacement) []string {
	var out []string
	for _, g := range groups {
		for _, p := range g.Allocs {
			out = append(out, fmt.Sprintf("%s on %s: %s", g.Group, p.NodeID, gpuList(p.GPUs, p.Islands)))
		}
	}
	return out
}

// rejectedLines renders why nodes could not take the job, reasons sorted.
func rejectedLines(r map[string]int) []string {
	out := make([]string, 0, len(r))
	for why, n := range r {
		out = append(out, fmt.Sprintf("%s: %d node(s)", why, n))
	}
	sort.Strings(out)
	return out
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
