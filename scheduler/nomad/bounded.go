package nomad

// bounded is a map that forgets its oldest entries beyond a capacity: the
// adapter keeps per-job notes (outcomes, the last explanation written) for
// as long as it runs, and jobs come and go by the hundred thousand. Not
// safe for concurrent use.
type bounded[V any] struct {
	max   int
	gen   uint64
	m     map[string]boundedEntry[V]
	order []boundedKey // oldest first; entries of deleted or re-set keys are stale
}

type boundedEntry[V any] struct {
	v   V
	gen uint64
}

type boundedKey struct {
	k   string
	gen uint64
}

func newBounded[V any](max int) *bounded[V] {
	return &bounded[V]{max: max, m: map[string]boundedEntry[V]{}}
}

func (b *bounded[V]) get(k string) (V, bool) {
	e, ok := b.m[k]
	return e.v, ok
}

func (b *bounded[V]) del(k string) { delete(b.m, k) }

// set stores v under k; a key set again keeps its age, a key deleted and
// set again is new.
func (b *bounded[V]) set(k string, v V) {
	if old, ok := b.m[k]; ok {
		b.m[k] = boundedEntry[V]{v: v, gen: old.gen}
		return
	}
	b.gen++
	b.m[k] = boundedEntry[V]{v: v, gen: b.gen}
	b.order = append(b.order, boundedKey{k, b.gen})
	for len(b.m) > b.max {
		old := b.order[0]
		b.order = b.order[1:]
		if cur, ok := b.m[old.k]; ok && cur.gen == old.gen {
			delete(b.m, old.k)
		}
	}
	if len(b.order) > 2*b.max {
		live := make([]boundedKey, 0, len(b.m))
		for _, o := range b.order {
			if cur, ok := b.m[o.k]; ok && cur.gen == o.gen {
				live = append(live, o)
			}
		}
		b.order = live
	}
}
