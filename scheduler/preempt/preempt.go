package preempt

import (
	"cmp"
	"math/bits"
	"slices"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/internal/buffer"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
)

// Candidate is a gang that may be preempted, with what preempting it costs.
type Candidate struct {
	// Holder indexes placement.State.Holders().
	Holder int
	// Cost of preempting the whole gang.
	Cost float64
}

// WorkLost is the GPU-hours of work a gang loses if stopped at now: per
// allocation, its GPUs x the time since its last checkpoint (see
// LastCheckpoint).
func WorkLost(allocs []*cluster.Alloc, interval time.Duration, now time.Time) float64 {
	sum := 0.0
	for _, a := range allocs {
		if d := now.Sub(LastCheckpoint(a, interval, now)); d > 0 {
			sum += float64(len(a.GPUs)) * d.Hours()
		}
	}
	return sum
}

// LastCheckpoint is the latest instant before now from which an
// allocation could resume: the checkpoint the model knows of
// (Alloc.LastCheckpoint), or the last one a job that saves its work every
// interval (impact_checkpoint_interval; 0 = unknown) has made since it
// started, or else its start. Nomad reports no checkpoints, so without an
// interval the work lost counts from the start: the most a preemption can
// cost, never an underestimate.
func LastCheckpoint(a *cluster.Alloc, interval time.Duration, now time.Time) time.Time {
	since := a.Start
	if interval > 0 && now.After(a.Start) {
		since = a.Start.Add(now.Sub(a.Start) / interval * interval)
	}
	if a.LastCheckpoint.After(since) {
		since = a.LastCheckpoint
	}
	return since
}

// Index organises candidates by node so that repeated victim searches in
// one cycle (one per waiting job that may preempt) do not rebuild it.
// Build it once per candidate set with NewIndex.
type Index struct {
	cost     []float64
	excluded []bool
	// byNode[ord] lists the candidates holding GPUs on node ord with the
	// GPUs each holds there (a slice by ordinal, not a map: a search
	// visits every node).
	byNode [][]onNode
	nodes  []int
	// minCost[ord] and union[ord] are the cheapest candidate on node ord
	// and all the GPUs candidates hold there: bounds that stay valid as
	// candidates are excluded or released (the cheapest can only get
	// dearer, the union only smaller), so a search skips most nodes in
	// O(1).
	minCost []float64
	union   []uint64
	// byCost is nodes by minCost (then ordinal): a search visits the
	// cheapest bounds first and stops at the first node whose bound
	// exceeds the best set found.
	byCost []int
}

// onNode is a candidate's GPUs on one node.
type onNode struct {
	h    int
	mask uint64
}

// Exclude removes a holder from the candidates (it was chosen as a victim
// for another job).
func (ix *Index) Exclude(h int) {
	if h >= 0 && h < len(ix.excluded) {
		ix.excluded[h] = true
	}
}

// NewIndex indexes candidates by the schedulable nodes of pool ("" = any)
// where they hold GPUs. The per-node lists are windows of one array: a
// first pass counts each node's entries, a second fills them, so an
// index costs a few allocations, not one per node.
func NewIndex(st *placement.State, pool string, cands []Candidate) *Index {
	holders := st.Holders()
	ix := &Index{cost: make([]float64, len(holders)), excluded: make([]bool, len(holders)), byNode: make([][]onNode, st.NumNodes())}
	isCand := make([]bool, len(holders))
	// Each pass visits the candidates' GPUs node by node; a holder's
	// slots on one node make one entry (last[ord] is the holder of the
	// node's latest entry).
	last := make([]int32, st.NumNodes())
	visit := func(add func(ord, h int, mask uint64, merge bool)) {
		clear(isCand)
		for i := range last {
			last[i] = -1
		}
		for _, c := range cands {
			if isCand[c.Holder] {
				continue
			}
			isCand[c.Holder] = true
			for _, sl := range holders[c.Holder].Slots {
				if !st.Schedulable(sl.Node) || (pool != "" && st.PoolOf(sl.Node) != pool) {
					continue
				}
				add(sl.Node, c.Holder, sl.Mask, last[sl.Node] == int32(c.Holder))
				last[sl.Node] = int32(c.Holder)
			}
		}
	}
	count := make([]int32, st.NumNodes())
	n, nodes := 0, 0
	visit(func(ord, _ int, _ uint64, merge bool) {
		if !merge {
			if count[ord] == 0 {
				nodes++
			}
			count[ord]++
			n++
		}
	})
	all := make([]onNode, n)
	ix.nodes = make([]int, 0, nodes) // in ordinal order
	for ord, k := range count {
		if k > 0 {
			ix.byNode[ord] = buffer.Window(&all, int(k), 0)
			ix.nodes = append(ix.nodes, ord)
		}
	}
	visit(func(ord, h int, mask uint64, merge bool) {
		list := ix.byNode[ord]
		if merge {
			list[len(list)-1].mask |= mask
			return
		}
		ix.byNode[ord] = append(list, onNode{h: h, mask: mask})
	})
	for i := len(cands) - 1; i >= 0; i-- { // the first of a holder's duplicates counts
		ix.cost[cands[i].Holder] = cands[i].Cost
	}
	ix.minCost = make([]float64, len(ix.byNode))
	ix.union = make([]uint64, len(ix.byNode))
	for _, ord := range ix.nodes {
		for k, c := range ix.byNode[ord] {
			if k == 0 || ix.cost[c.h] < ix.minCost[ord] {
				ix.minCost[ord] = ix.cost[c.h]
			}
			ix.union[ord] |= c.mask
		}
	}
	// By bound, then ordinal: a total order, so no stable sort is needed.
	ix.byCost = slices.Clone(ix.nodes)
	slices.SortFunc(ix.byCost, func(a, b int) int {
		if c := cmp.Compare(ix.minCost[a], ix.minCost[b]); c != 0 {
			return c
		}
		return a - b
	})
	return ix
}

