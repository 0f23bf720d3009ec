package placement

import (
	"fmt"
	"reflect"
	"testing"

	"pgregory.net/rapid"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// holderView is what a State says about its gangs, comparable across
// States.
type holderView struct {
	JobID    string
	HasJob   bool
	Job      *cluster.Job
	Allocs   []string
	Slots    []Slot
	GPUs     int
	Stopping bool
}

func holdersOf(s *State) []holderView {
	var out []holderView
	for _, h := range s.Holders() {
		v := holderView{JobID: h.JobID, HasJob: h.Job != nil, Job: h.Job, Slots: h.Slots, GPUs: h.GPUs, Stopping: h.Stopping}
		for _, a := range h.Allocs {
			v.Allocs = append(v.Allocs, a.ID)
		}
		out = append(out, v)
	}
	return out
}

// A Cache reused across a sequence of snapshots (nodes, jobs and
// allocations added, replaced and removed between them) builds exactly the
// State a fresh cache builds from each snapshot: what it keeps per shard
// (and the gang order it merges changed shards into) is redone whenever
// the shard (or the node table) changed.
func TestCacheReuseMatchesFresh(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		store := cluster.NewStore()
		cache := NewCache()
		upsertNode := func(i int) {
			id := fmt.Sprintf("n%d", i)
			n := &cluster.Node{ID: id, Pool: rapid.SampledFrom([]string{"a", "b"}).Draw(t, "pool"), Eligible: true, Ready: rapid.Bool().Draw(t, "ready")}
			for k := range 4 {
				n.GPUs = append(n.GPUs, cluster.GPU{ID: fmt.Sprintf("%s-%d", id, k), Index: k, Island: k / 2, Healthy: rapid.IntRange(0, 5).Draw(t, "h") > 0})
			}
			if err := store.UpsertNode(n); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 4 {
			upsertNode(i)
		}
		for step := range 12 {
			for range rapid.IntRange(0, 4).Draw(t, "changes") {
				switch rapid.IntRange(0, 5).Draw(t, "kind") {
				case 0:
					upsertNode(rapid.IntRange(0, 5).Draw(t, "node"))
				case 1:
					store.DeleteNode(fmt.Sprintf("n%d", rapid.IntRange(0, 5).Draw(t, "node")))
				case 2:
					j := &cluster.Job{ID: fmt.Sprintf("j%d", rapid.IntRange(0, 6).Draw(t, "job")), Priority: step, State: cluster.JobRunning}
					if err := store.UpsertJob(j); err != nil {
						t.Fatal(err)
					}
				case 3:
					store.DeleteJob(fmt.Sprintf("j%d", rapid.IntRange(0, 6).Draw(t, "job")))
				case 4:
					node := rapid.IntRange(0, 5).Draw(t, "node")
					a := &cluster.Alloc{
						ID:       fmt.Sprintf("a%d", rapid.IntRange(0, 9).Draw(t, "alloc")),
						JobID:    fmt.Sprintf("j%d", rapid.IntRange(0, 6).Draw(t, "job")),
						NodeID:   fmt.Sprintf("n%d", node),
						GPUs:     []string{fmt.Sprintf("n%d-%d", node, rapid.IntRange(0, 3).Draw(t, "gpu"))},
						Stopping: rapid.IntRange(0, 4).Draw(t, "stopping") == 0,
					}
					if err := store.UpsertAlloc(a); err != nil {
						t.Fatal(err)
					}
				case 5:
					store.DeleteAlloc(fmt.Sprintf("a%d", rapid.IntRange(0, 9).Draw(t, "alloc")))
				}
			}
			snap := store.Snapshot()
			got, want := New(snap, nil, cache), New(snap, nil, nil)
			if !reflect.DeepEqual(capture(got), capture(want)) {
				t.Fatalf("step %d: capacity with a reused cache %+v, fresh %+v", step, capture(got), capture(want))
			}
			if !reflect.DeepEqual(holdersOf(got), holdersOf(want)) {
				t.Fatalf("step %d: gangs with a reused cache %+v, fresh %+v", step, holdersOf(got), holdersOf(want))
			}
			for _, pool := range []string{"", "a", "b"} {
				if got.FreeGPUs(pool) != want.FreeGPUs(pool) {
					t.Fatalf("step %d: pool %q free %d with a reused cache, %d fresh", step, pool, got.FreeGPUs(pool), want.FreeGPUs(pool))
				}
			}
		}
	})
}
