package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/impact-sched/nomad-impact/scheduler/placement"
	"github.com/impact-sched/nomad-impact/scheduler/preempt"
)

// defragger is the defragment step: the policy's defragment block for a
// job that neither fits nor may preempt its way in (tryDefragment). It
// owns the cycle's move counts and its candidate lists by pool.
//
// Moves come last: a job left waiting, or holding a reservation (not a
// gang gathering its nodes), is noted (consider) and its moves searched
// only once the whole queue is decided (moveLast), on the GPUs no job
// behind it took, so that a move only ever fills GPUs that would
// otherwise idle. Searched in queue order, a wide job's moves took free
// GPUs that smaller jobs behind it fitted on, which on the robustness
// suite cost their waits more than it gained (example/sim/README.md,
// "Fourth pass"). A job whose moved jobs are still stopping waits for
// them in queue order (waitsForMoves).
type defragger struct {
	c *cycle
	// later: the jobs noted by consider, whose moves moveLast searches.
	later []laterMove
	// defrags and defragAttempts count this cycle's defragmenting
	// preemptions and their searches.
	defrags, defragAttempts int
	cands                   map[string]*candList
}

// exclude drops a claimed holder from every candidate list.
func (d *defragger) exclude(h int, gpus int) {
	for _, cl := range d.cands {
		cl.exclude(h, gpus)
	}
}

// tryDefragment is the policy's defragment block for a job that neither
// fits nor may preempt its way in: when its pool has free GPUs enough but
// not where the job could use them (a node with 7 free GPUs whose 8th
// holds a one-GPU job), it moves small preemptible jobs out of the way.
// A victim may be of any tier (the mover's own included, which
// may_preempt never allows) as long as it can be placed again at once on
// GPUs free elsewhere, after the job's own placement: it is stopped with
// its checkpoint signal and grace like any victim and bound to those GPUs
// (holdBindings keeps them for it while it stops), so it loses only the
// work since its last checkpoint and its restart. The job is bound to the
// GPUs its victims free and the free ones beside them, and admitted by a
// later cycle as a preemptor is; while the jobs it moved still stop it
// moves no more (movesUnderWay). Gain (over the block's gain horizon) and
// cost are weighed as a preemption's, and the work lost is charged to the
// same hourly budget.
func (df *defragger) tryDefragment(q *queued, exp *Explanation) bool {
	if !df.enabled() || df.spent() {
		return false
	}
	free := df.c.st.FreeGPUs(q.pool)
	if free < q.gpus {
		return false // moving work around frees no GPU
	}
	cl := df.defragCandidates(q)
	if cl.gpus == 0 {
		return false
	}
	df.c.plan.CostsWeighed = true // from here on the victims' costs decide
	gain := q.f.impact * float64(q.gpus) * df.c.pol.DefragmentGainHorizon().Hours()
	if gain <= cl.minPerGPU { // even the cheapest GPU to move costs more
		if df.c.explain {
			exp.Reason += fmt.Sprintf("; moving small jobs out of its way would cost at least %.1f, more than its gain %.1f", cl.minPerGPU, gain)
		}
		return false
	}
	req := df.c.request(q, false)
	victims, res, dests, ok := df.defragSearch(cl, req)
	if !ok {
		return false
	}
	cost, lost := df.c.pre.victimsCost(victims)
	if gain <= cost {
		if df.c.explain {
			exp.Reason += fmt.Sprintf("; moving %d small job(s) out of its way would cost %.1f, more than its gain %.1f", len(victims), cost, gain)
		}
		return false
	}
	budget, ok := df.c.pre.budgetAllows(q, exp, lost)
	if !ok {
		return false
	}
	df.orderMoves(q, exp, victims, res, dests, gain, cost, budget)
	return true
}

func (df *defragger) enabled() bool {
	return df.c.pol.Defragment.Enabled && df.c.pol.Preemption.Enabled
}

// spent: no more moves may be searched this cycle.
func (df *defragger) spent() bool {
	d := df.c.pol.Defragment
	return df.defrags >= d.MaxPerCycle || df.defragAttempts >= maxPreemptAttemptsPerSuccess*d.MaxPerCycle
}

// waitsForMoves settles, in queue order, a job whose moved jobs are
// still stopping (a tier that may preempt no one has no waitForStopping
// to claim them): it waits for them rather than moving more.
func (df *defragger) waitsForMoves(q *queued, exp *Explanation) bool {
	if !df.enabled() || !df.movesUnderWay(q) {
		return false
	}
	exp.Status = StatusPreempting
	if df.c.explain {
		df.explainMoves(q, exp)
	}
	return true
}

// laterMove is a job whose moves moveLast searches: its queue position
// (1-based) and the index of its reservation (-1: none).
type laterMove struct{ pos, reservation int }

