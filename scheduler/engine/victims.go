package engine

import (
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/internal/buffer"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
	"github.com/impact-sched/nomad-impact/scheduler/preempt"
)

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
		g := preempt.Gang{Allocs: hd.Allocs, GPUs: hd.GPUs, Start: earliestStart(hd.Allocs), Tier: f.tier, Impact: f.impact, Spec: &j.Spec}
		minRT := c.pol.MinRuntime(j.Spec)
		// A young gang is a victim only for a headroom's tiers
		// (headroomWaives).
		v, young := preempt.Running(g, c.now, minRT, c.pol.Preemption.RestartCost, len(c.pol.Headrooms) > 0)
		if young && c.explain {
			c.why.addYoung(youngHolder{h: h, tier: f.tier, from: g.Start.Add(minRT), own: j.Spec.MinRuntime})
		}
		c.victims[h] = v
	}
	c.why.sortYoung(holders)
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
