package robust

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/impact-sched/nomad-impact/scheduler/sim"
)

// JCTBreakdown says where impact's tier-weighted JCT differs from
// nomad-native's, so that a failed weighted-JCT check shows what it pays
// for: per tier, the seconds of the weighted mean that its jobs' waits
// to their first start add, and those their time from first start to
// finish adds. A job runs the same time under both policies (the suite
// replays no hung runs), so the second is the work preemptions cost it
// and its waits to start again (a preempted job queues anew, behind the
// jobs of its tier that waited while it ran: scheduler/nomad/park.go).
type JCTBreakdown struct {
	// Tiers, largest share first.
	Tiers []JCTPart `json:"tiers"`
	// OtherS is the rest of the difference: jobs that finished under one
	// policy only.
	OtherS float64 `json:"other_s"`
}

// JCTPart is one tier's share of the difference, over the jobs both
// policies finished. Over several replicas, every number is the mean of
// the replicas' (meanJCT).
type JCTPart struct {
	Tier string  `json:"tier"`
	Jobs float64 `json:"jobs"`
	// FirstStartS and AfterStartS are impact's minus native's, in seconds
	// of the weighted mean: w x (first start - submit), and w x (finish -
	// first start), summed over the tier's jobs and divided by the weights
	// summed over every job impact finished.
	FirstStartS float64 `json:"first_start_s"`
	AfterStartS float64 `json:"after_first_start_s"`
	// Preemptions of its jobs under each policy.
	Preemptions       float64 `json:"preemptions"`
	NativePreemptions float64 `json:"native_preemptions"`
}

// TotalS is the tier's share: FirstStartS + AfterStartS.
func (p JCTPart) TotalS() float64 { return p.FirstStartS + p.AfterStartS }

// breakJCT splits imp.WeightedJCTS - nat.WeightedJCTS by tier (jobs
// matched by ID; weights as imp took them, Result.TierWeight). The parts
// and OtherS sum to the difference.
func breakJCT(imp, nat *sim.Result) *JCTBreakdown {
	natByID := make(map[string]*sim.JobResult, len(nat.Jobs))
	for i := range nat.Jobs {
		natByID[nat.Jobs[i].ID] = &nat.Jobs[i]
	}
	wsum := 0.0
	for _, j := range imp.Jobs {
		if j.Finish >= 0 {
			wsum += imp.TierWeight(j.Tier)
		}
	}
	b := &JCTBreakdown{OtherS: imp.WeightedJCTS - nat.WeightedJCTS}
	if wsum == 0 {
		return b
	}
	byTier := map[string]*JCTPart{}
	for _, a := range imp.Jobs {
		n := natByID[a.ID]
		if a.Finish < 0 || n == nil || n.Finish < 0 {
			continue
		}
		p := byTier[a.Tier]
		if p == nil {
			p = &JCTPart{Tier: a.Tier}
			byTier[a.Tier] = p
		}
		w := imp.TierWeight(a.Tier) / wsum
		p.Jobs++
		p.FirstStartS += w * float64((a.FirstStart-a.Submit)-(n.FirstStart-n.Submit))
		p.AfterStartS += w * float64((a.Finish-a.FirstStart)-(n.Finish-n.FirstStart))
		p.Preemptions += float64(a.Preempted)
		p.NativePreemptions += float64(n.Preempted)
	}
	for _, p := range byTier {
		b.Tiers = append(b.Tiers, *p)
	}
	b.sort()
	// Subtracted in the sorted order, not the map's, so that two runs of
	// the same jobs write the same OtherS to the last bit.
	for _, p := range b.Tiers {
		b.OtherS -= p.TotalS()
	}
	return b
}

// sort orders b's tiers largest share first.
func (b *JCTBreakdown) sort() {
	slices.SortFunc(b.Tiers, func(x, y JCTPart) int {
		return cmp.Or(cmp.Compare(math.Abs(y.TotalS()), math.Abs(x.TotalS())), cmp.Compare(x.Tier, y.Tier))
	})
}

// meanJCT is the mean of breakJCT over the replicas, impRuns[k] against
// natRuns[k] (the same jobs): the parts and OtherS sum to the difference
// of the means, the weighted JCTs the check compares.
func meanJCT(impRuns, natRuns []*sim.Result) *JCTBreakdown {
	n := min(len(impRuns), len(natRuns))
	if n == 1 {
		return breakJCT(impRuns[0], natRuns[0])
	}
	f := 1 / float64(n)
	m := &JCTBreakdown{}
	byTier := map[string]*JCTPart{}
	for k := range n {
		b := breakJCT(impRuns[k], natRuns[k])
		m.OtherS += f * b.OtherS
		for _, p := range b.Tiers {
			q := byTier[p.Tier]
			if q == nil {
				q = &JCTPart{Tier: p.Tier}
				byTier[p.Tier] = q
			}
			q.Jobs += f * p.Jobs
			q.FirstStartS += f * p.FirstStartS
			q.AfterStartS += f * p.AfterStartS
			q.Preemptions += f * p.Preemptions
			q.NativePreemptions += f * p.NativePreemptions
		}
	}
	for _, q := range byTier {
		m.Tiers = append(m.Tiers, *q)
	}
	m.sort()
	return m
}

// String is the breakdown in a line, for the suite's list of failures: the
// tiers that moved or were preempted.
func (b *JCTBreakdown) String() string {
	if len(b.Tiers) == 0 {
		return fmt.Sprintf("no job finished under both policies; impact minus native %+.1fs", b.OtherS)
	}
	var parts []string
	for _, p := range b.Tiers {
		if math.Abs(p.TotalS()) < 0.05 && p.Preemptions == 0 && p.NativePreemptions == 0 {
			continue // nothing to tell (the JSON keeps it)
		}
		parts = append(parts, fmt.Sprintf("%s %+.1fs (first starts %+.1fs, first start to finish %+.1fs; preemptions %.4g, native %.4g)",
			p.Tier, p.TotalS(), p.FirstStartS, p.AfterStartS, p.Preemptions, p.NativePreemptions))
	}
	s := "by tier, impact minus native in the weighted mean: " + strings.Join(parts, ", ")
	if math.Abs(b.OtherS) >= 0.05 {
		s += fmt.Sprintf("; jobs finished under one policy only %+.1fs", b.OtherS)
	}
	return s
}
