package engine

import (
	"fmt"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/placement"
	"github.com/impact-sched/nomad-impact/scheduler/preempt"
)

// maxPreemptAttemptsPerSuccess bounds the victim searches of one cycle
// (successful or not) to this many per job the policy lets preempt in a
// cycle (Preemption.MaxPerCycle), so a long queue of jobs that may preempt
// but cannot gain enough does not turn a cycle into a scan of the cluster
// per job.
const maxPreemptAttemptsPerSuccess = 4

// preempter is the preempt step: for a job that does not fit and whose
// tier may preempt, it waits for gangs already stopping when they free
// enough (waitForStopping; a job of the top tier first only for those
// stopping for itself, then preempts its own way in, and only when
// it cannot waits for the others' too), or searches the cheapest whole
// gangs to stop (preempt.Search among the candidates its tier may take:
// preemptible, of a tier it may preempt, past their min runtime; made
// minimal), among those that stop for it on short notice first
// (searchShortNotice: work a headroom of its tier takes back, having
// started less than its take_back ago or with less work unsaved than
// its take_back_unsaved, stopped at once; work on the
// nodes of a headroom that lends them, stopped after the loan's grace),
// then among those of its own shape (searchShaped), and
// orders their stops only if the gain exceeds the cost and the policy's
// limits allow (the hourly budget of work lost is the preemptor tier's
// own when the policy gives it one, else the shared one). A preemption
// that stops no gang is never ordered.
//
// The GPUs chosen for the preemptor are bound to it (holdings.bind):
// until it is admitted, leaves the queue or the binding expires (the
// victims' longest grace plus the admission TTL), no other job, its
// victims included, is admitted onto them, even as backfill. A later
// cycle admits it once they are free; if it then waits for no stop and
// still does not place (a node it preempted on went down), or it is
// parked, the binding is dropped at once (holdings.lend, dropSpent). A
// new leader learns preemptions under way from the adapter
// (Engine.Preempting).
//
// It owns the cycle's preemption counts, the stopping gangs not yet
// counted for a preemptor and the candidate lists by tier and pool.
type preempter struct {
	c               *cycle
	preemptors      int
	preemptAttempts int
	stopping        []int // holders stopping, not yet counted for a preemptor
	// stoppingGPUs: the GPUs of the unclaimed holders in stopping (-1:
	// to count again; claim resets it).
	stoppingGPUs int
	candCache    map[tierPool]*candList
}

// spent: no preemption may be ordered or searched for any more this
// cycle.
func (p *preempter) spent() bool {
	pr := p.c.pol.Preemption
	return !pr.Enabled || p.preemptors >= pr.MaxPerCycle || p.preemptAttempts >= maxPreemptAttemptsPerSuccess*pr.MaxPerCycle
}

// tryPreempt looks for victims for a job that does not fit. It first
// counts the GPUs of gangs already stopping (preemptions under way): if
// they suffice, the job waits for them instead of preempting more (a
// top-tier job only for gangs stopping for itself, before
// searching, and for all of them only when it orders no preemption).
// Otherwise it searches the cheapest minimal set of victims (preemptable;
// among the gangs of its shape first, preemptOwnWay) and orders their
// stops if the gain beats the cost and the budgets allow
// (orderPreemptions).
func (pe *preempter) tryPreempt(q *queued, exp *Explanation) (preempting bool) {
	if !pe.mayTryPreempting(q) {
		return false
	}
	var req placement.Request
	reqBuilt := false
	request := func() placement.Request {
		if !reqBuilt {
			req, reqBuilt = pe.c.request(q, false), true
		}
		return req
	}
	// A job of the top tier waits first only for the gangs stopping for
	// itself (its own earlier preemption), then preempts its own way in,
	// and only when it cannot waits for gangs stopping for others.
	ownFirst := pe.c.pol.Preemption.Enabled && pe.topTier(q)
	if pe.waitForStopping(q, exp, request, ownFirst) {
		return true
	}
	if !pe.c.pol.Preemption.Enabled {
		return false
	}
	if pe.preemptOwnWay(q, exp, request) {
		return true
	}
	return ownFirst && pe.waitForStopping(q, exp, request, false)
}

// topTier: q's tier has the highest weight of the policy's tiers (ties
// included, see cycle.topTier).
func (pe *preempter) topTier(q *queued) bool { return pe.c.topTier(q.f.tier) }

