package engine

import (
	"math/bits"

	"github.com/impact-sched/nomad-impact/scheduler/placement"
	"github.com/impact-sched/nomad-impact/scheduler/preempt"
)

// searchVictims finds the cheapest victims among the candidates that make
// room for the request (preempt.Search: made minimal, for a gang re-placed
// whole, judged by the admission's own placement).
func (pe *preempter) searchVictims(cl *candList, req placement.Request) ([]int, placement.Result, bool) {
	pe.preemptAttempts++
	return preempt.Search(pe.c.st, cl.indexOn(pe.c.st, req.Pool), req, pe.c.victims)
}

// searchShaped is searchVictims among the candidates of q's shape only:
// gangs whose every allocation holds as many GPUs as each of q's does
// (allocShape). Preempting those swaps which job runs on a block of GPUs
// without cutting the pool's GPUs another way. A preemptor that takes one
// GPU of each of two one-GPU jobs, or a free GPU and one job's, leaves a
// two-GPU block where there were single GPUs; once it ends, that block
// frees whole and goes whole to the next job of its size, and so on: on
// a saturated pool each such preemption moves GPUs for good from the
// single-GPU work the lower tiers get by skipping ahead of wider jobs to
// the wider jobs ahead of them in the queue (example/sim/README.md,
// "Eighth pass"). False when q's allocations differ in size or no
// candidate has its shape; the caller then searches every candidate.
func (pe *preempter) searchShaped(cl *candList, q *queued, req placement.Request) ([]int, placement.Result, bool) {
	size, ok := allocShape(q)
	if !ok {
		return nil, placement.Result{}, false
	}
	ix := cl.shapedOn(pe.c.st, req.Pool, size)
	if ix == nil {
		return nil, placement.Result{}, false
	}
	pe.preemptAttempts++
	return preempt.Search(pe.c.st, ix, req, pe.c.victims)
}

// searchShortNotice is searchVictims among the candidates that stop on short
// notice for q (hrCycle.notice: preemptible work of other tiers that a
// headroom q's tier uses takes back, having started less than its
// take_back ago or with less than its take_back_unsaved of work unsaved,
// or that runs on loan on its nodes): they stop at once
// or after the loan's short grace, where other victims keep their own,
// so the job starts seconds after the decision instead of a grace later.
// False when no candidate stops on short notice; the caller then
// searches as before.
func (pe *preempter) searchShortNotice(cl *candList, q *queued, req placement.Request) ([]int, placement.Result, bool) {
	ix := cl.shortOn(pe, q, req.Pool)
	if ix == nil {
		return nil, placement.Result{}, false
	}
	pe.preemptAttempts++
	return preempt.Search(pe.c.st, ix, req, pe.c.victims)
}

// allocShape is the GPUs each of q's allocations asks, when they all ask
// the same (false otherwise).
func allocShape(q *queued) (int, bool) {
	for gi := range q.job.Groups {
		g := &q.job.Groups[gi]
		if g.Count > 0 && g.GPUs > 0 && g.GPUs != int(q.maxAlloc) {
			return 0, false
		}
	}
	return int(q.maxAlloc), q.maxAlloc > 0
}

// indexOn is the candidates' victim index, built on the first search.
func (cl *candList) indexOn(st *placement.State, pool string) *preempt.Index {
	if cl.index == nil {
		cl.index = preempt.NewIndex(st, pool, cl.cands)
		for _, cd := range cl.cands {
			if !cl.member[cd.Holder] {
				cl.index.Exclude(cd.Holder) // claimed before the index existed
			}
		}
	}
	return cl.index
}

// shapedOn is the victim index of the candidates, still members, whose
// every allocation holds size GPUs, built on the first search for that
// size; nil when there are none.
func (cl *candList) shapedOn(st *placement.State, pool string, size int) *preempt.Index {
	if ix, ok := cl.shaped[size]; ok {
		return ix
	}
	holders := st.Holders()
	var cands []preempt.Candidate
	for _, cd := range cl.cands {
		if cl.member[cd.Holder] && hasShape(&holders[cd.Holder], size) {
			cands = append(cands, cd)
		}
	}
	var ix *preempt.Index
	if len(cands) > 0 {
		ix = preempt.NewIndex(st, pool, cands)
	}
	if cl.shaped == nil {
		cl.shaped = map[int]*preempt.Index{}
	}
	cl.shaped[size] = ix
	return ix
}

// shortOn is the victim index of the candidates, still members, that
// stop for q on short notice (searchShortNotice), built on the first
// search of the cycle: the list is one tier's in one pool, and whether a
// holder is taken back or on loan depends on nothing else that changes
// within the cycle. nil when there are none.
func (cl *candList) shortOn(pe *preempter, q *queued, pool string) *preempt.Index {
	if cl.shortBuilt {
		return cl.short
	}
	cl.shortBuilt = true
	if !pe.c.hr.lendsTo(q) {
		return nil // no headroom lends or takes back for q's tier: nothing to look at
	}
	var cands []preempt.Candidate
	for _, cd := range cl.cands {
		v := &pe.c.victims[cd.Holder]
		if _, why := pe.c.hr.notice(q, cd.Holder, v.Tier, v.Grace); why != ownNotice && cl.member[cd.Holder] {
			cands = append(cands, cd)
		}
	}
	if len(cands) > 0 {
		cl.short = preempt.NewIndex(pe.c.st, pool, cands)
	}
	return cl.short
}

// hasShape: every allocation of hd holds size GPUs.
func hasShape(hd *placement.Holder, size int) bool {
	for _, sl := range hd.Slots {
		if bits.OnesCount64(sl.Mask) != size {
			return false
		}
	}
	return len(hd.Slots) > 0
}
