package robust

import (
	"cmp"
	"slices"

	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// A scenario's replicas. The suite's queues are chaotic: nomad-native with
// its submits moved by at most a second (the native twin, twin.go) moves a
// tier's median by hours on some scenarios, so one run of each policy
// cannot tell a policy's effect from chance. With Config.Replicas = R,
// every policy runs R times: replica 0 on the scenario's jobs as given,
// replica k > 0 on a copy with every submit moved later by up to
// Config.ReplicaJitter seconds (jitter stream 2k-1), the same copy for
// every policy, so that each replica is a paired comparison. The checks
// compare the policies' means over their replicas (summarize), and a
// failed check says on how many replicas impact failed it against the
// native run on the same copy. The native twin runs R times too, on
// streams 2k: no two runs share a jitter, and adding replicas keeps the
// earlier ones. Averaging narrows what chance moves but cannot remove it
// from a check with no slack (the weighted JCT's): the twin's count says
// how much is left.

// replicaStream and twinStream are the jitter streams of replica k > 0 of
// the compared policies and of replica k of the native twin.
func replicaStream(k int) uint64 { return uint64(2*k - 1) }
func twinStream(k int) uint64    { return uint64(2 * k) }

// Jitter returns a copy of jobs with every submit moved later by an
// amount in [0, upTo] seconds that depends only on the job's index and
// the stream (the same scenario and stream give the same copy), never
// past windowEnd - 1 for a job submitted inside the window, sorted by
// submit again.
func Jitter(jobs []trace.Job, upTo, windowEnd int64, stream uint64) []trace.Job {
	out := slices.Clone(jobs)
	if upTo <= 0 {
		return out
	}
	for i := range out {
		moved := out[i].Submit + int64(splitmix(uint64(i)+stream<<32)%uint64(upTo+1))
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

// runs are every run of policy name on o, replica order: nil when it did
// not run.
func (o *Outcome) runs(name string) []*sim.Result {
	r := o.Results[name]
	if r == nil {
		return nil
	}
	return append([]*sim.Result{r}, o.Replicas[name]...)
}

// mean is policy name's metrics on o, the mean over its replicas (the
// zero Summary when it did not run).
func (o *Outcome) mean(name string) Summary {
	rs := o.runs(name)
	if len(rs) == 0 {
		return Summary{}
	}
	return summarize(rs)
}

// summarize is the mean of the runs' headline metrics (rs not empty).
func summarize(rs []*sim.Result) Summary {
	n := float64(len(rs))
	s := Summary{Cadence: rs[0].Cadence, WaitS: map[string]sim.Percentiles{}, JobsCompletedByTier: map[string]float64{}}
	for _, r := range rs {
		s.Occupancy += r.Occupancy / n
		s.OccupancyNet += netOccupancy(r) / n
		s.PartialGangIdleGPUHours += r.PartialGangIdleGPUHours / n
		s.WeightedJCTS += r.WeightedJCTS / n
		s.Preemptions += float64(r.Preemptions) / n
		s.LostFraction += r.LostFraction / n
		s.JobsUnfinished += float64(r.JobsUnfinished) / n
		if c, ok := r.HeadroomCost[headroomPool(r)]; ok {
			s.HeadroomIdleShare += c.Share / n
			s.Headroom = true
		}
		for t, p := range r.WaitS {
			m := s.WaitS[t]
			m.P50 += p.P50 / n
			m.P95 += p.P95 / n
			m.P99 += p.P99 / n
			s.WaitS[t] = m
		}
		for t, c := range r.JobsCompletedByTier {
			s.JobsCompletedByTier[t] += float64(c) / n
		}
	}
	return s
}

// replicaFailures counts, per check name, the replicas on which check
// fails a's run against b's on the same jobs: nil with one replica (or
// runs that do not pair).
func replicaFailures(a, b []*sim.Result, check func(a, b Summary) []Check) map[string]int {
	if len(a) < 2 || len(a) != len(b) {
		return nil
	}
	failed := map[string]int{}
	for k := range a {
		for _, c := range check(summarize(a[k:k+1]), summarize(b[k:k+1])) {
			if !c.OK {
				failed[c.Name]++
			}
		}
	}
	return failed
}
