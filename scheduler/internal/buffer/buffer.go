// Package buffer holds the scheduling core's two helpers for memory the
// collector would otherwise find again and again. Zeroed keeps per-cycle
// memory between cycles (the engine's scratch tables, placement's
// State): a cycle that fills megabytes of tables and drops them leaves
// the garbage collector to find them again, so the next cycle refills
// the same arrays instead. Window hands out many small slices as windows
// of a few shared arrays (a new engine's queue cache, placement's node
// statics, preempt's per-node candidate lists): the collector's cost
// grows with the count of objects as well as their bytes.
package buffer

// Zeroed returns *buf resized to n zero values, reallocating (and storing
// the new array in *buf) only when it is too small.
func Zeroed[T any](buf *[]T, n int) []T {
	if cap(*buf) < n {
		*buf = make([]T, n)
	}
	s := (*buf)[:n]
	clear(s)
	return s
}

// Window returns an empty slice of capacity n taken from the front of
// *from (which keeps what is left), its capacity cut at n so that no
// append reaches the next window. When *from has less than n left, it is
// first replaced by a new array of max(refill, n) elements, or, with
// refill 0, the window is an array of its own and *from is left as it is.
// An array lives as long as any window of it does.
func Window[T any](from *[]T, n, refill int) []T {
	if len(*from) < n {
		if refill <= 0 {
			return make([]T, 0, n)
		}
		*from = make([]T, max(refill, n))
	}
	w := (*from)[:0:n]
	*from = (*from)[n:]
	return w
}
