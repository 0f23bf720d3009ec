package engine

// The spec facts: what the policy says of every job of one tier and
// project, worked out once per engine.

import (
	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// specFacts is what the policy derives from the fields of a spec it
// resolves tier and project from (specKey); the same for every job with
// those fields, so worked out once per engine, not once per job.
type specFacts struct {
	bad         string // CheckSpec's error, "" when valid
	tier        string
	project     string
	proj        int32
	impact      float64
	quota       int
	preemptible bool
	// idle is the tier's idle policy.
	idle policy.Idle
}

// specKey is every field of a spec that TierOf, ProjectName, ProjectOf,
// CheckSpec, Impact and IsPreemptible read.
type specKey struct {
	tier, project       string
	preemptibleSet, pre bool
}

const maxSpecFacts = 4096

func (c *cycle) specFacts(s *jobspec.Spec) *specFacts {
	qc := &c.e.queue
	k := specKey{s.Tier, s.Project, s.PreemptibleSet, s.Preemptible}
	if f, ok := qc.facts[k]; ok {
		return f
	}
	f := &specFacts{project: c.pol.ProjectName(*s)}
	f.proj = qc.project(f.project)
	if err := c.pol.CheckSpec(*s); err != nil {
		f.bad = "bad impact metadata: " + err.Error()
	} else {
		f.tier = c.pol.TierOf(*s).Name
		f.impact = c.pol.Impact(*s)
		f.preemptible = c.pol.IsPreemptible(*s)
		f.quota = c.pol.ProjectOf(*s).GPUQuota
		f.idle = c.pol.IdleFor(*s)
	}
	if qc.facts == nil || len(qc.facts) >= maxSpecFacts {
		qc.facts = map[specKey]*specFacts{} // bounded: tiers and projects are few, typos are not
	}
	qc.facts[k] = f
	return f
}
