package placement

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// Block is one device block of an allocation: Count GPUs that Nomad gives
// from ONE device group of the node (cluster.DeviceGroupRule).
type Block struct {
	Count int
	// Group, when not "", is the only device group (by name) the block
	// may use: a request named "nvidia/gpu/<name>".
	Group string
	// None: the block asks a vendor the model has no GPUs of; it fits on
	// no node.
	None bool
	// IDs, when not nil, are the only instances the block may get (its
	// own ${device.ids} set_contains_any constraint).
	IDs []string
	// Cons are the block's own constraints on the device group: it may
	// use only groups they do not fail (cluster.DeviceConstraints.Eval;
	// a group the model cannot judge may be used).
	Cons cluster.DeviceConstraints
}

// BlockOf is the placement view of a task's device block.
func BlockOf(d cluster.DeviceAsk) Block {
	b := Block{Count: d.Count, IDs: d.IDs, Cons: d.Constraints, None: !d.MatchesGroup("")}
	if parts := strings.SplitN(d.Name, "/", 3); len(parts) == 3 {
		b.Group = parts[2]
	}
	return b
}

// blocks returns the group's device blocks: Blocks, or one block of GPUs
// matching any device group.
func (g *Group) blocks() []Block {
	if len(g.Blocks) > 0 {
		return g.Blocks
	}
	return []Block{{Count: g.GPUs}}
}

// trivial reports whether the node's device groups cannot restrict the
// group: one device group (or none) and one block that may use it. Such
// nodes take the fast path (one mask, no block assignment).
func (ns *nodeState) trivial(g *Group) bool {
	if len(ns.groups) > 1 {
		return false
	}
	if len(g.Blocks) == 0 {
		return true
	}
	if len(g.Blocks) > 1 {
		return false
	}
	b := g.Blocks[0]
	return !b.None && b.IDs == nil && (b.Group == "" || len(ns.groupNames) == 0 || ns.groupNames[0] == "" || ns.groupNames[0] == b.Group) &&
		(len(b.Cons) == 0 || len(ns.groupNames) == 0 || ns.groupMeets(0, b))
}

// groupMeets reports whether the node's device group i may serve the
// block as far as its constraints go: they do not fail on the group's
// attributes (a group the model has no facts of may).
func (ns *nodeState) groupMeets(i int, b Block) bool {
	return len(b.Cons) == 0 || b.Cons.Eval(ns.node.DeviceGroup(ns.groupNames[i])) != cluster.Fails
}

// allowed returns the masks of the node's device groups a block may draw
// from (restricted to the block's IDs), in group order.
func (ns *nodeState) allowed(b Block) []uint64 {
	if b.None {
		return nil
	}
	var idMask uint64
	if b.IDs != nil {
		for _, id := range b.IDs {
			idMask |= ns.ids.bit(id)
		}
	}
	out := make([]uint64, 0, len(ns.groups))
	for i, m := range ns.groups {
		if b.Group != "" && ns.groupNames[i] != "" && ns.groupNames[i] != b.Group {
			continue
		}
		if len(b.Cons) > 0 && !ns.groupMeets(i, b) {
			continue
		}
		if b.IDs != nil {
			m &= idMask
		}
		if m != 0 {
			out = append(out, m)
		}
	}
	return out
}

// pickBlocks chooses an allocation's GPUs on a node where device groups
// matter: every block's GPUs from one device group it may use, all of
// them in one NVLink island when the topology asks it (and, for other
// topologies but "any", one island when possible, best fit). It returns
// the allocation's mask, each block's mask (in g.Blocks order), and the
// free GPUs left in the island used (1<<20 when it spans islands).
func (s *State) pickBlocks(ns *nodeState, free uint64, g *Group) (uint64, []uint64, int, bool) {
	blocks := g.blocks()
	n := 0
	choices := make([][]uint64, len(blocks))
	for i, b := range blocks {
		n += b.Count
		if choices[i] = ns.allowed(b); len(choices[i]) == 0 {
			return 0, nil, 0, false
		}
	}
	if bits.OnesCount64(free) < n {
		return 0, nil, 0, false
	}
	// Largest blocks first: they are the hardest to fit.
	order := make([]int, len(blocks))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return blocks[b].Count - blocks[a].Count })
	out := make([]uint64, len(blocks))
	if g.Topology != jobspec.TopologyAny {
		// Islands in best-fit order: the fewest free GPUs that still fit.
		type isl struct {
			m uint64
			f int
		}
		var list []isl
		for _, m := range ns.islands {
			if f := bits.OnesCount64(m & free); f >= n {
				list = append(list, isl{m, f})
			}
		}
		slices.SortStableFunc(list, func(a, b isl) int { return a.f - b.f })
		for _, it := range list {
			if m, ok := s.assign(ns, free&it.m, blocks, choices, order, 0, 0, out, g.Topology); ok {
				return m, out, it.f - n, true
			}
		}
		if g.Topology == jobspec.TopologyNVLink {
			return 0, nil, 0, false
		}
	}
	if m, ok := s.assign(ns, free, blocks, choices, order, 0, 0, out, g.Topology); ok {
		return m, out, 1 << 20, true
	}
	return 0, nil, 0, false
}

