package placement

import (
	"fmt"
	"math/bits"
	"slices"
	"sort"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// Place finds an all-or-nothing placement for every group and takes the
// GPUs. On failure the state is unchanged and rej (if not nil) says why
// nodes were rejected.
func (s *State) Place(req Request, rej Rejections) (Result, bool) {
	ix := s.indexFor(req.Pool)
	if ix == nil {
		rej.add(fmt.Sprintf("no node in pool %q", req.Pool), s.all.total)
		return Result{}, false
	}
	cp := s.Checkpoint()
	var restore []Slot
	if req.AllowReserved {
		restore = s.unreserveAll(req.Pool)
	}
	need := req.GPUs()
	if need > ix.free {
		s.reject(req, ix, rej)
		s.Rollback(cp)
		return Result{}, false
	}
	// Largest groups first: they are the hardest to fit.
	order := make([]int, len(req.Groups))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		ga, gb := req.Groups[order[a]], req.Groups[order[b]]
		if ga.GPUs != gb.GPUs {
			return ga.GPUs > gb.GPUs
		}
		return ga.Count*ga.GPUs > gb.Count*gb.GPUs
	})
	res, failed, ok := s.placeGroups(ix, req, order)
	for _, other := range otherOrders(req, order, ok) {
		// Each group is placed best fit, so one group may take the
		// tightest node that another, spread over several nodes, needed
		// (a 1 x 4 group filling the 4-GPU node that a 2 x 1
		// distinct-hosts group had to use beside an 8-GPU one): the
		// other orders are tried before the job is refused.
		s.Rollback(cp)
		if req.AllowReserved {
			s.unreserveAll(req.Pool)
		}
		if res, _, ok = s.placeGroups(ix, req, other); ok {
			break
		}
	}
	if !ok {
		s.rejectGroup(failed, ix, req.Pool, rej)
		s.Rollback(cp)
		return Result{}, false
	}
	if req.AllowReserved {
		// Give back to the reservation what this job did not take.
		for _, sl := range restore {
			if m := sl.Mask &^ s.nodes[sl.Node].used; m != 0 {
				s.Reserve(Slot{Node: sl.Node, Mask: m})
			}
		}
	}
	return res, true
}

// otherOrders lists the group orders to try after order failed (none when
// it placed, or with one group): every other permutation for up to
// maxPermutedGroups groups with GPUs, else the groups of most allocations
// first, then the distinct-hosts groups first.
func otherOrders(req Request, order []int, placed bool) [][]int {
	var gpuGroups []int
	for _, gi := range order {
		if g := req.Groups[gi]; g.Count > 0 && g.GPUs > 0 {
			gpuGroups = append(gpuGroups, gi)
		}
	}
	if placed || len(gpuGroups) < 2 {
		return nil
	}
	var out [][]int
	add := func(o []int) {
		for _, seen := range append(out, gpuGroups) {
			if slices.Equal(seen, o) {
				return
			}
		}
		out = append(out, o)
	}
	if len(gpuGroups) <= maxPermutedGroups {
		permute(slices.Clone(gpuGroups), 0, func(o []int) { add(slices.Clone(o)) })
		return out
	}
	spread := slices.Clone(gpuGroups)
	sort.SliceStable(spread, func(a, b int) bool { return req.Groups[spread[a]].Count > req.Groups[spread[b]].Count })
	add(spread)
	distinct := slices.Clone(gpuGroups)
	sort.SliceStable(distinct, func(a, b int) bool {
		return req.Groups[distinct[a]].DistinctHosts && !req.Groups[distinct[b]].DistinctHosts
	})
	add(distinct)
	return out
}

// maxPermutedGroups: up to this many GPU groups, a job that does not place
// in the usual order is tried in every order (6 at most).
const maxPermutedGroups = 3

// permute calls fn with every ordering of o[k:] after o[:k].
func permute(o []int, k int, fn func([]int)) {
	if k == len(o) {
		fn(o)
		return
	}
	for i := k; i < len(o); i++ {
		o[k], o[i] = o[i], o[k]
		permute(o, k+1, fn)
		o[k], o[i] = o[i], o[k]
	}
}

// placeGroups places the request's groups in the given order, taking
// their GPUs; on failure it returns the group that did not place, and the
// caller rolls back what the others took.
func (s *State) placeGroups(ix *index, req Request, order []int) (Result, Group, bool) {
	res := Result{Groups: make([][]Slot, len(req.Groups))}
	var taken []int // nodes used so far, for a job-level distinct_hosts
	for _, gi := range order {
		g := req.Groups[gi]
		if g.Count == 0 || g.GPUs == 0 {
			continue
		}
		if req.DistinctHosts {
			g.DistinctHosts = true
			g.Avoid = append(g.Avoid[:len(g.Avoid):len(g.Avoid)], taken...)
		}
		slots, ok := s.placeGroup(ix, g, req.LocalityLabels)
		if !ok {
			return Result{}, g, false
		}
		res.Groups[gi] = slots
		if req.DistinctHosts {
			for _, sl := range slots {
				taken = append(taken, sl.Node)
			}
		}
	}
	return res, Group{}, true
}

