package placement

// The cache of what New derives from the model's immutable objects: node
// statics (GPU masks, islands, groups), the node table, and per allocation
// shard each allocation's node ordinal and GPU mask, with the allocations
// in gang order.

import (
	"encoding/binary"
	"slices"
	"strings"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/internal/buffer"
	"github.com/impact-sched/nomad-impact/scheduler/internal/radix"
)

// Cache memoizes what placement derives from the model's immutable
// objects across cycles: the node table (ordinals, healthy and island
// masks), kept while the snapshot's node table is unchanged, and per shard
// of the allocation table each allocation's node ordinal and GPU mask,
// kept while the shard is unchanged (cluster.ShardKey): a cycle after a
// few updates redoes only the shards those updates touched. One Cache
// belongs to one engine; it is not safe for concurrent use.
type Cache struct {
	nodes map[*cluster.Node]*nodeStatic
	slab  staticSlab

	// The node table of the last snapshot.
	nodesKey cluster.NodesKey
	table    *nodeTable

	// Per allocation shard: its key and entries.
	shardKeys []cluster.ShardKey
	shards    [][]allocEnt

	// refs: every entry in gang order (sortedRefs), built from the shards
	// as of refKeys; refsValid: refs match the shards of refKeys.
	refs      []ref
	refKeys   []cluster.ShardKey
	refsValid bool
	// sortKeys: sortRefs' key arrays, kept for the next sort.
	sortKeys [2][]radix.Key
	// Buffers sortedRefs reuses: the changed shards' entries (fresh),
	// their sorted order (sorted), the merge's output (spare: the
	// buffer of the refs before last), which shards changed.
	fresh, sorted, spare []ref
	isChanged            []bool
	// allocs: the allocation table refs were built from (equal: refs are
	// current without a look at any shard).
	allocs cluster.TableKey

	// last is the State New built last, whose memory the next reuses.
	last *State
}

// nodeTable is what New derives from a node table; shared read-only by
// the States built from equal tables.
type nodeTable struct {
	nodes   []*cluster.Node
	byID    map[string]int
	statics []*nodeStatic
}

// allocEnt is an allocation on a known node with its GPU mask.
type allocEnt struct {
	a    *cluster.Alloc
	ord  int
	mask uint64
	// job is the allocation's job as of job table jobsAt, whose shard
	// jobShard had key jobKey: reused while that table, or that shard of
	// it, is unchanged.
	jobShard int
	jobKey   cluster.ShardKey
	jobsAt   cluster.TableKey
	job      *cluster.Job
	jobKnown bool
}

// lookupJob returns the allocation's job (in the snapshot whose job table
// is jobs), from the entry while the job table it was looked up in is
// unchanged, or at least the table's shard holding the job. The table is
// the entry's own, not the last State's: buildGangs looks up only the
// first allocation of each gang, so an entry may be several tables old.
func (e *allocEnt) lookupJob(snap *cluster.Snapshot, jobs cluster.TableKey) *cluster.Job {
	if e.jobKnown && e.jobsAt == jobs {
		return e.job
	}
	key := snap.JobShardKey(e.jobShard)
	if !e.jobKnown || key != e.jobKey {
		e.job, _ = snap.Job(e.a.JobID)
		e.jobKey, e.jobKnown = key, true
	}
	e.jobsAt = jobs
	return e.job
}

type nodeStatic struct {
	healthy    uint64
	islands    []uint64
	groups     []uint64
	groupNames []string
	spanning   bool
	ids        gpuBits
}

// gpuBits maps a node's GPU instance IDs to their bits: a scan of the
// node's GPUs for the usual few (no map to build per node), a map for
// nodes of many GPUs.
type gpuBits struct {
	gpus []cluster.GPU // the node's, up to MaxGPUsPerNode
	m    map[string]uint64
}

