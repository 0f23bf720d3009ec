package placement

import (
	"math/bits"
	"sort"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// Slot is one allocation's GPUs on one node: the node's ordinal in the
// State and a mask over the node's GPU list (bit i = Node.GPUs[i]).
type Slot struct {
	Node int
	Mask uint64
}

// Holder is a running gang (all allocations of one job) holding GPUs.
type Holder struct {
	// JobID of the gang; Job is nil for jobs the snapshot does not hold
	// (unmanaged work: capacity, never a victim).
	JobID string
	Job   *cluster.Job
	// Allocs of the gang, with their slots (same order).
	Allocs []*cluster.Alloc
	Slots  []Slot
	// Stopping: a preemption is under way; the GPUs will be freed.
	Stopping bool
	// GPUs held in total.
	GPUs int
}

// nodeState is the capacity of one node in the current transaction.
type nodeState struct {
	node  *cluster.Node
	sched bool
	// healthy: GPUs that exist (within MaxGPUsPerNode) and are healthy.
	healthy  uint64
	used     uint64
	reserved uint64
	// islands are the masks of the node's NVLink islands, by island ID.
	islands []uint64
	holders []int
}

func (n *nodeState) free() uint64 { return n.healthy &^ n.used &^ n.reserved }

// index buckets the schedulable nodes of one pool by free GPU count, so
// best-fit search starts at the smallest sufficient bucket and a full
// cluster is recognised in O(1).
type index struct {
	buckets [cluster.MaxGPUsPerNode + 1][]int32
	pos     []int32 // per node ordinal: position in its bucket, -1 = absent
	count   []int8  // per node ordinal: bucket it is in
	free    int     // free GPUs over the pool
	nodes   int     // schedulable nodes in the pool
	total   int     // all nodes in the pool
}

func newIndex(n int) *index {
	ix := &index{pos: make([]int32, n), count: make([]int8, n)}
	for i := range ix.pos {
		ix.pos[i] = -1
	}
	return ix
}

func (ix *index) add(ord, free int) {
	b := &ix.buckets[free]
	ix.pos[ord] = int32(len(*b))
	ix.count[ord] = int8(free)
	*b = append(*b, int32(ord))
	ix.free += free
}

func (ix *index) move(ord, free int) {
	p := ix.pos[ord]
	if p < 0 {
		return
	}
	old := int(ix.count[ord])
	if old == free {
		return
	}
	b := &ix.buckets[old]
	last := (*b)[len(*b)-1]
	(*b)[p] = last
	ix.pos[last] = p
	*b = (*b)[:len(*b)-1]
	ix.free -= old
	ix.add(ord, free)
}

type entry struct {
	ord            int32
	used, reserved uint64
}

// State is the capacity of the cluster during one cycle: which GPUs are
// free, held by running gangs, placed in this cycle, or reserved. Every
// change is journaled so that a tentative gang placement or preemption can
// be rolled back to a checkpoint (all-or-nothing is a rollback away).
type State struct {
	nodes   []nodeState
	byID    map[string]int
	all     *index
	pools   map[string]*index
	holders []Holder
	journal []entry
	// reservedNodes lists nodes that have (or had) reserved GPUs.
	reservedNodes []int
	isReservedSet []bool
	ignoredGPUs   int
}

// New builds the state of a snapshot: nodes sorted by ID, running
// allocations grouped into gangs. stopping reports allocations to treat as
// being stopped (besides those marked Stopping in the snapshot); it may be
// nil.
func New(snap *cluster.Snapshot, stopping func(*cluster.Alloc) bool) *State {
	nodes := snap.Nodes()
	s := &State{
		nodes:         make([]nodeState, len(nodes)),
		byID:          make(map[string]int, len(nodes)),
		all:           newIndex(len(nodes)),
		pools:         map[string]*index{},
		isReservedSet: make([]bool, len(nodes)),
	}
	for i, n := range nodes {
		ns := &s.nodes[i]
		ns.node = n
		ns.sched = n.Schedulable()
		s.byID[n.ID] = i
		var islandIDs []int
		for gi, g := range n.GPUs {
			if gi >= cluster.MaxGPUsPerNode {
				s.ignoredGPUs++
				continue
			}
			if g.Healthy {
				ns.healthy |= 1 << gi
			}
			k := sort.SearchInts(islandIDs, g.Island)
			if k == len(islandIDs) || islandIDs[k] != g.Island {
				islandIDs = append(islandIDs, 0)
				copy(islandIDs[k+1:], islandIDs[k:])
				islandIDs[k] = g.Island
				ns.islands = append(ns.islands, 0)
				copy(ns.islands[k+1:], ns.islands[k:])
				ns.islands[k] = 0
			}
			ns.islands[k] |= 1 << gi
		}
		pix := s.pools[n.Pool]
		if pix == nil {
			pix = newIndex(len(nodes))
			s.pools[n.Pool] = pix
		}
		pix.total++
		s.all.total++
	}
	// Gangs, in job ID order (allocations come sorted by ID).
	byJob := map[string]int{}
	for _, a := range snap.Allocs() {
		ord, ok := s.byID[a.NodeID]
		if !ok {
			continue // node gone: nothing to hold
		}
		ns := &s.nodes[ord]
		var mask uint64
		for _, id := range a.GPUs {
			for gi := range min(len(ns.node.GPUs), cluster.MaxGPUsPerNode) {
				if ns.node.GPUs[gi].ID == id {
					mask |= 1 << gi
					break
				}
			}
		}
		// A GPU claimed twice by the snapshot stays claimed once; nothing
		// double counts.
		mask &^= ns.used
		ns.used |= mask
		h, ok := byJob[a.JobID]
		if !ok {
			h = len(s.holders)
			byJob[a.JobID] = h
			j, _ := snap.Job(a.JobID)
			s.holders = append(s.holders, Holder{JobID: a.JobID, Job: j})
		}
		hd := &s.holders[h]
		hd.Allocs = append(hd.Allocs, a)
		hd.Slots = append(hd.Slots, Slot{Node: ord, Mask: mask})
		hd.GPUs += bits.OnesCount64(mask)
		if a.Stopping || (stopping != nil && stopping(a)) {
			hd.Stopping = true
		}
		if len(ns.holders) == 0 || ns.holders[len(ns.holders)-1] != h {
			ns.holders = append(ns.holders, h)
		}
	}
	for i := range s.nodes {
		ns := &s.nodes[i]
		if !ns.sched {
			continue
		}
		f := bits.OnesCount64(ns.free())
		s.all.add(i, f)
		s.all.nodes++
		pix := s.pools[ns.node.Pool]
		pix.add(i, f)
		pix.nodes++
	}
	return s
}

// NumNodes is the number of nodes.
func (s *State) NumNodes() int { return len(s.nodes) }

// Node returns the node at an ordinal.
func (s *State) Node(ord int) *cluster.Node { return s.nodes[ord].node }

// Ordinal returns a node's ordinal.
func (s *State) Ordinal(nodeID string) (int, bool) { o, ok := s.byID[nodeID]; return o, ok }

// Holders returns the running gangs. Do not modify.
func (s *State) Holders() []Holder { return s.holders }

// NodeHolders returns the gangs holding GPUs on a node.
func (s *State) NodeHolders(ord int) []int { return s.nodes[ord].holders }

// Free returns the free (unused, unreserved, healthy) GPU mask of a node.
func (s *State) Free(ord int) uint64 { return s.nodes[ord].free() }

// Reserved returns the reserved GPU mask of a node.
func (s *State) Reserved(ord int) uint64 { return s.nodes[ord].reserved }

// Used returns the used GPU mask of a node.
func (s *State) Used(ord int) uint64 { return s.nodes[ord].used }

// Schedulable reports whether new work may go to a node.
func (s *State) Schedulable(ord int) bool { return s.nodes[ord].sched }

// IgnoredGPUs counts GPUs beyond MaxGPUsPerNode that placement ignores.
func (s *State) IgnoredGPUs() int { return s.ignoredGPUs }

// FreeGPUs is the number of free GPUs in a pool ("" = all pools).
func (s *State) FreeGPUs(pool string) int {
	if ix := s.indexFor(pool); ix != nil {
		return ix.free
	}
	return 0
}

// ReservedFreeGPUs is the number of reserved GPUs that are not in use (what
// a backfill-eligible job may additionally take) in a pool ("" = all).
func (s *State) ReservedFreeGPUs(pool string) int {
	n := 0
	for _, ord := range s.reservedNodes {
		ns := &s.nodes[ord]
		if ns.sched && (pool == "" || ns.node.Pool == pool) {
			n += bits.OnesCount64(ns.reserved & ns.healthy &^ ns.used)
		}
	}
	return n
}

// MaxNodeGPUs is the largest number of healthy GPUs on one schedulable node
// of a pool ("" = all), and the largest NVLink island.
func (s *State) MaxNodeGPUs(pool string) (node, island int) {
	for i := range s.nodes {
		ns := &s.nodes[i]
		if !ns.sched || (pool != "" && ns.node.Pool != pool) {
			continue
		}
		node = max(node, bits.OnesCount64(ns.healthy))
		for _, m := range ns.islands {
			island = max(island, bits.OnesCount64(m&ns.healthy))
		}
	}
	return node, island
}

func (s *State) indexFor(pool string) *index {
	if pool == "" {
		return s.all
	}
	return s.pools[pool]
}

func (s *State) set(ord int, used, reserved uint64) {
	ns := &s.nodes[ord]
	if ns.used == used && ns.reserved == reserved {
		return
	}
	s.journal = append(s.journal, entry{ord: int32(ord), used: ns.used, reserved: ns.reserved})
	s.apply(ord, used, reserved)
}

func (s *State) apply(ord int, used, reserved uint64) {
	ns := &s.nodes[ord]
	ns.used, ns.reserved = used, reserved
	if reserved != 0 && !s.isReservedSet[ord] {
		s.isReservedSet[ord] = true
		s.reservedNodes = append(s.reservedNodes, ord)
	}
	if ns.sched {
		f := bits.OnesCount64(ns.free())
		s.all.move(ord, f)
		s.pools[ns.node.Pool].move(ord, f)
	}
}

// Take marks GPUs used (placed in this cycle); it takes reserved GPUs too.
func (s *State) Take(sl Slot) {
	ns := &s.nodes[sl.Node]
	s.set(sl.Node, ns.used|sl.Mask, ns.reserved&^sl.Mask)
}

// Release frees GPUs (a victim's, in a tentative preemption).
func (s *State) Release(sl Slot) {
	ns := &s.nodes[sl.Node]
	s.set(sl.Node, ns.used&^sl.Mask, ns.reserved)
}

// Reserve withholds GPUs from later placements; they may be in use now (a
// reservation covers them once freed).
func (s *State) Reserve(sl Slot) {
	ns := &s.nodes[sl.Node]
	s.set(sl.Node, ns.used, ns.reserved|sl.Mask)
}

// Unreserve returns reserved GPUs to the free pool.
func (s *State) Unreserve(sl Slot) {
	ns := &s.nodes[sl.Node]
	s.set(sl.Node, ns.used, ns.reserved&^sl.Mask)
}

// ReleaseHolder frees every GPU of a gang.
func (s *State) ReleaseHolder(h int) {
	for _, sl := range s.holders[h].Slots {
		s.Release(sl)
	}
}

// Checkpoint marks the journal; Rollback returns to it.
func (s *State) Checkpoint() int { return len(s.journal) }

// Rollback undoes every change since the checkpoint.
func (s *State) Rollback(cp int) {
	for i := len(s.journal) - 1; i >= cp; i-- {
		e := s.journal[i]
		s.apply(int(e.ord), e.used, e.reserved)
	}
	s.journal = s.journal[:cp]
}

// Commit forgets the journal: changes so far can no longer be rolled back.
// Call it only with no checkpoint outstanding.
func (s *State) Commit() { s.journal = s.journal[:0] }

// GPUIDs converts a slot to the node's GPU instance IDs, in GPU order.
func (s *State) GPUIDs(sl Slot) []string {
	n := s.nodes[sl.Node].node
	out := make([]string, 0, bits.OnesCount64(sl.Mask))
	for m := sl.Mask; m != 0; m &= m - 1 {
		out = append(out, n.GPUs[bits.TrailingZeros64(m)].ID)
	}
	return out
}