// preemptOwnWay searches victims for q (the cheapest that stop for it on
// short notice first, searchShortNotice, then the cheapest of its shape,
// searchShaped, else the cheapest of all) and orders their stops when the
// gain beats the cost and the budgets allow.
func (pe *preempter) preemptOwnWay(q *queued, exp *Explanation, request func() placement.Request) (preempting bool) {
	if pe.c.explain && pe.c.why.hasYoung() {
		defer func() {
			if !preempting {
				y := pe.c.why.youngNote(q)
				exp.Reason = pe.c.why.cat(exp.Reason, y.note)
				exp.CouldPreempt, exp.CouldPreemptFrom = y.job, y.from
			}
		}()
	}
	cl, gain, ok := pe.preemptable(q, exp)
	if !ok {
		return false
	}
	// Work on short notice (searchShortNotice: taken back, or on loan on
	// the headroom's nodes) first, then victims of its shape
	// (searchShaped), each when they cost less than the gain; else the
	// cheapest of all.
	victims, res, short := pe.searchShortNotice(cl, q, request())
	cost, lost := pe.victimsCost(victims)
	shaped := false
	if short && gain <= cost {
		short = false
	}
	if !short {
		victims, res, shaped = pe.searchShaped(cl, q, request())
		cost, lost = pe.victimsCost(victims)
	}
	if shaped && gain <= cost {
		shaped = false
	}
	if !shaped && !short {
		if victims, res, ok = pe.searchVictims(cl, request()); !ok {
			if pe.c.explain {
				exp.Reason += "; preempting eligible gangs would not make room"
			}
			return false
		}
		cost, lost = pe.victimsCost(victims)
	}
	if gain <= cost {
		if pe.c.explain {
			exp.Reason += fmt.Sprintf("; preemption would cost %.1f, more than its gain %.1f", cost, gain)
		}
		return false
	}
	if pe.endsFirst(q, victims, gain, cost, exp) {
		return false
	}
	budget, ok := pe.budgetAllows(q, exp, lost)
	if !ok {
		return false
	}
	if !shaped && !short {
		pe.c.cuts.record(q, victims, res)
	}
	pe.orderPreemptions(q, exp, victims, res, gain, cost, budget, shaped)
	return true
}

// endsFirst: a top-tier job does not preempt victims (worth gain, at
// cost) when running work ending on its own is likely enough to free
// room for it before they would stop that the wait the preemption saves
// is worth no more than its cost (policy preemption weigh_ends,
// endpace.go). Only until the job has waited as long as their grace: a
// pace learned over the last hour may be faster than the present one, and
// after that long the preemption would have started it.
func (pe *preempter) endsFirst(q *queued, victims []int, gain, cost float64, exp *Explanation) bool {
	if !pe.c.pol.Preemption.WeighEnds || !pe.topTier(q) {
		return false
	}
	grace := pe.maxGrace(q, victims)
	if pe.c.now.Sub(q.submitTime()) >= grace {
		return false
	}
	chance := pe.c.pace.firstChance(q, grace)
	saved := gain * (1 - chance)
	if chance <= 0 || saved > cost {
		return false
	}
	if pe.c.explain {
		exp.Reason += fmt.Sprintf("; running work ending on its own is likely (%.0f%%, at the pace of the last hour's ends) to free room for it before its victims' grace of %s is over: preempting would save a wait worth %.1f of its gain %.1f, no more than its cost %.1f",
			100*chance, grace, saved, gain, cost)
	}
	return true
}

// maxGrace is the longest grace q's preemption gives the victims: how
// long until the last of them has stopped.
func (pe *preempter) maxGrace(q *queued, victims []int) time.Duration {
	var g time.Duration
	for _, h := range victims {
		g = max(g, pe.graceOf(q, h))
	}
	return g
}

// graceOf is the grace q's preemption gives holder h: its own
// impact_grace, none where a headroom takes it back, or the headroom's
// loan grace where h runs on loan (hrCycle.notice). Every use of a
// victim's grace in a preemption (the stop, its expiry, the preemptor's
// binding, weighing natural ends) reads it here.
func (pe *preempter) graceOf(q *queued, h int) time.Duration {
	g, _ := pe.noticeOf(q, h)
	return g
}

