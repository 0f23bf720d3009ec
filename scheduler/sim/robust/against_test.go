package robust

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/sim/impact"
)

// outcome is a scenario's report as robustness.json carries it: checks
// failing (on failed[name] replicas of 3), waived by a bound, or passing.
func outcome(name string, jobs int, preemptions float64, failed map[string]int, waived []string, passing ...string) *Outcome {
	o := &Outcome{Scenario: Scenario{Name: name, GPUs: 16, NumJobs: jobs}, NumReplicas: 3,
		Summary: map[string]Summary{impact.Name: {Preemptions: preemptions}}}
	for _, n := range passing {
		o.Checks = append(o.Checks, Check{Name: n, OK: true, Detail: "fine"})
	}
	for n, r := range failed {
		o.Checks = append(o.Checks, Check{Name: n, Detail: n + " worse", ReplicasFailed: r})
	}
	for _, n := range waived {
		o.Checks = append(o.Checks, Check{Name: n, Detail: n + " short", Bound: "idle GPUs cost too much"})
	}
	return o
}

// TestCompare: a check failing before and passing, or waived by its bound,
// after is fixed; the reverse is newly failing; one failing in both is
// neither. The tallies count the scenarios both runs ran, failures on
// every replica among them, and scenarios passing (exceptions pass).
func TestCompare(t *testing.T) {
	before := []*Outcome{
		outcome("a", 10, 5, map[string]int{"high wait p99": 3, "weighted JCT": 2}, nil),
		outcome("b", 20, 7, nil, []string{"critical p99 gain"}, "occupancy"),
		outcome("c", 30, 1, map[string]int{"occupancy": 1}, nil),
		outcome("gone", 5, 0, map[string]int{"occupancy": 3}, nil),
	}
	after := []*Outcome{
		outcome("a", 10, 4, map[string]int{"high wait p99": 3}, []string{"weighted JCT"}),
		outcome("b", 20, 9, map[string]int{"occupancy": 2, "critical p99 gain": 3}, nil),
		outcome("c", 30, 1, nil, nil, "occupancy"),
		outcome("new", 5, 0, map[string]int{"occupancy": 3}, nil),
	}
	c, err := Compare(before, after)
	if err != nil {
		t.Fatal(err)
	}
	// By kind: the tiers' p99 waits, weighted JCT, occupancy, the top
	// tier's gain (checkKinds).
	if want := (Tally{Scenarios: 3, Passing: 1, Failed: 3, EveryReplica: 1, Exceptions: 1, Preemptions: 13,
		ByKind: [len(checkKinds)]int{0, 1, 1, 1, 0, 0, 0, 0}}); c.Before != want {
		t.Errorf("before %+v, want %+v", c.Before, want)
	}
	if want := (Tally{Scenarios: 3, Passing: 1, Failed: 3, EveryReplica: 2, Exceptions: 1, Preemptions: 14,
		ByKind: [len(checkKinds)]int{0, 1, 0, 1, 1, 0, 0, 0}}); c.After != want {
		t.Errorf("after %+v, want %+v", c.After, want)
	}
	shifts := func(ss []Shift) []string {
		var out []string
		for _, s := range ss {
			state := "passing"
			if s.Other.Waived() {
				state = "waived"
			}
			out = append(out, s.Scenario+"/"+s.Failing.Name+"/"+state)
		}
		return out
	}
	// Map order puts a scenario's checks in any order; compare as sets.
	sameSet := func(what string, got, want []string) {
		t.Helper()
		got, want = slices.Clone(got), slices.Clone(want)
		slices.Sort(got)
		slices.Sort(want)
		g, w := strings.Join(got, " "), strings.Join(want, " ")
		if g != w {
			t.Errorf("%s: %s, want %s", what, g, w)
		}
	}
	sameSet("fixed", shifts(c.Fixed), []string{"a/weighted JCT/waived", "c/occupancy/passing"})
	sameSet("new", shifts(c.New), []string{"b/occupancy/passing", "b/critical p99 gain/waived"})
	if strings.Join(c.OnlyBefore, ",") != "gone" || strings.Join(c.OnlyAfter, ",") != "new" {
		t.Errorf("only before %v, only after %v", c.OnlyBefore, c.OnlyAfter)
	}

	var b strings.Builder
	c.Write(&b, "old/robustness.json")
	for _, want := range []string{
		"against old/robustness.json (3 scenarios in both):",
		"failed checks: 3 (2 on every replica), before 3 (1)",
		"scenarios passing: 1, before 1",
		"failed checks by kind: tier wait p99 1 (before 1), weighted JCT 0 (before 1), occupancy 1 (before 1), top-tier p99 gain 1 (before 0)",
		"fixed (2):",
		"    a: weighted JCT: weighted JCT worse (fails on 2 of 3 replicas); now an exception, bound: idle GPUs cost too much",
		"    c: occupancy: occupancy worse (fails on 1 of 3 replicas); now passes",
		"newly failing (2):",
		"    b: critical p99 gain: critical p99 gain worse (fails on 3 of 3 replicas); an exception before, bound: idle GPUs cost too much",
		"not compared, in the earlier run only: gone",
		"not compared, in this run only: new",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}

	// Another seed's scenario of the same name is not the same scenario.
	other := []*Outcome{outcome("a", 11, 4, nil, nil)}
	if _, err := Compare(before, other); err == nil || !strings.Contains(err.Error(), "scenario a has 10 jobs on 16 GPUs in the earlier run and 11 on 16 in this one") {
		t.Errorf("different suites: %v", err)
	}
}

