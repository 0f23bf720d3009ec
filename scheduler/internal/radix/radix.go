// Package radix sorts 128-bit keys by a least-significant-digit radix
// sort: a handful of linear passes over small, pointer-free values instead
// of a comparison sort's n log n calls through a function value. The
// scheduler's two largest sorts use it, the engine's queue (by score and
// tie) and placement's running allocations (by job ID prefix); each maps
// what it sorts to keys and resolves equal keys itself.
package radix

import "slices"

// Key is a sort key, Hi then Lo, and the index of what it stands for. It
// holds no pointer: moving keys costs no write barriers.
type Key struct {
	Hi, Lo uint64
	I      int32
}

// Sort sorts keys by (Hi, Lo) ascending, equal keys in their input order
// (it is stable), and returns the sorted keys: keys itself or *scratch,
// which Sort grows as needed and the caller may keep for the next call.
// One pass counts the bytes of every position; byte positions where every
// key agrees are then skipped, so keys that differ in a few bytes sort in
// a few passes.
func Sort(keys []Key, scratch *[]Key) []Key {
	if len(keys) < 2 {
		return keys
	}
	if cap(*scratch) < len(keys) {
		*scratch = make([]Key, len(keys))
	}
	// counts[p][d]: keys whose byte p (0-7 of Lo, 8-15 of Hi, least
	// significant first) is d.
	var counts [16][256]int32
	for i := range keys {
		lo, hi := keys[i].Lo, keys[i].Hi
		for p := range 8 {
			counts[p][uint8(lo>>(8*p))]++
			counts[8+p][uint8(hi>>(8*p))]++
		}
	}
	a, b := keys, (*scratch)[:len(keys)]
	n := int32(len(keys))
	for p := range 16 {
		count := &counts[p]
		shift := uint(p%8) * 8
		word := func(k *Key) uint64 {
			if p < 8 {
				return k.Lo
			}
			return k.Hi
		}
		if count[uint8(word(&a[0])>>shift)] == n {
			continue // every key has this byte
		}
		var sum int32
		for d := range count {
			c := count[d]
			count[d] = sum
			sum += c
		}
		for i := range a {
			d := uint8(word(&a[i]) >> shift)
			b[count[d]] = a[i]
			count[d]++
		}
		a, b = b, a
	}
	return a
}

// SortFunc writes items into out in key order: keys[i] is the key of
// items[i] (its I field i), out is as long as items. Items with equal
// keys are then ordered by cmp among themselves, so the result is cmp's
// order wherever the keys order items as cmp does and tie where cmp
// needs more than the key (the engine's queue: score and tie, then the
// jobs; placement's gangs: a job-ID prefix, then the IDs). keys and
// *scratch are the radix sort's (see Sort).
func SortFunc[T any](items []T, keys []Key, scratch *[]Key, out []T, cmp func(a, b T) int) {
	sorted := Sort(keys, scratch)
	for k, key := range sorted {
		out[k] = items[key.I]
	}
	for i := 0; i < len(out); {
		j := i + 1
		for j < len(out) && sorted[j].Hi == sorted[i].Hi && sorted[j].Lo == sorted[i].Lo {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(out[i:j], cmp)
		}
		i = j
	}
}