// consider notes a job left waiting or holding a reservation at queue
// position pos for the moves searched last.
func (df *defragger) consider(pos, reservation int) {
	if !df.enabled() {
		return
	}
	if df.later == nil {
		df.later = df.c.e.scratch.later[:0]
	}
	df.later = append(df.later, laterMove{pos, reservation})
}

// moveLast runs once the whole queue is decided: it searches the moves
// of the jobs left waiting or holding a reservation (consider; a gang
// gathering its nodes is not moved for), in queue order, each
// with its own reservation's GPUs and the headroom's as decide gives
// them (GPUs bound to a job were its own in decide: what is still free
// of them stays withheld).
func (df *defragger) moveLast(lay *queueLayout) {
	for _, l := range df.later {
		q := lay.at(l.pos - 1)
		df.moveOne(q, df.c.why.explanation(q, l.pos), l.reservation)
	}
	if df.later != nil {
		df.c.e.scratch.later = df.later[:0] // reused by the next cycle
	}
}

// moveOne searches q's moves; reservation is the index of its own
// reservation, -1 when it holds none.
func (df *defragger) moveOne(q *queued, exp *Explanation, reservation int) {
	if give := df.c.hr.protect(q); give != nil {
		defer give()
	}
	if reservation < 0 {
		df.tryDefragment(q, exp)
		return
	}
	back := df.c.place.lendReservation(reservation)
	if !df.tryDefragment(q, exp) {
		back()
	}
}

// defragCandidates lists the gangs a defragmenting preemption may move in
// the job's pool (preempt.Victim.Movable: preemptible and past their
// minimum runtime, not idle victims, one allocation of at most the
// block's max_victim_gpus), not claimed. Built once per cycle per pool;
// claim removes a victim from it.
func (df *defragger) defragCandidates(q *queued) *candList {
	keptOut := df.c.hr.keepsOut(q)
	key := q.pool
	if keptOut {
		key += "\x00kept-out"
	}
	if cl, ok := df.cands[key]; ok {
		return cl
	}
	holders := df.c.st.Holders()
	maxGPUs := df.c.pol.Defragment.MaxVictimGPUs
	cl := &candList{member: make([]bool, len(holders))}
	for h := range df.c.victims {
		v := &df.c.victims[h]
		hd := &holders[h]
		if !v.Movable(len(hd.Allocs), hd.GPUs, maxGPUs) || df.c.claimed[h] {
			continue
		}
		if q.pool != "" && !df.c.holderInPool(h, q.pool) {
			continue
		}
		if keptOut && df.c.hr.shields(q, h) {
			continue
		}
		cl.cands = append(cl.cands, preempt.Candidate{Holder: h, Cost: v.Cost})
		cl.member[h] = true
		cl.gpus += hd.GPUs
		if per := v.Cost / float64(max(1, hd.GPUs)); len(cl.cands) == 1 || per < cl.minPerGPU {
			cl.minPerGPU = per
		}
	}
	if df.cands == nil {
		df.cands = map[string]*candList{}
	}
	df.cands[key] = cl
	return cl
}

// defragSearch finds the cheapest minimal set of candidates whose GPUs
// let the request place, and a placement of every victim, made after the
// job's, on GPUs that are free now (not reserved, not the job's, not a
// victim's). The state is left as it was.
func (df *defragger) defragSearch(cl *candList, req placement.Request) (victims []int, res placement.Result, dests [][]placement.Slot, ok bool) {
	ix := cl.indexOn(df.c.st, req.Pool)
	df.defragAttempts++
	return preempt.SearchMoves(df.c.st, ix, req, df.c.victims, func(h int) placement.Request {
		j := df.c.st.Holders()[h].Job
		vq := &queued{job: j, pool: j.Spec.Pool}
		if vq.pool == "" {
			vq.pool = df.c.e.opts.defaultPool
		}
		return df.c.request(vq, false)
	})
}

