package placement

import (
	"math/bits"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/internal/buffer"
)

// Slot is one allocation's GPUs on one node: the node's ordinal in the
// State and a mask over the node's GPU list (bit i = Node.GPUs[i]).
type Slot struct {
	Node int
	Mask uint64
	// Blocks, for a group of several device blocks placed where device
	// groups matter, is each block's share of Mask (in Group.Blocks
	// order); nil otherwise (the one block has all of Mask). See
	// SplitBlocks.
	Blocks []uint64
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
	// groups are the masks of the node's device groups (groupNames, in
	// name order); spanning: a device group spans several islands. ids
	// maps an instance ID to its bit. All shared with the nodeStatic.
	groups     []uint64
	groupNames []string
	spanning   bool
	ids        *gpuBits
	holders    []int
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
	return (&index{}).reset(n)
}

// reset empties the index for n nodes, in its own memory where it fits.
func (ix *index) reset(n int) *index {
	for i := range ix.buckets {
		ix.buckets[i] = ix.buckets[i][:0]
	}
	ix.pos, ix.count = buffer.Zeroed(&ix.pos, n), buffer.Zeroed(&ix.count, n)
	for i := range ix.pos {
		ix.pos[i] = -1
	}
	ix.free, ix.nodes, ix.total = 0, 0, 0
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
	// reservedFree is ReservedFreeGPUs("") kept up to date by apply (the
	// only writer of reserved GPUs): a long queue asks it once per job.
	reservedFree int
	// gangs is the memory of holders' windows (buildGangs).
	gangs gangMem
}

