package placement

import (
	"fmt"
	"math/bits"
	"slices"
	"sort"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// Group asks for Count allocations of GPUs GPUs each.
type Group struct {
	Name     string
	Count    int
	GPUs     int
	Topology jobspec.Topology
	// DistinctHosts puts each allocation of the group on a node of its
	// own (Nomad's distinct_hosts).
	DistinctHosts bool
	// Constraints every node of the group must satisfy.
	Constraints []cluster.Constraint
	// Avoid lists node ordinals the group may not use: a caller placing a
	// distinct-hosts group one allocation at a time (preemption) names the
	// nodes taken so far.
	Avoid []int
	// Blocks are the device blocks of one allocation (their counts add up
	// to GPUs): each gets its GPUs from one device group of the node that
	// it may use. Empty: one block of GPUs, any group.
	Blocks []Block
}

// Request is an all-or-nothing placement of every group of one job.
type Request struct {
	// Pool restricts the nodes ("" = any pool).
	Pool   string
	Groups []Group
	// AllowReserved lets the placement use reserved GPUs (a backfill job
	// that cannot delay the reservation).
	AllowReserved bool
	// LocalityLabels are the node labels a multi-node gang tries to share,
	// tightest first.
	LocalityLabels []string
	// DistinctHosts puts every allocation of the job, whatever its group,
	// on a node of its own (a job-level distinct_hosts).
	DistinctHosts bool
}

// GPUs is the total GPUs asked.
func (r Request) GPUs() int {
	n := 0
	for _, g := range r.Groups {
		n += g.Count * g.GPUs
	}
	return n
}

// Result holds the slots of each group, in request order.
type Result struct {
	Groups [][]Slot
}

// Rejections counts nodes by the reason they could not take a job (for
// explain). Keys are short sentences.
type Rejections map[string]int

func (r Rejections) add(reason string, n int) {
	if r != nil && n > 0 {
		r[reason] += n
	}
}

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

type cand struct {
	ord, cap, free int
	// scope is the mask the node's allocations go in (scopeFor).
	scope uint64
}

// placeGang places a multi-allocation group on the fewest nodes, preferring
// nodes that share a locality label, best fit on the last node.
func (s *State) placeGang(ix *index, g Group, labels []string) ([]Slot, bool) {
	var cands []cand
	total := 0
	for k := g.GPUs; k <= cluster.MaxGPUsPerNode; k++ {
		for _, o := range ix.buckets[k] {
			ord := int(o)
			if !s.Allowed(ord, g) {
				continue
			}
			scope, c := s.scopeFor(ord, &g)
			if g.DistinctHosts {
				c = min(c, 1)
			}
			if c > 0 {
				cands = append(cands, cand{ord: ord, cap: min(c, g.Count), free: k, scope: scope})
				total += min(c, g.Count)
			}
		}
	}
	if total < g.Count {
		return nil, false
	}
	sort.Slice(cands, func(a, b int) bool {
		if cands[a].cap != cands[b].cap {
			return cands[a].cap > cands[b].cap
		}
		if cands[a].free != cands[b].free {
			return cands[a].free < cands[b].free
		}
		return cands[a].ord < cands[b].ord
	})
	minNodes := nodesNeeded(cands, g.Count)
	chosen := cands
	for _, label := range labels {
		if sub, ok := s.bestDomain(cands, label, g.Count, minNodes); ok {
			chosen = sub
			break
		}
	}
	picked := selectNodes(chosen, g.Count)
	var slots []Slot
	for _, c := range picked {
		for range c.cap {
			sl, _, ok := s.pickSlot(c.ord, s.nodes[c.ord].free()&c.scope, &g)
			if !ok {
				return nil, false // cannot happen: capacity said it fits
			}
			s.Take(sl)
			slots = append(slots, sl)
		}
	}
	return slots, len(slots) == g.Count
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

// nodesNeeded: how many of the (capacity-sorted) candidates cover count.
func nodesNeeded(cands []cand, count int) int {
	sum := 0
	for i, c := range cands {
		sum += c.cap
		if sum >= count {
			return i + 1
		}
	}
	return len(cands) + 1
}

// bestDomain returns the candidates of the label value (rack, switch) that
// covers the gang with the fewest nodes, if that is the global minimum.
func (s *State) bestDomain(cands []cand, label string, count, minNodes int) ([]cand, bool) {
	domains := map[string][]cand{}
	var names []string
	for _, c := range cands {
		v, ok := s.nodes[c.ord].node.Labels[label]
		if !ok || v == "" {
			continue
		}
		if _, seen := domains[v]; !seen {
			names = append(names, v)
		}
		domains[v] = append(domains[v], c)
	}
	sort.Strings(names)
	bestName, bestN, bestLeft := "", 1<<30, 1<<30
	for _, name := range names {
		d := domains[name]
		n := nodesNeeded(d, count)
		if n > len(d) || n > minNodes {
			continue
		}
		left := 0
		for _, c := range d[:n] {
			left += c.free
		}
		if n < bestN || (n == bestN && left < bestLeft) {
			bestName, bestN, bestLeft = name, n, left
		}
	}
	if bestName == "" {
		return nil, false
	}
	return domains[bestName], true
}

// selectNodes picks nodes from capacity-sorted candidates: while the rest
// does not fit one node, take the largest; then the smallest node that
// holds the rest (best fit).
func selectNodes(cands []cand, count int) []cand {
	var out []cand
	used := make([]bool, len(cands))
	left := count
	for left > 0 {
		best := -1
		for i, c := range cands {
			if used[i] || c.cap < left {
				continue
			}
			if best < 0 || c.cap < cands[best].cap || (c.cap == cands[best].cap && c.free < cands[best].free) {
				best = i
			}
		}
		if best < 0 {
			for i := range cands {
				if !used[i] {
					best = i
					break
				}
			}
			if best < 0 {
				return out
			}
		}
		used[best] = true
		c := cands[best]
		c.cap = min(c.cap, left)
		left -= c.cap
		out = append(out, c)
	}
	return out
}

// reject summarises, cheaply (from the index, not per node), why the pool
// cannot take the whole request.
func (s *State) reject(req Request, ix *index, rej Rejections) {
	if rej == nil {
		return
	}
	s.rejectPool(req.Pool, ix, rej)
	for _, g := range req.Groups {
		if g.Count > 0 && g.GPUs > 0 {
			s.rejectNodes(g, ix, rej)
		}
	}
	rej.add(fmt.Sprintf("pool has %d free GPUs in all, job needs %d", ix.free, req.GPUs()), ix.nodes)
}

// Explain fills rej with why the nodes cannot take req now, without
// placing anything; it costs O(GPUs per node), not O(nodes).
func (s *State) Explain(req Request, rej Rejections) {
	ix := s.indexFor(req.Pool)
	if ix == nil {
		rej.add(fmt.Sprintf("no node in pool %q", req.Pool), s.all.total)
		return
	}
	s.reject(req, ix, rej)
}

func (s *State) rejectPool(pool string, ix *index, rej Rejections) {
	if pool != "" {
		rej.add(fmt.Sprintf("not in node pool %q", pool), s.all.total-ix.total)
	}
	rej.add("node ineligible, down or draining", ix.total-ix.nodes)
}

func (s *State) rejectGroup(g Group, ix *index, pool string, rej Rejections) {
	if rej == nil {
		return
	}
	s.rejectPool(pool, ix, rej)
	s.rejectNodes(g, ix, rej)
}

func (s *State) rejectNodes(g Group, ix *index, rej Rejections) {
	if len(g.Constraints) > 0 {
		bad := 0
		for k := range ix.buckets {
			for _, o := range ix.buckets[k] {
				if !s.Allowed(int(o), Group{Constraints: g.Constraints}) {
					bad++
				}
			}
		}
		rej.add(fmt.Sprintf("does not meet the constraints of group %q", g.Name), bad)
	}
	small := 0
	for k := 0; k < g.GPUs && k <= cluster.MaxGPUsPerNode; k++ {
		small += len(ix.buckets[k])
	}
	rej.add(fmt.Sprintf("fewer than %d free GPUs", g.GPUs), small)
	big := ix.nodes - small
	if big == 0 {
		return
	}
	if dev := s.rejectDeviceGroups(g, ix, rej); dev > 0 {
		big -= dev
		if big == 0 {
			return
		}
	}
	if g.Topology == jobspec.TopologyNVLink {
		noIsland := 0
		for k := g.GPUs; k <= cluster.MaxGPUsPerNode; k++ {
			for _, o := range ix.buckets[k] {
				if _, c := s.scopeFor(int(o), &g); c == 0 {
					noIsland++
				}
			}
		}
		rej.add(fmt.Sprintf("no %d free GPUs in one NVLink island", g.GPUs), noIsland)
		big -= noIsland
		if g.Count > 1 && !g.DistinctHosts {
			// The union rule (scopeFor): where the node's device group spans
			// islands, the group's allocations there must share one island.
			shared := 0
			for k := g.GPUs; k <= cluster.MaxGPUsPerNode; k++ {
				for _, o := range ix.buckets[k] {
					ns := &s.nodes[o]
					if !ns.unionScoped(&g) {
						continue
					}
					if _, c := s.scopeFor(int(o), &g); c < g.Count && s.capacityIn(int(o), ns.free(), &g) > c {
						shared++
					}
				}
			}
			rej.add("its NVLink allocations may share this node only inside one island, since the node's device group spans islands (impact-gpu's group_by) and Nomad splits a group's pinned GPUs among its allocations as it likes; one allocation per node (distinct_hosts), impact_topology = \"node\" or group_by = \"island\" lift this", shared)
			big -= shared
		}
	}
	if g.Count > 1 {
		rej.add(fmt.Sprintf("gang of %d x %d GPUs does not fit on the nodes with room", g.Count, g.GPUs), big)
	}
}

// PoolOf returns a node's pool.
func (s *State) PoolOf(ord int) string { return s.nodes[ord].node.Pool }

// consString writes a block's constraints for explanations.
func consString(cs cluster.DeviceConstraints) string {
	out := ""
	for i, c := range cs {
		if i > 0 {
			out += ", "
		}
		out += c.String()
	}
	return out
}

// rejectDeviceGroups counts the nodes with enough free GPUs where a device
// block of the group finds no device group with enough of them free
// (cluster.DeviceGroupRule), naming the nodes' group_by.
func (s *State) rejectDeviceGroups(g Group, ix *index, rej Rejections) int {
	bad := 0
	for k := g.GPUs; k <= cluster.MaxGPUsPerNode; k++ {
		for _, o := range ix.buckets[k] {
			ns := &s.nodes[o]
			if ns.trivial(&g) {
				continue
			}
			for _, b := range g.blocks() {
				if len(b.Cons) > 0 && len(ns.allowed(b)) == 0 {
					unc := b
					unc.Cons = nil
					if len(ns.allowed(unc)) > 0 {
						rej.add(fmt.Sprintf("device block of %d GPUs: no device group of the node meets its constraints (%s)", b.Count, consString(b.Cons)), 1)
						bad++
						break
					}
				}
				most := 0
				for _, m := range ns.allowed(b) {
					most = max(most, bits.OnesCount64(m&ns.free()))
				}
				if most < b.Count {
					rej.add(fmt.Sprintf("device block of %d GPUs: at most %d free in one matching device group (%s%s)",
						b.Count, most, cluster.DeviceGroupRule, GroupByHint(ns.node.GroupBy)), 1)
					bad++
					break
				}
			}
		}
	}
	return bad
}