func (b *gpuBits) bit(id string) uint64 {
	if b.m != nil {
		return b.m[id]
	}
	// The store points an allocation's GPU IDs at its node's copies
	// (cluster.Store.UpsertAlloc): the matching ID compares equal at its
	// address, and the others differ within their first bytes after
	// "GPU-".
	for i := range b.gpus {
		if b.gpus[i].ID == id {
			return 1 << i
		}
	}
	return 0
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{nodes: map[*cluster.Node]*nodeStatic{}}
}

func (c *Cache) node(n *cluster.Node) *nodeStatic {
	if ns, ok := c.nodes[n]; ok {
		return ns
	}
	ns := c.slab.newNodeStatic(n)
	c.nodes[n] = ns
	return ns
}

// staticSlab hands out the memory of new node statics from a few large
// arrays: a new cache derives every node's at once (BenchmarkDecide:
// 2,000 nodes, four allocations each), and the collector's cost grows
// with the count of objects as well as their bytes. Each piece is a
// buffer.Window, so no append reaches a neighbour's. An array lives as
// long as any static in it: the cache drops statics of nodes gone only
// when they are many (nodeTable), so little is held for them.
type staticSlab struct {
	statics []nodeStatic
	words   []uint64
	names   []string
}

// slabLen is how many statics, and slabWords how many words or names,
// one array of a slab holds.
const slabLen, slabWords = 256, 2048

func (sl *staticSlab) static() *nodeStatic {
	return &buffer.Window(&sl.statics, 1, slabLen)[:1][0]
}

// carve copies src into a window of *slab.
func carve[T any](slab *[]T, src []T) []T {
	return append(buffer.Window(slab, len(src), slabWords), src...)
}

// newNodeStatic derives a node's masks: healthy GPUs, one per NVLink
// island (by island number) and one per device group (by name), and
// whether a group spans islands. Islands and groups are collected in
// arrays on the stack, kept sorted by insertion (a node has a few), and
// copied out into the slab.
func (sl *staticSlab) newNodeStatic(n *cluster.Node) *nodeStatic {
	ns := sl.static()
	ns.ids = gpuBits{gpus: n.GPUs[:min(len(n.GPUs), cluster.MaxGPUsPerNode)]}
	if len(ns.ids.gpus) > 16 {
		ns.ids.m = make(map[string]uint64, len(ns.ids.gpus))
	}
	var (
		islandIDs, islands [cluster.MaxGPUsPerNode]uint64
		groupNames         [cluster.MaxGPUsPerNode]string
		groups             [cluster.MaxGPUsPerNode]uint64
		nIsl, nGrp         int
	)
	for gi, g := range n.GPUs {
		if gi >= cluster.MaxGPUsPerNode {
			continue // beyond what a mask holds: never placed
		}
		bit := uint64(1) << gi
		if ns.ids.m != nil {
			ns.ids.m[g.ID] = bit
		}
		if g.Healthy {
			ns.healthy |= bit
		}
		// Island numbers are ordered as ints: shifted by 1<<63 so that
		// negative ones sort first as unsigned words.
		id := uint64(g.Island) ^ (1 << 63)
		k := 0
		for k < nIsl && islandIDs[k] < id {
			k++
		}
		if k == nIsl || islandIDs[k] != id {
			copy(islandIDs[k+1:nIsl+1], islandIDs[k:nIsl])
			copy(islands[k+1:nIsl+1], islands[k:nIsl])
			islandIDs[k], islands[k] = id, 0
			nIsl++
		}
		islands[k] |= bit
		k = 0
		for k < nGrp && groupNames[k] < g.Group {
			k++
		}
		if k == nGrp || groupNames[k] != g.Group {
			copy(groupNames[k+1:nGrp+1], groupNames[k:nGrp])
			copy(groups[k+1:nGrp+1], groups[k:nGrp])
			groupNames[k], groups[k] = g.Group, 0
			nGrp++
		}
		groups[k] |= bit
	}
	if nIsl > 0 {
		ns.islands = carve(&sl.words, islands[:nIsl])
	}
	if nGrp > 0 {
		ns.groups = carve(&sl.words, groups[:nGrp])
		ns.groupNames = carve(&sl.names, groupNames[:nGrp])
	}
	for gi, gm := range ns.groups {
		if ns.groupNames[gi] == "" {
			continue // no group facts (a simulated node): no union rule
		}
		spans := 0
		for _, im := range ns.islands {
			if gm&im != 0 {
				spans++
			}
		}
		ns.spanning = ns.spanning || spans > 1
	}
	return ns
}

