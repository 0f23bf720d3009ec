// Package simcmd is the `impact sim` command: flags, trace loading, running
// the policies (in parallel), the table, report.json and plots. The cli
// package exposes it as a subcommand.
package simcmd

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/impact-sched/nomad-impact/internal/flaghelp"
	agentconfig "github.com/impact-sched/nomad-impact/scheduler/agent/config"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/baseline"
	"github.com/impact-sched/nomad-impact/scheduler/sim/impact"
	"github.com/impact-sched/nomad-impact/scheduler/sim/plot"
	"github.com/impact-sched/nomad-impact/scheduler/sim/report"
	"github.com/impact-sched/nomad-impact/scheduler/sim/robust"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

const simHelp = `Usage: impact sim --trace FILE [options]

Replays a job trace on a simulated GPU cluster under several scheduling
policies, with the same discrete-event engine and accounting for each, and
compares them: occupancy (against capacity and against the bound
min(capacity, demand)), GPUs held idle by partially placed gangs, waiting
time per tier, tier-weighted job completion time, preemptions and work lost,
fair share per project and decision latency.

Writes DIR/report.json (metrics, definitions, the modelled effects and the
rule that synthesized missing labels) and plots (PNG) into DIR, and prints a
table. A progress line goes to stderr on long runs.

Policies:
  nomad-native  plain Nomad: priority-ordered evaluations, each allocation
                placed independently as Nomad 2.0.5's batch scheduler does
                (the better-packed of two random feasible nodes), gangs
                placed partially, no preemption
  fifo-gang     strict FIFO, all-or-nothing gangs, the head blocks
  backfill      priority + EASY backfill (Slurm-like), no preemption
  impact        this project's scheduler core (scheduler/engine)

Cadence: the impact policy decides as impact agent does, from the same
settings as its cycle block (defaults, --agent-config FILE, or
--cycle-interval/--cycle-debounce): a decision one debounce after the first
event of a burst (rounded up to the simulator's 1s clock) and a timer tick
every interval while jobs wait. The baselines decide after every batch of
simultaneous events (as Nomad evaluates at once) and every --recheck.
report.json states each policy's cadence.

Trace formats:
  philly   gzip or plain CSV timestamp,duration,num_gpus,gpu_time,cluster
           (the bundled example/traces/philly.csv.gz); --from/--to are dates
           (YYYY-MM-DD, --to inclusive) or RFC 3339 times
  generic  CSV with header id,submit_s,duration_s,gpus,project,tier,
           preemptible,walltime_s (the last four may be empty; tiers are
           critical, high, normal, scavenger); --from/--to are seconds

Example (the standard scenario, what 'make demo' runs):
  impact sim --trace example/traces/philly.csv.gz --format philly \
    --from 2017-10-02 --to 2017-10-22 --nodes 64 --gpus-per-node 8 \
    --islands-per-node 2 --policies nomad-native,fifo-gang,backfill,impact \
    --seed 1 --hang-share 0.05 --out out

Options (one dash or two, --name=value or --name value):

`

// simPolicies are the policy names impact sim knows, in report order.
var simPolicies = []string{baseline.NomadNative, baseline.FIFOGang, baseline.Backfill, impact.Name}

type simFlags struct {
	tracePath, format, from, to string
	nodes, gpn, islands, rack   int
	clusterFile, policies, out  string
	policyFile                  string
	seed                        int64
	skipBad, noPlots, quiet     bool
	checkpoint, restart, grace  time.Duration
	saveOnSignal                time.Duration
	interval, debounce, recheck time.Duration
	agentConfig                 string
	cpuProfile                  string
	parallel                    int
	hangShare                   float64
}

// Synopsis is the one-line description of `impact sim`.
const Synopsis = "Replay a GPU job trace under impact and baseline policies and compare them"

