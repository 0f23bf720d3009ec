package robust

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/impact-sched/nomad-impact/scheduler/sim/impact"
)

// A change to the engine or the policy is judged on the suite against a
// run without it: which checks it fixed, which it broke, and whether the
// totals moved by more than the checks' noise. --against FILE prints
// that from this run and an earlier run's robustness.json, so that the
// before/after of a change comes from the suite itself, scenario by
// scenario, with the replicas each failure holds on.

// ReadReport reads the outcomes an earlier run wrote to robustness.json
// (writeJSON). Only what the file carries is filled in: each scenario's
// name, size and load, the policies' summaries and the checks.
func ReadReport(path string) ([]*Outcome, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var outs []*Outcome
	if err := json.Unmarshal(b, &outs); err != nil {
		return nil, fmt.Errorf("%s: not a robustness.json: %w", path, err)
	}
	for i, o := range outs {
		if o == nil || o.Scenario.Name == "" {
			return nil, fmt.Errorf("%s: outcome %d names no scenario", path, i)
		}
	}
	return outs, nil
}

// Tally is one run's never-worse totals over the scenarios two runs share.
type Tally struct {
	Scenarios int
	// Passing: scenarios that fail no check (exceptions with their bound
	// pass).
	Passing int
	// Failed: checks failed that no bound waives; EveryReplica: those of
	// them failing on every replica (all of them with one replica).
	Failed, EveryReplica int
	// Exceptions: checks failed with the bound that proves them.
	Exceptions int
	// Preemptions is impact's, each scenario's mean over its replicas,
	// summed.
	Preemptions float64
	// ByKind counts Failed by kind of check, in checkKinds' order.
	ByKind [len(checkKinds)]int
}

// checkKinds are the kinds of never-worse check, in the order Write
// prints them: the tiers' median and p99 waits (every tier's counted
// together), the weighted JCT, occupancy, the top tier's gain, GPUs idle
// in partial gangs, jobs left unfinished, and any other.
var checkKinds = [...]string{"tier wait p50", "tier wait p99", WeightedJCTCheck, "occupancy", "top-tier p99 gain", "partial-gang idle", "finished", "other"}

// kindOf is the index in checkKinds of the kind of check name is.
func kindOf(name string) int {
	kind := name
	switch {
	case strings.HasSuffix(name, " wait p50"):
		kind = "tier wait p50"
	case strings.HasSuffix(name, " wait p99"):
		kind = "tier wait p99"
	case name == TopTierGainCheck:
		kind = "top-tier p99 gain"
	}
	if i := slices.Index(checkKinds[:], kind); i >= 0 {
		return i
	}
	return len(checkKinds) - 1
}

// Shift is one check that fails the suite in one run and not in the
// other.
type Shift struct {
	Scenario string
	// Failing is the check as it fails; Other the same check in the other
	// run (OK, or waived by a bound; OK when that run lacks it).
	Failing, Other Check
	// Replicas is the failing run's number of replicas.
	Replicas int
}

// Comparison is a run against an earlier one (Compare).
type Comparison struct {
	Before, After Tally
	// Fixed fail the suite before and not after; New after and not
	// before; each in scenario order, then check order.
	Fixed, New []Shift
	// OnlyBefore and OnlyAfter name the scenarios of one run only (--only
	// in one of them); the tallies leave them out.
	OnlyBefore, OnlyAfter []string
}

// Compare compares after's never-worse results with before's on the
// scenarios both ran. Two runs of different suites (another --seed or
// --scale gives a scenario of the same name other jobs) are an error:
// their checks would not compare like with like.
func Compare(before, after []*Outcome) (Comparison, error) {
	var c Comparison
	prev := map[string]*Outcome{}
	for _, o := range before {
		prev[o.Scenario.Name] = o
	}
	seen := map[string]bool{}
	for _, a := range after {
		name := a.Scenario.Name
		b, ok := prev[name]
		if !ok {
			c.OnlyAfter = append(c.OnlyAfter, name)
			continue
		}
		seen[name] = true
		if err := sameScenario(b.Scenario, a.Scenario); err != nil {
			return Comparison{}, err
		}
		c.Before.add(b)
		c.After.add(a)
		c.Fixed = append(c.Fixed, shifts(b, a)...)
		c.New = append(c.New, shifts(a, b)...)
	}
	for _, o := range before {
		if !seen[o.Scenario.Name] {
			c.OnlyBefore = append(c.OnlyBefore, o.Scenario.Name)
		}
	}
	return c, nil
}

