package robust

import (
	"fmt"

	"github.com/impact-sched/nomad-impact/scheduler/sim/baseline"
)

// The native twin is the suite's noise floor: nomad-native run again on
// the same scenario with every submit moved later by at most
// Config.TwinJitter seconds (each job by its own fixed amount), a change
// no user or policy could control, as many times as the scenario has
// replicas (replicas.go), on jitters of its own. The never-worse checks
// that this twin fails against nomad-native itself measure how far a
// scenario's waits, JCT and occupancy move on chance alone, so that a
// reader can tell an impact failure of that size from a systematic one
// (it stays in the report: the twin waives nothing).

// NativeTwin names the twin's results (Outcome.Results).
const NativeTwin = "nomad-native-twin"

// twinChecks compares the native twin with nomad-native by the checks
// impact is held to that compare two runs (compare: tier waits, weighted
// JCT, occupancy; not partial-gang idle, which native has by design,
// every job finished, or the top tier's gain), on their means over the
// replicas: it sets o.TwinFailed to the names of those the twin fails
// (and o.TwinReplicasFailed to on how many replicas each fails), and
// gives each failed check of impact the twin's result on the same check
// (Check.Twin) and whether the twin is at least as bad there
// (Check.WithinTwin). Without a twin it does nothing.
func twinChecks(o *Outcome) {
	twinRuns, natRuns := o.runs(NativeTwin), o.runs(baseline.NomadNative)
	if twinRuns == nil || natRuns == nil {
		return
	}
	check := func(a, b Summary) []Check { return compare(a, b, o.Debounce) }
	byName := map[string]Check{}
	o.TwinFailed = []string{}
	perReplica := replicaFailures(twinRuns, natRuns, check)
	for _, c := range check(summarize(twinRuns), summarize(natRuns)) {
		byName[c.Name] = c
		if !c.OK {
			o.TwinFailed = append(o.TwinFailed, c.Name)
			if perReplica != nil {
				if o.TwinReplicasFailed == nil {
					o.TwinReplicasFailed = map[string]int{}
				}
				o.TwinReplicasFailed[c.Name] = perReplica[c.Name]
			}
		}
	}
	for i := range o.Checks {
		c := &o.Checks[i]
		if tc, ok := byName[c.Name]; ok && !c.OK {
			c.Twin, c.WithinTwin = tc.Detail, tc.worse >= c.worse
		}
	}
}

// TwinCount is the native twin's tally over the scenarios (TwinTally).
type TwinCount struct {
	// TwinFailed is the checks the twin fails against nomad-native;
	// ImpactFailed impact's failed checks of the kinds the twin is held
	// to; Within how many of those the twin is at least as bad on.
	TwinFailed, ImpactFailed, Within int
	// TwinEvery and ImpactEvery are how many of TwinFailed and
	// ImpactFailed fail on every replica, with more than one.
	TwinEvery, ImpactEvery int
}

// TwinTally counts, over outs, the native twin's failed checks and
// impact's of the same kinds; ok is false when no scenario ran a twin.
func TwinTally(outs []*Outcome) (n TwinCount, ok bool) {
	for _, o := range outs {
		if o.TwinFailed == nil {
			continue
		}
		ok = true
		n.TwinFailed += len(o.TwinFailed)
		for _, name := range o.TwinFailed {
			if o.NumReplicas > 1 && o.TwinReplicasFailed[name] == o.NumReplicas {
				n.TwinEvery++
			}
		}
		for _, c := range o.Checks {
			if !c.OK && c.Twin != "" {
				n.ImpactFailed++
				if c.WithinTwin {
					n.Within++
				}
				if o.NumReplicas > 1 && c.ReplicasFailed == o.NumReplicas {
					n.ImpactEvery++
				}
			}
		}
	}
	return n, ok
}

// describe is the tally in a sentence, for replicas runs of each policy.
func (n TwinCount) describe(replicas int) string {
	if replicas < 2 {
		return fmt.Sprintf("it fails %d checks against nomad-native itself; impact fails %d of those kinds, %d of them no worse than the twin does",
			n.TwinFailed, n.ImpactFailed, n.Within)
	}
	return fmt.Sprintf("it fails %d checks against nomad-native itself, %d of them on all %d replicas; impact fails %d of those kinds, %d of them on all %d replicas, %d no worse than the twin does",
		n.TwinFailed, n.TwinEvery, replicas, n.ImpactFailed, n.ImpactEvery, replicas, n.Within)
}