// assign gives blocks order[k:] GPUs of free not in taken, each from one
// of its device groups (the fullest-fitting group first: best fit), by
// backtracking over the group choices (a node has few groups and a task
// few blocks). out receives each block's mask.
func (s *State) assign(ns *nodeState, free uint64, blocks []Block, choices [][]uint64, order []int, k int, taken uint64, out []uint64, topo jobspec.Topology) (uint64, bool) {
	if k == len(order) {
		return taken, true
	}
	bi := order[k]
	need := blocks[bi].Count
	type opt struct {
		avail uint64
		f     int
	}
	opts := make([]opt, 0, len(choices[bi]))
	for _, gm := range choices[bi] {
		avail := free & gm &^ taken
		if f := bits.OnesCount64(avail); f >= need {
			opts = append(opts, opt{avail, f})
		}
	}
	slices.SortStableFunc(opts, func(a, b opt) int { return a.f - b.f })
	for _, o := range opts {
		m := spread(ns, o.avail, need, topo)
		out[bi] = m
		if all, ok := s.assign(ns, free, blocks, choices, order, k+1, taken|m, out, topo); ok {
			return all, true
		}
	}
	return 0, false
}

// spread takes n GPUs of avail: for "any" from the most fragmented islands
// first (keeping whole islands whole), otherwise from as few islands as
// possible; inside an island, the lowest GPUs.
func spread(ns *nodeState, avail uint64, n int, topo jobspec.Topology) uint64 {
	type isl struct {
		m uint64
		f int
	}
	list := make([]isl, 0, len(ns.islands))
	for _, m := range ns.islands {
		if f := bits.OnesCount64(m & avail); f > 0 {
			list = append(list, isl{m & avail, f})
		}
	}
	if len(list) == 1 {
		return lowest(list[0].m, n)
	}
	slices.SortStableFunc(list, func(a, b isl) int {
		if topo == jobspec.TopologyAny {
			return a.f - b.f
		}
		return b.f - a.f
	})
	var mask uint64
	left := n
	for _, it := range list {
		take := min(left, it.f)
		mask |= lowest(it.m, take)
		left -= take
		if left == 0 {
			break
		}
	}
	return mask
}

// unionScoped reports whether a group's allocations sharing a node must
// share one NVLink island there. The admission pins each device block to
// the union of its GPUs over the group's allocations (Nomad applies a
// device constraint to every allocation of the group alike), and Nomad
// splits that union among the allocations as it likes within a device
// group: an NVLink ask is only kept when the union on the node is in one
// island, or when device groups do not span islands (group_by "island").
func (ns *nodeState) unionScoped(g *Group) bool {
	return g.Topology == jobspec.TopologyNVLink && ns.spanning
}

// scopeFor returns the mask a node's allocations of the group are placed
// in and how many fit there now: the whole node, or, where unionScoped,
// the island holding the most allocations (then the fewest free GPUs).
func (s *State) scopeFor(ord int, g *Group) (uint64, int) {
	ns := &s.nodes[ord]
	if !ns.unionScoped(g) {
		return ^uint64(0), s.capacityIn(ord, ns.free(), g)
	}
	best, bestCap, bestFree := uint64(0), 0, 1<<30
	for _, m := range ns.islands {
		f := ns.free() & m
		c := s.capacityIn(ord, f, g)
		if c > bestCap || (c == bestCap && c > 0 && bits.OnesCount64(f) < bestFree) {
			best, bestCap, bestFree = m, c, bits.OnesCount64(f)
		}
	}
	return best, bestCap
}

