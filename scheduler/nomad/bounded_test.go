package nomad

import (
	"fmt"
	"testing"
)

// Per-job notes stay bounded: the oldest are forgotten first, a note
// deleted and set again counts as new, and the newest are always kept.
func TestBoundedMap(t *testing.T) {
	n := newBounded[string](3)
	n.set("a", "1")
	n.set("b", "1")
	n.del("a")
	n.set("a", "2") // re-set: now the newest
	n.set("c", "1")
	n.set("b", "2") // updated, keeps its age
	n.set("d", "1") // over capacity: b, the oldest live note, goes
	get := func(k string) string { v, _ := n.get(k); return v }
	if _, ok := n.get("b"); ok || get("a") != "2" || get("c") != "1" || get("d") != "1" {
		t.Fatalf("notes = %v, want a, c, d kept and b forgotten", n.m)
	}
	for i := range 100 {
		n.set(fmt.Sprint("k", i), "x")
		if i%3 == 0 {
			n.del(fmt.Sprint("k", i))
		}
	}
	if len(n.m) > 3 || len(n.order) > 6 || get("k98") != "x" {
		t.Fatalf("after churn: %d notes, %d order entries, k98=%q", len(n.m), len(n.order), get("k98"))
	}
}
