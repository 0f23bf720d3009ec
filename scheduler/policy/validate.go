package policy

import (
	"errors"
	"fmt"
	"math"
)

// Checking a policy as a whole: Validate, and the file positions its
// errors name.

// Pos is a position in a policy file.
type Pos struct {
	File string
	Line int
}

func (p Pos) String() string {
	if p.File == "" {
		return "policy default"
	}
	return fmt.Sprintf("%s:%d", p.File, p.Line)
}

// FieldError is a policy error that names the file, line and field.
type FieldError struct {
	Pos    Pos
	Field  string
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.Pos, e.Field, e.Reason)
}

// Validate checks the policy as a whole. It returns every problem found,
// joined, each a *FieldError naming file, line and field.
func (p *Policy) Validate() error {
	var errs []error
	for _, pr := range p.problems {
		errs = append(errs, pr)
	}
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Pos: p.posOf(field), Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if len(p.Tiers) == 0 {
		bad("tier", "at least one tier is required")
	}
	if _, ok := p.Tiers[p.DefaultTier]; !ok {
		bad("default_tier", "names tier %q, which is not defined (tiers: %s)", p.DefaultTier, joinKeys(p.Tiers))
	}
	if p.DefaultProject == "" {
		bad("default_project", "must not be empty")
	}
	p.validateTiers(bad)
	p.validateProjects(bad)
	p.validateScoring(bad)
	p.validatePreemption(bad)
	if p.Backfill.Reservations < 0 {
		bad("backfill reservations", "must be >= 0, got %d", p.Backfill.Reservations)
	}
	for _, t := range p.Backfill.ReserveTiers {
		if _, ok := p.Tiers[t]; !ok {
			bad("backfill reserve_tiers", "names tier %q, which is not defined (tiers: %s)", t, joinKeys(p.Tiers))
		}
	}
	p.validateDefragment(bad)
	p.validateHeadrooms(bad)
	if p.Gangs.MissingMemberGrace < 0 {
		bad("gangs missing_member_grace", "must not be negative (0 turns the watch off)")
	}
	p.validateIdle(bad)
	p.validateWalltime(bad)
	return errors.Join(errs...)
}

func (p *Policy) validateWalltime(bad func(field, format string, args ...any)) {
	w := p.Walltime
	if !finite(w.Quantile) || w.Quantile <= 0 || w.Quantile > 1 {
		bad("walltime quantile", "must be a number in (0, 1], such as 0.9, got %v", w.Quantile)
	}
	if w.MinSamples < 1 {
		bad("walltime min_samples", "must be >= 1, got %d", w.MinSamples)
	}
	if w.Window <= 0 {
		bad("walltime window", "must be > 0, got %s", w.Window)
	}
	if w.Running && !w.Learn {
		bad("walltime running", "needs learn = true (running work's ends are estimated from learned run times)")
	}
}