// TestReadReport: what a run writes (writeJSON) reads back with every
// check's verdict, bound and replicas; a file that is not a report is a
// clear error.
func TestReadReport(t *testing.T) {
	dir := t.TempDir()
	in := []*Outcome{outcome("a", 10, 5, map[string]int{"high wait p99": 2}, []string{"critical p99 gain"}, "occupancy")}
	path, err := writeJSON(dir, in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ReadReport(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Compare(in, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Fixed)+len(c.New) != 0 || c.Before != c.After || c.After.Failed != 1 || c.After.Exceptions != 1 {
		t.Errorf("read back differs: %+v", c)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"scenario": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadReport(bad); err == nil || !strings.Contains(err.Error(), "bad.json: not a robustness.json") {
		t.Errorf("bad file: %v", err)
	}
}

// TestMainAgainst: --against reads its file before any scenario runs: a
// missing file, or a report of another suite (a scenario of the same name
// with other jobs), is a usage error naming the option.
func TestMainAgainst(t *testing.T) {
	var out, errb strings.Builder
	if code := Main([]string{"--against", "/nonexistent/robustness.json", "--trace", "/nonexistent"}, &out, &errb); code != 2 || !strings.HasPrefix(errb.String(), "impact robustness: --against: open /nonexistent/robustness.json") {
		t.Errorf("missing file: exit %d, stderr %q", code, errb.String())
	}
	dir := t.TempDir()
	path, err := writeJSON(dir, []*Outcome{outcome("saturated", 1, 0, nil, nil)})
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	code := Main([]string{"--against", path, "--only", "saturated", "--scale", "0.05", "--random", "0", "--out", t.TempDir(),
		"--trace", filepath.Join("..", "..", "..", "example", "traces", "philly.csv.gz")}, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "scenario saturated has 1 jobs on 16 GPUs in the earlier run") || out.Len() != 0 {
		t.Errorf("another suite: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

// Every check the suite makes has its kind; an unknown name is "other".
func TestKindOf(t *testing.T) {
	for name, want := range map[string]string{
		"critical wait p50": "tier wait p50", "scavenger wait p99": "tier wait p99",
		WeightedJCTCheck: WeightedJCTCheck, "occupancy": "occupancy", TopTierGainCheck: "top-tier p99 gain",
		"partial-gang idle": "partial-gang idle", "finished": "finished", "something new": "other",
	} {
		if got := checkKinds[kindOf(name)]; got != want {
			t.Errorf("kindOf(%q) = %q, want %q", name, got, want)
		}
	}
}
