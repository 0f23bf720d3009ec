package engine

import (
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