// Main runs `impact sim` with args (after the subcommand name) and returns
// the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	var f simFlags
	fs := flag.NewFlagSet("impact sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, simHelp)
			flaghelp.Print(stdout, fs)
			return 0
		}
		fmt.Fprintf(stderr, "impact sim: %v\n\n%s", err, simHelp)
		flaghelp.Print(stderr, fs)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "impact sim: unexpected arguments %q\n", fs.Args())
		return 2
	}
	stop, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		fmt.Fprintf(stderr, "impact sim: %v\n", err)
		return 1
	}
	err = simMain(f, args, stdout, stderr)
	stop()
	if err != nil {
		fmt.Fprintf(stderr, "impact sim: %v\n", err)
		return 1
	}
	return 0
}

// register defines the flags of impact sim on fs, into f.
func (f *simFlags) register(fs *flag.FlagSet) {
	m := sim.DefaultModel()
	fs.StringVar(&f.tracePath, "trace", "", "the trace `file` (required)")
	fs.StringVar(&f.format, "format", "philly", "the trace `format`: philly or generic")
	fs.StringVar(&f.from, "from", "", "the first submit `time` to include (philly: a date or an RFC 3339 time; generic: seconds)")
	fs.StringVar(&f.to, "to", "", "the last submit `time` to include (a philly date includes that whole day)")
	fs.IntVar(&f.nodes, "nodes", 64, "number of nodes (ignored with --cluster)")
	fs.IntVar(&f.gpn, "gpus-per-node", 8, "GPUs per node (ignored with --cluster)")
	fs.IntVar(&f.islands, "islands-per-node", 2, "NVLink islands per node (ignored with --cluster)")
	fs.IntVar(&f.rack, "rack-size", 8, "nodes per rack (ignored with --cluster)")
	fs.StringVar(&f.clusterFile, "cluster", "", "a cluster HCL `file` with node_group blocks (see example/sim/cluster.hcl)")
	fs.StringVar(&f.policies, "policies", strings.Join(simPolicies, ","), "the `policies` to compare, comma-separated")
	fs.StringVar(&f.policyFile, "impact-policy", "", "a policy HCL `file` for the impact scheduler (default: the built-in simulation policy)")
	fs.Int64Var(&f.seed, "seed", 1, "seed for synthesized labels (tier, preemptibility, walltime)")
	fs.StringVar(&f.out, "out", "out", "the output `directory` for report.json and plots")
	fs.BoolVar(&f.skipBad, "skip-bad", false, "skip (and count) bad trace rows instead of failing on the first")
	fs.BoolVar(&f.noPlots, "no-plots", false, "do not draw plots")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress line")
	fs.DurationVar(&f.checkpoint, "checkpoint-interval", time.Duration(m.CheckpointInterval)*time.Second, "progress between two checkpoints of a job (0: never checkpoints)")
	fs.DurationVar(&f.restart, "restart-cost", time.Duration(m.RestartCost)*time.Second, "time a restarted job spends before progress resumes")
	fs.DurationVar(&f.grace, "grace", time.Duration(m.Grace)*time.Second, "time between the checkpoint signal and the stop of a preempted job")
	fs.DurationVar(&f.saveOnSignal, "save-on-signal", 0, "jobs save their work on the checkpoint signal within this `duration` and exit, where a preemption's grace allows it (0: they never do and lose the work since their last checkpoint)")
	fs.StringVar(&f.agentConfig, "agent-config", "", "an impact agent config `file` whose cycle block (interval, debounce) sets the impact scheduler's cadence")
	fs.DurationVar(&f.interval, "cycle-interval", 0, fmt.Sprintf("the impact scheduler's timer, as the agent's cycle.interval (default: the agent's, %s)", agentconfig.DefaultCycleInterval))
	fs.DurationVar(&f.debounce, "cycle-debounce", -1, fmt.Sprintf("the impact scheduler's delay from an event to its decision, as the agent's cycle.debounce, rounded up to a second (default: the agent's, %s)", agentconfig.DefaultCycleDebounce))
	fs.DurationVar(&f.recheck, "recheck", time.Duration(m.Interval)*time.Second, "the baselines' timer (they decide after every event and this often while jobs wait); the impact scheduler re-reads aging and fair share at least this often on ticks where nothing else changed")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this `file` (go tool pprof)")
	fs.IntVar(&f.parallel, "parallel", runtime.GOMAXPROCS(0), "policies simulated at once")
	fs.Float64Var(&f.hangShare, "hang-share", 0, "idleness model: the share of jobs (0..1) that hang once at a random point of their first run, holding their GPUs at 0% until their walltime estimate ends unless the policy reclaims them (seeded by --seed; 0: off)")
}

