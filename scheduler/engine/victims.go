package engine

import (
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/internal/buffer"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
	"github.com/impact-sched/nomad-impact/scheduler/preempt"
)

// judger is the judge-running-gangs step: once per cycle, before the
// queue is decided, it charges each running gang to its project, judges
// its utilisation against its tier's idle policy (idle.go: reclaims,
// Plan.Running), works out which gangs may be victims and at what cost
// (preempt.Running, preempt.Idle: the cycle's victims), and watches
// gangs for missing members (gangwatch.go: Plan.Requeues).
type judger struct {
	c *cycle
	// holderProj: each holder's project index (managedFacts; -1: no job).
	holderProj []int32
	// holderByJob: the holder of each running managed job (managedFacts).
	holderByJob map[*cluster.Job]int32
	// idleVictims: some gang is a victim by its idle action (any tier
	// may then preempt, see preempt.MayTake).
	idleVictims bool
}

// run judges the running gangs: victims and idleness, then the gang
// watch.
func (jd *judger) run(facts []*specFacts) {
	jd.assessHolders(facts)
	jd.watchGangs()
}

// anyIdleVictim: some gang is a victim by its idle action.
func (jd *judger) anyIdleVictim() bool { return jd.idleVictims }

// managedHolder is the holder of a running managed job.
func (jd *judger) managedHolder(j *cluster.Job) (int, bool) {
	h, ok := jd.holderByJob[j]
	return int(h), ok
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
func (jd *judger) assessHolders(facts []*specFacts) {
	holders := jd.c.st.Holders()
	jd.c.victims = buffer.Zeroed(&jd.c.e.scratch.victims, len(holders))
	idle := jd.judgeRunning(facts)
	for h := range holders {
		hd := &holders[h]
		if hd.Job == nil {
			continue
		}
		jd.c.addProjectGPUs(jd.holderProj[h], hd.GPUs)
		j := hd.Job
		f := facts[h]
		if hd.Stopping || jd.c.claimed[h] || f == nil {
			continue
		}
		if st := idle[h]; st.idle && !st.ignored && st.cfg.Action == policy.IdlePreemptible {
			jd.c.victims[h] = jd.idleVictim(&holders[h], st)
			jd.idleVictims = true
			continue
		}
		if !f.preemptible {
			continue
		}
		g := preempt.Gang{Allocs: hd.Allocs, GPUs: hd.GPUs, Start: earliestStart(hd.Allocs), Tier: f.tier, Impact: f.impact, Spec: &j.Spec}
		minRT := jd.c.pol.MinRuntime(j.Spec)
		// A young gang is a victim only for a headroom's tiers
		// (hrCycle.waives); a reservation counts on it once past its
		// minimum runtime (placer.reclaimableAt).
		v := preempt.Running(g, jd.c.now, minRT, jd.c.pol.Preemption.RestartCost)
		if v.Young && jd.c.explain {
			jd.c.why.addYoung(youngHolder{h: h, tier: f.tier, from: v.Grown, own: j.Spec.MinRuntime})
		}
		jd.c.victims[h] = v
	}
	jd.c.why.sortYoung(holders)
}

// managedFacts gives, per holder, the spec facts of a running job the
// scheduler manages (valid metadata); nil for the others. Worked out once
// per cycle for the steps that judge running gangs.
func (jd *judger) managedFacts() []*specFacts {
	holders := jd.c.st.Holders()
	facts := buffer.Zeroed(&jd.c.e.scratch.facts, len(holders))
	if jd.c.e.scratch.holderByJob == nil {
		jd.c.e.scratch.holderByJob = make(map[*cluster.Job]int32, len(holders))
	}
	clear(jd.c.e.scratch.holderByJob)
	jd.holderByJob = jd.c.e.scratch.holderByJob
	jd.holderProj = buffer.Zeroed(&jd.c.e.scratch.holderProj, len(holders))
	for h := range holders {
		j := holders[h].Job
		jd.holderProj[h] = -1
		if j == nil {
			continue
		}
		if j.SpecErr != nil || j.State != cluster.JobRunning {
			jd.holderProj[h] = jd.c.e.queue.project(jd.c.pol.ProjectName(j.Spec))
			continue
		}
		jd.holderByJob[j] = int32(h)
		f, ok := jd.c.e.queue.runningFacts(jd.c.snap, j)
		if !ok {
			f = jd.c.specFacts(&j.Spec) // a job object the job table no longer holds
		}
		if f.bad == "" {
			facts[h] = f
		}
		jd.holderProj[h] = f.proj
	}
	return facts
}
