package policy

import "fmt"

// Building a policy: Clone, and Merge, which lays what a policy file set
// over the defaults, field by field and tiers and projects by name.

// Clone returns a deep copy.
func (p *Policy) Clone() *Policy {
	c := *p
	c.Tiers = make(map[string]*Tier, len(p.Tiers))
	for k, t := range p.Tiers {
		tt := *t
		tt.MayPreempt = append([]string(nil), t.MayPreempt...)
		tt.Idle = t.Idle.clone()
		c.Tiers[k] = &tt
	}
	c.Projects = make(map[string]*Project, len(p.Projects))
	for k, pr := range p.Projects {
		pp := *pr
		c.Projects[k] = &pp
	}
	if p.Headrooms != nil {
		c.Headrooms = make(map[string]*Headroom, len(p.Headrooms))
		for k, h := range p.Headrooms {
			hh := *h
			hh.Tiers = append([]string(nil), h.Tiers...)
			c.Headrooms[k] = &hh
		}
	}
	c.problems = append([]*FieldError(nil), p.problems...)
	c.pos = make(map[string]Pos, len(p.pos))
	for k, v := range p.pos {
		c.pos[k] = v
	}
	return &c
}

// Merge returns p with every field that o set (o came from a file: a field
// is set when the file wrote it) laid on top. Tiers and projects merge by
// name: a block in o changes only the fields it writes of the same-named
// entry of p, or adds an entry.
func (p *Policy) Merge(o *Policy) *Policy {
	c := p.Clone()
	if o == nil {
		return c
	}
	set := func(field string) bool { _, ok := o.pos[field]; return ok }
	take := func(field string) { c.pos[field] = o.pos[field] }
	mergeField(set, take, "default_tier", &c.DefaultTier, o.DefaultTier)
	mergeField(set, take, "default_project", &c.DefaultProject, o.DefaultProject)
	c.mergeTiers(o, set, take)
	c.mergeProjects(o, set, take)
	mergeField(set, take, "aging weight_per_hour", &c.Aging.WeightPerHour, o.Aging.WeightPerHour)
	mergeField(set, take, "aging max", &c.Aging.Max, o.Aging.Max)
	mergeField(set, take, "fair_share half_life", &c.FairShare.HalfLife, o.FairShare.HalfLife)
	mergeField(set, take, "fair_share weight", &c.FairShare.Weight, o.FairShare.Weight)
	mergeField(set, take, "deadline weight", &c.Deadline.Weight, o.Deadline.Weight)
	mergeField(set, take, "deadline horizon", &c.Deadline.Horizon, o.Deadline.Horizon)
	mergeField(set, take, "preemption enabled", &c.Preemption.Enabled, o.Preemption.Enabled)
	mergeField(set, take, "preemption max_gpu_hours_lost_per_hour", &c.Preemption.MaxGPUHoursLostPerHour, o.Preemption.MaxGPUHoursLostPerHour)
	mergeField(set, take, "preemption min_runtime", &c.Preemption.MinRuntime, o.Preemption.MinRuntime)
	mergeField(set, take, "preemption restart_cost", &c.Preemption.RestartCost, o.Preemption.RestartCost)
	mergeField(set, take, "preemption gain_horizon", &c.Preemption.GainHorizon, o.Preemption.GainHorizon)
	mergeField(set, take, "preemption max_per_cycle", &c.Preemption.MaxPerCycle, o.Preemption.MaxPerCycle)
	mergeField(set, take, "backfill enabled", &c.Backfill.Enabled, o.Backfill.Enabled)
	mergeField(set, take, "backfill reservations", &c.Backfill.Reservations, o.Backfill.Reservations)
	mergeField(set, take, "defragment enabled", &c.Defragment.Enabled, o.Defragment.Enabled)
	mergeField(set, take, "defragment max_victim_gpus", &c.Defragment.MaxVictimGPUs, o.Defragment.MaxVictimGPUs)
	mergeField(set, take, "defragment max_per_cycle", &c.Defragment.MaxPerCycle, o.Defragment.MaxPerCycle)
	mergeField(set, take, "defragment gain_horizon", &c.Defragment.GainHorizon, o.Defragment.GainHorizon)
	c.mergeHeadrooms(o)
	mergeField(set, take, "gangs missing_member_grace", &c.Gangs.MissingMemberGrace, o.Gangs.MissingMemberGrace)
	mergeIdle(c, o, set, take)
	return c
}

// mergeField lays src on dst when the file set field, keeping its
// position.
func mergeField[T any](set func(string) bool, take func(string), field string, dst *T, src T) {
	if set(field) {
		*dst = src
		take(field)
	}
}

// mergeTiers merges o's tier blocks into c by name.
func (c *Policy) mergeTiers(o *Policy, set func(string) bool, take func(string)) {
	for _, name := range sortedKeys(o.Tiers) {
		ot := o.Tiers[name]
		ct, ok := c.Tiers[name]
		prefix := fmt.Sprintf("tier %q ", name)
		if !ok {
			ct = &Tier{Name: name}
			c.Tiers[name] = ct
			if !set(prefix + "weight") {
				// A tier the defaults do not know needs its weight said:
				// 0 would silently rank it below everything.
				c.problems = append(c.problems, &FieldError{Pos: o.pos[prefix[:len(prefix)-1]], Field: prefix + "weight", Reason: "required for a tier that is not built in"})
			}
		}
		take(prefix[:len(prefix)-1])
		mergeField(set, take, prefix+"weight", &ct.Weight, ot.Weight)
		mergeField(set, take, prefix+"may_preempt", &ct.MayPreempt, append([]string(nil), ot.MayPreempt...))
		mergeField(set, take, prefix+"preemptible", &ct.Preemptible, ot.Preemptible)
		mergeField(set, take, prefix+"max_gpu_hours_lost_per_hour", &ct.MaxGPUHoursLostPerHour, ot.MaxGPUHoursLostPerHour)
	}
}

// mergeProjects merges o's project blocks into c by name.
func (c *Policy) mergeProjects(o *Policy, set func(string) bool, take func(string)) {
	for _, name := range sortedKeys(o.Projects) {
		op := o.Projects[name]
		cp, ok := c.Projects[name]
		if !ok {
			cp = &Project{Name: name, Share: 1, Weight: 1}
			c.Projects[name] = cp
		}
		prefix := fmt.Sprintf("project %q ", name)
		take(prefix[:len(prefix)-1])
		mergeField(set, take, prefix+"share", &cp.Share, op.Share)
		mergeField(set, take, prefix+"weight", &cp.Weight, op.Weight)
		mergeField(set, take, prefix+"gpu_quota", &cp.GPUQuota, op.GPUQuota)
	}
}
