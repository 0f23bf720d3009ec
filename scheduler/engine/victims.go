package engine

import (
	"sort"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/internal/buffer"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
	"github.com/impact-sched/nomad-impact/scheduler/preempt"
)

// victimInfo is what the cycle knows about a running gang as a possible
// victim: one per running gang, so only what the search for victims
// reads of most of them (a stop's signal and exit code are read from the
// job's spec when one is ordered, victimStop; an idle victim's numbers
// are behind idleVictim).
type victimInfo struct {
	ok bool // preemptible at all (policy, min runtime, not stopping)
	// young: preemptible but within its minimum runtime, a victim only
	// for the tiers of its pool's headroom (headroomWaives).
	young bool
	// idle: a victim on its tier's preemptible idle action (see
	// cycle.idleVictim).
	idle bool
	tier string
	cost float64
	lost float64
	// grace is the job's impact_grace (zero for a gang that is no candidate:
	// bindings count only candidates' grace).
	grace time.Duration
	// weight is its tier's weight (idle victims).
	weight float64
	*idleVictim
}

// idleVictim is what an idle victim's stop says of its idleness.
type idleVictim struct {
	idleSince time.Time
	idleNote  string
	idleGPUh  float64
	reclaimed float64
}

// youngHolder is a gang that would be a preemption candidate but for its
// min runtime (the policy's, or its impact_min_runtime when larger).
type youngHolder struct {
	h    int
	tier string
	from time.Time
	// own is the gang's impact_min_runtime (0: none), from which
	// youngNote says whose min runtime protects it.
	own time.Duration
}

// assessHolders charges running gangs to their projects (for quotas) and
// works out, once per cycle, which may be victims and at what cost.
func (c *cycle) assessHolders(facts []*specFacts) {
	holders := c.st.Holders()
	c.victims = buffer.Zeroed(&c.e.scratch.victims, len(holders))
	idle := c.judgeRunning(facts)
	for h := range holders {
		hd := &holders[h]
		if hd.Job == nil {
			continue
		}
		c.addProjectGPUs(c.holderProj[h], hd.GPUs)
		j := hd.Job
		f := facts[h]
		if hd.Stopping || c.claimed[h] || f == nil {
			continue
		}
		if st := idle[h]; st.idle && !st.ignored && st.cfg.Action == policy.IdlePreemptible {
			c.victims[h] = c.idleVictim(&holders[h], st)
			c.idleVictims = true
			continue
		}
		if !f.preemptible {
			continue
		}
		start := earliestStart(hd.Allocs)
		young := false
		if minRT := c.pol.MinRuntime(j.Spec); c.now.Sub(start) < minRT {
			if c.explain {
				c.young = append(c.young, youngHolder{h: h, tier: f.tier, from: start.Add(minRT), own: j.Spec.MinRuntime})
			}
			if len(c.pol.Headrooms) == 0 {
				continue
			}
			young = true // a victim only for a headroom's tiers (headroomWaives)
		}
		lost := preempt.WorkLost(hd.Allocs, j.Spec.CheckpointInterval, c.now)
		restart := float64(hd.GPUs) * c.pol.Preemption.RestartCost.Hours()
		c.victims[h] = victimInfo{
			ok:    !young,
			young: young,
			tier:  f.tier,
			cost:  f.impact * (lost + restart),
			lost:  lost,
			grace: j.Spec.Grace,
		}
	}
	sort.SliceStable(c.young, func(a, b int) bool {
		ya, yb := c.young[a], c.young[b]
		if !ya.from.Equal(yb.from) {
			return ya.from.Before(yb.from)
		}
		return holders[ya.h].JobID < holders[yb.h].JobID
	})
}

// managedFacts gives, per holder, the spec facts of a running job the
// scheduler manages (valid metadata); nil for the others. Worked out once
// per cycle for the steps that judge running gangs.
func (c *cycle) managedFacts() []*specFacts {
	holders := c.st.Holders()
	facts := buffer.Zeroed(&c.e.scratch.facts, len(holders))
	if c.e.scratch.holderByJob == nil {
		c.e.scratch.holderByJob = make(map[*cluster.Job]int32, len(holders))
	}
	clear(c.e.scratch.holderByJob)
	c.holderByJob = c.e.scratch.holderByJob
	c.holderProj = buffer.Zeroed(&c.e.scratch.holderProj, len(holders))
	for h := range holders {
		j := holders[h].Job
		c.holderProj[h] = -1
		if j == nil {
			continue
		}
		if j.SpecErr != nil || j.State != cluster.JobRunning {
			c.holderProj[h] = c.e.queue.project(c.pol.ProjectName(j.Spec))
			continue
		}
		c.holderByJob[j] = int32(h)
		f, ok := c.e.queue.runningFacts(c.snap, j)
		if !ok {
			f = c.specFacts(&j.Spec) // a job object the job table no longer holds
		}
		if f.bad == "" {
			facts[h] = f
		}
		c.holderProj[h] = f.proj
	}
	return facts
}
