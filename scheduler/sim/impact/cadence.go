package impact

import (
	"container/heap"
	"maps"
	"slices"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/sim"
)

// The simulator's cadence: which of the live agent's decisions (one per
// event burst, one per timer tick) the replay may skip because their plan
// would repeat the last look's (quiet, idle), and the thresholds that
// wake it (wakeMatters, nextWake).

// victimTiers answers, for one cycle, whether a waiting job may preempt a
// running one: the only use the engine makes of a checkpoint is to price a
// victim (preempt.WorkLost), so a checkpoint of a job no waiting job may
// preempt leaves the plan as it was.
type victimTiers struct {
	// waiting: the policy tiers of this cycle's queue (nil: not yet
	// gathered); a few, so a victim's answer is a short loop.
	waiting []string
	// movers: some waiting job may move small jobs (mayMove), once known.
	movers, moversKnown bool
}

// mayPreempt: some waiting job's tier may preempt j's, or some waiting job
// may move j out of its way (the policy's defragment block: j is small
// enough and some waiting job asks no more GPUs than are free), or j hung
// (the idle policy can make a hung job a victim of any tier at least as
// heavy; its idle state is the engine's to judge).
func (v *victimTiers) mayPreempt(s *Scheduler, st *sim.State, j *sim.Job) bool {
	if _, hung := s.hung[j.Index]; hung || !s.pol.Preemption.Enabled {
		return hung
	}
	if d := s.pol.Defragment; d.Enabled && j.Count() == 1 && j.MemberGPUs() <= d.MaxVictimGPUs {
		if !v.moversKnown {
			v.movers, v.moversKnown = s.mayMove(st), true
		}
		if v.movers {
			return true
		}
	}
	if v.waiting == nil {
		// One pass over the queue by trace tier (a handful of distinct
		// strings, mostly the same ones): no map lookup per waiting job.
		v.waiting = []string{}
		var seen []string
		for _, q := range st.Queue() {
			if !slices.Contains(seen, q.Tier) {
				seen = append(seen, q.Tier)
				if t := s.tierOf(q); !slices.Contains(v.waiting, t) {
					v.waiting = append(v.waiting, t)
				}
			}
		}
	}
	victim := s.tierOf(j)
	for _, t := range v.waiting {
		if s.pol.MayPreempt(t, victim) {
			return true
		}
	}
	return false
}

// mayMove: with the policy's defragment block on, some waiting job asks no
// more GPUs than are free, so it may move small jobs out of its way when
// they are what keeps it from fitting (the engine's tryDefragment needs
// its pool to have GPUs enough).
func (s *Scheduler) mayMove(st *sim.State) bool {
	if !s.pol.Defragment.Enabled || !s.pol.Preemption.Enabled {
		return false
	}
	for _, q := range st.Queue() {
		if q.TotalGPUs() <= st.FreeGPUs {
			return true
		}
	}
	return false
}

// tierOf is the policy's tier of j (its default tier for one it lacks),
// as the engine resolves it.
func (s *Scheduler) tierOf(j *sim.Job) string {
	if name, ok := s.tierNames[j.Tier]; ok {
		return name
	}
	name := j.Tier
	if t := s.pol.TierOf(jobspec.Spec{Tier: j.Tier}); t != nil {
		name = t.Name
	}
	s.tierNames[j.Tier] = name
	return name
}