func (s *State) unreserveAll(pool string) []Slot {
	var out []Slot
	for _, ord := range s.reservedNodes {
		ns := &s.nodes[ord]
		if ns.reserved == 0 || (pool != "" && ns.node.Pool != pool) {
			continue
		}
		sl := Slot{Node: ord, Mask: ns.reserved}
		out = append(out, sl)
		s.Unreserve(sl)
	}
	return out
}

// placeGroup places Count allocations of one group and takes their GPUs.
func (s *State) placeGroup(ix *index, g Group, labels []string) ([]Slot, bool) {
	if g.GPUs > cluster.MaxGPUsPerNode {
		return nil, false
	}
	if g.Count == 1 {
		sl, ok := s.bestFitOne(ix, g)
		if !ok {
			return nil, false
		}
		s.Take(sl)
		return []Slot{sl}, true
	}
	return s.placeGang(ix, g, labels)
}

// bestFitOne finds the node whose free GPU count is the smallest that
// fits (so fragments stay small) and picks GPUs there.
func (s *State) bestFitOne(ix *index, g Group) (Slot, bool) {
	for k := g.GPUs; k <= cluster.MaxGPUsPerNode; k++ {
		best, bestLeft := Slot{Node: -1}, 1<<30
		for _, o := range ix.buckets[k] {
			ord := int(o)
			if !s.Allowed(ord, g) {
				continue
			}
			sl, left, ok := s.pickSlot(ord, s.nodes[ord].free(), &g)
			if !ok {
				continue
			}
			// Prefer the island left with the fewest free GPUs, then the
			// lowest node ordinal (deterministic).
			if left < bestLeft || (left == bestLeft && ord < best.Node) {
				best, bestLeft = sl, left
			}
			if left == 0 && best.Node == ord {
				break
			}
		}
		if best.Node >= 0 {
			return best, true
		}
	}
	return Slot{}, false
}

// pickSlot picks one allocation of the group on a node: the fast path
// where device groups cannot matter, pickBlocks otherwise.
func (s *State) pickSlot(ord int, free uint64, g *Group) (Slot, int, bool) {
	ns := &s.nodes[ord]
	if ns.trivial(g) {
		m, left, ok := s.pick(ord, free, g.GPUs, g.Topology)
		return Slot{Node: ord, Mask: m}, left, ok
	}
	m, bl, left, ok := s.pickBlocks(ns, free, g)
	if !ok {
		return Slot{}, 0, false
	}
	sl := Slot{Node: ord, Mask: m}
	if len(g.Blocks) > 1 {
		sl.Blocks = bl
	}
	return sl, left, true
}

// pick chooses n GPUs from a node's free mask honouring topology. It returns
// the mask and the free GPUs left in the island used (the fragment size, the
// smaller the better) when the set lies in one island.
func (s *State) pick(ord int, free uint64, n int, topo jobspec.Topology) (uint64, int, bool) {
	ns := &s.nodes[ord]
	if bits.OnesCount64(free) < n {
		return 0, 0, false
	}
	// Best-fit island: the one with the fewest free GPUs that still fits.
	bestIsl, bestFree := -1, 1<<30
	for i, m := range ns.islands {
		f := bits.OnesCount64(m & free)
		if f >= n && f < bestFree {
			bestIsl, bestFree = i, f
		}
	}
	if bestIsl >= 0 && topo != jobspec.TopologyAny {
		return lowest(ns.islands[bestIsl]&free, n), bestFree - n, true
	}
	if topo == jobspec.TopologyNVLink {
		return 0, 0, false
	}
	// Spread: for "any", fill the most fragmented islands first (keeping
	// whole islands whole); otherwise span as few islands as possible.
	type isl struct{ i, f int }
	list := make([]isl, 0, len(ns.islands))
	for i, m := range ns.islands {
		if f := bits.OnesCount64(m & free); f > 0 {
			list = append(list, isl{i, f})
		}
	}
	sort.SliceStable(list, func(a, b int) bool {
		if topo == jobspec.TopologyAny {
			return list[a].f < list[b].f
		}
		return list[a].f > list[b].f
	})
	var mask uint64
	left := n
	for _, it := range list {
		take := min(left, it.f)
		mask |= lowest(ns.islands[it.i]&free, take)
		left -= take
		if left == 0 {
			break
		}
	}
	return mask, 1 << 20, true
}

// lowest returns the n lowest set bits of m.
func lowest(m uint64, n int) uint64 {
	var out uint64
	for ; n > 0 && m != 0; n-- {
		b := m & -m
		out |= b
		m &^= b
	}
	return out
}

// Allowed reports whether a group may use a node at all: the node meets
// the group's constraints and is not one it must avoid.
func (s *State) Allowed(ord int, g Group) bool {
	if len(g.Constraints) == 0 && len(g.Avoid) == 0 {
		return true
	}
	if slices.Contains(g.Avoid, ord) {
		return false
	}
	n := s.nodes[ord].node
	for _, c := range g.Constraints {
		if !n.Satisfies(c) {
			return false
		}
	}
	return true
}

// PoolOf returns a node's pool.
func (s *State) PoolOf(ord int) string { return s.nodes[ord].node.Pool }
