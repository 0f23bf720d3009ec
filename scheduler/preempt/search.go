package preempt

// The victim search's rules past Index.Select: the victims made minimal,
// a gang re-placed whole, the admission's placement as the judge, and
// the destinations of a defragmenting move.

import (
	"cmp"
	"slices"
	"strings"

	"github.com/impact-sched/nomad-impact/scheduler/placement"
)

// Search finds the cheapest victims among the index's candidates that
// make room for req, made minimal (Minimal), for a gang re-placed whole
// (ReplaceGang), and kept only if req places as an admission would on
// what they free (PlacesOnReleased) and they are not none. victims[h] is
// what the cycle knows of holder h (its cost orders Minimal). The state
// is left as it was.
func Search(st *placement.State, ix *Index, req placement.Request, victims []Victim) ([]int, placement.Result, bool) {
	hs, res, ok := selectMinimal(st, ix, req, victims)
	if !ok {
		return nil, placement.Result{}, false
	}
	if len(hs) == 0 || !PlacesOnReleased(st, req, hs) {
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
	return hs, res, true
}

// selectMinimal is Index.Select rolled back, then Minimal and, for a
// gang, ReplaceGang.
func selectMinimal(st *placement.State, ix *Index, req placement.Request, victims []Victim) ([]int, placement.Result, bool) {
	cp := st.Checkpoint()
	hs, res, ok := ix.Select(st, req)
	st.Rollback(cp)
	if !ok {
		return nil, placement.Result{}, false
	}
	hs, res = Minimal(st, req, hs, res, victims)
	if IsGang(req) {
		hs, res = ReplaceGang(st, req, hs, res)
	}
	return hs, res, true
}

// SearchMoves is a defragmenting preemption's search: the cheapest
// minimal set of the index's candidates whose GPUs let req place, and a
// placement of every victim, made after req's, on GPUs that are free now
// (not reserved, not req's, not a victim's): dests[i] is where hs[i]
// restarts, placed by requestOf(hs[i]). The state is left as it was.
func SearchMoves(st *placement.State, ix *Index, req placement.Request, victims []Victim,
	requestOf func(h int) placement.Request) (hs []int, res placement.Result, dests [][]placement.Slot, ok bool) {
	cp := st.Checkpoint()
	hs, res, ok = selectMinimal(st, ix, req, victims)
	if !ok {
		return nil, placement.Result{}, nil, false
	}
	defer st.Rollback(cp)
	for _, h := range hs {
		st.ReleaseHolder(h)
	}
	for _, g := range res.Groups {
		for _, sl := range g {
			st.Take(sl)
		}
	}
	holders := st.Holders()
	// What the job leaves of its victims' GPUs is theirs until they stop.
	for _, h := range hs {
		for _, sl := range holders[h].Slots {
			if m := sl.Mask & st.Free(sl.Node); m != 0 {
				st.Take(placement.Slot{Node: sl.Node, Mask: m})
			}
		}
	}
	for _, h := range hs {
		to, fit := st.Place(requestOf(h), nil)
		if !fit {
			return nil, placement.Result{}, nil, false
		}
		var slots []placement.Slot
		for _, g := range to.Groups {
			slots = append(slots, g...)
		}
		dests = append(dests, slots)
	}
	return hs, res, dests, true
}

// PlacesOnReleased: does the whole request place, as an admission would
// place it, once holders hs are released? The state is left as it was.
func PlacesOnReleased(st *placement.State, req placement.Request, hs []int) bool {
	cp := st.Checkpoint()
	defer st.Rollback(cp)
	for _, h := range hs {
		st.ReleaseHolder(h)
	}
	_, ok := st.Place(req, nil)
	return ok
}

// Minimal drops the victims hs that later choices of the search made
// unnecessary: the search frees room one allocation at a time, cheapest
// first, so a cheap gang taken for the first allocation may be useless
// once a bigger one is released for the next (a 2x8 preemptor taking a
// 3x8 and a 2x4 gang where the 3x8 alone frees enough). Each victim,
// costliest first (victims[h].Cost, then GPUs, then job ID), is given
// back its GPUs; if the whole request still places on what the others
// free, it stays running. The result is minimal: no victim left could be
// spared. The preemptor is then placed as an admission would place it on
// what the remaining victims free. The state is left as it was.
func Minimal(st *placement.State, req placement.Request, hs []int, res placement.Result, victims []Victim) ([]int, placement.Result) {
	if len(hs) < 2 {
		return hs, res
	}
	holders := st.Holders()
	cp := st.Checkpoint()
	defer st.Rollback(cp)
	for _, h := range hs {
		st.ReleaseHolder(h)
	}
	order := slices.Clone(hs)
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(victims[b].Cost, victims[a].Cost), cmp.Compare(holders[b].GPUs, holders[a].GPUs),
			strings.Compare(holders[a].JobID, holders[b].JobID))
	})
	spared := map[int]bool{}
	for _, h := range order {
		if len(spared) == len(hs)-1 {
			break
		}
		back := st.Checkpoint()
		for _, sl := range holders[h].Slots {
			st.Take(sl)
		}
		fit := st.Checkpoint()
		if _, ok := st.Place(req, nil); ok {
			st.Rollback(fit)
			spared[h] = true
			continue
		}
		st.Rollback(back)
	}
	if len(spared) == 0 {
		return hs, res
	}
	whole, ok := st.Place(req, nil)
	if !ok {
		return hs, res // cannot happen: the last check placed it
	}
	var kept []int
	for _, h := range hs {
		if !spared[h] {
			kept = append(kept, h)
		}
	}
	// The placement may not touch every remaining victim (it could sit on
	// GPUs that were free anyway): those are spared too.
	if used := Uses(st, whole, kept); len(used) > 0 {
		kept = used
	}
	return kept, whole
}

// IsGang: does the request place some group as more than one allocation?
func IsGang(req placement.Request) bool {
	for _, g := range req.Groups {
		if g.Count > 1 && g.GPUs > 0 {
			return true
		}
	}
	return false
}

// ReplaceGang re-places a gang on the GPUs the chosen victims free (and
// those already free) as a whole, the way an admission is placed: fewest
// nodes, then a shared switch or rack, best fit. The victim search places
// one allocation at a time, cheapest node first, which scatters a
// multi-node gang. Victims the new placement does not touch are spared.
// When the whole-gang placement fails or is no better (fewer victims or
// fewer nodes), the search's own stands. The state is left as it was.
func ReplaceGang(st *placement.State, req placement.Request, hs []int, res placement.Result) ([]int, placement.Result) {
	cp := st.Checkpoint()
	defer st.Rollback(cp)
	for _, h := range hs {
		st.ReleaseHolder(h)
	}
	whole, ok := st.Place(req, nil)
	if !ok {
		return hs, res
	}
	// Only an improvement is taken: fewer victims, or fewer nodes. An
	// equal one would just move the preemptor's reservation around.
	spared := Uses(st, whole, hs)
	if len(spared) < len(hs) || resultNodes(whole) < resultNodes(res) {
		return spared, whole
	}
	return hs, res
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

// Uses returns the holders among hs whose GPUs the result uses.
func Uses(st *placement.State, res placement.Result, hs []int) []int {
	var out []int
	holders := st.Holders()
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
