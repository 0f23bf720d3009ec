// Package buffer holds the one helper the scheduling core uses to keep
// per-cycle memory between cycles (the engine's scratch tables,
// placement's State): a cycle that fills megabytes of tables and drops
// them leaves the garbage collector to find them again, so the next cycle
// refills the same arrays instead.
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
