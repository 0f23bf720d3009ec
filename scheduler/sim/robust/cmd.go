package robust

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/internal/flaghelp"
	agentconfig "github.com/impact-sched/nomad-impact/scheduler/agent/config"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/impact"
)

// Synopsis is the one-line description of `impact robustness`.
const Synopsis = "Run the simulator's robustness suite: impact vs nomad-native and backfill on many workloads"

const help = `Usage: impact robustness [options]

Simulates nomad-native, backfill and impact on four Philly windows (a week
each, node counts giving offered loads 0.8, 1.0, 1.15 and 1.3), on four
seeded synthetic workloads (saturated: long non-preemptible work with a
rare critical tier; bursty: floods of short 1-GPU jobs; walltimes: unknown
or badly estimated walltimes; gangs: 16-64 GPU gangs among small jobs) and
on a seeded random family (--random, rand-NN: pools of 2 to 128 nodes,
offered load 0.6 to 2.0, 10% to 90% preemptible, random tier mixes, gang
sizes, walltime accuracy, steady or bursty arrivals).
For each it computes the critical tier's bound (critical jobs alone on the
cluster, placed by backfill at the impact cadence) and checks that impact
is never worse than nomad-native: every tier's p50 and p99 wait at most
1.1 x native + 2m, tier-weighted JCT no worse (up to the debounce every
job waits at the live cadence), occupancy at most 0.5 point lower (not
counting native's GPUs idle in partially placed gangs as occupied), no
GPU-hours idle in partial gangs, every job finished, and a critical p99 at
least 10x lower wherever native's exceeds 10x the bound.

Each policy runs --replicas times on every scenario (3 by default): once
on its jobs as given, then on copies with every submit moved later by up
to --replica-jitter (1s), each job by its own amount, the same copy for
every policy. A second's change moves some scenarios' tier medians by
hours, so one run cannot tell a policy's effect from chance: the checks
compare the policies' means over their replicas, and a failed check says
on how many replicas impact fails it against native on the same copy.

Prints one table (ratios are baseline / impact: above 1 is better for
impact; occupancy in points, impact minus baseline; the GPUs idle for
urgent work in points of occupancy: the headroom's kept GPUs and the
reserve tiers' reserved ones, which its idle budget pays for) and every
failed check; writes DIR/robustness.json. Exits 1 when a check fails,
except one failed with the bound that proves the scenario cannot meet it
without idle capacity costing more occupancy than impact has above the
occupancy check's floor (listed as an exception with its bound:
occupancy wins).

The native twin (--twin-jitter, 1s by default) is the checks' noise
floor: nomad-native run again with every submit moved later by up to that
long, each job by its own fixed amount, as many times as there are
replicas, on jitters of its own. The table counts the checks it
fails against nomad-native itself (tier waits, weighted JCT, occupancy),
and each failed check of impact shows the twin's result on it, to tell a
failure of the size chance gives from a systematic one. The twin waives
nothing. A failed weighted-JCT check says, per tier, how much of the
difference its jobs' waits to their first start make and how much their
time from first start to finish (work lost to preemptions, waits to
start again), with their preemptions under each policy. A failed
tier-wait check gives the same percentile by job width (GPUs), of the
tier's jobs and of the tiers above it where impact served them better:
where the tier's wait may have gone.

To see why a check failed, --jobs writes the jobs of each policy's
first replica, the jobs as given (DIR/jobs/SCENARIO.POLICY.tsv: tier,
GPUs, submit, first start, finish,
preemptions, and the GPUs free in the cluster and on its emptiest node
when the job arrived) and --reasons, with them, what impact told each
waiting job at every change (DIR/jobs/SCENARIO.impact.reasons.tsv). Use
them with --only.

To judge a change, --against FILE compares this run with an earlier one
(the robustness.json another binary or policy wrote, same --seed and
--scale): both runs' totals over the scenarios they share (failed checks,
those failing on every replica, failed checks by kind, scenarios
passing, exceptions, impact's preemptions), then every check fixed and
every check newly failing, with the replicas each fails on.

Options (one dash or two, --name=value or --name value):

`