// orderMoves plans a defragmenting preemption: the victims' stops (as
// orderPreemptions does), the job's binding on what they free, and each
// victim's binding on the GPUs it moves to. The free GPUs of both
// placements are taken from the rest of this cycle; later cycles withhold
// them through the bindings.
func (df *defragger) orderMoves(q *queued, exp *Explanation, victims []int, res placement.Result, dests [][]placement.Slot, gain, cost float64, budget string) {
	holders := df.c.st.Holders()
	df.defrags++
	df.c.place.takeSlots(res)
	df.c.holds.bind(q, res, victims)
	b, _ := df.c.mem.bindingOf(q.id)
	b.movedOut = make([]string, 0, len(victims))
	for _, h := range victims {
		b.movedOut = append(b.movedOut, holders[h].JobID)
	}
	df.c.mem.setBinding(q.id, b)
	var moved []string
	for i, h := range victims {
		df.c.pre.claim(h)
		hd := holders[h]
		v := df.c.victims[h]
		to := make([]AllocPlacement, 0, len(dests[i]))
		for _, sl := range dests[i] {
			df.c.st.Take(sl)
			to = append(to, AllocPlacement{NodeID: df.c.st.Node(sl.Node).ID, GPUs: df.c.st.GPUIDs(sl)})
		}
		where := placesText(to)
		df.c.mem.setBinding(hd.JobID, binding{gpus: to, expires: df.c.now.Add(v.Grace + df.c.e.opts.admissionTTL), made: df.c.now, moved: true})
		p := victimStop(q, hd, v, df.c.now)
		p.MovedTo, p.PreemptorGPUs = to, b.gpus
		p.Reason = fmt.Sprintf("moved out of the way of %s (tier %s, score %.1f), for which the pool has GPUs enough but not where it could use them: restarts at once on %s, on GPUs bound to it; gain %.1f > cost %.1f; %.2f GPU-hours of its work lost, counted from %s",
			q.job.ID, q.f.tier, q.total, where, gain, cost, v.Lost, lostBasis(hd.Allocs, hd.Job.Spec.CheckpointInterval))
		for _, a := range hd.Allocs {
			p.Allocs = append(p.Allocs, a.ID)
			df.c.mem.orderStop(a.ID, inflightStop{job: hd.JobID, decided: df.c.now, expires: df.c.now.Add(v.Grace)})
		}
		df.c.plan.Preemptions = append(df.c.plan.Preemptions, p)
		df.c.e.logger.Debug("moving job to defragment", "victim", hd.JobID, "preemptor", q.job.ID, "gpus", hd.GPUs,
			"to", where, "cost", v.Cost, "lost_gpu_hours", v.Lost, "gain", gain)
		df.c.mem.losses = append(df.c.mem.losses, loss{at: df.c.now, gpuHours: v.Lost, job: hd.JobID, budget: budget})
		exp.Victims = append(exp.Victims, hd.JobID)
		moved = append(moved, hd.JobID+" to "+where)
	}
	exp.Status = StatusPreempting
	if df.c.explain {
		exp.Reason = fmt.Sprintf("defragmenting: the pool has GPUs enough but not where it could use them, so %d small job(s) move out of its way and restart at once elsewhere: %s",
			len(victims), strings.Join(moved, ", "))
	}
	exp.Rejected = nil
}

// explainMoves explains a job whose defragmenting preemption is under way
// (movesUnderWay) for as long as it lasts, not only in the cycle that
// decided it: it waits for the jobs it moved to stop, each named with the
// GPUs it is bound to restart on (none once it has restarted).
func (df *defragger) explainMoves(q *queued, exp *Explanation) {
	b, _ := df.c.mem.bindingOf(q.id)
	moved := make([]string, 0, len(b.movedOut))
	for _, id := range b.movedOut {
		if !slices.Contains(exp.Victims, id) {
			exp.Victims = append(exp.Victims, id)
		}
		mb, ok := df.c.mem.bindingOf(id)
		if !ok || !mb.moved {
			moved = append(moved, id+" (restarted)")
			continue
		}
		moved = append(moved, id+" to "+placesText(mb.gpus))
	}
	exp.Reason = fmt.Sprintf("defragmenting: waiting for the %d small job(s) moved out of its way to stop; they restart at once elsewhere: %s",
		len(moved), strings.Join(moved, ", "))
	exp.Rejected = nil
}

// placesText names where a moved job restarts: "node (gpu, gpu); node
// (gpu)", as its preemption's reason and the mover's explanation say it.
func placesText(to []AllocPlacement) string {
	where := make([]string, 0, len(to))
	for _, ap := range to {
		where = append(where, fmt.Sprintf("%s (%s)", ap.NodeID, strings.Join(ap.GPUs, ", ")))
	}
	return strings.Join(where, "; ")
}

// movesUnderWay: some job moved out of q's way by an earlier cycle is
// still stopping (within its grace; then it is queued again, or gone, and
// may have restarted where it was moved to: that no longer counts).
func (df *defragger) movesUnderWay(q *queued) bool {
	b, ok := df.c.mem.bindingOf(q.id)
	if !ok || len(b.movedOut) == 0 {
		return false
	}
	holders := df.c.st.Holders()
	for _, id := range b.movedOut {
		if j, ok := df.c.snap.Job(id); ok {
			if h, ok := df.c.judge.managedHolder(j); ok && holders[h].Stopping {
				return true
			}
		}
	}
	return false
}
