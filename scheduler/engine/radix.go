package engine

import (
	"math"
	"slices"

	"github.com/impact-sched/nomad-impact/scheduler/internal/radix"
)

// sortQueue sorts queue keys as cmpQkey orders them, by an LSD radix sort
// on (total, tie) and a final sort of each run of equal (total, tie) by
// cmpQkey (radix.SortFunc): for ten thousand jobs a handful of linear
// passes instead of a comparison sort's ~140,000 calls through a function
// value (the queue was the cycle's largest sort; see package radix).
// buf holds the sort's scratch arrays, kept for the next cycle. laidOut
// says the keys are laid out in the last cycle's order (mostly sorted,
// worth mending: mendOrder); without one (a new engine) the radix sort
// runs at once.
func sortQueue(keys []qkey, buf *radixBuf, laidOut bool) {
	if len(keys) < 64 {
		insertionSortQkeys(keys)
		return
	}
	if laidOut && mendOrder(keys, buf) {
		return
	}
	if cap(buf.a) < len(keys) {
		buf.a = make([]radix.Key, len(keys))
	}
	a := buf.a[:len(keys)]
	for i, k := range keys {
		a[i] = radix.Key{Hi: ^orderedBits(k.total), Lo: k.tie, I: int32(i)}
	}
	if cap(buf.keys) < len(keys) {
		buf.keys = make([]qkey, len(keys))
	}
	sorted := buf.keys[:len(keys)]
	// Runs of equal (total, tie) are ordered by the jobs themselves.
	radix.SortFunc(keys, a, &buf.b, sorted, cmpQkey)
	copy(keys, sorted)
	clear(sorted) // keep no job alive
}

// radixBuf is sortQueue's scratch space.
type radixBuf struct {
	// a: the keys' radix keys, hi the total (descending), lo the tie
	// (ascending); b: the radix sort's scratch.
	a, b []radix.Key
	keys []qkey
	out  []qkey // mendOrder's keys out of order
}

// mendOrder sorts keys that are mostly in order already (the queue is laid
// out in the last cycle's order and scores move little) in one pass and a
// merge: every key that breaks the order is taken out with the key before
// it, which leaves the rest sorted and takes out at most twice as many
// keys as the fewest whose removal would; the keys taken out are sorted
// and merged back. It gives up (reporting false, keys unchanged) once
// more than a sixteenth of the keys are out, where the radix sort is the
// cheaper.
func mendOrder(keys []qkey, buf *radixBuf) bool {
	limit := len(keys) / 16
	if cap(buf.keys) < len(keys) {
		buf.keys = make([]qkey, len(keys))
	}
	kept := buf.keys[:0]
	out := buf.out[:0]
	defer func() {
		clear(buf.keys[:len(keys)]) // keep no job alive
		clear(out)
		buf.out = out[:0]
	}()
	for _, k := range keys {
		if n := len(kept); n > 0 && cmpQkey(k, kept[n-1]) < 0 {
			out = append(out, kept[n-1], k)
			kept = kept[:n-1]
			if len(out) > limit {
				return false
			}
			continue
		}
		kept = append(kept, k)
	}
	if len(out) == 0 {
		return true
	}
	if len(out) < 64 {
		insertionSortQkeys(out)
	} else {
		slices.SortFunc(out, cmpQkey)
	}
	i, j := 0, 0
	for w := range keys {
		if j == len(out) || (i < len(kept) && cmpQkey(kept[i], out[j]) <= 0) {
			keys[w] = kept[i]
			i++
		} else {
			keys[w] = out[j]
			j++
		}
	}
	return true
}

// orderedBits maps a float to bits whose unsigned order is the float's
// order (-0 and +0 alike, as cmpQkey's comparison sees them).
func orderedBits(f float64) uint64 {
	if f == 0 {
		f = 0
	}
	b := math.Float64bits(f)
	if b>>63 != 0 {
		return ^b
	}
	return b | 1<<63
}

func insertionSortQkeys(keys []qkey) {
	for i := 1; i < len(keys); i++ {
		k := keys[i]
		j := i
		for j > 0 && cmpQkey(k, keys[j-1]) < 0 {
			keys[j] = keys[j-1]
			j--
		}
		keys[j] = k
	}
}