// simSetup is what the flags resolve to before anything is simulated.
type simSetup struct {
	format      trace.Format
	ro          trace.ReadOptions
	names       []string
	cluster     sim.ClusterSpec
	clusterDesc string
	// model is the impact scheduler's (the live cadence), baseModel the
	// baselines' (every modelled effect the same, their own cadence).
	model, baseModel sim.Model
	cadenceNote      string
}

func simMain(f simFlags, args []string, stdout, stderr io.Writer) error {
	su, err := resolve(f)
	if err != nil {
		return err
	}
	if os.Getenv("GOGC") == "" {
		// The run allocates many short-lived objects and stays small
		// (about 300 MB for the whole Philly trace): collecting less
		// often saves a fifth of the time.
		debug.SetGCPercent(400)
	}
	t0 := time.Now()
	tr, err := loadTrace(f, su, stderr)
	if err != nil {
		return err
	}
	opts := su.options(f, tr)
	if !f.quiet {
		opts.Progress = progressLine(stderr, opts, t0)
	}
	results, wall, err := runPolicies(f, su, tr, opts)
	if err != nil {
		return err
	}
	rep := newReport(f, su, args, tr, opts, results, wall)
	if b, n, err := robust.TopTierBound(tr.Jobs, opts, su.model); err != nil {
		return err
	} else if n > 0 {
		rep.Scenario.TopTierBound = &b
	}
	rep.Compare(impact.Name)
	path, err := writeOutputs(f, rep, results, stdout)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n%d jobs on %d GPUs; report: %s; wall time %s\n", len(tr.Jobs), su.cluster.GPUs(), path, time.Since(t0).Round(100*time.Millisecond))
	return nil
}

// resolve checks the flags and works out the trace window, policies,
// cluster and models.
func resolve(f simFlags) (*simSetup, error) {
	if f.tracePath == "" {
		return nil, errors.New("--trace is required (try example/traces/philly.csv.gz)")
	}
	su := &simSetup{}
	var err error
	if su.format, err = trace.ParseFormat(f.format); err != nil {
		return nil, err
	}
	if su.ro, err = readOptions(f, su.format); err != nil {
		return nil, err
	}
	if su.names, err = parsePolicies(f.policies); err != nil {
		return nil, err
	}
	if su.cluster, su.clusterDesc, err = simCluster(f); err != nil {
		return nil, err
	}
	if f.saveOnSignal < 0 || f.saveOnSignal%time.Second != 0 {
		return nil, fmt.Errorf("--save-on-signal %s: want whole seconds, 0 or more", f.saveOnSignal)
	}
	model := sim.DefaultModel()
	model.CheckpointInterval = int64(f.checkpoint / time.Second)
	model.RestartCost = int64(f.restart / time.Second)
	model.Grace = int64(f.grace / time.Second)
	model.SaveOnSignal = int64(f.saveOnSignal / time.Second)
	model.Interval = int64(f.recheck / time.Second)
	su.baseModel = model
	if err := su.baseModel.Validate(); err != nil {
		return nil, fmt.Errorf("--recheck: %w", err)
	}
	if su.cadenceNote, err = impactCadence(f, &model); err != nil {
		return nil, err
	}
	if err := model.Validate(); err != nil {
		return nil, fmt.Errorf("impact cadence: %w", err)
	}
	su.model = model
	if err := (sim.IdleModel{HangShare: f.hangShare, Seed: f.seed}).Validate(); err != nil {
		return nil, fmt.Errorf("--hang-share: %w", err)
	}
	return su, nil
}

