package placement

import (
	"fmt"
	"math/bits"
	"testing"

	"pgregory.net/rapid"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

func genSnapshot(t *rapid.T) *cluster.Snapshot {
	store := cluster.NewStore()
	for i := range rapid.IntRange(1, 5).Draw(t, "nodes") {
		id := fmt.Sprintf("n%d", i)
		n := &cluster.Node{ID: id, Pool: "gpu", Eligible: true, Ready: rapid.IntRange(0, 7).Draw(t, "ready") > 0}
		g := rapid.SampledFrom([]int{2, 4, 8}).Draw(t, "gpus")
		for k := range g {
			n.GPUs = append(n.GPUs, cluster.GPU{ID: fmt.Sprintf("%s-%d", id, k), Index: k, Island: k / (g / 2), Healthy: rapid.IntRange(0, 9).Draw(t, "h") > 0})
		}
		if err := store.UpsertNode(n); err != nil {
			t.Fatal(err)
		}
		used := rapid.IntRange(0, g).Draw(t, "used")
		if used > 0 {
			a := &cluster.Alloc{ID: "a-" + id, JobID: "j-" + id, NodeID: id}
			for k := range used {
				a.GPUs = append(a.GPUs, fmt.Sprintf("%s-%d", id, k))
			}
			if err := store.UpsertAlloc(a); err != nil {
				t.Fatal(err)
			}
		}
	}
	return store.Snapshot()
}

type view struct{ used, reserved, free []uint64 }

func capture(s *State) view {
	var v view
	for i := range s.NumNodes() {
		v.used = append(v.used, s.Used(i))
		v.reserved = append(v.reserved, s.Reserved(i))
		v.free = append(v.free, s.Free(i))
	}
	return v
}

// Placement is all-or-nothing: a failed Place leaves the state exactly as
// it was, a successful one takes exactly the GPUs it returns (free, healthy,
// schedulable, right count, NVLink island when asked), and Rollback undoes
// it. The free-capacity index always agrees with the masks.
func TestPlaceTransaction(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		snap := genSnapshot(t)
		s := New(snap, nil, NewCache())
		for step := range 6 {
			var req Request
			for g := range rapid.IntRange(1, 2).Draw(t, "groups") {
				req.Groups = append(req.Groups, Group{
					Name:     fmt.Sprint("g", g),
					Count:    rapid.IntRange(1, 3).Draw(t, "count"),
					GPUs:     rapid.IntRange(1, 4).Draw(t, "per"),
					Topology: jobspec.Topology(rapid.SampledFrom([]string{"", "nvlink", "node", "any"}).Draw(t, "topo")),
				})
			}
			before := capture(s)
			cp := s.Checkpoint()
			res, ok := s.Place(req, Rejections{})
			if !ok {
				if fmt.Sprint(capture(s)) != fmt.Sprint(before) {
					t.Fatalf("step %d: failed Place changed the state", step)
				}
				continue
			}
			for gi, g := range req.Groups {
				if len(res.Groups[gi]) != g.Count {
					t.Fatalf("group %d: %d slots, want %d", gi, len(res.Groups[gi]), g.Count)
				}
				for _, sl := range res.Groups[gi] {
					if bits.OnesCount64(sl.Mask) != g.GPUs {
						t.Fatalf("slot with %d GPUs, want %d", bits.OnesCount64(sl.Mask), g.GPUs)
					}
					if sl.Mask&^before.free[sl.Node] != 0 {
						t.Fatalf("slot takes GPUs that were not free")
					}
					if !s.Schedulable(sl.Node) {
						t.Fatalf("slot on an unschedulable node")
					}
					if g.Topology == jobspec.TopologyNVLink {
						n := s.Node(sl.Node)
						isl := map[int]bool{}
						for m := sl.Mask; m != 0; m &= m - 1 {
							isl[n.GPUs[bits.TrailingZeros64(m)].Island] = true
						}
						if len(isl) != 1 {
							t.Fatalf("nvlink slot spans %d islands", len(isl))
						}
					}
					if sl.Mask&s.Used(sl.Node) != sl.Mask {
						t.Fatalf("placed GPUs not marked used")
					}
				}
			}
			if rapid.Bool().Draw(t, "rollback") {
				s.Rollback(cp)
				if fmt.Sprint(capture(s)) != fmt.Sprint(before) {
					t.Fatalf("rollback did not restore the state")
				}
			}
			// The index agrees with the masks.
			sum := 0
			for i := range s.NumNodes() {
				if s.Schedulable(i) {
					sum += bits.OnesCount64(s.Free(i))
				}
			}
			if s.FreeGPUs("") != sum || s.FreeGPUs("gpu") != sum {
				t.Fatalf("index says %d free, masks say %d", s.FreeGPUs(""), sum)
			}
		}
	})
}

