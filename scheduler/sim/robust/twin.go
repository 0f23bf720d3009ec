package robust

import (
	"cmp"
	"slices"

	"github.com/impact-sched/nomad-impact/scheduler/sim/baseline"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// The native twin is the suite's noise floor: nomad-native run again on
// the same scenario with every submit moved later by at most
// Config.TwinJitter seconds (each job by its own fixed amount), a change
// no user or policy could control. The never-worse checks that this twin
// fails against nomad-native itself measure how far a scenario's waits,
// JCT and occupancy move on chance alone, so that a reader can tell an
// impact failure of that size from a systematic one (it stays in the
// report: the twin waives nothing).

// NativeTwin names the twin's results (Outcome.Results).
const NativeTwin = "nomad-native-twin"

// Jitter returns a copy of jobs with every submit moved later by an
// amount in [0, upTo] seconds that depends only on the job's index (the
// same scenario gives the same twin), never past windowEnd - 1 for a job
// submitted inside the window, sorted by submit again.
func Jitter(jobs []trace.Job, upTo, windowEnd int64) []trace.Job {
	out := slices.Clone(jobs)
	if upTo <= 0 {
		return out
	}
	for i := range out {
		moved := out[i].Submit + int64(splitmix(uint64(i))%uint64(upTo+1))
		if out[i].Submit < windowEnd {
			moved = min(moved, windowEnd-1)
		}
		out[i].Submit = moved
	}
	slices.SortStableFunc(out, func(a, b trace.Job) int { return cmp.Compare(a.Submit, b.Submit) })
	return out
}

// splitmix is SplitMix64's finalizer: a well-mixed hash of x.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// twinChecks compares the native twin with nomad-native by the checks
// impact is held to that compare two runs (compare: tier waits, weighted
// JCT, occupancy; not partial-gang idle, which native has by design,
// every job finished, or the top tier's gain): it sets o.TwinFailed
// to the names of those the twin fails, and gives each failed check of
// impact the twin's result on the same check (Check.Twin) and whether the
// twin is at least as bad there (Check.WithinTwin). Without a twin it
// does nothing.
func twinChecks(o *Outcome) {
	twin, nat := o.Results[NativeTwin], o.Results[baseline.NomadNative]
	if twin == nil || nat == nil {
		return
	}
	byName := map[string]Check{}
	o.TwinFailed = []string{}
	for _, c := range compare(twin, nat, o.Debounce) {
		byName[c.Name] = c
		if !c.OK {
			o.TwinFailed = append(o.TwinFailed, c.Name)
		}
	}
	for i := range o.Checks {
		c := &o.Checks[i]
		if tc, ok := byName[c.Name]; ok && !c.OK {
			c.Twin, c.WithinTwin = tc.Detail, tc.worse >= c.worse
		}
	}
}

// TwinTally counts, over outs, the checks the native twin fails against
// nomad-native, impact's failed checks of the kinds the twin is held to,
// and how many of those the twin is at least as bad on; ok is false when
// no scenario ran a twin.
func TwinTally(outs []*Outcome) (twinFailed, impactFailed, within int, ok bool) {
	for _, o := range outs {
		if o.TwinFailed == nil {
			continue
		}
		ok = true
		twinFailed += len(o.TwinFailed)
		for _, c := range o.Checks {
			if !c.OK && c.Twin != "" {
				impactFailed++
				if c.WithinTwin {
					within++
				}
			}
		}
	}
	return twinFailed, impactFailed, within, ok
}
