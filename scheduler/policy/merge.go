package policy

// Building a policy: Clone, on which Overlay (file.go) lays what a policy
// file writes.

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
			if h.LoanGrace != nil {
				g := *h.LoanGrace
				hh.LoanGrace = &g
			}
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
