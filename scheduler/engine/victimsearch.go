package engine

// The victim search: which running gangs to stop so that a preemptor's
// request places, made minimal, and for a gang re-placed whole.

import (
	"cmp"
	"slices"
	"strings"

	"github.com/impact-sched/nomad-impact/scheduler/placement"
	"github.com/impact-sched/nomad-impact/scheduler/preempt"
)

// searchVictims finds the cheapest victims among the candidates that make
// room for the request, made minimal, and for a gang re-placed whole.
func (c *cycle) searchVictims(cl *candList, req placement.Request) ([]int, placement.Result, bool) {
	if cl.index == nil {
		cl.index = preempt.NewIndex(c.st, req.Pool, cl.cands)
		for _, cd := range cl.cands {
			if !cl.member[cd.Holder] {
				cl.index.Exclude(cd.Holder) // claimed before the index existed
			}
		}
	}
	c.preemptAttempts++
	cp := c.st.Checkpoint()
	victims, res, ok := cl.index.Select(c.st, req)
	c.st.Rollback(cp)
	if !ok {
		return nil, placement.Result{}, false
	}
	victims, res = c.minimalVictims(req, victims, res)
	if isGang(req) {
		victims, res = c.replaceGang(req, victims, res)
	}
	if len(victims) == 0 || !c.placesOnReleased(req, victims) {
		// The search places one allocation at a time, so it cannot see
		// the rules that bind a group's allocations together (several
		// NVLink allocations sharing a node whose device group spans
		// islands must share one island). The admission's own placement,
		// on what the victims free, is the judge: a preemption it would
		// not admit, or one that stops nothing, is no preemption at all.
		// Ordering it would bind the pool's GPUs to a job that can never
		// start on them.
		return nil, placement.Result{}, false
	}
	return victims, res, true
}

// placesOnReleased: does the whole request place, as an admission would
// place it, once the victims are released?
func (c *cycle) placesOnReleased(req placement.Request, victims []int) bool {
	cp := c.st.Checkpoint()
	defer c.st.Rollback(cp)
	for _, h := range victims {
		c.st.ReleaseHolder(h)
	}
	_, ok := c.st.Place(req, nil)
	return ok
}

// minimalVictims drops the victims that later choices of the search made
// unnecessary: the search frees room one allocation at a time, cheapest
// first, so a cheap gang taken for the first allocation may be useless
// once a bigger one is released for the next (a 2x8 preemptor taking a
// 3x8 and a 2x4 gang where the 3x8 alone frees enough). Each victim,
// costliest first, is given back its GPUs; if the whole request still
// places on what the others free, it stays running. The result is
// minimal: no victim left could be spared. The preemptor is then placed
// as an admission would place it on what the remaining victims free.
func (c *cycle) minimalVictims(req placement.Request, victims []int, res placement.Result) ([]int, placement.Result) {
	if len(victims) < 2 {
		return victims, res
	}
	holders := c.st.Holders()
	cp := c.st.Checkpoint()
	defer c.st.Rollback(cp)
	for _, h := range victims {
		c.st.ReleaseHolder(h)
	}
	order := slices.Clone(victims)
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(c.victims[b].cost, c.victims[a].cost), cmp.Compare(holders[b].GPUs, holders[a].GPUs),
			strings.Compare(holders[a].JobID, holders[b].JobID))
	})
	spared := map[int]bool{}
	for _, h := range order {
		if len(spared) == len(victims)-1 {
			break
		}
		back := c.st.Checkpoint()
		for _, sl := range holders[h].Slots {
			c.st.Take(sl)
		}
		fit := c.st.Checkpoint()
		if _, ok := c.st.Place(req, nil); ok {
			c.st.Rollback(fit)
			spared[h] = true
			continue
		}
		c.st.Rollback(back)
	}
	if len(spared) == 0 {
		return victims, res
	}
	whole, ok := c.st.Place(req, nil)
	if !ok {
		return victims, res // cannot happen: the last check placed it
	}
	var kept []int
	for _, h := range victims {
		if !spared[h] {
			kept = append(kept, h)
		}
	}
	// The placement may not touch every remaining victim (it could sit on
	// GPUs that were free anyway): those are spared too.
	if used := c.slotsUse(whole, kept); len(used) > 0 {
		kept = used
	}
	return kept, whole
}

// isGang: does the request place some group as more than one allocation?
func isGang(req placement.Request) bool {
	for _, g := range req.Groups {
		if g.Count > 1 && g.GPUs > 0 {
			return true
		}
	}
	return false
}

// replaceGang re-places a gang on the GPUs the chosen victims free (and
// those already free) as a whole, the way an admission is placed: fewest
// nodes, then a shared switch or rack, best fit. The victim search places
// one allocation at a time, cheapest node first, which scatters a
// multi-node gang. Victims the new placement does not touch are spared.
// When the whole-gang placement fails or is no better, the search's own
// stands.
func (c *cycle) replaceGang(req placement.Request, victims []int, res placement.Result) ([]int, placement.Result) {
	cp := c.st.Checkpoint()
	defer c.st.Rollback(cp)
	for _, h := range victims {
		c.st.ReleaseHolder(h)
	}
	whole, ok := c.st.Place(req, nil)
	if !ok {
		return victims, res
	}
	// Only an improvement is taken: fewer victims, or fewer nodes. An
	// equal one would just move the preemptor's reservation around.
	spared := c.slotsUse(whole, victims)
	if len(spared) < len(victims) || resultNodes(whole) < resultNodes(res) {
		return spared, whole
	}
	return victims, res
}

// resultNodes counts the distinct nodes of a placement.
func resultNodes(res placement.Result) int {
	var seen []int
	for _, g := range res.Groups {
		for _, sl := range g {
			if !slices.Contains(seen, sl.Node) {
				seen = append(seen, sl.Node)
			}
		}
	}
	return len(seen)
}

// slotsUse returns the holders among hs whose GPUs the result uses.
func (c *cycle) slotsUse(res placement.Result, hs []int) []int {
	var out []int
	holders := c.st.Holders()
	for _, h := range hs {
		hit := false
		for _, hsl := range holders[h].Slots {
			for _, g := range res.Groups {
				for _, sl := range g {
					if sl.Node == hsl.Node && sl.Mask&hsl.Mask != 0 {
						hit = true
					}
				}
			}
		}
		if hit {
			out = append(out, h)
		}
	}
	return out
}