// noticeOf is graceOf and why it is shorter than h's own.
func (pe *preempter) noticeOf(q *queued, h int) (time.Duration, shortNotice) {
	v := &pe.c.victims[h]
	return pe.c.hr.notice(q, h, v.Tier, v.Grace)
}

// mayTryPreempting: q's tier may preempt some tier, or some running job
// is an idle victim (a tier of at least its weight may take it, see
// preempt.MayTake); else tryPreempt has nothing to try.
func (pe *preempter) mayTryPreempting(q *queued) bool {
	tier := pe.c.tier(q.f.tier)
	return tier != nil && (len(tier.MayPreempt) > 0 || pe.c.judge.anyIdleVictim())
}

// budgetAllows checks that lost more GPU-hours of work fit the hourly
// budget the job's preemptions draw on, and returns that budget's key
// (see Engine.budgetOf); when they do not, the job's reason says so.
func (pe *preempter) budgetAllows(q *queued, exp *Explanation, lost float64) (string, bool) {
	budget, mx := pe.c.e.budgetOf(q.f.tier)
	if mx > 0 { // the hour's losses are summed only for a capped budget
		if already := pe.c.mem.lostFrom(budget); already+lost > mx {
			if pe.c.explain {
				which := "shared"
				if budget != "" {
					which = fmt.Sprintf("tier %q", budget)
				}
				exp.Reason += fmt.Sprintf("; preemption limit (%s budget): %.1f GPU-hours lost in the last hour, %.1f more would exceed %.1f", which, already, lost, mx)
			}
			return budget, false
		}
	}
	return budget, true
}

// victimStop is the stop of victim hd (what the cycle knows of it: v) for
// preemptor q, decided at now, without its reason.
func victimStop(q *queued, hd placement.Holder, v preempt.Victim, now time.Time) Preemption {
	p := Preemption{
		Stop:         stopOf(hd.Job, hd.GPUs), // v.grace is the job's impact_grace too
		Preemptor:    q.job.ID,
		Cost:         v.Cost,
		LostGPUHours: v.Lost,
	}
	p.addRun(hd.Allocs, hd.Job.Spec.CheckpointInterval, now)
	return p
}

// victimsCost is what stopping the victims costs (the preemption's cost
// to weigh against its gain) and the GPU-hours of work they lose.
func (pe *preempter) victimsCost(victims []int) (cost, lost float64) {
	for _, h := range victims {
		cost += pe.c.victims[h].Cost
		lost += pe.c.victims[h].Lost
	}
	return cost, lost
}