// sameSuite checks, before a run, that the scenarios it will run are
// those of the same names in an earlier run's outcomes (Compare).
func sameSuite(before []*Outcome, scs []Scenario) error {
	prev := map[string]Scenario{}
	for _, o := range before {
		prev[o.Scenario.Name] = o.Scenario
	}
	for _, s := range scs {
		if b, ok := prev[s.Name]; ok {
			if err := sameScenario(b, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// sameScenario: b (an earlier run's) and a have the same jobs, as far as
// a report tells: as many jobs on as many GPUs.
func sameScenario(b, a Scenario) error {
	if b.NumJobs != a.NumJobs || b.GPUs != a.GPUs {
		return fmt.Errorf("scenario %s has %d jobs on %d GPUs in the earlier run and %d on %d in this one: not the same suite (another --seed or --scale?)",
			a.Name, b.NumJobs, b.GPUs, a.NumJobs, a.GPUs)
	}
	return nil
}

// add counts o into t.
func (t *Tally) add(o *Outcome) {
	t.Scenarios++
	failing := o.Failing()
	if len(failing) == 0 {
		t.Passing++
	}
	t.Failed += len(failing)
	for _, ch := range failing {
		if o.NumReplicas <= 1 || ch.ReplicasFailed >= o.NumReplicas {
			t.EveryReplica++
		}
		t.ByKind[kindOf(ch.Name)]++
	}
	t.Exceptions += len(o.Failed()) - len(failing)
	t.Preemptions += o.Summary[impact.Name].Preemptions
}

// shifts are the checks that fail the suite in f and not in other (the
// same scenario in the other run).
func shifts(f, other *Outcome) []Shift {
	var out []Shift
	for _, ch := range f.Failing() {
		o, ok := checkNamed(other, ch.Name)
		if ok && !o.OK && !o.Waived() {
			continue
		}
		if !ok {
			o = Check{Name: ch.Name, OK: true}
		}
		out = append(out, Shift{Scenario: f.Scenario.Name, Failing: ch, Other: o, Replicas: f.NumReplicas})
	}
	return out
}

// checkNamed is o's check of that name.
func checkNamed(o *Outcome, name string) (Check, bool) {
	for _, c := range o.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

// Write prints c: the totals of both runs, then each check fixed and each
// newly failing; against names the earlier run.
func (c Comparison) Write(w io.Writer, against string) {
	fmt.Fprintf(w, "\nagainst %s (%d scenarios in both):\n", against, c.After.Scenarios)
	fmt.Fprintf(w, "  failed checks: %d (%d on every replica), before %d (%d)\n", c.After.Failed, c.After.EveryReplica, c.Before.Failed, c.Before.EveryReplica)
	var kinds []string
	for k, name := range checkKinds {
		if a, b := c.After.ByKind[k], c.Before.ByKind[k]; a > 0 || b > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %d (before %d)", name, a, b))
		}
	}
	if len(kinds) > 0 {
		fmt.Fprintf(w, "  failed checks by kind: %s\n", strings.Join(kinds, ", "))
	}
	fmt.Fprintf(w, "  scenarios passing: %d, before %d\n", c.After.Passing, c.Before.Passing)
	fmt.Fprintf(w, "  exceptions with their bound: %d, before %d\n", c.After.Exceptions, c.Before.Exceptions)
	fmt.Fprintf(w, "  impact's preemptions (each scenario's mean over its replicas, summed): %.0f, before %.0f\n", c.After.Preemptions, c.Before.Preemptions)
	writeShifts(w, "fixed", c.Fixed, "now passes", "now an exception")
	writeShifts(w, "newly failing", c.New, "passed before", "an exception before")
	for _, only := range []struct {
		which string
		names []string
	}{{"the earlier run only", c.OnlyBefore}, {"this run only", c.OnlyAfter}} {
		switch n := len(only.names); {
		case n > maxNamed:
			fmt.Fprintf(w, "  not compared: %d scenarios in %s\n", n, only.which)
		case n > 0:
			fmt.Fprintf(w, "  not compared, in %s: %s\n", only.which, strings.Join(slices.Sorted(slices.Values(only.names)), ", "))
		}
	}
}

// maxNamed is how many scenarios of one run only Write names; more are
// counted (an --only run against the whole suite).
const maxNamed = 8

// writeShifts prints one list of Comparison.Write: each check as it fails,
// then how it stood in the other run (passing, or waived with its bound).
func writeShifts(w io.Writer, title string, ss []Shift, passing, waived string) {
	fmt.Fprintf(w, "  %s (%d):\n", title, len(ss))
	for _, s := range ss {
		line := fmt.Sprintf("    %s: %s: %s", s.Scenario, s.Failing.Name, s.Failing.Detail)
		if s.Replicas > 1 {
			line += fmt.Sprintf(" (fails on %d of %d replicas)", s.Failing.ReplicasFailed, s.Replicas)
		}
		if s.Other.Waived() {
			line += fmt.Sprintf("; %s, bound: %s", waived, s.Other.Bound)
		} else {
			line += "; " + passing
		}
		fmt.Fprintln(w, line)
	}
}
