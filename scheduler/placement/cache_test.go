package placement

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/internal/radix"
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
				if got.FreeGPUs(pool) != want.FreeGPUs(pool) || got.ReservedFreeGPUs(pool) != want.ReservedFreeGPUs(pool) {
					t.Fatalf("step %d: pool %q free %d (reserved %d) with a reused cache, %d (%d) fresh", step, pool,
						got.FreeGPUs(pool), got.ReservedFreeGPUs(pool), want.FreeGPUs(pool), want.ReservedFreeGPUs(pool))
				}
			}
			// The cycle then works in the State (takes, reservations,
			// releases, some rolled back, some kept): the next State the
			// cache builds in the same memory must not inherit any of it.
			for range rapid.IntRange(0, 6).Draw(t, "ops") {
				if got.NumNodes() == 0 {
					break
				}
				sl := Slot{Node: rapid.IntRange(0, got.NumNodes()-1).Draw(t, "op node"), Mask: uint64(rapid.IntRange(1, 15).Draw(t, "op mask"))}
				cp := got.Checkpoint()
				switch rapid.IntRange(0, 2).Draw(t, "op") {
				case 0:
					got.Take(sl)
				case 1:
					got.Reserve(sl)
				case 2:
					if len(got.Holders()) > 0 {
						got.ReleaseHolder(rapid.IntRange(0, len(got.Holders())-1).Draw(t, "op holder"))
					}
				}
				if rapid.Bool().Draw(t, "rollback") {
					got.Rollback(cp)
				}
			}
			got.Commit()
		}
	})
}

// sortRefs orders refs exactly as comparing (job ID, allocation ID) as
// strings does, whatever the IDs: sharing a beginning or not, shorter or
// longer than the 16 bytes after it that it sorts by first, equal in
// them, a prefix of one another, with zero bytes (which the keys pad
// with) or bytes above 0x7f.
func TestSortRefsOrdersAsStrings(t *testing.T) {
	alphabet := []byte{0, 1, 'a', 'b', 0x7f, 0x80, 0xff}
	stems := rapid.SampledFrom([]string{"", "default/train-", "default/train-resnet-"})
	rapid.Check(t, func(t *rapid.T) {
		// Stems make 16-byte prefixes tie often; one stem for all makes
		// the beginning every ID shares long.
		shared := rapid.Bool().Draw(t, "one stem")
		stem := stems.Draw(t, "stem")
		id := rapid.Custom(func(t *rapid.T) string {
			if !shared {
				stem = stems.Draw(t, "stem")
			}
			tail := rapid.SliceOfN(rapid.SampledFrom(alphabet), 0, 20).Draw(t, "tail")
			return stem + string(tail)
		})
		// Below 64 refs a comparison sort runs, from 64 the radix sort.
		n := rapid.IntRange(0, 200).Draw(t, "refs")
		refs := make([]ref, n)
		for i := range refs {
			refs[i] = ref{job: id.Draw(t, "job"), id: id.Draw(t, "alloc"), shard: i}
		}
		want := slices.Clone(refs)
		slices.SortStableFunc(want, cmpRef)
		var scratch [2][]radix.Key
		var out []ref
		got, _ := sortRefs(slices.Clone(refs), &scratch, &out)
		for i := range want {
			if cmpRef(got[i], want[i]) != 0 {
				t.Fatalf("position %d: %q/%q, want %q/%q", i, got[i].job, got[i].id, want[i].job, want[i].id)
			}
		}
	})
}

// A node's statics hold one mask per NVLink island in island-number
// order (negative numbers first) and one per device group in name order,
// the healthy mask, and whether a named group spans islands, for any
// order the GPUs come in.
func TestNodeStaticMasks(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := &cluster.Node{ID: "n"}
		count := rapid.IntRange(0, cluster.MaxGPUsPerNode).Draw(t, "gpus")
		for i := range count {
			n.GPUs = append(n.GPUs, cluster.GPU{
				ID:      fmt.Sprintf("g%d", i),
				Island:  rapid.IntRange(-3, 3).Draw(t, "island"),
				Group:   rapid.SampledFrom([]string{"", "a", "b", "c"}).Draw(t, "group"),
				Healthy: rapid.Bool().Draw(t, "healthy"),
			})
		}
		ns := new(staticSlab).newNodeStatic(n)
		var islandIDs []int
		var groupNames []string
		var healthy uint64
		for i, g := range n.GPUs {
			if !slices.Contains(islandIDs, g.Island) {
				islandIDs = append(islandIDs, g.Island)
			}
			if !slices.Contains(groupNames, g.Group) {
				groupNames = append(groupNames, g.Group)
			}
			if g.Healthy {
				healthy |= 1 << i
			}
		}
		slices.Sort(islandIDs)
		slices.Sort(groupNames)
		wantIsl := make([]uint64, len(islandIDs))
		wantGrp := make([]uint64, len(groupNames))
		for i, g := range n.GPUs {
			wantIsl[slices.Index(islandIDs, g.Island)] |= 1 << i
			wantGrp[slices.Index(groupNames, g.Group)] |= 1 << i
		}
		spanning := false
		for k, gm := range wantGrp {
			spans := 0
			for _, im := range wantIsl {
				if gm&im != 0 {
					spans++
				}
			}
			spanning = spanning || (groupNames[k] != "" && spans > 1)
		}
		if !slices.Equal(ns.islands, wantIsl) || !slices.Equal(ns.groups, wantGrp) || !slices.Equal(ns.groupNames, groupNames) {
			t.Fatalf("islands %b groups %b %q, want %b %b %q", ns.islands, ns.groups, ns.groupNames, wantIsl, wantGrp, groupNames)
		}
		if ns.healthy != healthy || ns.spanning != spanning {
			t.Fatalf("healthy %b spanning %v, want %b %v", ns.healthy, ns.spanning, healthy, spanning)
		}
	})
}

// Statics made one after another from one slab, across its arrays, are
// each as if made alone: no static's windows reach another's.
func TestStaticSlabKeepsStaticsApart(t *testing.T) {
	var slab staticSlab
	var nodes []*cluster.Node
	var made []*nodeStatic
	for k := range 3 * slabLen {
		n := &cluster.Node{ID: fmt.Sprintf("n%d", k)}
		for i := range k % (cluster.MaxGPUsPerNode + 1) {
			n.GPUs = append(n.GPUs, cluster.GPU{ID: fmt.Sprintf("g%d", i), Island: (i * k) % 5, Group: fmt.Sprintf("grp%d", (i+k)%3), Healthy: (i+k)%4 != 0})
		}
		nodes = append(nodes, n)
		made = append(made, slab.newNodeStatic(n))
	}
	for k, n := range nodes {
		want := new(staticSlab).newNodeStatic(n)
		got := made[k]
		if got.healthy != want.healthy || !slices.Equal(got.islands, want.islands) || !slices.Equal(got.groups, want.groups) ||
			!slices.Equal(got.groupNames, want.groupNames) || got.spanning != want.spanning {
			t.Fatalf("node %d: static %+v, alone %+v", k, *got, *want)
		}
		if cap(got.islands) != len(got.islands) || cap(got.groups) != len(got.groups) || cap(got.groupNames) != len(got.groupNames) {
			t.Fatalf("node %d: windows with room past their length", k)
		}
	}
}