// waitForStopping: when the gangs already stopping (preemptions under way,
// not yet counted for another preemptor) free room for the job, it waits
// for them, claims those it needs and binds their GPUs, rather than
// preempting more. Not those on a node a headroom keeps whole and keeps
// the job out of (hrCycle.shields): claiming them would put the job there
// once they stop. Not those moved out of another job's way (boundToOther):
// a defragmenting move frees room on one node for one job, and a job
// scoring higher that took it would leave the mover to move more, the
// moved jobs' lost work wasted. A gang preempted for another job may be
// claimed by a job scoring higher (as a higher-priority pod may take a
// nominated node's room in Kubernetes): the first preemptor then
// preempts again or waits. Measured at 6491fe7 against keeping those too
// for their preemptor, that orders fewer preemptions (the standard scenario:
// 11,703 against 12,522; the whole trace 26,866 against 31,713) for a
// similar or better tier-weighted JCT (12,431s against 12,231s; 26,763s
// against 28,877s), at a longer critical p99 (90s against 62s; 101s
// against 62s).
//
// With ownOnly, only those stopping for q (stopsFor: it preempted them):
// a top-tier job does not queue behind stops ordered for other jobs or
// for none, whose graces may run long, when it can preempt its own way
// in (tryPreempt); it still waits for those it preempted itself.
func (pe *preempter) waitForStopping(q *queued, exp *Explanation, request func() placement.Request, ownOnly bool) bool {
	holders := pe.c.st.Holders()
	// Releasing the stopping gangs frees at most their GPUs: when that
	// cannot make room, placing is not tried (most waiting jobs).
	if stopping := pe.unclaimedStoppingGPUs(); stopping == 0 || pe.c.st.FreeGPUs(q.pool)+stopping < q.gpus {
		return false
	}
	// Nor when releasing them would free no GPU at all (theirs are
	// reserved: a reservation covers them once freed, and the job may not
	// take reserved GPUs here) and the job does not fit what is free:
	// placing would fail on the free count at once. This learns it
	// without releasing and rolling back, which a long queue behind a
	// reservation otherwise does once per waiting job. Only then: a
	// release that frees GPUs moves nodes between placement's buckets by
	// free count, and the rollback puts them back at the end of their
	// bucket, an order later placements break ties by, so skipping that
	// release (stopping gangs in another pool, say) would change later
	// decisions.
	if pe.c.st.FreeGPUs(q.pool) < q.gpus && pe.freedByStopping() == 0 {
		return false
	}
	cp := pe.c.st.Checkpoint()
	var stopping []int
	for _, h := range pe.stopping {
		if !pe.c.claimed[h] && !pe.c.hr.shields(q, h) && !pe.c.holds.boundToOther(q, h) &&
			(!ownOnly || pe.stopsFor(q, h)) {
			stopping = append(stopping, h)
			pe.c.st.ReleaseHolder(h)
		}
	}
	if len(stopping) == 0 {
		return false
	}
	res, ok := pe.c.st.Place(request(), nil)
	pe.c.st.Rollback(cp)
	if !ok {
		return false
	}
	used := preempt.Uses(pe.c.st, res, stopping)
	if len(used) == 0 {
		// It places without any stopping gang's GPUs: waiting for them
		// would hold GPUs for a stop that frees nothing it needs.
		return false
	}
	pe.c.place.takeSlots(res)
	for _, h := range used {
		pe.claim(h)
		exp.Victims = append(exp.Victims, holders[h].JobID)
	}
	pe.c.holds.bind(q, res, used)
	pe.stopping = nil
	exp.Status = StatusPreempting
	exp.Reason = "waiting for preempted gangs to stop"
	exp.Rejected = nil
	if pe.c.explain && pe.c.defrag.movesUnderWay(q) {
		// What it waits for are the jobs it moved (its tier may
		// preempt, so it claims them here): said as a move.
		pe.c.defrag.explainMoves(q, exp)
	}
	return true
}

// stopsFor: holder h is stopping for q (a preemption q ordered).
func (pe *preempter) stopsFor(q *queued, h int) bool {
	for _, a := range pe.c.st.Holders()[h].Allocs {
		if st, ok := pe.c.mem.stopOf(a.ID); ok && st.preemptor == q.job.ID {
			return true
		}
	}
	return false
}

// unclaimedStoppingGPUs is what the gangs already stopping and not yet
// counted for a preemptor hold (stopping, stoppingGPUs: worked out
// once, again after a claim).
func (pe *preempter) unclaimedStoppingGPUs() int {
	holders := pe.c.st.Holders()
	if pe.stopping == nil {
		pe.stopping = []int{}
		for h := range holders {
			if holders[h].Stopping {
				pe.stopping = append(pe.stopping, h)
			}
		}
		pe.stoppingGPUs = -1
	}
	if pe.stoppingGPUs < 0 {
		pe.stoppingGPUs = 0
		for _, h := range pe.stopping {
			if !pe.c.claimed[h] {
				pe.stoppingGPUs += holders[h].GPUs
			}
		}
	}
	return pe.stoppingGPUs
}

// freedByStopping is how many free GPUs the cluster would gain if every
// unclaimed stopping gang were released (placement.State.FreedBy): at
// least what releasing the ones a preemptor may wait for frees.
func (pe *preempter) freedByStopping() int {
	n := 0
	for _, h := range pe.stopping {
		if !pe.c.claimed[h] {
			n += pe.c.st.FreedBy(h)
		}
	}
	return n
}