// Select is NewIndex followed by Index.Select.
func Select(st *placement.State, req placement.Request, cands []Candidate) ([]int, placement.Result, bool) {
	return NewIndex(st, req.Pool, cands).Select(st, req)
}

// Select frees the cheapest whole gangs among the indexed candidates so
// that req fits, and places req. It works allocation by allocation: an
// allocation that fits in what is free (or was freed for an earlier one)
// takes it; otherwise the node where the cheapest set of candidate gangs
// makes room is chosen, those gangs are released (all their allocations,
// everywhere) and the allocation is placed there. On failure the state is
// as it was.
//
// It returns the chosen holders (in the order chosen) and the placement.
// The state must be the one the index was built on (holders released since
// are skipped only if released through this call).
func (ix *Index) Select(st *placement.State, req placement.Request) ([]int, placement.Result, bool) {
	cp := st.Checkpoint()
	sr := &search{ix: ix, st: st}
	res := placement.Result{Groups: make([][]placement.Slot, len(req.Groups))}
	order := make([]int, len(req.Groups))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return req.Groups[b].GPUs - req.Groups[a].GPUs })
	var jobNodes []int // nodes taken so far, for a job-level distinct_hosts
	for _, gi := range order {
		g := req.Groups[gi]
		if g.Count == 0 || g.GPUs == 0 {
			continue
		}
		var groupNodes []int
		for range g.Count {
			// One allocation at a time: a distinct-hosts group (or job)
			// avoids the nodes its earlier allocations took.
			one := placement.Group{Name: g.Name, Count: 1, GPUs: g.GPUs, Topology: g.Topology, Constraints: g.Constraints,
				Avoid: slices.Clip(g.Avoid), Blocks: g.Blocks}
			if g.DistinctHosts || req.DistinctHosts {
				one.Avoid = append(one.Avoid, groupNodes...)
			}
			if req.DistinctHosts {
				one.Avoid = append(one.Avoid, jobNodes...)
			}
			sl, ok := sr.placeOne(req.Pool, one)
			if !ok {
				st.Rollback(cp)
				return nil, placement.Result{}, false
			}
			res.Groups[gi] = append(res.Groups[gi], sl)
			groupNodes = append(groupNodes, sl.Node)
			jobNodes = append(jobNodes, sl.Node)
		}
	}
	return sr.victims, res, true
}

// search is one Select: the index, the state it releases victims in and
// the victims chosen so far.
type search struct {
	ix      *Index
	st      *placement.State
	victims []int
	vs      []vic // scratch: one node's candidates
}

// best is the cheapest way found so far to make room for an allocation.
type best struct {
	ord  int // -1: none yet
	cost float64
	set  []int
	mask uint64
}

// cannotWin: a node whose victims would cost cost in n gangs cannot beat
// the best found. The best node is the one whose victims cost least, then
// are fewest, then the lowest ordinal.
func (b *best) cannotWin(ord int, cost float64, n int) bool {
	return b.ord >= 0 && (cost > b.cost || (cost == b.cost && (n > len(b.set) || (n == len(b.set) && ord > b.ord))))
}

