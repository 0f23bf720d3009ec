package policy

import (
	"fmt"
	"math"
	"time"
)

// Headroom keeps part of a node pool's GPUs free of non-preemptible work
// of the tiers that may not use it: those GPUs may be filled only by
// preemptible work (or by work of Tiers), so a job of Tiers that arrives
// when the pool is full starts by preempting at once instead of waiting
// for long-running work to end. Backfill reservations protect the queue
// head only after it arrives, and preemption helps only where running
// work is preemptible: a pool filled by long non-preemptible jobs has no
// room for urgent work for as long as they run. A headroom smaller than a
// node does not keep out a job with an allocation as wide as a node: no
// node could hold it beside the kept part, and kept out it would wait
// for a whole node to free outside the headroom, which narrower work
// refilling every freed GPU never leaves.
//
// Its size is fixed (GPUs, or Share of the pool's healthy GPUs) or, with
// Learn, learned from the recent arrivals of Tiers: the GPUs they held on
// average over the last Window (sum of GPUs x walltime of the jobs that
// arrived in it, over the window; by Little's law their mean occupancy;
// a job without a walltime counts its learned estimate when Walltime
// learns, else an hour)
// plus the largest of those jobs, so that one more arrival of that size
// finds room at once; at least MinGPUs, at most MaxShare of the pool.
//
// IdleBudget bounds what the headroom costs the pool in occupancy: the
// GPU-seconds it leaves idle (the pool's free GPUs, up to its size, while
// work it keeps out waits and would fit them) may average at most
// IdleBudget of the pool's healthy GPUs.
// The engine counts them as it goes, against an allowance that accrues
// at that rate (unspent allowance is carried for at most a Window);
// while the headroom has spent more than its allowance it yields: it
// keeps nothing, and the work it kept out starts on those GPUs, until
// the allowance has caught up again. Urgent work then preempts what it
// may, or waits, as without a headroom. A headroom whose tiers' work is
// rare and whose pool is full of non-preemptible work is the one that
// idles most for the least; the budget lets urgency cost the pool at
// most that share of its occupancy. The same allowance pays for the
// GPUs that reservations of the headroom's tiers hold idle when they are
// reserve tiers (Backfill.ReserveTiers), which yield with it (their jobs
// then reserve only within Backfill.Reservations, like any job). 0: no
// budget (the headroom keeps its GPUs however long they idle).
//
// LoanGrace lends the headroom's nodes to preemptible work of the other
// tiers on a short notice. Such work goes there first (it may use what
// the headroom keeps), and a job of Tiers takes back what it needs by
// preempting it; with LoanGrace set, such a preemption stops work
// running on the headroom's nodes after LoanGrace (or the job's own
// impact_grace, if shorter) instead of its impact_grace, and a job of
// Tiers preempts work on loan before other work of the tiers it would
// have stopped. A preemption that waits out a minute's grace cannot
// start urgent work within the seconds that a pool whose work ends
// often gives under plain Nomad; lending the kept GPUs on short notice
// can, without keeping them idle. The price is the borrowers' grace:
// a task that saves its work on the checkpoint signal has LoanGrace to
// do so, and otherwise loses what it did since its last checkpoint.
//
// TakeBack lets a job of Tiers take back, at once, GPUs anywhere in the
// pool that preemptible work of the other tiers started on less than
// TakeBack ago: a preemption by a job of Tiers chooses such work before
// other victims and stops it without its impact_grace. Where work ends
// often, a job of Tiers that arrives when the pool is full finds the
// GPUs given a moment earlier to a job it would have gone ahead of, had
// it come a moment sooner; taking them back starts it a decision later,
// not a grace later, and the victim loses at most TakeBack of work (it
// has run no longer) and queues again as a preempted job does. Where
// work is long, little is that young and the headroom's tiers preempt
// as without it. A victim that would save its work on the checkpoint
// signal gets no time to: it has little to save.
//
// TakeBackUnsaved takes back, the same way, preemptible work of the
// other tiers of any age whose work since its last checkpoint (expected
// from its impact_checkpoint_interval, or as the engine was told of it;
// its start when it has neither) is less than TakeBackUnsaved: it too
// loses at most that much. Such a victim's grace would buy it the save
// of a few minutes' work and cost the urgent job a grace; where little
// work is young (long runs in a small pool) it is what the headroom's
// tiers can start on at once.
type Headroom struct {
	// Pool is the node pool (the block's label).
	Pool string
	// Tiers may use the headroom with non-preemptible work; every other
	// tier's non-preemptible work is kept out of it.
	Tiers []string
	// GPUs is a fixed size; Share a fixed share of the pool's healthy
	// GPUs (rounded up); Learn learns the size (see Headroom). Exactly one
	// is set.
	GPUs  int
	Share float64
	Learn bool
	// Window is how far back Learn looks; MaxShare caps the learned size
	// as a share of the pool's healthy GPUs; MinGPUs is its floor, so a
	// quiet window (no urgent arrival in it) does not let long
	// non-preemptible work take every node before the next one comes.
	Window   time.Duration
	MaxShare float64
	MinGPUs  int
	// IdleBudget: the share of the pool's healthy GPUs the headroom may
	// keep idle on average while work it keeps out waits (see Headroom).
	IdleBudget float64
	// LoanGrace: nil lends nothing (victims keep their own grace); else
	// the grace of preemptible work on the headroom's nodes when a job of
	// Tiers preempts it (see Headroom).
	LoanGrace *time.Duration
	// TakeBack: 0 takes nothing back; else how young (since its
	// allocations started) preemptible work of the other tiers is taken
	// back at once by a job of Tiers (see Headroom).
	TakeBack time.Duration
	// TakeBackUnsaved: 0 takes nothing back by it; else how little work
	// since its last checkpoint preemptible work of the other tiers has
	// when a job of Tiers takes it back at once (see Headroom).
	TakeBackUnsaved time.Duration
}