// readOptions parses --from, --to and --skip-bad.
func readOptions(f simFlags, format trace.Format) (trace.ReadOptions, error) {
	ro := trace.ReadOptions{SkipBad: f.skipBad}
	if f.from != "" {
		v, err := trace.ParseTimeBound(format, f.from, false)
		if err != nil {
			return ro, fmt.Errorf("--from: %w", err)
		}
		ro.From = &v
	}
	if f.to != "" {
		v, err := trace.ParseTimeBound(format, f.to, true)
		if err != nil {
			return ro, fmt.Errorf("--to: %w", err)
		}
		ro.To = &v
	}
	if ro.From != nil && ro.To != nil && *ro.To <= *ro.From {
		return ro, fmt.Errorf("--to (%s) must be after --from (%s)", f.to, f.from)
	}
	return ro, nil
}

// simCluster is the cluster of --cluster, or the uniform one of --nodes and
// friends, and its description for the report.
func simCluster(f simFlags) (sim.ClusterSpec, string, error) {
	if f.clusterFile != "" {
		src, err := os.ReadFile(f.clusterFile)
		if err != nil {
			return sim.ClusterSpec{}, "", fmt.Errorf("read cluster file: %w", err)
		}
		cl, err := sim.ParseClusterHCL(src, f.clusterFile)
		return cl, f.clusterFile, err
	}
	// The flags are checked here, so that an error names the flag to fix,
	// not the first node built from it ("node-000").
	var bad []error
	if f.nodes < 1 {
		bad = append(bad, fmt.Errorf("--nodes must be at least 1, got %d", f.nodes))
	}
	switch {
	case f.gpn < 1:
		bad = append(bad, fmt.Errorf("--gpus-per-node must be at least 1, got %d", f.gpn))
	case f.islands < 1 || f.gpn%f.islands != 0:
		bad = append(bad, fmt.Errorf("--islands-per-node must divide --gpus-per-node (%d) evenly, got %d", f.gpn, f.islands))
	}
	if len(bad) > 0 {
		return sim.ClusterSpec{}, "", errors.Join(bad...)
	}
	cl, err := sim.UniformCluster(f.nodes, f.gpn, f.islands, f.rack)
	if err != nil {
		return cl, "", fmt.Errorf("cluster: %w", err)
	}
	return cl, fmt.Sprintf("%d nodes x %d GPUs, %d NVLink islands per node, %d nodes per rack", f.nodes, f.gpn, f.islands, f.rack), nil
}

// loadTrace reads the selected window and synthesizes missing labels.
func loadTrace(f simFlags, su *simSetup, stderr io.Writer) (*trace.Trace, error) {
	tr, err := trace.ReadFile(f.tracePath, su.format, su.ro)
	if err != nil {
		return nil, err
	}
	if len(tr.Jobs) == 0 {
		return nil, fmt.Errorf("%s: no jobs in the selected window (%d rows outside it)", f.tracePath, tr.Filtered)
	}
	if err := trace.Synthesize(tr.Jobs, tr.Source, f.seed); err != nil {
		return nil, err
	}
	if tr.Skipped > 0 {
		fmt.Fprintf(stderr, "impact sim: skipped %d bad rows (first: %s)\n", tr.Skipped, tr.SkipErrors[0])
	}
	return tr, nil
}

// options are the run options of the impact scheduler (the baselines
// differ only in the model); the window is the selected one, or the trace's
// first to last submit.
func (su *simSetup) options(f simFlags, tr *trace.Trace) sim.Options {
	opts := sim.Options{Cluster: su.cluster, Model: su.model, ProgressEvery: 2 * time.Second, Idle: sim.IdleModel{HangShare: f.hangShare, Seed: f.seed}}
	opts.WindowStart = tr.Jobs[0].Submit
	if su.ro.From != nil {
		opts.WindowStart = *su.ro.From
	}
	opts.WindowEnd = tr.Jobs[len(tr.Jobs)-1].Submit + 1
	if su.ro.To != nil {
		opts.WindowEnd = *su.ro.To
	}
	return opts
}