// placeOne places one allocation: on free GPUs when it fits, else on the
// node where the cheapest set of candidates makes room, releasing them.
func (sr *search) placeOne(pool string, one placement.Group) (placement.Slot, bool) {
	st := sr.st
	if r, ok := st.Place(placement.Request{Pool: pool, Groups: []placement.Group{one}}, nil); ok {
		return r.Groups[0][0], true
	}
	b := best{ord: -1}
	// Nodes are visited by their cost bound, so the first bound above the
	// best cost ends the search; every other check skips only nodes that
	// cannot win.
	for _, ord := range sr.ix.byCost {
		if b.ord >= 0 && sr.ix.minCost[ord] > b.cost {
			break
		}
		if bits.OnesCount64(st.Free(ord)|sr.ix.union[ord]) < one.GPUs || b.cannotWin(ord, sr.ix.minCost[ord], 1) {
			continue // the checks below, from bounds (see minCost)
		}
		if st.Allowed(ord, one) {
			sr.tryNode(ord, one, &b)
		}
	}
	if b.ord < 0 {
		return placement.Slot{}, false
	}
	for _, h := range b.set {
		sr.victims = append(sr.victims, h)
		st.ReleaseHolder(h)
	}
	if b.mask&^st.Free(b.ord) != 0 {
		return placement.Slot{}, false
	}
	sl := placement.Slot{Node: b.ord, Mask: b.mask} // blocks: placement.SplitBlocks
	st.Take(sl)
	return sl, true
}

// tryNode finds the cheapest candidates on one node that make room for
// the allocation, releasing them cheapest per GPU first, and records them
// in b when they beat it.
func (sr *search) tryNode(ord int, one placement.Group, b *best) {
	st, ix := sr.st, sr.ix
	vs := sr.vs[:0]
	inUse := st.Used(ord) &^ st.Reserved(ord)
	free := st.Free(ord)
	room := free
	minCost := 0.0
	for _, c := range ix.byNode[ord] {
		h := c.h
		if ix.excluded[h] || slices.Contains(sr.victims, h) {
			continue
		}
		// Only GPUs the gang still holds and nobody reserved count.
		m := c.mask & inUse
		if m == 0 {
			continue
		}
		if len(vs) == 0 || ix.cost[h] < minCost {
			minCost = ix.cost[h]
		}
		room |= m
		vs = append(vs, vic{h: h, perGPU: ix.cost[h] / float64(bits.OnesCount64(m)), onNode: m, fullCost: ix.cost[h]})
	}
	sr.vs = vs
	// Skip, without sorting, nodes that cannot take the allocation even
	// with every candidate gone, and nodes where the cheapest single
	// victim already cannot win: the scan below would stop at its first
	// step on them.
	if len(vs) == 0 || bits.OnesCount64(room) < one.GPUs || b.cannotWin(ord, minCost, 1) {
		return
	}
	sortVics(vs, st.Holders())
	sum := 0.0
	for k, v := range vs {
		free |= v.onNode
		sum += v.fullCost
		if b.cannotWin(ord, sum, k+1) {
			return
		}
		if sl, ok := st.PickGroup(ord, free, one); ok {
			// Drop victims the pick did not need.
			set, total := trim(vs[:k+1], sl.Mask)
			if !b.cannotWin(ord, total, len(set)) {
				*b = best{ord: ord, cost: total, set: set, mask: sl.Mask}
			}
			return
		}
	}
}

// sortVics orders a node's candidates cheapest per GPU first, then by job
// ID (a total order: one holder per job). Lists are a handful long, so an
// insertion sort without a comparison closure is the cheapest.
func sortVics(vs []vic, holders []placement.Holder) {
	for i := 1; i < len(vs); i++ {
		v := vs[i]
		k := i
		for k > 0 && vicLess(v, vs[k-1], holders) {
			vs[k] = vs[k-1]
			k--
		}
		vs[k] = v
	}
}

func vicLess(a, b vic, holders []placement.Holder) bool {
	if a.perGPU != b.perGPU {
		return a.perGPU < b.perGPU
	}
	return holders[a.h].JobID < holders[b.h].JobID
}

// vic is a candidate gang as seen from one node.
type vic struct {
	h        int
	perGPU   float64
	onNode   uint64
	fullCost float64
}

// trim keeps only the victims whose GPUs the chosen mask uses.
func trim(vs []vic, mask uint64) ([]int, float64) {
	var out []int
	sum := 0.0
	for _, v := range vs {
		if v.onNode&mask != 0 {
			out = append(out, v.h)
			sum += v.fullCost
		}
	}
	return out, sum
}