// idle reports a cycle whose plan is certainly empty, so the engine need
// not run: no node has room for any waiting allocation, no waiting job
// belongs to a tier that may preempt or may move small jobs out of its way
// (mayMove), and no allocation ended since the last cycle (its GPUs could
// admit a job). The skipped plan would be
// empty; what changes is only where the engine splits its fair-share
// accrual (at its next cycle it charges the allocations still running by
// elapsed time, and those that ended meanwhile from the store's finished
// log: the same totals up to floating-point rounding, which can still tip
// a later tie between scores).
func (s *Scheduler) idle(st *sim.State) bool {
	for _, c := range st.Changes() {
		if c.Kind == sim.Finished || c.Kind == sim.Requeued {
			return false
		}
	}
	for _, j := range st.Queue() {
		if j.MemberGPUs() <= st.MaxNodeFree {
			return false
		}
		if s.pol.Preemption.Enabled {
			if t := s.pol.Tiers[j.Tier]; t != nil && len(t.MayPreempt) > 0 {
				return false
			}
		}
	}
	return !s.mayMove(st)
}

// quiet reports a timer tick whose decision would repeat the last look's
// (a decision, or an idle check that proved the plan empty): nothing the
// engine reads changed since (no submit, start, stop or finish, and no
// checkpoint of a job some waiting job may preempt or move, see
// victimTiers, while the last plan weighed victims' costs at all:
// engine.Plan.CostsWeighed; no GPUs kept by the last plan for narrower
// jobs, engine.Plan.CutGPUsKept) and no time-dependent threshold that matters
// passed (wakeMatters): a running gang's impact_min_runtime ending (it
// becomes a victim) when some waiting job may preempt or move it, a
// preemption leaving the lost-work budget's hour when the last plan
// weighed costs (the budget is consulted only then), a headroom's idle
// budget running out or paid back (engine.HeadroomIdleBudget.TurnsAt).
// While a run hangs (the idleness model) no tick is quiet: the engine
// reads a new utilisation sample of it at every one, and skipping them
// was measured to change the run (week 1 with 5% of jobs hanging: normal
// p99 7.0h skipping against 10.9h at every tick). The inputs that move
// continuously, aging and fair-share decay, move slowly (points per
// hour), so they are re-read at least every Refresh seconds rather than
// at every tick. The live agent decides at every tick; this lets the
// simulator take its timer at face value (every 10s) at the cost of the
// ticks that would plan the same as the last one.
func (s *Scheduler) quiet(st *sim.State, now int64) bool {
	if len(s.hung) > 0 || s.Refresh <= 0 || s.lastLook < 0 || s.changed || now >= s.lastLook+s.Refresh {
		return false
	}
	if now >= s.wakeAt {
		if s.wakeMatters(st, now) {
			return false
		}
		s.wakeAt = s.nextWake(now)
	}
	return true
}

// budgetWindow: the lost-work budget counts the last hour.
const budgetWindow = 3600

// wakeMatters reports whether a threshold that passed by now (see quiet)
// can change the plan: a run passing its minimum runtime that some
// waiting job may preempt or move (victimTiers), a preemption leaving
// the budget's hour when the last plan weighed costs, or a headroom's
// idle budget turning (hrTurnAt). The runs passed
// are dropped from youngUntil either way: the next decision reads them
// as they are.
func (s *Scheduler) wakeMatters(st *sim.State, now int64) bool {
	if s.hrTurnAt > 0 && s.hrTurnAt <= now {
		return true
	}
	if s.weighed && len(s.preempts) > 0 && s.preempts[0]+budgetWindow <= now {
		return true
	}
	var v victimTiers
	matters := false
	for len(s.youngUntil) > 0 && s.youngUntil[0].t <= now {
		ri := heap.Pop(&s.youngUntil).(runAt).ri
		j := ri.job
		matters = matters || s.running[j.Index] == ri && j.State == sim.Running && v.mayPreempt(s, st, j)
	}
	return matters
}