// nodeTable returns the snapshot's node table, rebuilding it (and
// forgetting every allocation shard, whose ordinals it invalidates) when
// the nodes changed.
func (c *Cache) nodeTable(snap *cluster.Snapshot) *nodeTable {
	key := snap.NodesKey()
	if c.table != nil && key.Equal(c.nodesKey) {
		return c.table
	}
	if len(c.nodes) == 0 {
		c.nodes = make(map[*cluster.Node]*nodeStatic, snap.NumNodes()) // grown once
	} else if len(c.nodes) > 2*snap.NumNodes()+64 {
		live := make(map[*cluster.Node]*nodeStatic, snap.NumNodes())
		for _, n := range snap.Nodes() {
			if ns, ok := c.nodes[n]; ok {
				live[n] = ns
			}
		}
		c.nodes = live
	}
	nodes := snap.Nodes()
	t := &nodeTable{
		nodes:   nodes,
		byID:    make(map[string]int, len(nodes)),
		statics: make([]*nodeStatic, len(nodes)),
	}
	for i, n := range nodes {
		t.byID[n.ID] = i
		t.statics[i] = c.node(n)
	}
	c.nodesKey, c.table = key, t
	c.shardKeys, c.shards = nil, nil
	c.refs, c.refsValid = nil, false
	return t
}

// allocShard returns the entries of allocation shard i (allocations on
// unknown nodes left out), recomputing them when the shard changed.
func (c *Cache) allocShard(snap *cluster.Snapshot, i int, t *nodeTable) []allocEnt {
	if c.shardKeys == nil {
		c.shardKeys = make([]cluster.ShardKey, snap.NumShards())
		c.shards = make([][]allocEnt, snap.NumShards())
	}
	if snap.AllocShardKey(i) == c.shardKeys[i] {
		return c.shards[i]
	}
	key, allocs := snap.AllocShard(i)
	ents := make([]allocEnt, 0, len(allocs))
	for _, a := range allocs {
		ord, ok := t.byID[a.NodeID]
		if !ok {
			continue // node gone: nothing to hold
		}
		st := t.statics[ord]
		var m uint64
		for _, id := range a.GPUs {
			m |= st.ids.bit(id)
		}
		ents = append(ents, allocEnt{a: a, ord: ord, mask: m, jobShard: snap.ShardOf(a.JobID)})
	}
	c.shardKeys[i], c.shards[i] = key, ents
	return ents
}

// ref is an allocation entry in the order gangs are built in: by job ID,
// then allocation ID.
type ref struct {
	job, id string
	shard   int
	e       *allocEnt
}

func cmpRef(x, y ref) int {
	if c := strings.Compare(x.job, y.job); c != 0 {
		return c
	}
	return strings.Compare(x.id, y.id)
}