// New builds the state of a snapshot: nodes sorted by ID, running
// allocations grouped into gangs. stopping reports allocations to treat as
// being stopped (besides those marked Stopping in the snapshot); it may be
// nil. cache may be nil (nothing is memoized). A State built with a cache
// reuses the memory of the one the cache built before, so it is valid only
// until the next New with that cache: an engine builds one per cycle and
// keeps nothing of it past the cycle.
func New(snap *cluster.Snapshot, stopping func(*cluster.Alloc) bool, cache *Cache) *State {
	if cache == nil {
		cache = NewCache()
	}
	t := cache.nodeTable(snap)
	s := newState(t, cache.last)
	cache.last = s
	refs := cache.sortedRefs(snap, t)
	s.buildGangs(snap, refs)
	s.claimGangs(stopping)
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

// newState is a state of the node table with nothing used yet, in the
// memory of old (nil: fresh memory), which must no longer be in use.
func newState(t *nodeTable, old *State) *State {
	nodes := t.nodes
	s := &State{
		byID:  t.byID,
		pools: map[string]*index{},
	}
	var oldPools map[string]*index
	if old != nil {
		s.nodes = buffer.Zeroed(&old.nodes, len(nodes))
		s.isReservedSet = buffer.Zeroed(&old.isReservedSet, len(nodes))
		s.all = old.all.reset(len(nodes))
		s.journal, s.reservedNodes = old.journal[:0], old.reservedNodes[:0]
		s.holders, s.gangs = old.holders[:0], old.gangs
		oldPools = old.pools
	} else {
		s.nodes = make([]nodeState, len(nodes))
		s.isReservedSet = make([]bool, len(nodes))
		s.all = newIndex(len(nodes))
	}
	for i, n := range nodes {
		ns := &s.nodes[i]
		ns.node = n
		ns.sched = n.Schedulable()
		st := t.statics[i]
		ns.healthy = st.healthy
		ns.islands = st.islands
		ns.groups, ns.groupNames, ns.spanning, ns.ids = st.groups, st.groupNames, st.spanning, &st.ids
		pix := s.pools[n.Pool]
		if pix == nil {
			if pix = oldPools[n.Pool]; pix != nil {
				pix.reset(len(nodes))
			} else {
				pix = newIndex(len(nodes))
			}
			s.pools[n.Pool] = pix
		}
		pix.total++
		s.all.total++
	}
	return s
}

// buildGangs makes the holders: every allocation sorted by job ID then
// allocation ID (refs, so that the result does not depend on the
// snapshot's iteration order), each job's run of them one holder, its
// Allocs and Slots windows of two shared arrays (two allocations, not two
// per gang). Each node's holder list gets a window of one more array, as
// long as the node's allocations (at most one holder each), so that
// claimGangs never allocates.
func (s *State) buildGangs(snap *cluster.Snapshot, refs []ref) {
	jobs := snap.JobsKey()
	m := &s.gangs
	allocs := buffer.Zeroed(&m.allocs, len(refs))
	slots := buffer.Zeroed(&m.slots, len(refs))
	perNode := buffer.Zeroed(&m.perNode, len(s.nodes))
	for i := range refs {
		// The allocation's whole mask for now; claimGangs reduces it to
		// the GPUs no earlier gang claimed.
		allocs[i], slots[i] = refs[i].e.a, Slot{Node: refs[i].e.ord, Mask: refs[i].e.mask}
		perNode[refs[i].e.ord]++
	}
	onNodes := buffer.Zeroed(&m.onNodes, len(refs))
	off := 0
	for i := range s.nodes {
		n := int(perNode[i])
		s.nodes[i].holders = onNodes[off : off : off+n]
		off += n
	}
	if cap(s.holders) < len(refs) {
		s.holders = make([]Holder, 0, len(refs))
	}
	for i := 0; i < len(refs); {
		j := i + 1
		for j < len(refs) && refs[j].job == refs[i].job {
			j++
		}
		s.holders = append(s.holders, Holder{JobID: refs[i].job, Job: refs[i].e.lookupJob(snap, jobs), Allocs: allocs[i:j:j], Slots: slots[i:j:j]})
		i = j
	}
	clear(s.holders[len(s.holders):cap(s.holders)]) // drop the last State's references for the GC
}

// gangMem is the memory buildGangs lays the holders out in: their Allocs
// and Slots are windows of allocs and slots, each node's holder list one
// of onNodes.
type gangMem struct {
	allocs  []*cluster.Alloc
	slots   []Slot
	perNode []int32
	onNodes []int
}

// claimGangs marks the holders' GPUs used, in holder order: a GPU claimed
// twice by the snapshot stays claimed once, by the first, so nothing
// double counts. stopping (may be nil) reports allocations to treat as
// being stopped besides those marked so.
func (s *State) claimGangs(stopping func(*cluster.Alloc) bool) {
	for h := range s.holders {
		hd := &s.holders[h]
		for i, a := range hd.Allocs {
			ord := hd.Slots[i].Node
			ns := &s.nodes[ord]
			mask := hd.Slots[i].Mask &^ ns.used
			ns.used |= mask
			hd.Slots[i].Mask = mask
			hd.GPUs += bits.OnesCount64(mask)
			if a.Stopping || (stopping != nil && stopping(a)) {
				hd.Stopping = true
			}
			if len(ns.holders) == 0 || ns.holders[len(ns.holders)-1] != h {
				ns.holders = append(ns.holders, h)
			}
		}
	}
}

// NumNodes is the number of nodes.
func (s *State) NumNodes() int { return len(s.nodes) }

// Node returns the node at an ordinal.
func (s *State) Node(ord int) *cluster.Node { return s.nodes[ord].node }

// Ordinal returns a node's ordinal.
func (s *State) Ordinal(nodeID string) (int, bool) { o, ok := s.byID[nodeID]; return o, ok }

// Holders returns the running gangs. Do not modify.
func (s *State) Holders() []Holder { return s.holders }

// Free returns the free (unused, unreserved, healthy) GPU mask of a node.
func (s *State) Free(ord int) uint64 { return s.nodes[ord].free() }

// Reserved returns the reserved GPU mask of a node.
func (s *State) Reserved(ord int) uint64 { return s.nodes[ord].reserved }

// Used returns the used GPU mask of a node.
func (s *State) Used(ord int) uint64 { return s.nodes[ord].used }

// Schedulable reports whether new work may go to a node.
func (s *State) Schedulable(ord int) bool { return s.nodes[ord].sched }

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
	if pool == "" {
		return s.reservedFree
	}
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
	if ns.sched {
		s.reservedFree += bits.OnesCount64(reserved&ns.healthy&^used) - bits.OnesCount64(ns.reserved&ns.healthy&^ns.used)
	}
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

// Hold marks GPUs of a node (by instance ID) used: capacity promised to an
// admission whose allocations are not in the snapshot yet. Unknown nodes
// and GPUs are ignored.
func (s *State) Hold(nodeID string, gpuIDs []string) {
	if ord, m, ok := s.Mask(nodeID, gpuIDs); ok {
		s.Take(Slot{Node: ord, Mask: m})
	}
}

// Mask is the ordinal of a node (by ID) and the mask of its GPUs with
// these instance IDs (unknown ones left out); false for an unknown node.
func (s *State) Mask(nodeID string, gpuIDs []string) (int, uint64, bool) {
	ord, ok := s.byID[nodeID]
	if !ok {
		return 0, 0, false
	}
	n := s.nodes[ord].node
	var m uint64
	for _, id := range gpuIDs {
		for gi := range min(len(n.GPUs), cluster.MaxGPUsPerNode) {
			if n.GPUs[gi].ID == id {
				m |= 1 << gi
				break
			}
		}
	}
	return ord, m, true
}

// Empty frees every GPU of the pool's schedulable nodes ("" = every pool)
// and lifts their reservations, as if nothing ran there: whether a job
// fits its pool at all is asked inside a transaction that rolls this back.
func (s *State) Empty(pool string) {
	for ord := range s.nodes {
		if ns := &s.nodes[ord]; ns.sched && (pool == "" || ns.node.Pool == pool) {
			s.set(ord, 0, 0)
		}
	}
}

// ReleaseHolder frees every GPU of a gang.
func (s *State) ReleaseHolder(h int) {
	for _, sl := range s.holders[h].Slots {
		s.Release(sl)
	}
}

// FreedBy is how many free GPUs the cluster (every pool) would gain if
// holder h were released (ReleaseHolder): those of its GPUs on schedulable
// nodes that are healthy and not reserved. It changes nothing: a
// preemptor learns from it, without releasing anything, that waiting for
// stopping gangs frees nothing.
func (s *State) FreedBy(h int) int {
	n := 0
	for _, sl := range s.holders[h].Slots {
		ns := &s.nodes[sl.Node]
		if !ns.sched {
			continue
		}
		n += bits.OnesCount64(sl.Mask & ns.used & ns.healthy &^ ns.reserved)
	}
	return n
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