// progressLine prints the progress of the policies' runs (called from
// their goroutines).
func progressLine(stderr io.Writer, opts sim.Options, t0 time.Time) func(sim.Progress) {
	var mu sync.Mutex
	return func(p sim.Progress) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(stderr, "impact sim: %-12s day %5.1f of %.1f  done %d/%d  queued %d  (%s)\n", p.Policy,
			float64(p.Now-opts.WindowStart)/86400, float64(opts.WindowEnd-opts.WindowStart)/86400,
			p.Done, p.Total, p.Queue, time.Since(t0).Round(time.Second))
	}
}

// runPolicies simulates every policy, --parallel at a time, and returns
// their results and wall times in seconds.
func runPolicies(f simFlags, su *simSetup, tr *trace.Trace, opts sim.Options) ([]*sim.Result, map[string]float64, error) {
	scheds := make([]sim.Scheduler, len(su.names))
	for i, n := range su.names {
		var err error
		if scheds[i], err = newSimScheduler(n, f); err != nil {
			return nil, nil, err
		}
	}
	results := make([]*sim.Result, len(su.names))
	errs := make([]error, len(su.names))
	walls := make([]float64, len(su.names))
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, f.parallel))
	for i := range su.names {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			start := time.Now()
			o := opts
			if su.names[i] != impact.Name {
				o.Model = su.baseModel
			}
			results[i], errs[i] = sim.Run(tr.Jobs, scheds[i], o)
			walls[i] = time.Since(start).Seconds()
		}(i)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	wall := make(map[string]float64, len(su.names))
	for i, n := range su.names {
		wall[n] = walls[i]
	}
	return results, wall, nil
}

// newReport assembles the report of a run (without comparisons).
func newReport(f simFlags, su *simSetup, args []string, tr *trace.Trace, opts sim.Options, results []*sim.Result, wall map[string]float64) *report.Report {
	rep := &report.Report{
		Scenario: report.Scenario{
			Command:     "impact sim " + strings.Join(args, " "),
			Trace:       f.tracePath,
			Format:      string(su.format),
			From:        f.from,
			To:          f.to,
			Jobs:        len(tr.Jobs),
			OutsideRows: tr.Filtered,
			SkippedRows: tr.Skipped,
			SkipErrors:  tr.SkipErrors,
			Nodes:       len(su.cluster.Nodes),
			GPUs:        su.cluster.GPUs(),
			Cluster:     su.clusterDesc,
			Seed:        f.seed,
			LabelRule:   trace.LabelRule(f.seed),
			Model:       report.ModelOf(su.model, su.baseModel, su.cadenceNote),
			Idleness:    opts.Idle.Describe(),
			TierWeights: report.TierWeightMap(sim.DefaultTierWeights),
		},
		Definitions: report.Definitions,
		Policies:    results,
		WallS:       wall,
	}
	for _, n := range su.names {
		if n == impact.Name {
			rep.Scenario.ImpactPolicy = "built in (the text of example/sim/policy.hcl)"
			if f.policyFile != "" {
				rep.Scenario.ImpactPolicy = f.policyFile
			}
		}
	}
	return rep
}

// writeOutputs prints the table and writes report.json, the series and
// the plots; it returns report.json's path.
func writeOutputs(f simFlags, rep *report.Report, results []*sim.Result, stdout io.Writer) (string, error) {
	if err := rep.WriteTable(stdout); err != nil {
		return "", err
	}
	path, err := rep.WriteJSON(f.out)
	if err != nil {
		return "", err
	}
	if err := rep.WriteSeries(f.out); err != nil {
		return "", err
	}
	if !f.noPlots {
		files, err := plot.All(f.out, results)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(stdout, "plots: %s\n", strings.Join(files, ", "))
	}
	return path, nil
}