// sortRefs returns refs sorted in ref order: fewer than 64 sorted in
// place by comparison (inPlace), more into *out (grown as needed; refs
// keeps its order). Job IDs mostly share a beginning
// (every key starts with its namespace, "default/"), so the keys sorted
// are the 16 bytes after the beginning all share, radix-sorted; refs
// equal in them (allocations of one job, IDs equal that far) are then
// ordered by cmpRef. Most of the work is a few linear passes over small
// keys, not comparisons of strings scattered in memory.
func sortRefs(refs []ref, scratch *[2][]radix.Key, out *[]ref) (sorted []ref, inPlace bool) {
	if len(refs) < 64 {
		// A few changed allocations (a warm cycle's usual case): a
		// comparison sort costs less than the radix sort's counting.
		slices.SortFunc(refs, cmpRef)
		return refs, true
	}
	common := len(refs[0].job)
	for i := 1; i < len(refs) && common > 0; i++ {
		common = commonPrefix(refs[0].job[:common], refs[i].job)
	}
	keys := scratch[0][:0]
	for i := range refs {
		hi, lo := prefix16(refs[i].job[common:])
		keys = append(keys, radix.Key{Hi: hi, Lo: lo, I: int32(i)})
	}
	scratch[0] = keys
	sorted = buffer.Zeroed(out, len(refs))
	radix.SortFunc(refs, keys, &scratch[1], sorted, cmpRef)
	return sorted, false
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// prefix16 packs the first 16 bytes of s big-endian into two words, zero
// past its end: prefixes order as the strings do, except that strings
// equal in their first 16 bytes (or one a prefix of the other, when
// shorter) tie.
func prefix16(s string) (hi, lo uint64) {
	var b [16]byte
	copy(b[:], s)
	return binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
}

// sortedRefs returns the snapshot's allocation entries in ref order. The
// order is kept across cycles: the entries of unchanged shards stay in
// place, those of changed shards are dropped, and the changed shards'
// entries are sorted and merged in, so a cycle after a few updates sorts
// a few allocations, not all of them.
func (c *Cache) sortedRefs(snap *cluster.Snapshot, t *nodeTable) []ref {
	n := snap.NumShards()
	if c.refs == nil || len(c.refKeys) != n {
		c.refs, c.refKeys, c.refsValid = nil, make([]cluster.ShardKey, n), false
	}
	table := snap.AllocsKey()
	if c.refsValid && table == c.allocs {
		return c.refs
	}
	var changed []int
	for si := range n {
		c.allocShard(snap, si, t)
		if !c.refsValid || c.shardKeys[si] != c.refKeys[si] {
			changed = append(changed, si)
		}
	}
	c.allocs = table
	if len(changed) == 0 {
		return c.refs
	}
	isChanged := buffer.Zeroed(&c.isChanged, n)
	nFresh := 0
	for _, si := range changed {
		nFresh += len(c.shards[si])
	}
	fresh := c.fresh[:0]
	if cap(fresh) < nFresh {
		fresh = make([]ref, 0, nFresh)
	}
	for _, si := range changed {
		isChanged[si] = true
		ents := c.shards[si]
		for k := range ents {
			e := &ents[k]
			fresh = append(fresh, ref{job: e.a.JobID, id: e.a.ID, shard: si, e: e})
		}
		c.refKeys[si] = c.shardKeys[si]
	}
	c.fresh = fresh
	sorted, inPlace := sortRefs(fresh, &c.sortKeys, &c.sorted)
	if len(c.refs) == 0 {
		// Nothing kept to merge with (the first State, or every
		// allocation changed): the sorted buffer becomes refs, and the
		// old refs' buffer takes its place.
		if inPlace {
			c.fresh = c.refs[:0]
		} else {
			c.sorted = c.refs[:0]
		}
		c.refs, c.refsValid = sorted, true
		return sorted
	}
	out := c.spare[:0]
	if cap(out) < snap.NumAllocs() {
		out = make([]ref, 0, snap.NumAllocs())
	}
	i := 0
	for _, r := range c.refs {
		if isChanged[r.shard] {
			continue
		}
		for i < len(sorted) && cmpRef(sorted[i], r) < 0 {
			out = append(out, sorted[i])
			i++
		}
		out = append(out, r)
	}
	out = append(out, sorted[i:]...)
	c.spare = c.refs[:0]
	c.refs, c.refsValid = out, true
	return out
}