// nextWake is the first time after now at which a threshold quiet
// watches passes: a run in youngUntil passing its minimum runtime, a
// preemption leaving the budget's hour (only when the last plan weighed
// costs), a headroom's idle budget turning (hrTurnAt). Hung runs need no
// wake: while one hangs no tick is quiet.
func (s *Scheduler) nextWake(now int64) int64 {
	k := 0
	for k < len(s.preempts) && s.preempts[k]+budgetWindow <= now {
		k++
	}
	s.preempts = s.preempts[k:]
	wake := int64(1<<62 - 1)
	if s.weighed && len(s.preempts) > 0 {
		wake = min(wake, s.preempts[0]+budgetWindow)
	}
	if s.hrTurnAt > now {
		wake = min(wake, s.hrTurnAt)
	}
	for len(s.youngUntil) > 0 && s.youngUntil[0].t <= now {
		heap.Pop(&s.youngUntil)
	}
	if len(s.youngUntil) > 0 {
		wake = min(wake, s.youngUntil[0].t)
	}
	return wake
}

// looked records a look at now (a decision with plan, or an idle check:
// plan nil) and computes the next threshold.
func (s *Scheduler) looked(now int64, plan *engine.Plan) {
	// GPUs kept this look for narrower jobs (a cut undone) are anyone's
	// at the next: that one is no repeat of this.
	s.lastLook, s.changed = now, plan != nil && plan.CutGPUsKept > 0
	s.weighed = plan != nil && plan.CostsWeighed
	if plan != nil {
		for range plan.Preemptions {
			s.preempts = append(s.preempts, now)
		}
		s.hrTurnAt = 0
		for _, h := range plan.Headroom {
			if b := h.IdleBudget; b != nil && !b.TurnsAt.IsZero() {
				if t := b.TurnsAt.Unix(); s.hrTurnAt == 0 || t < s.hrTurnAt {
					s.hrTurnAt = t
				}
			}
		}
	} else if s.hrTurnAt <= now {
		// An idle check proved that nothing may start or preempt: a
		// headroom yielding or coming back changes no plan until the
		// model does (and then the engine decides anyway).
		s.hrTurnAt = 0
	}
	s.wakeAt = s.nextWake(now)
	if plan != nil {
		s.recordHeadroom(now, plan.Headroom)
	}
}

// hrStep is a change in the GPUs idle for urgent work: from at on, idle
// per pool (engine.HeadroomStatus.IdleKeptGPUs plus IdleReservedGPUs: the
// headroom's and the reserve tiers' reservations', which its idle budget
// pays for), until the next step.
type hrStep struct {
	at   int64
	idle map[string]int
}

// recordHeadroom notes the GPUs idle for urgent work after a decision
// (a skipped decision would have decided the same: they hold until the
// next one).
func (s *Scheduler) recordHeadroom(now int64, hs []engine.HeadroomStatus) {
	var idle map[string]int
	for _, h := range hs {
		if n := h.IdleKeptGPUs + h.IdleReservedGPUs; n > 0 {
			if idle == nil {
				idle = map[string]int{}
			}
			idle[h.Pool] = n
		}
		if s.hrPools == nil {
			s.hrPools = map[string]bool{}
		}
		s.hrPools[h.Pool] = true
	}
	if n := len(s.hrSteps); n > 0 && maps.Equal(s.hrSteps[n-1].idle, idle) {
		return
	}
	s.hrSteps = append(s.hrSteps, hrStep{at: now, idle: idle})
}

// HeadroomIdleGPUSeconds implements sim.HeadroomCoster: per pool with a
// headroom, the GPU-seconds in [from, to) its kept GPUs sat idle while
// work it keeps out waited, and the reserve tiers' reserved GPUs sat idle
// on its idle budget's account.
func (s *Scheduler) HeadroomIdleGPUSeconds(from, to int64) map[string]float64 {
	if len(s.hrPools) == 0 {
		return nil
	}
	out := map[string]float64{}
	for p := range s.hrPools {
		out[p] = 0
	}
	for i, st := range s.hrSteps {
		end := to
		if i+1 < len(s.hrSteps) {
			end = min(end, s.hrSteps[i+1].at)
		}
		if d := end - max(st.at, from); d > 0 {
			for p, n := range st.idle {
				out[p] += float64(n) * float64(d)
			}
		}
	}
	return out
}
