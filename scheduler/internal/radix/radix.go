// Package radix sorts 128-bit keys by a least-significant-digit radix
// sort: a handful of linear passes over small, pointer-free values instead
// of a comparison sort's n log n calls through a function value. The
// scheduler's two largest sorts use it, the engine's queue (by score and
// tie) and placement's running allocations (by job ID prefix); each maps
// what it sorts to keys and resolves equal keys itself.
package radix

// Key is a sort key, Hi then Lo, and the index of what it stands for. It
// holds no pointer: moving keys costs no write barriers.
type Key struct {
	Hi, Lo uint64
	I      int32
}

// Sort sorts keys by (Hi, Lo) ascending, equal keys in their input order
// (it is stable), and returns the sorted keys: keys itself or *scratch,
// which Sort grows as needed and the caller may keep for the next call.
// Byte positions where every key agrees are skipped, so keys that differ
// in a few bytes sort in a few passes.
func Sort(keys []Key, scratch *[]Key) []Key {
	if len(keys) < 2 {
		return keys
	}
	if cap(*scratch) < len(keys) {
		*scratch = make([]Key, len(keys))
	}
	a, b := keys, (*scratch)[:len(keys)]
	var count [256]int
	for pass := range 16 {
		shift := uint(pass%8) * 8
		digit := func(k *Key) uint8 {
			if pass < 8 {
				return uint8(k.Lo >> shift)
			}
			return uint8(k.Hi >> shift)
		}
		clear(count[:])
		for i := range a {
			count[digit(&a[i])]++
		}
		if count[digit(&a[0])] == len(a) {
			continue // every key has this byte
		}
		sum := 0
		for d := range count {
			c := count[d]
			count[d] = sum
			sum += c
		}
		for i := range a {
			d := digit(&a[i])
			b[count[d]] = a[i]
			count[d]++
		}
		a, b = b, a
	}
	return a
}