// startCPUProfile starts profiling into path (nothing if path is empty)
// and returns what stops it.
func startCPUProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	fh, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(fh); err != nil {
		fh.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		fh.Close()
	}, nil
}

func parsePolicies(s string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		known := false
		for _, k := range simPolicies {
			known = known || k == p
		}
		if !known {
			return nil, fmt.Errorf("unknown policy %q (want some of %s)", p, strings.Join(simPolicies, ","))
		}
		if seen[p] {
			return nil, fmt.Errorf("policy %q named twice", p)
		}
		seen[p] = true
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, errors.New("--policies names no policy")
	}
	return out, nil
}

// impactCadence sets m's debounce and interval to the live agent's: the
// defaults of its cycle block, or those of --agent-config, or the flags.
// The simulator's clock counts whole seconds, so a debounce is rounded up
// to one (the agent's 500ms becomes 1s). It returns where they came from.
func impactCadence(f simFlags, m *sim.Model) (string, error) {
	cyc := agentconfig.Default().Cycle
	note := "the defaults of impact agent's cycle block"
	if f.agentConfig != "" {
		c, err := agentconfig.ParseFile(f.agentConfig)
		if err != nil {
			return "", fmt.Errorf("--agent-config: %w", err)
		}
		if c.Cycle.Interval > 0 {
			cyc.Interval = c.Cycle.Interval
		}
		if c.Cycle.Debounce > 0 {
			cyc.Debounce = c.Cycle.Debounce
		}
		note = "the cycle block of " + f.agentConfig
	}
	if f.interval != 0 {
		cyc.Interval = f.interval
		note = "--cycle-interval"
	}
	if f.debounce >= 0 {
		cyc.Debounce = f.debounce
		note = "--cycle-debounce"
		if f.interval != 0 {
			note = "--cycle-interval and --cycle-debounce"
		}
	}
	if cyc.Interval < time.Second {
		return "", fmt.Errorf("impact cadence: cycle interval %s is under the simulator's 1s resolution", cyc.Interval)
	}
	m.Interval = int64(cyc.Interval / time.Second)
	m.Debounce = int64((cyc.Debounce + time.Second - 1) / time.Second)
	// What impact.Scheduler skips (quiet, with Refresh = --recheck, and
	// idle), so that the report says how often it really decides.
	skip := fmt.Sprintf("; it skips the ticks on which nothing the engine reads changed: no event, no checkpoint of a job some waiting job may preempt or move out of its way "+
		"while the last decision weighed victims' costs, no minimum runtime running out for such a job, no lost-work budget hour running out while the last decision weighed costs, "+
		"no GPUs kept by the last decision for jobs as narrow as a preemption's victims, no headroom's idle budget running out or paid back, "+
		"no run hanging (the idleness model), re-reading aging and fair share at least every %s; "+
		"and the decisions while no waiting job fits a node's free GPUs, none may preempt or move small jobs out of its way (the policy's defragment block) and nothing ended", f.recheck)
	return fmt.Sprintf("interval %s, debounce %s, from %s%s", cyc.Interval, cyc.Debounce, note, skip), nil
}

func newSimScheduler(name string, f simFlags) (sim.Scheduler, error) {
	if name != impact.Name {
		return baseline.New(name)
	}
	pol, err := impactPolicy(f)
	if err != nil {
		return nil, err
	}
	s, err := impact.New(pol, nil)
	if err != nil {
		return nil, err
	}
	s.Refresh = int64(f.recheck / time.Second)
	return s, nil
}

func impactPolicy(f simFlags) (*policy.Policy, error) {
	if f.policyFile == "" {
		return impact.DefaultPolicy()
	}
	pol, err := policy.Load(f.policyFile)
	if err != nil {
		return nil, fmt.Errorf("impact policy: %w", err)
	}
	return pol, nil
}