// capacityIn is how many allocations of the group fit in free on a node,
// as successive picks would place them (so that placeGang's picks never
// fall short of it).
func (s *State) capacityIn(ord int, free uint64, g *Group) int {
	ns := &s.nodes[ord]
	if ns.trivial(g) {
		if g.Topology == jobspec.TopologyNVLink {
			c := 0
			for _, m := range ns.islands {
				c += bits.OnesCount64(m&free) / g.GPUs
			}
			return c
		}
		return bits.OnesCount64(free) / g.GPUs
	}
	c := 0
	for c < g.Count {
		m, _, _, ok := s.pickBlocks(ns, free, g)
		if !ok {
			break
		}
		free &^= m
		c++
	}
	return c
}

// SplitBlocks divides an allocation's GPUs (a slot of the group) among the
// group's device blocks, each from one device group it may use: what each
// block is pinned to. Slots Place returns carry their split already; this
// serves slots chosen elsewhere (preemption). ok is false when no split
// exists.
func (s *State) SplitBlocks(sl Slot, g Group) ([]uint64, bool) {
	blocks := g.blocks()
	if len(blocks) == 1 && s.nodes[sl.Node].trivial(&g) {
		return []uint64{sl.Mask}, bits.OnesCount64(sl.Mask) == blocks[0].Count
	}
	if len(sl.Blocks) == len(blocks) {
		return sl.Blocks, true
	}
	ns := &s.nodes[sl.Node]
	choices := make([][]uint64, len(blocks))
	order := make([]int, len(blocks))
	n := 0
	for i, b := range blocks {
		order[i] = i
		n += b.Count
		choices[i] = ns.allowed(b)
	}
	if n != bits.OnesCount64(sl.Mask) {
		return nil, false
	}
	slices.SortStableFunc(order, func(a, b int) int { return blocks[b].Count - blocks[a].Count })
	out := make([]uint64, len(blocks))
	if _, ok := s.assign(ns, sl.Mask, blocks, choices, order, 0, 0, out, jobspec.TopologyNode); !ok {
		return nil, false
	}
	return out, true
}

// UnionExact reports whether the slots of one group can be pinned exactly:
// where several share a node and the group asks NVLink on a node whose
// device groups span islands, they must share one island (see
// unionScoped). Placements from Place always are; a caller that builds
// slots itself (preemption, one allocation at a time) checks with this.
func (s *State) UnionExact(g Group, slots []Slot) bool {
	island := map[int]uint64{}
	for _, sl := range slots {
		ns := &s.nodes[sl.Node]
		if !ns.unionScoped(&g) {
			continue
		}
		in := uint64(0)
		for _, m := range ns.islands {
			if sl.Mask&m == sl.Mask {
				in = m
			}
		}
		if in == 0 {
			return false
		}
		if prev, ok := island[sl.Node]; ok && prev != in {
			return false
		}
		island[sl.Node] = in
	}
	return true
}

// PickGroup chooses one allocation's GPUs of the group among free on a
// node, honouring topology and device groups (see Place); preemption uses
// it to test a node with a victim's GPUs added.
func (s *State) PickGroup(ord int, free uint64, g Group) (Slot, bool) {
	ns := &s.nodes[ord]
	if ns.trivial(&g) {
		m, _, ok := s.pick(ord, free, g.GPUs, g.Topology)
		return Slot{Node: ord, Mask: m}, ok
	}
	m, bl, _, ok := s.pickBlocks(ns, free, &g)
	if !ok {
		return Slot{}, false
	}
	sl := Slot{Node: ord, Mask: m}
	if len(g.Blocks) > 1 {
		sl.Blocks = bl
	}
	return sl, true
}

// largestBlockGroup is the most healthy GPUs one device group of the node
// offers a block.
func (ns *nodeState) largestBlockGroup(b Block) int {
	best := 0
	for _, m := range ns.allowed(b) {
		best = max(best, bits.OnesCount64(m&ns.healthy))
	}
	return best
}

// MaxBlockGPUs is the most healthy GPUs one device group offers the block
// on a schedulable node of the pool ("" = all), and that node's group_by
// (for the explanation).
func (s *State) MaxBlockGPUs(pool string, b Block) (int, string) {
	best, by, found := 0, "", false
	for i := range s.nodes {
		ns := &s.nodes[i]
		if !ns.sched || (pool != "" && ns.node.Pool != pool) {
			continue
		}
		if n := ns.largestBlockGroup(b); !found || n > best {
			best, by, found = n, ns.node.GroupBy, true
		}
	}
	return best, by
}