func TestRejectionsExplain(t *testing.T) {
	store := cluster.NewStore()
	n := &cluster.Node{ID: "n1", Pool: "gpu", Eligible: true, Ready: true}
	for k := range 8 {
		n.GPUs = append(n.GPUs, cluster.GPU{ID: fmt.Sprint("g", k), Island: k / 4, Healthy: true})
	}
	_ = store.UpsertNode(n)
	_ = store.UpsertNode(&cluster.Node{ID: "n2", Pool: "cpu", Eligible: true, Ready: true})
	_ = store.UpsertAlloc(&cluster.Alloc{ID: "a", JobID: "j", NodeID: "n1", GPUs: []string{"g0", "g4"}})
	s := New(store.Snapshot(), nil, nil)
	rej := Rejections{}
	if _, ok := s.Place(Request{Pool: "gpu", Groups: []Group{{Name: "w", Count: 1, GPUs: 4, Topology: jobspec.TopologyNVLink}}}, rej); ok {
		t.Fatal("4 NVLink GPUs placed on a node with 3+3 free")
	}
	if rej[`not in node pool "gpu"`] != 1 || rej["no 4 free GPUs in one NVLink island"] != 1 {
		t.Fatalf("rejections %v", rej)
	}
}

// ReservedFreeGPUs("") is kept up to date as GPUs are taken, released,
// reserved, unreserved and rolled back: it equals what the masks say (and
// the pool's count, which is summed from them).
func TestReservedFreeGPUsFollowsEveryChange(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := New(genSnapshot(t), nil, NewCache())
		var cps []int
		for step := range 30 {
			ord := rapid.IntRange(0, s.NumNodes()-1).Draw(t, "node")
			sl := Slot{Node: ord, Mask: rapid.Uint64Range(0, 255).Draw(t, "mask")}
			switch op := rapid.IntRange(0, 5).Draw(t, "op"); op {
			case 0:
				s.Take(sl)
			case 1:
				s.Release(sl)
			case 2:
				s.Reserve(sl)
			case 3:
				s.Unreserve(sl)
			case 4:
				cps = append(cps, s.Checkpoint())
			case 5:
				if len(cps) > 0 {
					s.Rollback(cps[len(cps)-1])
					cps = cps[:len(cps)-1]
				}
			}
			want := 0
			for i := range s.NumNodes() {
				if s.Schedulable(i) {
					want += bits.OnesCount64(s.Reserved(i) & s.nodes[i].healthy &^ s.Used(i))
				}
			}
			if got, pool := s.ReservedFreeGPUs(""), s.ReservedFreeGPUs("gpu"); got != want || pool != want {
				t.Fatalf("step %d: ReservedFreeGPUs(\"\") %d, (\"gpu\") %d, the masks say %d", step, got, pool, want)
			}
		}
	})
}

// FreedBy says, without releasing anything, exactly what releasing a
// holder adds to the cluster's free GPUs, whatever else is taken or
// reserved (reserved GPUs under a holder stay unavailable once it is
// released, an unhealthy or unschedulable node's do not count), and it
// changes nothing.
func TestFreedByIsWhatReleasingFrees(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := New(genSnapshot(t), nil, NewCache())
		for range rapid.IntRange(0, 8).Draw(t, "changes") {
			sl := Slot{Node: rapid.IntRange(0, s.NumNodes()-1).Draw(t, "node"), Mask: rapid.Uint64Range(0, 255).Draw(t, "mask")}
			if rapid.Bool().Draw(t, "reserve") {
				s.Reserve(sl)
			} else {
				s.Take(sl)
			}
		}
		for h := range s.Holders() {
			before, state := s.FreeGPUs(""), capture(s)
			got := s.FreedBy(h)
			if fmt.Sprint(capture(s)) != fmt.Sprint(state) {
				t.Fatalf("FreedBy(%d) changed the state", h)
			}
			cp := s.Checkpoint()
			s.ReleaseHolder(h)
			if want := s.FreeGPUs("") - before; got != want {
				t.Fatalf("FreedBy(%d) = %d, releasing it freed %d", h, got, want)
			}
			s.Rollback(cp)
		}
	})
}