// posOf is where a field was written, or where its enclosing block was
// when the field itself was not (e.g. a tier block without a weight).
func (p *Policy) posOf(field string) Pos {
	pos, ok := p.pos[field]
	for f := field; !ok && f != ""; {
		i := lastSpace(f)
		if i <= 0 {
			break
		}
		f = f[:i]
		pos, ok = p.pos[f]
	}
	return pos
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// nonNegative: a weight or budget a file may set, a number from 0 up (NaN
// and infinities are not).
func nonNegative(v float64) bool { return finite(v) && v >= 0 }

func (p *Policy) validateTiers(bad func(field, format string, args ...any)) {
	for _, name := range sortedKeys(p.Tiers) {
		t := p.Tiers[name]
		prefix := fmt.Sprintf("tier %q ", name)
		if !nonNegative(t.Weight) {
			bad(prefix+"weight", "must be a number >= 0, got %v", t.Weight)
		}
		if !nonNegative(t.MaxGPUHoursLostPerHour) {
			bad(prefix+"max_gpu_hours_lost_per_hour", "must be a number >= 0 (0 = the shared preemption budget), got %v", t.MaxGPUHoursLostPerHour)
		}
		for _, v := range t.MayPreempt {
			if _, ok := p.Tiers[v]; !ok {
				bad(prefix+"may_preempt", "names tier %q, which is not defined (tiers: %s)", v, joinKeys(p.Tiers))
			} else if v == name {
				bad(prefix+"may_preempt", "a tier may not preempt itself")
			}
		}
	}
}

func (p *Policy) validateProjects(bad func(field, format string, args ...any)) {
	for _, name := range sortedKeys(p.Projects) {
		pr := p.Projects[name]
		prefix := fmt.Sprintf("project %q ", name)
		if !finite(pr.Share) || pr.Share <= 0 {
			bad(prefix+"share", "must be a number > 0, got %v", pr.Share)
		}
		if !finite(pr.Weight) || pr.Weight <= 0 {
			bad(prefix+"weight", "must be a number > 0, got %v", pr.Weight)
		}
		if pr.GPUQuota < 0 {
			bad(prefix+"gpu_quota", "must be >= 0 (0 = no quota), got %d", pr.GPUQuota)
		}
	}
}

// validateScoring checks the aging, fair-share, deadline and
// shortest-first terms.
func (p *Policy) validateScoring(bad func(field, format string, args ...any)) {
	if !nonNegative(p.Aging.WeightPerHour) {
		bad("aging weight_per_hour", "must be >= 0, got %v", p.Aging.WeightPerHour)
	}
	if !nonNegative(p.Aging.Max) {
		bad("aging max", "must be >= 0, got %v", p.Aging.Max)
	}
	if p.FairShare.HalfLife <= 0 {
		bad("fair_share half_life", "must be > 0, got %s", p.FairShare.HalfLife)
	}
	if !nonNegative(p.FairShare.Weight) {
		bad("fair_share weight", "must be >= 0, got %v", p.FairShare.Weight)
	}
	if !nonNegative(p.Deadline.Weight) {
		bad("deadline weight", "must be >= 0, got %v", p.Deadline.Weight)
	}
	if p.Deadline.Horizon <= 0 {
		bad("deadline horizon", "must be > 0, got %s", p.Deadline.Horizon)
	}
	if !nonNegative(p.ShortestFirst.Weight) {
		bad("shortest_first weight", "must be >= 0 (0 = off), got %v", p.ShortestFirst.Weight)
	}
	if s := p.ShortestFirst.OverdueShare; !(s >= 0 && s <= 1) {
		bad("shortest_first overdue_share", "must be between 0 and 1, got %v", s)
	}
}

func (p *Policy) validatePreemption(bad func(field, format string, args ...any)) {
	if !nonNegative(p.Preemption.MaxGPUHoursLostPerHour) {
		bad("preemption max_gpu_hours_lost_per_hour", "must be >= 0 (0 = no cap), got %v", p.Preemption.MaxGPUHoursLostPerHour)
	}
	if p.Preemption.MinRuntime < 0 {
		bad("preemption min_runtime", "must not be negative")
	}
	if p.Preemption.RestartCost < 0 {
		bad("preemption restart_cost", "must not be negative")
	}
	if p.Preemption.GainHorizon <= 0 {
		bad("preemption gain_horizon", "must be > 0, got %s", p.Preemption.GainHorizon)
	}
	if p.Preemption.MaxPerCycle < 1 {
		bad("preemption max_per_cycle", "must be >= 1, got %d", p.Preemption.MaxPerCycle)
	}
}

func (p *Policy) validateDefragment(bad func(field, format string, args ...any)) {
	d := p.Defragment
	if d.MaxVictimGPUs < 1 {
		bad("defragment max_victim_gpus", "must be >= 1, got %d", d.MaxVictimGPUs)
	}
	if d.MaxPerCycle < 1 {
		bad("defragment max_per_cycle", "must be >= 1, got %d", d.MaxPerCycle)
	}
	if d.GainHorizon < 0 {
		bad("defragment gain_horizon", "must not be negative (0 = the preemption block's), got %s", d.GainHorizon)
	}
	if d.Enabled && !p.Preemption.Enabled {
		bad("defragment enabled", "needs preemption enabled (a defragmenting preemption uses its gain, cost, minimum runtime and budget)")
	}
}

func lastSpace(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == ' ' {
			return i
		}
	}
	return -1
}