// MaxDeviceGroup is the most healthy GPUs in one device group on a
// schedulable node of the pool ("" = all): a block asking no more than it
// may fit somewhere (the engine's cheap test before MaxBlockGPUs).
func (s *State) MaxDeviceGroup(pool string) int {
	best := 0
	for i := range s.nodes {
		ns := &s.nodes[i]
		if !ns.sched || (pool != "" && ns.node.Pool != pool) {
			continue
		}
		for _, m := range ns.groups {
			best = max(best, bits.OnesCount64(m&ns.healthy))
		}
	}
	return best
}

// ConstraintMiss says why a device block's constraints rule out every
// device group of a pool (DeviceConstraintMiss).
type ConstraintMiss struct {
	// Constraint is the first of the block's constraints that no group
	// meets; nil when each is met by some group but no group meets all.
	Constraint *cluster.DeviceConstraint
	// Hint is what the groups hold of the attribute it tests, for people
	// ("" when nothing useful): the values seen, and where the attribute
	// is one of impact-gpu's topology facts, when it is set.
	Hint string
}

// DeviceConstraintMiss reports whether the block's own constraints fail
// on every device group, of the name it asks, on the schedulable nodes of
// the pool ("" = all) that hold any: then it can never be placed there
// (Nomad would refuse it too). ok is false when some group may serve it,
// or when there is no such group at all (not the constraints' doing).
func (s *State) DeviceConstraintMiss(pool string, b Block) (ConstraintMiss, bool) {
	if len(b.Cons) == 0 || b.None {
		return ConstraintMiss{}, false
	}
	var cands []*cluster.DeviceGroup
	for i := range s.nodes {
		ns := &s.nodes[i]
		if !ns.sched || (pool != "" && ns.node.Pool != pool) {
			continue
		}
		for _, name := range ns.groupNames {
			if b.Group != "" && name != "" && name != b.Group {
				continue
			}
			dg := ns.node.DeviceGroup(name)
			if b.Cons.Eval(dg) != cluster.Fails {
				return ConstraintMiss{}, false
			}
			cands = append(cands, dg)
		}
	}
	if len(cands) == 0 {
		return ConstraintMiss{}, false
	}
	var miss ConstraintMiss
	for ci := range b.Cons {
		c := &b.Cons[ci]
		met := false
		for _, dg := range cands {
			if c.Eval(dg) != cluster.Fails {
				met = true
				break
			}
		}
		if !met {
			miss.Constraint = c
			miss.Hint = attrHint(c.Attribute(), cands)
			break
		}
	}
	return miss, true
}

// attrHint says what device groups hold of an attribute: its values, and,
// for impact-gpu's topology facts that are absent where a group spans
// islands or NUMA nodes, when they are set.
func attrHint(attr string, groups []*cluster.DeviceGroup) string {
	if attr == "" {
		return ""
	}
	var parts []string
	if v := cluster.ExplainValues(attr, groups); v != "" {
		parts = append(parts, "its device groups have "+v)
	}
	missing := false
	for _, g := range groups {
		if _, ok := g.Attributes[attr]; !ok {
			missing = true
		}
	}
	if missing {
		switch attr {
		case "island", "island_size":
			parts = append(parts, attr+` is set only where a group lies in one island: impact-gpu group_by = "island"`)
		case "numa":
			parts = append(parts, attr+` is set only where a group's GPUs share one known NUMA node: impact-gpu group_by = "numa" or "island"`)
		default:
			if len(parts) == 0 {
				parts = append(parts, fmt.Sprintf("no device group has %s", attr))
			}
		}
	}
	return strings.Join(parts, "; ")
}

// GroupByHint is the sentence explanations add when a node's device
// groups make a block impossible.
func GroupByHint(groupBy string) string {
	switch groupBy {
	case "island", "numa":
		return fmt.Sprintf("; the node's impact-gpu group_by = %q makes one device group per %s, and group_by = \"model\" lets any count up to the node's GPUs place", groupBy, groupBy)
	case "":
		return "; the node's device plugin decides the device groups (Nomad's NVIDIA plugin: one per model; impact-gpu: group_by)"
	}
	return fmt.Sprintf("; the node's impact-gpu group_by = %q", groupBy)
}
