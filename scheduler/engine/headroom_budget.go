package engine

import (
	"math"
	"time"
)

// A headroom's idle budget (policy.Headroom.IdleBudget): an account of the
// GPU-seconds the headroom may still leave idle. The allowance accrues at
// the budget's rate (its share of the pool's GPUs, GPU-seconds per
// second), carried for at most a window; the GPUs the last cycle left
// idle on the headroom's account (HeadroomStatus.IdleKeptGPUs: the pool's
// free GPUs, up to its size, while work it keeps out waits and would fit
// them) are spent from it until the next cycle. While the account is overspent
// the headroom yields: it keeps no GPU, so the work it kept out starts on
// them, and nothing is spent, until the allowance has caught up.
//
// Why a budget rather than a smaller size: what a headroom costs depends
// on what else waits, not on its size. On a pool full of preemptible work
// a large headroom costs nothing (that work fills it), on one full of
// long non-preemptible work a one-node headroom idles for days while the
// rare urgent job it serves does not come. The never-worse checks allow
// half a point of occupancy; a budget under that bounds urgency's cost
// wherever the headroom would idle, and leaves it whole where it does not.
//
// The account lives in the engine, as a learned headroom's arrivals do: a
// new leader opens it again at zero.

// hrCredit is one pool's idle account as the last cycle left it.
type hrCredit struct {
	// gpuSec is the unspent allowance in GPU-seconds (below zero:
	// overspent, the headroom yields).
	gpuSec float64
	// idle is the GPUs the cycle left idle on the headroom's account
	// (HeadroomStatus.IdleKeptGPUs): spent each second until the next
	// cycle.
	idle int
	at   time.Time
}

// overspent is the balance below which the headroom yields. Not zero: the
// instant a balance crosses zero is a float computation, and the simulator
// wakes at the whole second after it (HeadroomIdleBudget.TurnsAt).
const overspent = -1e-6

// budgetNow brings pool's idle account up to the cycle's instant and
// decides whether the headroom yields this cycle; a no-op for a headroom
// without a budget.
func (hc *hrCycle) budgetNow(name string, p *hrPool) {
	rate, carry := p.h.IdleAllowance(p.capacity)
	if rate <= 0 {
		return
	}
	p.budgeted = true
	last, ok := hc.c.e.hrCredit[name]
	if ok {
		// A new account starts at zero: a headroom earns its first idle
		// time before spending it.
		dt := max(0, hc.c.now.Sub(last.at).Seconds())
		p.credit = min(carry, last.gpuSec+(rate-float64(last.idle))*dt)
	}
	p.yielded = p.credit < overspent
}

// recordBudgets writes every budgeted pool's account after the cycle
// (idle: each pool's idle count, HeadroomStatus.IdleKeptGPUs) and returns
// each one's view for the plan.
func (hc *hrCycle) recordBudgets(idle map[string]int) map[string]*HeadroomIdleBudget {
	var out map[string]*HeadroomIdleBudget
	for _, name := range hc.names {
		p := hc.pools[name]
		if !p.budgeted {
			continue
		}
		if out == nil {
			hc.c.mem.hrCredit = map[string]hrCredit{}
			out = map[string]*HeadroomIdleBudget{}
		}
		hc.c.mem.hrCredit[name] = hrCredit{gpuSec: p.credit, idle: idle[name], at: hc.c.now}
		rate, _ := p.h.IdleAllowance(p.capacity)
		out[name] = &HeadroomIdleBudget{
			Share: p.h.IdleBudget, CreditGPUHours: p.credit / 3600, Yielded: p.yielded,
			TurnsAt: turnsAt(hc.c.now, p.credit, rate, idle[name], p.yielded),
		}
	}
	return out
}

// turnsAt is the first whole second after now at which an account of
// credit GPU-seconds, accruing rate and spending idle a second, would
// change whether the headroom yields, if nothing else changed; zero when
// it never would (a kept headroom idling no faster than it earns).
func turnsAt(now time.Time, credit, rate float64, idle int, yielded bool) time.Time {
	var secs float64
	switch {
	case yielded:
		secs = math.Ceil((overspent - credit) / rate)
	case float64(idle) > rate:
		secs = math.Floor((credit-overspent)/(float64(idle)-rate)) + 1
	default:
		return time.Time{}
	}
	return now.Add(time.Duration(max(1, secs)) * time.Second)
}

// HeadroomIdleBudget is a headroom's idle account after a cycle (policy
// headroom idle_budget).
type HeadroomIdleBudget struct {
	// Share is the budget: the share of the pool's GPUs the headroom may
	// keep idle on average while work it keeps out waits.
	Share float64 `json:"share"`
	// CreditGPUHours is the allowance left; below zero the headroom has
	// idled more than its budget and yields until it is paid back.
	CreditGPUHours float64 `json:"credit_gpu_hours"`
	// Yielded: the headroom kept nothing this cycle (GPUs is 0).
	Yielded bool `json:"yielded"`
	// TurnsAt is when the headroom would next yield (it idles faster than
	// it earns) or be kept again (it yielded), if nothing else changed;
	// zero when it would not. A replay that skips decisions wakes then.
	TurnsAt time.Time `json:"turns_at,omitempty"`
}