// Main runs `impact robustness` with args and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("impact robustness", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f flags
	fs.StringVar(&f.tracePath, "trace", "example/traces/philly.csv.gz", "the Philly trace `file`")
	fs.Int64Var(&f.seed, "seed", 1, "seed of the synthetic workloads and of the labels synthesized for Philly")
	fs.Float64Var(&f.scale, "scale", 1, "length of the synthetic workloads (1: the suite's; smaller is quicker)")
	fs.IntVar(&f.random, "random", RandomScenarios, "scenarios of the seeded random family to run beside the named ones")
	fs.StringVar(&f.only, "only", "", "the `scenarios` to run, comma-separated (default: all)")
	fs.StringVar(&f.out, "out", "out/robustness", "the output `directory` for robustness.json")
	fs.StringVar(&f.policyFile, "impact-policy", "", "a policy HCL `file` for impact (default: the built-in simulation policy)")
	fs.IntVar(&f.parallel, "parallel", runtime.GOMAXPROCS(0), "simulations run at once")
	fs.DurationVar(&f.twinJitter, "twin-jitter", time.Second, "run the native twin, nomad-native with every submit moved later by up to this `duration` (whole seconds), as the noise floor of the checks (0: no twin)")
	fs.IntVar(&f.replicas, "replicas", DefaultReplicas, "runs of each policy per scenario whose means the checks compare: the jobs as given, then copies with submits moved by up to --replica-jitter")
	fs.DurationVar(&f.replicaJitter, "replica-jitter", time.Second, "the most a replica's submits move, each job by its own amount (whole seconds, at least 1s)")
	fs.DurationVar(&f.saveOnSignal, "save-on-signal", 0, "jobs save their work on the checkpoint signal within this `duration` (whole seconds) and exit, where a preemption's grace allows it; 0: they never do and lose the work since their last checkpoint (the suite's model)")
	fs.BoolVar(&f.jobs, "jobs", false, "also write the per-job outcomes of each policy's first replica (the jobs as given) to DIR/jobs/SCENARIO.POLICY.tsv (DIR: --out)")
	fs.BoolVar(&f.reasons, "reasons", false, "also write impact's waiting reasons, each change of a queued job's status or reason, to DIR/jobs/SCENARIO.impact.reasons.tsv (implies --jobs; slower; decides the same)")
	fs.StringVar(&f.against, "against", "", "also compare this run with an earlier one, the robustness.json `file` it wrote (another binary's or policy's, same --seed and --scale): both runs' totals, the checks fixed and those newly failing")
	fs.BoolVar(&f.strict, "strict", true, "exit 1 when a never-worse check fails that no bound waives (--strict=false: report only)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, help)
			flaghelp.Print(stdout, fs)
			return 0
		}
		fmt.Fprintf(stderr, "impact robustness: %v\n\n%s", err, help)
		flaghelp.Print(stderr, fs)
		return 2
	}
	code, err := run(f, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "impact robustness: %v\n", err)
		// run says 2 for bad usage (--only, --twin-jitter, --replicas), else 1.
		return max(code, 1)
	}
	return code
}

// DefaultConfig is the suite's configuration for pol: impact at the live
// agent's default cadence, the baselines after every event and every
// 300s.
func DefaultConfig(pol *policy.Policy) Config {
	base := sim.DefaultModel()
	imp := base
	cyc := agentconfig.Default().Cycle
	imp.Interval = int64(cyc.Interval / time.Second)
	imp.Debounce = int64((cyc.Debounce + time.Second - 1) / time.Second)
	return Config{Policy: pol, ImpactModel: imp, BaseModel: base, Refresh: base.Interval, Parallel: runtime.GOMAXPROCS(0)}
}

// flags are impact robustness's options.
type flags struct {
	tracePath, only, out, policyFile string
	against                          string
	seed                             int64
	scale                            float64
	parallel, random, replicas       int
	strict, jobs, reasons            bool
	twinJitter, replicaJitter        time.Duration
	saveOnSignal                     time.Duration
}

// DefaultReplicas is how many runs of each policy the suite averages by
// default: three narrow what chance moves by about the square root of
// three, for about twice the one run's time.
const DefaultReplicas = 3

func run(f flags, stdout, stderr io.Writer) (int, error) {
	t0 := time.Now()
	if f.twinJitter < 0 || f.twinJitter%time.Second != 0 {
		return 2, fmt.Errorf("--twin-jitter %s: want whole seconds, 0 or more", f.twinJitter)
	}
	if f.replicas < 1 {
		return 2, fmt.Errorf("--replicas %d: want 1 or more", f.replicas)
	}
	if f.replicaJitter < time.Second || f.replicaJitter%time.Second != 0 {
		return 2, fmt.Errorf("--replica-jitter %s: want whole seconds, 1s or more", f.replicaJitter)
	}
	if f.saveOnSignal < 0 || f.saveOnSignal%time.Second != 0 {
		return 2, fmt.Errorf("--save-on-signal %s: want whole seconds, 0 or more", f.saveOnSignal)
	}
	pol, err := suitePolicy(f.policyFile)
	if err != nil {
		return 1, err
	}
	var before []*Outcome
	if f.against != "" {
		// Read first: a missing or bad file is found before the runs.
		if before, err = ReadReport(f.against); err != nil {
			return 2, fmt.Errorf("--against: %w", err)
		}
	}
	cfg := DefaultConfig(pol)
	cfg.Parallel = f.parallel
	cfg.TwinJitter = int64(f.twinJitter / time.Second)
	cfg.Replicas, cfg.ReplicaJitter = f.replicas, int64(f.replicaJitter/time.Second)
	save := int64(f.saveOnSignal / time.Second)
	cfg.ImpactModel.SaveOnSignal, cfg.BaseModel.SaveOnSignal = save, save
	if f.jobs || f.reasons {
		cfg.JobsDir = filepath.Join(f.out, "jobs")
		cfg.Reasons = f.reasons
		if err := os.MkdirAll(cfg.JobsDir, 0o755); err != nil {
			return 1, fmt.Errorf("--jobs: %w", err)
		}
	}
	scs, code, err := selectScenarios(f)
	if err != nil {
		return code, err
	}
	if err := sameSuite(before, scs); err != nil {
		return 2, fmt.Errorf("--against %s: %w", f.against, err)
	}
	var outs []*Outcome
	for _, s := range scs {
		st := time.Now()
		o, err := Run(s, cfg)
		if err != nil {
			return 1, err
		}
		fmt.Fprintf(stderr, "impact robustness: %-14s %6d jobs on %4d GPUs, load %.2f: %s\n", s.Name, s.NumJobs, s.GPUs, s.Load, time.Since(st).Round(100*time.Millisecond))
		outs = append(outs, o)
	}
	failing, waived, err := printOutcomes(stdout, outs, cfg)
	if err != nil {
		return 1, err
	}
	path, err := writeJSON(f.out, outs)
	if err != nil {
		return 1, err
	}
	if n, ok := TwinTally(outs); ok {
		fmt.Fprintf(stdout, "\nnative twin (submits moved later by up to %s): %s\n", f.twinJitter, n.describe(cfg.Replicas))
	}
	if before != nil {
		cmp, err := Compare(before, outs)
		if err != nil {
			return 1, fmt.Errorf("--against %s: %w", f.against, err)
		}
		cmp.Write(stdout, f.against)
	}
	fmt.Fprintf(stdout, "\n%d scenarios, %d failed checks, %d exceptions with their bound; report: %s; wall time %s\n",
		len(outs), failing, waived, path, time.Since(t0).Round(100*time.Millisecond))
	return exitCode(f.strict, failing), nil
}

