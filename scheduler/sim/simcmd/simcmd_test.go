package simcmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeTrace writes a small generic trace: a stream of 1-GPU jobs, a few
// 8-GPU jobs and one 16-GPU gang on a 4 x 8 GPU cluster.
func writeTrace(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("id,submit_s,duration_s,gpus,project,tier,preemptible,walltime_s\n")
	for i := 0; i < 120; i++ {
		tier := []string{"critical", "high", "normal", "normal", "scavenger"}[i%5]
		gpus := 1
		switch {
		case i == 30:
			gpus = 16
		case i%17 == 0:
			gpus = 8
		case i%7 == 0:
			gpus = 2
		}
		fmt.Fprintf(&b, "j%d,%d,%d,%d,p%d,%s,,\n", i, i*60, 600+(i*137)%3000, gpus, i%3, tier)
	}
	p := filepath.Join(dir, "trace.csv")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// runReport runs the command with args plus --out out, fails the test on
// a non-zero exit, and decodes out/report.json into rep.
func runReport(t *testing.T, out string, args []string, rep any) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := Main(append(slices.Clip(args), "--out", out), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	raw, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, rep); err != nil {
		t.Fatal(err)
	}
}

func TestSimAllPolicies(t *testing.T) {
	dir := t.TempDir()
	tr := writeTrace(t, dir)
	out := filepath.Join(dir, "out")
	var stdout, stderr bytes.Buffer
	code := Main([]string{"--trace", tr, "--format", "generic", "--nodes", "4", "--gpus-per-node", "8", "--islands-per-node", "2", "--seed", "3", "--out", out, "--quiet"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, p := range []string{"nomad-native", "fifo-gang", "backfill", "impact"} {
		if !strings.Contains(stdout.String(), p) {
			t.Errorf("table lacks %s:\n%s", p, stdout.String())
		}
	}
	// The critical tier's bound, and each policy's critical p99 against it.
	if !strings.Contains(stdout.String(), "critical bound (critical jobs alone on the cluster, backfill at the impact cadence): p50 ") ||
		!strings.Contains(stdout.String(), " impact ") || !strings.Contains(stdout.String(), "the bound)") {
		t.Errorf("table lacks the critical bound:\n%s", stdout.String())
	}
	raw, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Scenario struct {
			LabelRule    string `json:"label_rule"`
			Jobs         int    `json:"jobs"`
			ImpactPolicy string `json:"impact_policy"`
			Model        struct {
				Description string `json:"description"`
			} `json:"model"`
		} `json:"scenario"`
		Policies    []map[string]any `json:"policies"`
		Comparisons []struct {
			Baseline string  `json:"baseline"`
			Ceiling  float64 `json:"weighted_jct_ratio_ceiling"`
			Ratio    float64 `json:"weighted_jct_ratio"`
		} `json:"comparisons"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Scenario.Jobs != 120 || !strings.Contains(rep.Scenario.ImpactPolicy, "example/sim/policy.hcl") || !strings.Contains(rep.Scenario.LabelRule, "seed 3") || !strings.Contains(rep.Scenario.Model.Description, "checkpoint") {
		t.Fatalf("scenario = %+v", rep.Scenario)
	}
	// The report says how the baseline every comparison is made with
	// places its jobs.
	if !strings.Contains(rep.Scenario.Model.Description, "nomad-native places each allocation as Nomad 2.0.5's batch scheduler does") {
		t.Fatalf("the model's description does not say how nomad-native places: %s", rep.Scenario.Model.Description)
	}
	if len(rep.Policies) != 4 {
		t.Fatalf("%d policies in report", len(rep.Policies))
	}
	if len(rep.Comparisons) != 3 {
		t.Fatalf("%d comparisons, want impact against 3 baselines", len(rep.Comparisons))
	}
	for _, c := range rep.Comparisons {
		// No policy beats jobs that never wait.
		if c.Ratio > c.Ceiling+1e-9 {
			t.Errorf("%s: JCT ratio %v above its ceiling %v", c.Baseline, c.Ratio, c.Ceiling)
		}
	}
	if !strings.Contains(stdout.String(), "impact vs nomad-native: critical p99 wait") {
		t.Errorf("no comparison lines under the table:\n%s", stdout.String())
	}
	for _, p := range rep.Policies {
		for _, k := range []string{"occupancy", "occupancy_vs_bound", "partial_gang_idle_gpu_hours", "wait_s", "weighted_jct_s", "weighted_jct_floor_s", "mean_jct_floor_s", "preemptions", "lost_gpu_hours", "delivered_gpu_hours", "decision_latency_ms", "jobs_completed", "fair_share"} {
			if _, ok := p[k]; !ok {
				t.Errorf("policy %v lacks %s", p["policy"], k)
			}
		}
		if p["jobs_completed"].(float64) != 120 {
			t.Errorf("policy %v completed %v of 120", p["policy"], p["jobs_completed"])
		}
	}
	for _, f := range []string{"wait_cdf.png", "occupancy.png", "partial_gang_idle.png", "series-impact.csv"} {
		st, err := os.Stat(filepath.Join(out, f))
		if err != nil || st.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}
}

func TestSimErrors(t *testing.T) {
	dir := t.TempDir()
	tr := writeTrace(t, dir)
	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(bad, []byte("id,submit_s,duration_s,gpus,project,tier,preemptible,walltime_s\na,0,10,1,,,,\nb,1,ten,1,,,,\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badTier := filepath.Join(dir, "tier.csv")
	if err := os.WriteFile(badTier, []byte("id,submit_s,duration_s,gpus,project,tier,preemptible,walltime_s\na,0,10,1,,high,,\nb,1,10,1,,urgnet,,\nc,2,ten,1,,,,\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{}, 1, "--trace is required"},
		{[]string{"--trace", tr, "--format", "csv"}, 1, `unknown trace format "csv"`},
		{[]string{"--trace", tr, "--format", "generic", "--policies", "impact,slurm"}, 1, `unknown policy "slurm"`},
		{[]string{"--trace", bad, "--format", "generic"}, 1, "bad.csv:3:5: column duration_s"},
		{[]string{"--trace", tr, "--format", "generic", "--nodes", "0"}, 1, "--nodes must be at least 1, got 0"},
		// Issue 36: the flag at fault is named, not `node "node-000"`.
		{[]string{"--trace", tr, "--format", "generic", "--gpus-per-node", "0"}, 1, "impact sim: --gpus-per-node must be at least 1, got 0\n"},
		{[]string{"--trace", tr, "--format", "generic", "--islands-per-node", "3"}, 1, "--islands-per-node must divide --gpus-per-node (8) evenly, got 3"},
		{[]string{"--trace", tr, "--format", "generic", "--islands-per-node", "0"}, 1, "--islands-per-node must divide --gpus-per-node (8) evenly, got 0"},
		// An unknown tier is reported at its row, before later bad rows.
		{[]string{"--trace", badTier, "--format", "generic"}, 1, "impact sim: " + badTier + ":3:11: column tier: unknown tier \"urgnet\""},
		{[]string{"--trace", tr, "--format", "generic", "--from", "100", "--to", "50"}, 1, "must be after"},
		{[]string{"--trace", tr, "--format", "philly", "--from", "yesterday"}, 1, "--from"},
		{[]string{"--trace", tr, "--format", "generic", "--cluster", filepath.Join(dir, "none.hcl")}, 1, "read cluster file"},
		{[]string{"--trace", tr, "--format", "generic", "--save-on-signal", "-5s"}, 1, "impact sim: --save-on-signal -5s: want whole seconds, 0 or more"},
		{[]string{"--trace", tr, "--format", "generic", "--save-on-signal", "1.5s"}, 1, "impact sim: --save-on-signal 1.5s: want whole seconds, 0 or more"},
		{[]string{"--bogus"}, 2, "flag provided but not defined"},
	}
	for _, tc := range cases {
		var stdout, stderr bytes.Buffer
		code := Main(tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
}

func TestSimSkipBad(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(bad, []byte("id,submit_s,duration_s,gpus,project,tier,preemptible,walltime_s\na,0,10,1,,,,\nb,1,ten,1,,,,\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := Main([]string{"--trace", bad, "--format", "generic", "--nodes", "1", "--policies", "fifo-gang", "--skip-bad", "--no-plots", "--out", filepath.Join(dir, "o")}, &stdout, &stderr)
	if code != 0 || !strings.Contains(stderr.String(), "skipped 1 bad rows (first: "+bad+":3:5: column duration_s") {
		t.Fatalf("exit %d stderr %q", code, stderr.String())
	}
	// Issue 36: a row with an unknown tier is a bad row that --skip-bad
	// skips, as its help says, counted with the others in row order.
	tier := filepath.Join(dir, "tier.csv")
	if err := os.WriteFile(tier, []byte("id,submit_s,duration_s,gpus,project,tier,preemptible,walltime_s\na,0,10,1,,high,,\nb,1,10,1,,urgnet,,\nc,2,ten,1,,,,\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	code = Main([]string{"--trace", tier, "--format", "generic", "--nodes", "1", "--policies", "fifo-gang", "--skip-bad", "--no-plots", "--out", filepath.Join(dir, "o2")}, &stdout, &stderr)
	if code != 0 || !strings.Contains(stderr.String(), "skipped 2 bad rows (first: "+tier+":3:11: column tier: unknown tier \"urgnet\"") {
		t.Fatalf("unknown tier with --skip-bad: exit %d stderr %q", code, stderr.String())
	}
}

func TestSimHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"-h"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"nomad-native", "fifo-gang", "backfill", "impact", "id,submit_s,duration_s,gpus", "  --islands-per-node=<int>", "  --cluster=<file>", "  --skip-bad"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
	// Issue 36: --cycle-debounce's sentinel default is not shown beside
	// the real one ("(default: the agent's, 500ms) (default -1ns)").
	if h := stdout.String(); !strings.Contains(h, "(default: the agent's,") || strings.Contains(h, "-1ns") {
		t.Errorf("help shows a sentinel default:\n%s", h)
	}
}

func TestSimClusterFile(t *testing.T) {
	dir := t.TempDir()
	tr := writeTrace(t, dir)
	var stdout, stderr bytes.Buffer
	code := Main([]string{"--trace", tr, "--format", "generic", "--cluster", "../../../example/sim/cluster.hcl", "--policies", "fifo-gang,impact", "--no-plots", "--quiet", "--out", filepath.Join(dir, "o")}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "on 512 GPUs") || !strings.Contains(stdout.String(), "../../../example/sim/cluster.hcl") {
		t.Fatalf("cluster file not used:\n%s", stdout.String())
	}
}

// TestSimDeterministic: two runs with the same seed write the same
// report.json, except wall-clock figures (run time, decision latency) and
// the command line (the output directory differs).
func TestSimDeterministic(t *testing.T) {
	dir := t.TempDir()
	tr := writeTrace(t, dir)
	read := func(out string) map[string]any {
		var rep map[string]any
		runReport(t, out, []string{"--trace", tr, "--format", "generic", "--nodes", "3", "--seed", "5", "--no-plots", "--quiet"}, &rep)
		delete(rep, "wall_s")
		delete(rep["scenario"].(map[string]any), "command")
		for _, p := range rep["policies"].([]any) {
			delete(p.(map[string]any), "decision_latency_ms")
		}
		return rep
	}
	a, b := read(filepath.Join(dir, "a")), read(filepath.Join(dir, "b"))
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Fatalf("two runs differ:\n%s\n%s", ja, jb)
	}
	if !bytes.Contains(ja, []byte(`"preemptions"`)) {
		t.Fatal("report has no policies")
	}
}

// TestSimRecheckReachesBaselines: --recheck applies to the baselines too
// (they decide at least that often while jobs wait), not only to impact.
func TestSimRecheckReachesBaselines(t *testing.T) {
	dir := t.TempDir()
	tr := writeTrace(t, dir)
	calls := func(recheck string) float64 {
		out := filepath.Join(dir, "r"+recheck)
		var rep struct {
			Policies []struct {
				Cycles        float64 `json:"cycles"`
				CyclesSkipped float64 `json:"cycles_skipped"`
			} `json:"policies"`
		}
		runReport(t, out, []string{"--trace", tr, "--format", "generic", "--nodes", "2", "--policies", "fifo-gang", "--recheck", recheck, "--no-plots", "--quiet"}, &rep)
		return rep.Policies[0].Cycles + rep.Policies[0].CyclesSkipped
	}
	if fast, slow := calls("10s"), calls("1h"); fast <= slow {
		t.Fatalf("fifo-gang decided %v times with --recheck 10s and %v with 1h: the flag did not reach it", fast, slow)
	}
}

// TestSimCadenceFromAgentConfig: the impact policy decides at the cadence
// of the agent's cycle block (defaults, or --agent-config, or the flags),
// and report.json states every policy's cadence.
func TestSimCadenceFromAgentConfig(t *testing.T) {
	dir := t.TempDir()
	tr := writeTrace(t, dir)
	cfg := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(cfg, []byte("cycle {\n  interval = \"20s\"\n  debounce = \"2500ms\"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cadences := func(extra ...string) map[string]string {
		out := filepath.Join(dir, "c")
		var rep struct {
			Policies []struct {
				Policy  string `json:"policy"`
				Cadence string `json:"cadence"`
			} `json:"policies"`
		}
		runReport(t, out, append([]string{"--trace", tr, "--format", "generic", "--nodes", "2", "--policies", "nomad-native,impact", "--no-plots", "--quiet"}, extra...), &rep)
		got := map[string]string{}
		for _, p := range rep.Policies {
			got[p.Policy] = p.Cadence
		}
		return got
	}
	base := "after every batch of simultaneous events, and every 300s while jobs wait"
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "1s after the first event of a burst (events inside it join that decision), and every 10s while jobs wait"},
		{[]string{"--agent-config", cfg}, "3s after the first event of a burst (events inside it join that decision), and every 20s while jobs wait"},
		{[]string{"--agent-config", cfg, "--cycle-debounce", "0", "--cycle-interval", "30s"}, "after every batch of simultaneous events, and every 30s while jobs wait"},
	} {
		got := cadences(c.args...)
		if got["impact"] != c.want || got["nomad-native"] != base {
			t.Fatalf("%v: cadences %q, want impact %q and nomad-native %q", c.args, got, c.want, base)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"--trace", tr, "--format", "generic", "--agent-config", filepath.Join(dir, "missing.hcl"), "--quiet", "--out", dir}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "--agent-config") {
		t.Fatalf("missing agent config: exit %d, %s", code, stderr.String())
	}
}

// TestSimCPUProfile: --cpuprofile writes a profile pprof can read (a gzip
// stream), and a path that cannot be created is an error naming the flag.
func TestSimCPUProfile(t *testing.T) {
	dir := t.TempDir()
	tr := writeTrace(t, dir)
	prof := filepath.Join(dir, "cpu.prof")
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"--trace", tr, "--format", "generic", "--nodes", "4", "--policies", "impact", "--no-plots", "--quiet", "--out", filepath.Join(dir, "o"), "--cpuprofile", prof}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	b, err := os.ReadFile(prof)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("profile %d bytes, err %v", len(b), err)
	}
	stderr.Reset()
	if code := Main([]string{"--trace", tr, "--format", "generic", "--cpuprofile", filepath.Join(dir, "missing", "cpu.prof")}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "--cpuprofile") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}

// TestSimModelStatesSkips: the scenario's model says which of the impact
// scheduler's ticks and decisions are skipped, with the --recheck it
// re-reads aging and fair share at.
func TestSimModelStatesSkips(t *testing.T) {
	dir := t.TempDir()
	tr := writeTrace(t, dir)
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "re-reading aging and fair share at least every 5m0s"},
		{[]string{"--recheck", "2m"}, "re-reading aging and fair share at least every 2m0s"},
	} {
		out := filepath.Join(dir, "m")
		var rep struct {
			Scenario struct {
				Model struct {
					Description string `json:"description"`
				} `json:"model"`
			} `json:"scenario"`
		}
		runReport(t, out, append([]string{"--trace", tr, "--format", "generic", "--nodes", "2", "--policies", "impact", "--no-plots", "--quiet"}, c.args...), &rep)
		d := rep.Scenario.Model.Description
		if !strings.Contains(d, "skips the ticks on which nothing the engine reads changed") || !strings.Contains(d, c.want) ||
			!strings.Contains(d, "the decisions while no waiting job fits") {
			t.Fatalf("%v: model description %q does not state the skips (want %q)", c.args, d, c.want)
		}
	}
}
