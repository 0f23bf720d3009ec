package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// sortQueue orders keys exactly as a comparison sort by cmpQkey does:
// negative, zero (both signs) and positive totals, many ties on total and
// on tie (resolved by priority, submit nanoseconds and ID), short and long
// queues.
func TestSortQueueMatchesComparisonSort(t *testing.T) {
	for _, n := range []int{0, 1, 5, 63, 64, 65, 500, 3000} {
		for seed := range uint64(4) {
			rng := rand.New(rand.NewPCG(seed, uint64(n)))
			totals := []float64{-12.5, -0.0, 0, 0.25, 1e-300, 7, 7, 1000.125, math.Copysign(0, -1), 1e9}
			keys := make([]qkey, n)
			for i := range keys {
				j := &cluster.Job{ID: fmt.Sprintf("j%05d-%d", rng.IntN(n*2+1), i), Priority: 40 + 10*rng.IntN(2),
					Submit: t0.Add(time.Duration(rng.IntN(3)) * time.Second).Add(time.Duration(rng.IntN(2)) * time.Nanosecond)}
				q := &queued{job: j, id: j.ID, prio: int32(j.Priority)}
				q.setTimes(j)
				q.tie, q.tieOK = tieOf(j)
				total := totals[rng.IntN(len(totals))]
				if rng.IntN(3) == 0 {
					total = rng.Float64()*200 - 100
				}
				keys[i] = qkey{total: total, tie: q.tie, q: q}
				if seed == 3 {
					keys[i].tie = 0 // unpacked: every tie left to cmpQueued
				}
			}
			want := slices.Clone(keys)
			slices.SortFunc(want, cmpQkey)
			for _, laidOut := range []bool{false, true} {
				got := slices.Clone(keys)
				sortQueue(got, &radixBuf{}, laidOut)
				for i := range want {
					if got[i].q != want[i].q {
						t.Fatalf("n=%d seed=%d laidOut=%v: position %d holds %s (total %v), want %s (total %v)", n, seed, laidOut, i, got[i].q.job.ID, got[i].total, want[i].q.job.ID, want[i].total)
					}
				}
			}
		}
	}
}

// A queue laid out in the last cycle's order with a few scores moved is
// mended in one pass and a merge (mendOrder), and gives the comparison
// sort's order; with too many keys out of place mendOrder declines and
// the radix sort orders them.
func TestSortQueueMendsNearlySortedQueues(t *testing.T) {
	for _, n := range []int{64, 500, 3000} {
		for _, moved := range []int{0, 1, 2, 7, n / 40, n / 4} {
			rng := rand.New(rand.NewPCG(uint64(n), uint64(moved)))
			keys := make([]qkey, n)
			for i := range keys {
				j := &cluster.Job{ID: fmt.Sprintf("j%05d", i), Priority: 50, Submit: t0.Add(time.Duration(rng.IntN(5)) * time.Second)}
				q := &queued{job: j, id: j.ID, prio: int32(j.Priority)}
				q.setTimes(j)
				q.tie, q.tieOK = tieOf(j)
				keys[i] = qkey{total: float64(rng.IntN(n / 4)), tie: q.tie, q: q}
			}
			slices.SortFunc(keys, cmpQkey)
			for range moved { // a score moved up or down, ties included
				keys[rng.IntN(n)].total = float64(rng.IntN(n / 4))
			}
			want := slices.Clone(keys)
			slices.SortFunc(want, cmpQkey)
			got := slices.Clone(keys)
			mended := mendOrder(got, &radixBuf{})
			// Each moved key takes out at most itself and one neighbour.
			if 2*moved <= n/16 && !mended {
				t.Errorf("n=%d moved=%d: mendOrder declined %d keys out of order", n, moved, moved)
			}
			if moved >= n/4 && mended {
				t.Errorf("n=%d moved=%d: mendOrder took a queue a quarter out of order", n, moved)
			}
			if !mended && !slices.Equal(got, keys) {
				t.Fatalf("n=%d moved=%d: mendOrder declined but changed the keys", n, moved)
			}
			got = slices.Clone(keys)
			sortQueue(got, &radixBuf{}, true)
			for i := range want {
				if got[i].q != want[i].q {
					t.Fatalf("n=%d moved=%d: position %d holds %s (total %v), want %s (total %v)", n, moved, i, got[i].q.id, got[i].total, want[i].q.id, want[i].total)
				}
			}
		}
	}
}
