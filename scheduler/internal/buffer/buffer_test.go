package buffer

import "testing"

func TestZeroed(t *testing.T) {
	var buf []int
	a := Zeroed(&buf, 4)
	if len(a) != 4 || cap(buf) < 4 {
		t.Fatalf("Zeroed(nil, 4) = len %d, buffer cap %d", len(a), cap(buf))
	}
	for i := range a {
		a[i] = i + 1
	}
	// Smaller: the same array, cleared.
	b := Zeroed(&buf, 3)
	if &b[0] != &a[0] {
		t.Fatal("Zeroed reallocated a buffer large enough")
	}
	for i, v := range b {
		if v != 0 {
			t.Fatalf("b[%d] = %d, want 0", i, v)
		}
	}
	// Larger: a new array, kept in buf.
	c := Zeroed(&buf, 10)
	if len(c) != 10 || &buf[0] != &c[0] {
		t.Fatalf("Zeroed(&buf, 10): len %d, stored %v", len(c), &buf[0] == &c[0])
	}
}

// Windows of one array are disjoint and full-capped; an array short of
// room is replaced (refill) or left for a window of its own (no refill).
func TestWindow(t *testing.T) {
	var slab []int
	a := append(Window(&slab, 3, 8), 1, 2, 3)
	b := append(Window(&slab, 4, 8), 4, 5, 6, 7)
	if cap(a) != 3 || cap(b) != 4 || &a[:3][2] == &b[0] || len(slab) != 1 {
		t.Fatalf("windows cap %d and %d, %d left", cap(a), cap(b), len(slab))
	}
	if a = append(a, 99); b[0] != 4 {
		t.Fatal("an append past a window's length reached the next window")
	}
	// Too little left: a new array of refill elements.
	c := Window(&slab, 2, 8)
	if cap(c) != 2 || len(slab) != 6 {
		t.Fatalf("after refill: window cap %d, %d left", cap(c), len(slab))
	}
	// Longer than refill: an array of exactly that many.
	if d := Window(&slab, 20, 8); cap(d) != 20 || len(slab) != 0 {
		t.Fatalf("long window cap %d, %d left", cap(d), len(slab))
	}
	// No refill: a window of its own, the slab untouched.
	slab = make([]int, 2)
	if e := Window(&slab, 5, 0); cap(e) != 5 || len(slab) != 2 {
		t.Fatalf("no refill: window cap %d, slab %d", cap(e), len(slab))
	}
}
