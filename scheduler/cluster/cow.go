package cluster

// shardCount splits each table so that a snapshot shares all shards with the
// store and a later update copies only the shard it touches: with 100,000
// jobs a copy is about 400 entries, not 100,000.
const shardCount = 256

type shard[V any] struct {
	m map[string]V
}

// frozen is a read-only table view held by a snapshot.
type frozen[V any] struct {
	shards *[shardCount]*shard[V]
	n      int
}

func (f frozen[V]) get(k string) (V, bool) {
	var zero V
	if f.shards == nil {
		return zero, false
	}
	s := f.shards[shardOf(k)]
	if s == nil {
		return zero, false
	}
	v, ok := s.m[k]
	return v, ok
}

func (f frozen[V]) each(fn func(k string, v V)) {
	if f.shards == nil {
		return
	}
	for _, s := range f.shards {
		if s == nil {
			continue
		}
		for k, v := range s.m {
			fn(k, v)
		}
	}
}

// cowMap is a copy-on-write sharded map: freeze hands out the current shards
// and marks them shared; a write to a shared shard copies it first.
type cowMap[V any] struct {
	shards [shardCount]*shard[V]
	owned  [shardCount]bool
	n      int
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
	s := c.shards[i]
	if s == nil {
		s = &shard[V]{m: make(map[string]V)}
		c.shards[i] = s
		c.owned[i] = true
		return s
	}
	if !c.owned[i] {
		cp := &shard[V]{m: make(map[string]V, len(s.m)+1)}
		for k, v := range s.m {
			cp.m[k] = v
		}
		c.shards[i] = cp
		c.owned[i] = true
		s = cp
	}
	return s
}

func (c *cowMap[V]) get(k string) (V, bool) {
	var zero V
	s := c.shards[shardOf(k)]
	if s == nil {
		return zero, false
	}
	v, ok := s.m[k]
	return v, ok
}

func (c *cowMap[V]) set(k string, v V) {
	s := c.writable(shardOf(k))
	if _, ok := s.m[k]; !ok {
		c.n++
	}
	s.m[k] = v
}

func (c *cowMap[V]) del(k string) bool {
	i := shardOf(k)
	if s := c.shards[i]; s == nil {
		return false
	} else if _, ok := s.m[k]; !ok {
		return false
	}
	delete(c.writable(i).m, k)
	c.n--
	return true
}

func (c *cowMap[V]) freeze() frozen[V] {
	cp := c.shards
	for i := range c.owned {
		c.owned[i] = false
	}
	return frozen[V]{shards: &cp, n: c.n}
}
