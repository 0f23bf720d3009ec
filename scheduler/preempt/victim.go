package preempt

import (
	"slices"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// Victim is what a cycle knows of a running gang as a possible victim:
// one per running gang, so only what the search for victims reads of
// most of them (a stop's signal and exit code are read from the job's
// spec when one is ordered; an idle victim's numbers are behind
// IdleVictim). The zero Victim is no victim at all.
type Victim struct {
	// OK: preemptible by the tiers that may preempt its own (policy,
	// past its min runtime, not stopping).
	OK bool
	// Young: preemptible but within its minimum runtime, a victim only
	// for the tiers a headroom of its pool waives that for (Eligible);
	// a reservation counts it as freed from Grown on.
	Young bool
	// Grown: when a young victim's minimum runtime ends (zero for the
	// others).
	Grown time.Time
	// Idle: a victim by its tier's preemptible idle action (see Idle).
	Idle bool
	Tier string
	// Cost of stopping it: its impact x (Lost + restart).
	Cost float64
	// Lost is the GPU-hours of work it loses (WorkLost).
	Lost float64
	// Grace is the job's impact_grace (zero for a gang that is no
	// candidate: bindings count only candidates' grace).
	Grace time.Duration
	// Weight is its tier's weight (idle victims only, see MayTake).
	Weight float64
	*IdleVictim
}

// IdleVictim is what an idle victim's stop says of its idleness.
type IdleVictim struct {
	Since     time.Time
	Note      string
	GPUHours  float64
	Reclaimed float64
}

// Gang is what the victim rules read of a running gang.
type Gang struct {
	Allocs []*cluster.Alloc
	GPUs   int
	// Start is its earliest allocation's start.
	Start  time.Time
	Tier   string
	Impact float64
	Spec   *jobspec.Spec
}

// Running judges a running preemptible gang at now: past its minimum
// runtime it is a victim (OK) at the cost of its impact x (the work it
// loses since its last checkpoint + restartCost per GPU). Within it it is
// a young victim (Young, at the same cost, Grown when the minimum runtime
// ends): a victim only where a headroom waives the minimum runtime, and
// one a reservation may count on once it has grown.
func Running(g Gang, now time.Time, minRuntime, restartCost time.Duration) Victim {
	young := now.Sub(g.Start) < minRuntime
	lost := WorkLost(g.Allocs, g.Spec.CheckpointInterval, now)
	restart := float64(g.GPUs) * restartCost.Hours()
	var grown time.Time
	if young {
		grown = g.Start.Add(minRuntime)
	}
	return Victim{
		OK:    !young,
		Young: young,
		Grown: grown,
		Tier:  g.Tier,
		Cost:  g.Impact * (lost + restart),
		Lost:  lost,
		Grace: g.Spec.Grace,
	}
}

// Idle makes a gang idle since `since` on its tier's preemptible idle
// action a victim: any waiting job of its tier or a heavier one may
// preempt it (MayTake), past its min runtime or not (the idle duration
// is its protection), at the cost of the work it did between its last
// checkpoint and going idle (nothing since counts as progress) plus the
// restart. iv says what its stop tells of the idleness.
func Idle(g Gang, weight float64, restartCost time.Duration, iv *IdleVictim) Victim {
	lost := WorkLost(g.Allocs, g.Spec.CheckpointInterval, iv.Since)
	restart := float64(g.GPUs) * restartCost.Hours()
	return Victim{
		OK:         true,
		Idle:       true,
		Tier:       g.Tier,
		Weight:     weight,
		Cost:       g.Impact * (lost + restart),
		Lost:       lost,
		Grace:      g.Spec.Grace,
		IdleVictim: iv,
	}
}

// MayTake: a job of tier by (nil: no tier) may preempt v when by may
// preempt v's tier, or v is idle and by weighs at least as much as v's
// tier.
func MayTake(by *policy.Tier, v *Victim) bool {
	if by == nil {
		return false
	}
	return slices.Contains(by.MayPreempt, v.Tier) || v.Idle && by.Weight >= v.Weight
}

// Movable: v may be moved out of a job's way by a defragmenting
// preemption: past its min runtime (idle victims are preemption's), one
// allocation of at most maxGPUs GPUs.
func (v *Victim) Movable(allocs, gpus, maxGPUs int) bool {
	return v.OK && !v.Idle && allocs == 1 && gpus <= maxGPUs
}
