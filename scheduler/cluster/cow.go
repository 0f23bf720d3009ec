package cluster

import "maps"

// shardCount splits each table so that a snapshot shares all shards with the
// store and a later update copies only the shard it touches: with 100,000
// jobs a copy is about 100 entries, not 100,000.
const shardCount = 1024

// The shards sit in groups of groupSize under a table of groupCount
// pointers: a snapshot of a changed store copies the table and the groups
// holding changed shards (a few hundred bytes), not 1,024 shard pointers
// (8 KiB per table, which a simulation taking hundreds of thousands of
// snapshots spent a third of its allocation on).
const (
	groupSize  = 32
	groupCount = shardCount / groupSize
)

type group[V any] [groupSize]*shard[V]

// table is a cowMap's shards by group; shard i is table[i/groupSize][i%groupSize].
type table[V any] [groupCount]*group[V]

// at is shard i (nil when it was never created).
func (t *table[V]) at(i int) *shard[V] {
	g := t[i/groupSize]
	if g == nil {
		return nil
	}
	return g[i%groupSize]
}

// shard keeps its values in a slice (fast to iterate: a cycle walks every
// job and allocation) with a map from key to position (fast to look up).
type shard[V any] struct {
	idx  map[string]int32
	keys []string
	vals []V
}

func (s *shard[V]) clone() *shard[V] {
	cp := &shard[V]{
		idx:  maps.Clone(s.idx),
		keys: make([]string, len(s.keys), len(s.keys)+1),
		vals: make([]V, len(s.vals), len(s.vals)+1),
	}
	copy(cp.keys, s.keys)
	copy(cp.vals, s.vals)
	return cp
}

// frozen is a read-only table view held by a snapshot.
type frozen[V any] struct {
	shards *table[V]
	n      int
}

func (f frozen[V]) get(k string) (V, bool) {
	var zero V
	if f.shards == nil {
		return zero, false
	}
	s := f.shards.at(shardOf(k))
	if s == nil {
		return zero, false
	}
	i, ok := s.idx[k]
	if !ok {
		return zero, false
	}
	return s.vals[i], true
}

func (f frozen[V]) each(fn func(k string, v V)) {
	if f.shards == nil {
		return
	}
	for _, g := range f.shards {
		if g == nil {
			continue
		}
		for _, s := range g {
			if s == nil {
				continue
			}
			for i, v := range s.vals {
				fn(s.keys[i], v)
			}
		}
	}
}

// cowMap is a copy-on-write sharded map: freeze hands out the current
// table and marks it, its groups and its shards shared; a write to a shared
// shard copies it (and its group, and the table's slot for the group) first.
type cowMap[V any] struct {
	shards     table[V]
	groupOwned [groupCount]bool
	owned      [shardCount]bool
	n          int
	// frozen is the table handed out by the last freeze; changed says
	// whether a shard was created or copied since (an update with no
	// shard change is impossible: freeze marks every shard shared). A
	// freeze with nothing changed shares the last table instead of
	// copying it.
	frozen  *table[V]
	changed bool
}

func shardOf(k string) int {
	// FNV-1a: deterministic, allocation-free.
	h := uint32(2166136261)
	for i := 0; i < len(k); i++ {
		h ^= uint32(k[i])
		h *= 16777619
	}
	return int(h % shardCount)
}

func (c *cowMap[V]) writable(i int) *shard[V] {
	gi := i / groupSize
	g := c.shards[gi]
	switch {
	case g == nil:
		g = &group[V]{}
		c.shards[gi], c.groupOwned[gi] = g, true
	case !c.groupOwned[gi]:
		cp := *g
		g = &cp
		c.shards[gi], c.groupOwned[gi] = g, true
	}
	s := g[i%groupSize]
	if s == nil {
		s = &shard[V]{idx: make(map[string]int32)}
		g[i%groupSize] = s
		c.owned[i] = true
		c.changed = true
		return s
	}
	if !c.owned[i] {
		s = s.clone()
		g[i%groupSize] = s
		c.owned[i] = true
		c.changed = true
	}
	return s
}

func (c *cowMap[V]) get(k string) (V, bool) {
	var zero V
	s := c.shards.at(shardOf(k))
	if s == nil {
		return zero, false
	}
	i, ok := s.idx[k]
	if !ok {
		return zero, false
	}
	return s.vals[i], true
}

func (c *cowMap[V]) set(k string, v V) {
	s := c.writable(shardOf(k))
	if i, ok := s.idx[k]; ok {
		s.vals[i] = v
		return
	}
	s.idx[k] = int32(len(s.vals))
	s.keys = append(s.keys, k)
	s.vals = append(s.vals, v)
	c.n++
}

func (c *cowMap[V]) del(k string) bool {
	si := shardOf(k)
	if s := c.shards.at(si); s == nil {
		return false
	} else if _, ok := s.idx[k]; !ok {
		return false
	}
	s := c.writable(si)
	i := s.idx[k]
	last := int32(len(s.vals) - 1)
	if i != last {
		s.keys[i], s.vals[i] = s.keys[last], s.vals[last]
		s.idx[s.keys[i]] = i
	}
	var zero V
	s.vals[last] = zero // drop the reference for the GC
	s.keys = s.keys[:last]
	s.vals = s.vals[:last]
	delete(s.idx, k)
	c.n--
	return true
}

func (c *cowMap[V]) freeze() frozen[V] {
	if c.frozen != nil && !c.changed {
		return frozen[V]{shards: c.frozen, n: c.n}
	}
	cp := c.shards
	clear(c.groupOwned[:])
	clear(c.owned[:])
	c.frozen, c.changed = &cp, false
	return frozen[V]{shards: &cp, n: c.n}
}

// at is shard i (nil when it was never created).
func (f frozen[V]) at(i int) *shard[V] {
	if f.shards == nil {
		return nil
	}
	return f.shards.at(i)
}
