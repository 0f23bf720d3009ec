package policy

import (
	"fmt"
	"math"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
)

// IdleAction is what the scheduler does with a running job that holds its
// GPUs idle.
type IdleAction string

const (
	// IdleReport only shows and logs idle and hung jobs (the default).
	IdleReport IdleAction = "report"
	// IdlePreemptible makes an idle job a preemption candidate for waiting
	// work of its own tier or of a heavier one, whatever its
	// impact_preemptible and min runtime say, costed as losing no progress
	// since it went idle. Its grace and checkpoint signal are honoured.
	IdlePreemptible IdleAction = "preemptible"
	// IdleRequeue stops a hung job (every member idle) with its checkpoint
	// signal and grace and queues it again, at most MaxRequeues times;
	// after that the job is stopped for good with the reason. A job that is
	// idle but not hung is only reported.
	IdleRequeue IdleAction = "requeue"
)

// Idle is the utilisation policy: when a running job counts as idle and
// what is done about it. The policy's Idle is the default of every tier; a
// tier's own idle block overrides the fields it writes (IdleFor resolves).
type Idle struct {
	// Threshold in percent: a job whose GPUs' mean utilisation stays
	// below it for Duration is idle.
	Threshold float64
	// Duration the utilisation must stay below Threshold, with no missing
	// sample in between (missing stats never count as idle).
	Duration time.Duration
	// Action taken on an idle (preemptible) or hung (requeue) job.
	Action IdleAction
	// MaxRequeues bounds the requeues of one job (requeue action); the
	// next time it hangs it is stopped for good.
	MaxRequeues int
	// AllowOptOut lets jobs opt out with impact_idle = "ignore".
	AllowOptOut bool
}

// IdleOverride is a tier's idle block: only the fields it sets (non-nil)
// replace the policy-wide Idle.
type IdleOverride struct {
	Threshold   *float64
	Duration    *time.Duration
	Action      *IdleAction
	MaxRequeues *int
	AllowOptOut *bool
}

func defaultIdle() Idle {
	return Idle{Threshold: 5, Duration: 30 * time.Minute, Action: IdleReport, MaxRequeues: 2, AllowOptOut: true}
}

func (o *IdleOverride) clone() *IdleOverride {
	if o == nil {
		return nil
	}
	return &IdleOverride{
		Threshold:   clonePtr(o.Threshold),
		Duration:    clonePtr(o.Duration),
		Action:      clonePtr(o.Action),
		MaxRequeues: clonePtr(o.MaxRequeues),
		AllowOptOut: clonePtr(o.AllowOptOut),
	}
}

// clonePtr returns a pointer to a copy of *p (nil for nil), so a cloned
// override shares no field with its original.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// with returns a copy of o with the fields n sets laid on top (a later
// file's tier idle block over an earlier one's).
func (o *IdleOverride) with(n *IdleOverride) *IdleOverride {
	c := o.clone()
	if c == nil {
		c = &IdleOverride{}
	}
	n = n.clone()
	if n.Threshold != nil {
		c.Threshold = n.Threshold
	}
	if n.Duration != nil {
		c.Duration = n.Duration
	}
	if n.Action != nil {
		c.Action = n.Action
	}
	if n.MaxRequeues != nil {
		c.MaxRequeues = n.MaxRequeues
	}
	if n.AllowOptOut != nil {
		c.AllowOptOut = n.AllowOptOut
	}
	return c
}

// apply lays the override's set fields on i.
func (o *IdleOverride) apply(i Idle) Idle {
	if o == nil {
		return i
	}
	if o.Threshold != nil {
		i.Threshold = *o.Threshold
	}
	if o.Duration != nil {
		i.Duration = *o.Duration
	}
	if o.Action != nil {
		i.Action = *o.Action
	}
	if o.MaxRequeues != nil {
		i.MaxRequeues = *o.MaxRequeues
	}
	if o.AllowOptOut != nil {
		i.AllowOptOut = *o.AllowOptOut
	}
	return i
}

// IdleOfTier resolves the idle policy of a tier: the policy-wide block with
// the tier's own fields on top.
func (p *Policy) IdleOfTier(tier string) Idle {
	if t := p.Tiers[tier]; t != nil {
		return t.Idle.apply(p.Idle)
	}
	return p.Idle
}

// IdleFor resolves the idle policy of a job's spec (its tier's).
func (p *Policy) IdleFor(s jobspec.Spec) Idle {
	if t := p.TierOf(s); t != nil {
		return p.IdleOfTier(t.Name)
	}
	return p.Idle
}

// IdleIgnored reports whether a job's opt-out (impact_idle = "ignore")
// holds: it is written and its tier allows it.
func (p *Policy) IdleIgnored(s jobspec.Spec) bool {
	return s.IdleIgnore && p.IdleFor(s).AllowOptOut
}

// MaxIdleDuration is the longest idle duration of any tier: how much
// utilisation history detection needs.
func (p *Policy) MaxIdleDuration() time.Duration {
	d := p.Idle.Duration
	for name := range p.Tiers {
		d = max(d, p.IdleOfTier(name).Duration)
	}
	return d
}

// validateIdle checks the policy-wide idle block and every tier's resolved
// one; bad names the field where it was written.
func (p *Policy) validateIdle(bad func(field, format string, args ...any)) {
	check := func(prefix string, i Idle, own func(string) bool) {
		// Only the fields a block writes are checked under its name; a
		// tier's inherited ones are checked once, as the policy-wide block.
		field := func(f string) string { return prefix + f }
		if own("threshold") && (math.IsNaN(i.Threshold) || i.Threshold <= 0 || i.Threshold > 100) {
			bad(field("threshold"), "must be a utilisation percentage in (0, 100], got %v", i.Threshold)
		}
		if own("duration") && i.Duration <= 0 {
			bad(field("duration"), "must be > 0, got %s", i.Duration)
		}
		if own("action") {
			switch i.Action {
			case IdleReport, IdlePreemptible, IdleRequeue:
			default:
				bad(field("action"), "must be one of %q, %q, %q, got %q", IdleReport, IdlePreemptible, IdleRequeue, i.Action)
			}
		}
		if own("max_requeues") && i.MaxRequeues < 0 {
			bad(field("max_requeues"), "must be >= 0 (0 = stop a hung job at once), got %d", i.MaxRequeues)
		}
	}
	check("idle ", p.Idle, func(string) bool { return true })
	for _, name := range sortedKeys(p.Tiers) {
		o := p.Tiers[name].Idle
		if o == nil {
			continue
		}
		check(fmt.Sprintf("tier %q idle ", name), p.IdleOfTier(name), func(f string) bool {
			switch f {
			case "threshold":
				return o.Threshold != nil
			case "duration":
				return o.Duration != nil
			case "action":
				return o.Action != nil
			case "max_requeues":
				return o.MaxRequeues != nil
			}
			return false
		})
	}
}