// TakesBack reports whether a job of the headroom's tiers takes back at
// once a victim of another tier whose first allocation started at
// started: less than TakeBack before now (a zero started never is).
func (h *Headroom) TakesBack(started, now time.Time) bool {
	return h != nil && h.TakeBack > 0 && !started.IsZero() && now.Sub(started) < h.TakeBack
}

// TakesBackUnsaved reports whether a job of the headroom's tiers takes
// back at once a victim of another tier that has run unsaved (its work
// since its last checkpoint, or its start) for that long: less than
// TakeBackUnsaved.
func (h *Headroom) TakesBackUnsaved(unsaved time.Duration) bool {
	return h != nil && h.TakeBackUnsaved > 0 && unsaved >= 0 && unsaved < h.TakeBackUnsaved
}

// TakesAnyBack: the headroom takes back some work at once (TakeBack or
// TakeBackUnsaved).
func (h *Headroom) TakesAnyBack() bool {
	return h != nil && (h.TakeBack > 0 || h.TakeBackUnsaved > 0)
}

// LoanOf is the grace a preemption by a job of the headroom's tiers
// gives a victim running on the headroom's nodes whose own grace is own:
// the shorter of LoanGrace and own; ok is false when h lends nothing.
func (h *Headroom) LoanOf(own time.Duration) (grace time.Duration, ok bool) {
	if h == nil || h.LoanGrace == nil {
		return own, false
	}
	return min(own, *h.LoanGrace), true
}

// Headroom defaults (a block sets what it needs).
const (
	DefaultHeadroomWindow   = 24 * time.Hour
	DefaultHeadroomMaxShare = 0.25
)

// HeadroomFor returns the headroom block of pool, nil when there is none.
func (p *Policy) HeadroomFor(pool string) *Headroom {
	return p.Headrooms[pool]
}

// UsesHeadroom reports whether tier may use h with non-preemptible work.
func (h *Headroom) UsesHeadroom(tier string) bool {
	for _, t := range h.Tiers {
		if t == tier {
			return true
		}
	}
	return false
}

// Size is the fixed size of h on a pool of capacity GPUs (learned sizes
// come from the engine's memory); ok is false for a learned headroom.
func (h *Headroom) Size(capacity int) (gpus int, ok bool) {
	switch {
	case h.Learn:
		return 0, false
	case h.Share > 0:
		return min(capacity, int(math.Ceil(h.Share*float64(capacity)-1e-9))), true
	default:
		return min(capacity, h.GPUs), true
	}
}

// LearnedCap is the most GPUs a learned headroom may keep on a pool of
// capacity GPUs.
func (h *Headroom) LearnedCap(capacity int) int {
	return min(capacity, int(math.Ceil(h.MaxShare*float64(capacity)-1e-9)))
}

