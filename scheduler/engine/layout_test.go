package engine

import (
	"fmt"
	"testing"
)

// The layout holds every entry of the queue, in order, whether the rest
// is copied before the decisions (one core) or while they read it (under
// -race, the hand-over of the second half is checked too), or read in
// place (the cache's own entries, none copied), and a later, shorter
// queue laid out in the same memory holds only its own entries.
func TestQueueLayoutCopiesTheQueueInOrder(t *testing.T) {
	o := &orderer{c: &cycle{e: &Engine{}}}
	for _, n := range []int{0, 1, 2, 7, 1000, 10} { // 10 after 1000: memory reused
		for _, mode := range []string{"before", "beside", "in place"} {
			beside, inPlace := mode == "beside", mode == "in place"
			t.Run(fmt.Sprintf("%d-%s", n, mode), func(t *testing.T) {
				entries := make([]queued, n)
				queue := make([]*queued, n)
				for i := range entries {
					entries[i] = queued{id: fmt.Sprintf("job-%d", n-i), gpus: i}
					queue[i] = &entries[i]
				}
				l := o.layOut(queue, inPlace)
				done := make(chan struct{})
				if beside {
					go func() { defer close(done); l.fillRest() }()
				} else {
					l.fillRest()
					close(done)
				}
				if l.len() != n {
					t.Fatalf("laid out %d entries, want %d", l.len(), n)
				}
				for i := range n {
					q := l.at(i)
					if q.id != queue[i].id || q.gpus != i {
						t.Fatalf("entry %d is %s (gpus %d), want %s (gpus %d)", i, q.id, q.gpus, queue[i].id, i)
					}
					if (q == queue[i]) != inPlace {
						t.Fatalf("entry %d: the cache's own %t, want %t", i, q == queue[i], inPlace)
					}
				}
				<-done
				for i := range n {
					if q := l.filled(i); q != l.at(i) {
						t.Fatalf("entry %d: filled and at differ", i)
					}
				}
			})
		}
	}
}
