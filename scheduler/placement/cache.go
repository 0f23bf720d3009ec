package placement

// The cache of what New derives from the model's immutable objects: node
// statics (GPU masks, islands, groups), the node table, and per allocation
// shard each allocation's node ordinal and GPU mask, with the allocations
// in gang order.

import (
	"slices"
	"sort"
	"strings"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
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
	// allocs: the allocation table refs were built from (equal: refs are
	// current without a look at any shard); jobs: the job table of the
	// last State, whose entries' jobs are then current too.
	allocs, jobs cluster.TableKey
}

// nodeTable is what New derives from a node table; shared read-only by
// the States built from equal tables.
type nodeTable struct {
	nodes   []*cluster.Node
	byID    map[string]int
	statics []*nodeStatic
	ignored int
}

// allocEnt is an allocation on a known node with its GPU mask.
type allocEnt struct {
	a    *cluster.Alloc
	ord  int
	mask uint64
	// job is the allocation's job as of job shard jobShard with key
	// jobKey: reused while that shard is unchanged.
	jobShard int
	jobKey   cluster.ShardKey
	job      *cluster.Job
	jobKnown bool
}

// lookupJob returns the allocation's job, from the entry while the job
// table's shard holding it is unchanged (all of them: jobsSame).
func (e *allocEnt) lookupJob(snap *cluster.Snapshot, jobsSame bool) *cluster.Job {
	if e.jobKnown && jobsSame {
		return e.job
	}
	key := snap.JobShardKey(e.jobShard)
	if e.jobKnown && key == e.jobKey {
		return e.job
	}
	e.job, _ = snap.Job(e.a.JobID)
	e.jobKey, e.jobKnown = key, true
	return e.job
}

type nodeStatic struct {
	healthy    uint64
	islands    []uint64
	groups     []uint64
	groupNames []string
	spanning   bool
	ignored    int
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
	ns := &nodeStatic{ids: gpuBits{gpus: n.GPUs[:min(len(n.GPUs), cluster.MaxGPUsPerNode)]}}
	if len(ns.ids.gpus) > 16 {
		ns.ids.m = make(map[string]uint64, len(ns.ids.gpus))
	}
	var islandIDs []int
	for gi, g := range n.GPUs {
		if gi >= cluster.MaxGPUsPerNode {
			ns.ignored++
			continue
		}
		if ns.ids.m != nil {
			ns.ids.m[g.ID] = 1 << gi
		}
		if g.Healthy {
			ns.healthy |= 1 << gi
		}
		k := sort.SearchInts(islandIDs, g.Island)
		if k == len(islandIDs) || islandIDs[k] != g.Island {
			islandIDs = slices.Insert(islandIDs, k, g.Island)
			ns.islands = slices.Insert(ns.islands, k, 0)
		}
		ns.islands[k] |= 1 << gi
		k = sort.SearchStrings(ns.groupNames, g.Group)
		if k == len(ns.groupNames) || ns.groupNames[k] != g.Group {
			ns.groupNames = slices.Insert(ns.groupNames, k, g.Group)
			ns.groups = slices.Insert(ns.groups, k, 0)
		}
		ns.groups[k] |= 1 << gi
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
	c.nodes[n] = ns
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
	if len(c.nodes) > 2*snap.NumNodes()+64 {
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
		t.ignored += t.statics[i].ignored
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
	isChanged := make([]bool, n)
	var fresh []ref
	for _, si := range changed {
		isChanged[si] = true
		ents := c.shards[si]
		for k := range ents {
			e := &ents[k]
			fresh = append(fresh, ref{job: e.a.JobID, id: e.a.ID, shard: si, e: e})
		}
		c.refKeys[si] = c.shardKeys[si]
	}
	slices.SortFunc(fresh, cmpRef)
	out := make([]ref, 0, snap.NumAllocs())
	i := 0
	for _, r := range c.refs {
		if isChanged[r.shard] {
			continue
		}
		for i < len(fresh) && cmpRef(fresh[i], r) < 0 {
			out = append(out, fresh[i])
			i++
		}
		out = append(out, r)
	}
	out = append(out, fresh[i:]...)
	c.refs, c.refsValid = out, true
	return out
}
