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