// preemptable checks, before any search, that preempting for the job may
// pay: the cycle's preemption and search budgets are not spent, its
// candidates hold enough GPUs, and even the cheapest of them per GPU cost
// less than its gain. It returns the candidates and the gain.
func (pe *preempter) preemptable(q *queued, exp *Explanation) (*candList, float64, bool) {
	if pe.preemptors >= pe.c.pol.Preemption.MaxPerCycle {
		if pe.c.explain {
			exp.Reason = pe.c.why.cat(exp.Reason, "; preemption budget of this cycle spent")
		}
		return nil, 0, false
	}
	if pe.preemptAttempts >= maxPreemptAttemptsPerSuccess*pe.c.pol.Preemption.MaxPerCycle {
		return nil, 0, false
	}
	cl := pe.candidates(q)
	if pe.c.st.FreeGPUs(q.pool)+cl.gpus < q.gpus {
		if pe.c.explain {
			// Without it a top-tier job in a pool of non-preemptible
			// (or young, said after this) work read only "needs N
			// GPUs, M free", as if preemption had not been thought of.
			exp.Reason = pe.c.why.cat(exp.Reason, "; the running work it may preempt holds too few GPUs to make room")
		}
		return nil, 0, false
	}
	pe.c.plan.CostsWeighed = true // from here on the victims' costs decide
	gain := q.f.impact * float64(q.gpus) * pe.c.pol.Preemption.GainHorizon.Hours()
	if short := q.gpus - pe.c.st.FreeGPUs(q.pool); short > 0 && gain <= cl.minPerGPU*float64(short) {
		if pe.c.explain {
			exp.Reason += fmt.Sprintf("; preemption would cost at least %.1f, more than its gain %.1f", cl.minPerGPU*float64(short), gain)
		}
		return nil, 0, false
	}
	return cl, gain, true
}

// orderPreemptions plans the victims' stops for the preemptor: claims
// them, reserves and binds the GPUs its placement takes, and charges the
// work they lose to the budget. shaped: the victims were chosen among the
// gangs of the preemptor's shape (searchShaped), which each stop's reason
// says.
func (pe *preempter) orderPreemptions(q *queued, exp *Explanation, victims []int, res placement.Result, gain, cost float64, budget string, shaped bool) {
	holders := pe.c.st.Holders()
	pe.preemptors++
	pe.c.place.takeSlots(res)
	pe.c.holds.bind(q, res, victims)
	for _, h := range victims {
		pe.claim(h)
		hd := holders[h]
		v := pe.c.victims[h]
		p := victimStop(q, hd, v, pe.c.now)
		p.Reason = fmt.Sprintf("preempted for %s (tier %s, score %.1f): gain %.1f > cost %.1f; %.2f GPU-hours of its work lost, counted from %s",
			q.job.ID, q.f.tier, q.total, gain, cost, v.Lost, lostBasis(hd.Allocs, hd.Job.Spec.CheckpointInterval))
		switch g, why := pe.noticeOf(q, h); why {
		case takenBack, takenBackUnsaved:
			p.TakenBack, p.Grace, v.Grace = true, g, g
			if why == takenBack {
				p.Reason += fmt.Sprintf("; started %s ago, less than the headroom's take_back", pe.c.now.Sub(earliestStart(hd.Allocs)).Round(time.Second))
			} else {
				p.Reason += fmt.Sprintf("; %s of its work unsaved since %s, less than the headroom's take_back_unsaved",
					unsaved(&hd, pe.c.now).Round(time.Second), lastSaveBasis(hd.Allocs, hd.Job.Spec.CheckpointInterval))
			}
			p.Reason += ", so taken back at once, not after its impact_grace"
		case onLoan:
			p.OnLoan = true
			if g != v.Grace {
				p.Grace, v.Grace = g, g
				p.Reason += fmt.Sprintf("; on loan on the headroom's GPUs, so stopped after the headroom's loan_grace of %s, not its impact_grace", g)
			} else {
				p.Reason += "; on loan on the headroom's GPUs, its own impact_grace no longer than the headroom's loan_grace"
			}
		}
		if shaped {
			p.Reason += fmt.Sprintf("; chosen among the gangs of its shape (%d GPUs per allocation) first", q.maxAlloc)
		}
		if v.Idle {
			p.Idle, p.IdleGPUHours, p.ReclaimedGPUHours = true, v.GPUHours, v.Reclaimed
			p.Reason += fmt.Sprintf(" up to going idle; %s, preemptible by its tier's idle action", v.Note)
			pe.c.e.logger.Info("preempting idle job", "victim", hd.JobID, "preemptor", q.job.ID, "gpus", hd.GPUs,
				"idle_since", v.Since, "idle_gpu_hours", v.GPUHours, "reclaimed_gpu_hours", v.Reclaimed, "cost", v.Cost, "gain", gain)
		}
		for _, a := range hd.Allocs {
			p.Allocs = append(p.Allocs, a.ID)
			pe.c.mem.orderStop(a.ID, inflightStop{job: hd.JobID, preemptor: q.job.ID, decided: pe.c.now, expires: pe.c.now.Add(v.Grace)})
		}
		pe.c.plan.Preemptions = append(pe.c.plan.Preemptions, p)
		pe.c.e.logger.Debug("preempting gang", "victim", hd.JobID, "preemptor", q.job.ID, "gpus", hd.GPUs,
			"cost", v.Cost, "lost_gpu_hours", v.Lost, "gain", gain)
		pe.c.mem.losses = append(pe.c.mem.losses, loss{at: pe.c.now, gpuHours: v.Lost, job: hd.JobID, budget: budget})
		exp.Victims = append(exp.Victims, hd.JobID)
	}
	exp.Status = StatusPreempting
	if pe.c.explain {
		exp.Reason = fmt.Sprintf("preempting %d gang(s): %s", len(victims), strings.Join(exp.Victims, ", "))
	}
	exp.Rejected = nil
}

