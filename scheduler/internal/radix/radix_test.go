package radix

import (
	"cmp"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// Sort orders keys as a stable comparison sort by (Hi, Lo) does: keys
// equal in many bytes, in all of them, or in none; short and long inputs;
// scratch space too small, reused, or large enough.
func TestSortMatchesStableComparisonSort(t *testing.T) {
	word := rapid.Custom(func(t *rapid.T) uint64 {
		// A few distinct bytes in a few positions: most passes are
		// skipped, the others see many equal digits.
		var w uint64
		for range rapid.IntRange(0, 3).Draw(t, "bytes") {
			pos := rapid.IntRange(0, 7).Draw(t, "pos")
			w |= uint64(rapid.SampledFrom([]byte{0, 1, 0x7f, 0x80, 0xff}).Draw(t, "byte")) << (8 * pos)
		}
		return w
	})
	var scratch []Key
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 300).Draw(t, "keys")
		keys := make([]Key, n)
		for i := range keys {
			keys[i] = Key{Hi: word.Draw(t, "hi"), Lo: word.Draw(t, "lo"), I: int32(i)}
		}
		want := slices.Clone(keys)
		slices.SortStableFunc(want, func(x, y Key) int {
			if c := cmp.Compare(x.Hi, y.Hi); c != 0 {
				return c
			}
			return cmp.Compare(x.Lo, y.Lo)
		})
		if rapid.Bool().Draw(t, "fresh scratch") {
			scratch = nil
		}
		if got := Sort(keys, &scratch); !slices.Equal(got, want) {
			t.Fatalf("Sort = %v, want %v", got, want)
		}
	})
}

// SortFunc gives cmp's order when the keys agree with cmp but tie items
// cmp tells apart: here the key is an item's high byte, cmp the whole
// item.
func TestSortFuncResolvesEqualKeysByCmp(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		items := rapid.SliceOfN(rapid.Uint16Range(0, 0x3ff), 0, 300).Draw(t, "items")
		keys := make([]Key, len(items))
		for i, it := range items {
			keys[i] = Key{Lo: uint64(it >> 8), I: int32(i)}
		}
		want := slices.Clone(items)
		slices.Sort(want)
		got := make([]uint16, len(items))
		var scratch []Key
		SortFunc(items, keys, &scratch, got, cmp.Compare[uint16])
		if !slices.Equal(got, want) {
			t.Fatalf("SortFunc = %v, want %v", got, want)
		}
	})
}