// IdleAllowance is the GPU-seconds per second a headroom on a pool of
// capacity GPUs may keep idle (IdleBudget of the pool; 0: no budget), and
// the most unspent allowance it carries (IdleBudget of the pool over a
// Window).
func (h *Headroom) IdleAllowance(capacity int) (rate, carry float64) {
	rate = h.IdleBudget * float64(capacity)
	return rate, rate * h.Window.Seconds()
}

// Describe says in words how h is sized, for explanations.
func (h *Headroom) Describe() string {
	out := h.describeSize()
	if h.IdleBudget > 0 {
		out += fmt.Sprintf(", idle at most %.2g%% of the pool on average", 100*h.IdleBudget)
	}
	if h.LoanGrace != nil {
		out += fmt.Sprintf(", its nodes lent to preemptible work on %s notice", *h.LoanGrace)
	}
	if h.TakeBack > 0 {
		out += fmt.Sprintf(", preemptible work younger than %s taken back at once", h.TakeBack)
	}
	if h.TakeBackUnsaved > 0 {
		out += fmt.Sprintf(", preemptible work with less than %s unsaved since its last checkpoint taken back at once", h.TakeBackUnsaved)
	}
	return out
}

func (h *Headroom) describeSize() string {
	switch {
	case h.Learn:
		return fmt.Sprintf("learned from the arrivals of %v over the last %s, at least %d GPUs, at most %.0f%% of the pool", h.Tiers, h.Window, h.MinGPUs, 100*h.MaxShare)
	case h.Share > 0:
		return fmt.Sprintf("%.0f%% of the pool", 100*h.Share)
	default:
		return fmt.Sprintf("%d GPUs", h.GPUs)
	}
}

func (p *Policy) validateHeadrooms(bad func(field, format string, args ...any)) {
	for _, name := range sortedKeys(p.Headrooms) {
		h := p.Headrooms[name]
		prefix := fmt.Sprintf("headroom %q ", name)
		if len(h.Tiers) == 0 {
			bad(prefix+"tiers", "required: the tiers whose work may use the headroom")
		}
		for _, t := range h.Tiers {
			if _, ok := p.Tiers[t]; !ok {
				bad(prefix+"tiers", "names tier %q, which is not defined (tiers: %s)", t, joinKeys(p.Tiers))
			}
		}
		n := 0
		if _, ok := p.pos[prefix+"gpus"]; ok {
			n++
		}
		if _, ok := p.pos[prefix+"share"]; ok {
			n++
		}
		if _, ok := p.pos[prefix+"learn"]; ok && h.Learn {
			n++
		}
		if n != 1 {
			bad(prefix+"gpus", "set exactly one of gpus, share and learn = true (got %d)", n)
		}
		if h.GPUs < 0 {
			bad(prefix+"gpus", "must be >= 0, got %d", h.GPUs)
		}
		if _, ok := p.pos[prefix+"share"]; ok && (math.IsNaN(h.Share) || h.Share <= 0 || h.Share > 1) {
			bad(prefix+"share", "must be a share of the pool in (0, 1], got %v", h.Share)
		}
		if h.Window <= 0 {
			bad(prefix+"window", "must be > 0, got %s", h.Window)
		}
		if h.MinGPUs < 0 {
			bad(prefix+"min_gpus", "must be >= 0, got %d", h.MinGPUs)
		}
		if math.IsNaN(h.MaxShare) || h.MaxShare <= 0 || h.MaxShare > 1 {
			bad(prefix+"max_share", "must be a share of the pool in (0, 1], got %v", h.MaxShare)
		}
		if math.IsNaN(h.IdleBudget) || h.IdleBudget < 0 || h.IdleBudget >= 1 {
			bad(prefix+"idle_budget", "must be a share of the pool in [0, 1) (0: no budget), got %v", h.IdleBudget)
		}
		if h.LoanGrace != nil && *h.LoanGrace < 0 {
			bad(prefix+"loan_grace", "must be >= 0 (\"0s\": stop work on loan at once), got %s", *h.LoanGrace)
		}
		if h.TakeBack < 0 {
			bad(prefix+"take_back", "must be >= 0 (\"0s\": take nothing back), got %s", h.TakeBack)
		}
		if h.TakeBackUnsaved < 0 {
			bad(prefix+"take_back_unsaved", "must be >= 0 (\"0s\": take nothing back by it), got %s", h.TakeBackUnsaved)
		}
	}
}