// candidates lists the gangs a job may preempt (by its tier and pool), and
// their GPUs. Lists are built once per cycle per tier and pool; claim
// removes a victim from all of them.
func (pe *preempter) candidates(q *queued) *candList {
	keptOut := pe.c.hr.keepsOut(q)
	key := tierPool{q.f.tier, q.pool}
	if keptOut {
		// Headroom nodes shield their holders from this job: its own list.
		key.pool += "\x00kept-out"
	}
	if cl, ok := pe.candCache[key]; ok {
		return cl
	}
	holders := pe.c.st.Holders()
	var cands []preempt.Candidate
	gpus := 0
	minPer := 0.0
	for h, v := range pe.c.victims {
		if !(v.OK || v.Young && pe.c.hr.waives(q, h)) || pe.c.claimed[h] || !preempt.MayTake(pe.c.tier(q.f.tier), &pe.c.victims[h]) {
			continue
		}
		if q.pool != "" && !pe.c.holderInPool(h, q.pool) {
			continue
		}
		if keptOut && pe.c.hr.shields(q, h) {
			continue
		}
		cands = append(cands, preempt.Candidate{Holder: h, Cost: v.Cost})
		gpus += holders[h].GPUs
		if per := v.Cost / float64(max(1, holders[h].GPUs)); len(cands) == 1 || per < minPer {
			minPer = per
		}
	}
	if pe.candCache == nil {
		pe.candCache = map[tierPool]*candList{}
	}
	// minPerGPU stays a valid lower bound as victims are claimed (the
	// minimum over fewer candidates can only be higher).
	cl := &candList{cands: cands, gpus: gpus, minPerGPU: minPer, member: make([]bool, len(holders))}
	for _, cd := range cands {
		cl.member[cd.Holder] = true
	}
	pe.candCache[key] = cl
	return cl
}

// claim marks a gang as taken for a preemptor in this cycle: it is no
// longer a candidate for anyone else.
func (pe *preempter) claim(h int) {
	if pe.c.claimed[h] {
		return
	}
	pe.c.claimed[h] = true
	pe.stoppingGPUs = -1
	pe.c.why.forgetYoung()
	gpus := pe.c.st.Holders()[h].GPUs
	for _, cl := range pe.candCache {
		cl.exclude(h, gpus)
	}
	pe.c.defrag.exclude(h, gpus)
}

type candList struct {
	cands []preempt.Candidate
	// member[h]: holder h is still a candidate (not claimed since).
	member []bool
	gpus   int
	// minPerGPU is the lowest cost per GPU among the candidates: a lower
	// bound on what freeing n GPUs costs.
	minPerGPU float64
	index     *preempt.Index // built on first victim search
	// shaped: per allocation size, the index of the candidates of that
	// shape (searchShaped; nil: none), built on first search.
	shaped map[int]*preempt.Index
	// short: the index of the candidates that stop on short notice
	// (searchShortNotice; nil: none), built on first search (shortBuilt).
	short      *preempt.Index
	shortBuilt bool
}

// exclude drops holder h (of gpus GPUs) from the list, when a member.
func (cl *candList) exclude(h, gpus int) {
	if cl.member[h] {
		cl.member[h] = false
		cl.gpus -= gpus
		if cl.index != nil {
			cl.index.Exclude(h)
		}
		if cl.short != nil {
			cl.short.Exclude(h)
		}
		for _, ix := range cl.shaped {
			if ix != nil {
				ix.Exclude(h)
			}
		}
	}
}
