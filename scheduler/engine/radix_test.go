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
				q := &queued{job: j, id: j.ID, prio: j.Priority, submit: j.Submit}
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
			got := slices.Clone(keys)
			sortQueue(got, &radixBuf{})
			for i := range want {
				if got[i].q != want[i].q {
					t.Fatalf("n=%d seed=%d: position %d holds %s (total %v), want %s (total %v)", n, seed, i, got[i].q.job.ID, got[i].total, want[i].q.job.ID, want[i].total)
				}
			}
		}
	}
}