// exitCode is the suite's exit code: 1 when a check failed that no bound
// waives (unless only reporting), else 0.
func exitCode(strict bool, failing int) int {
	if strict && failing > 0 {
		return 1
	}
	return 0
}

// suitePolicy is the policy of --impact-policy, or the built-in one.
func suitePolicy(path string) (*policy.Policy, error) {
	var pol *policy.Policy
	var err error
	if path != "" {
		pol, err = policy.Load(path)
	} else {
		pol, err = impact.DefaultPolicy()
	}
	if err != nil {
		return nil, fmt.Errorf("impact policy: %w", err)
	}
	return pol, nil
}

// selectScenarios builds the suite's scenarios, those --only names if
// given; on error it also returns the exit code (2 for a bad --only).
func selectScenarios(f flags) ([]Scenario, int, error) {
	want := map[string]bool{}
	for _, n := range strings.Split(f.only, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	ph, err := Philly(f.tracePath, f.seed, DefaultPhillyWindows)
	if err != nil {
		return nil, 1, err
	}
	syn, err := Synthetic(f.seed, f.scale)
	if err != nil {
		return nil, 1, err
	}
	rnd, err := Random(f.seed, f.random)
	if err != nil {
		return nil, 1, err
	}
	syn = append(syn, rnd...)
	var scs []Scenario
	found := map[string]bool{}
	for _, s := range append(ph, syn...) {
		if len(want) == 0 || want[s.Name] {
			scs = append(scs, s)
			found[s.Name] = true
		}
	}
	for n := range want {
		if !found[n] {
			return nil, 2, fmt.Errorf("--only: unknown scenario %q", n)
		}
	}
	return scs, 0, nil
}

// printOutcomes prints the table, the scenarios, the cadences and the
// failed checks; it returns how many checks failed, and how many of them a
// bound waives.
func printOutcomes(stdout io.Writer, outs []*Outcome, cfg Config) (failing, waived int, err error) {
	if err := WriteTable(stdout, outs); err != nil {
		return 0, 0, err
	}
	fmt.Fprintln(stdout)
	for _, o := range outs {
		fmt.Fprintf(stdout, "%s: %s\n", o.Scenario.Name, o.Scenario.Desc)
	}
	fmt.Fprintf(stdout, "impact decides %s; the baselines %s.\n", cfg.ImpactModel.Cadence(), cfg.BaseModel.Cadence())
	if s := cfg.ImpactModel.SaveOnSignal; s > 0 {
		fmt.Fprintf(stdout, "jobs save their work on the checkpoint signal within %ds and exit, where a preemption's grace allows it (--save-on-signal).\n", s)
	}
	if r := max(1, cfg.Replicas); r > 1 {
		fmt.Fprintf(stdout, "each policy ran %d times on each scenario, on its jobs as given and on %d copies with submits moved later by up to %ds; the checks compare the means.\n",
			r, r-1, cfg.ReplicaJitter)
	}
	for _, o := range outs {
		failing += len(o.Failing())
		waived += len(o.Failed()) - len(o.Failing())
	}
	if failing+waived > 0 {
		fmt.Fprintf(stdout, "\nfailed never-worse checks:\n")
		WriteFailures(stdout, outs)
	}
	return failing, waived, nil
}

// writeJSON writes the outcomes to DIR/robustness.json.
func writeJSON(dir string, outs []*Outcome) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(outs, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "robustness.json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return "", err
	}
	return path, nil
}
