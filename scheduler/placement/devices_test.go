package placement

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// twoIslandNode is an 8-GPU node of two 4-GPU islands whose device groups
// follow groupBy: "model" (one group of 8) or "island" (two of 4).
func twoIslandNode(id, groupBy string) *cluster.Node {
	n := &cluster.Node{ID: id, Pool: "gpu", Eligible: true, Ready: true, GroupBy: groupBy}
	for k := range 8 {
		grp := "A100"
		if groupBy == "island" {
			grp = fmt.Sprintf("A100 (island %d)", k/4)
		}
		n.GPUs = append(n.GPUs, cluster.GPU{ID: fmt.Sprintf("%s-g%d", id, k), Index: k, Island: k / 4, Model: "A100", Healthy: true, Group: grp})
	}
	return n
}

func stateOf(t testing.TB, nodes ...*cluster.Node) *State {
	t.Helper()
	store := cluster.NewStore()
	for _, n := range nodes {
		if err := store.UpsertNode(n); err != nil {
			t.Fatal(err)
		}
	}
	return New(store.Snapshot(), nil, NewCache())
}

// A whole-node ask places with group_by "model" and not with "island"
// (Nomad never spans device groups), and the rejection names group_by.
func TestWholeNodeAskFollowsDeviceGroups(t *testing.T) {
	for _, tc := range []struct {
		groupBy string
		ok      bool
	}{{"model", true}, {"island", false}} {
		s := stateOf(t, twoIslandNode("n1", tc.groupBy))
		g := Group{Name: "g", Count: 1, GPUs: 8, Blocks: []Block{{Count: 8}}}
		rej := Rejections{}
		res, ok := s.Place(Request{Groups: []Group{g}}, rej)
		if ok != tc.ok {
			t.Fatalf("group_by %s: placed %v, want %v (rejections %v)", tc.groupBy, ok, tc.ok, rej)
		}
		if ok && bits.OnesCount64(res.Groups[0][0].Mask) != 8 {
			t.Fatalf("group_by %s: %d GPUs", tc.groupBy, bits.OnesCount64(res.Groups[0][0].Mask))
		}
		if !ok {
			found := false
			for r := range rej {
				if strings.Contains(r, "device block of 8 GPUs") && strings.Contains(r, `group_by = "island"`) {
					found = true
				}
			}
			if !found {
				t.Fatalf("rejections %v do not name the device block and group_by", rej)
			}
			if n, by := s.MaxBlockGPUs("", g.Blocks[0]); n != 4 || by != "island" {
				t.Fatalf("MaxBlockGPUs = %d, %q; want 4, island", n, by)
			}
		}
	}
}

// 2 + 2 + 4 share one 8-GPU node (best fit), the 4 (NVLink) in one island,
// with group_by "model".
func TestBestFitTwoTwoFour(t *testing.T) {
	s := stateOf(t, twoIslandNode("n1", "model"))
	var masks []uint64
	for _, g := range []Group{
		{Name: "a", Count: 1, GPUs: 2, Blocks: []Block{{Count: 2}}},
		{Name: "b", Count: 1, GPUs: 2, Blocks: []Block{{Count: 2}}},
		{Name: "c", Count: 1, GPUs: 4, Topology: policy.TopologyNVLink, Blocks: []Block{{Count: 4}}},
	} {
		res, ok := s.Place(Request{Groups: []Group{g}}, nil)
		if !ok {
			t.Fatalf("group %s did not place", g.Name)
		}
		masks = append(masks, res.Groups[0][0].Mask)
	}
	if masks[2] != 0x0f && masks[2] != 0xf0 {
		t.Fatalf("the 4-GPU NVLink ask got %08b, not one island", masks[2])
	}
	if masks[0]|masks[1]|masks[2] != 0xff {
		t.Fatalf("2+2+4 did not fill the node: %08b %08b %08b", masks[0], masks[1], masks[2])
	}
}

// An NVLink gang with two allocations on a node whose device group spans
// both islands shares one island there (the pins are a union per group),
// and a 2 x 4 NVLink gang then needs two nodes with group_by "model" but
// fits one with group_by "island".
func TestNVLinkUnionRule(t *testing.T) {
	g := Group{Name: "g", Count: 2, GPUs: 2, Topology: policy.TopologyNVLink, Blocks: []Block{{Count: 2}}}
	s := stateOf(t, twoIslandNode("n1", "model"))
	res, ok := s.Place(Request{Groups: []Group{g}}, nil)
	if !ok {
		t.Fatal("2 x 2 NVLink did not place")
	}
	if u := res.Groups[0][0].Mask | res.Groups[0][1].Mask; u != 0x0f && u != 0xf0 {
		t.Fatalf("union %08b is not one island", u)
	}
	big := Group{Name: "g", Count: 2, GPUs: 4, Topology: policy.TopologyNVLink, Blocks: []Block{{Count: 4}}}
	if _, ok := stateOf(t, twoIslandNode("n1", "model")).Place(Request{Groups: []Group{big}}, nil); ok {
		t.Fatal("2 x 4 NVLink placed on one node whose device group spans both islands")
	}
	if _, ok := stateOf(t, twoIslandNode("n1", "model"), twoIslandNode("n2", "model")).Place(Request{Groups: []Group{big}}, nil); !ok {
		t.Fatal("2 x 4 NVLink did not place on two nodes")
	}
	if _, ok := stateOf(t, twoIslandNode("n1", "island")).Place(Request{Groups: []Group{big}}, nil); !ok {
		t.Fatal("2 x 4 NVLink did not place on one node grouped by island")
	}
}

// genDeviceNode draws a node with device groups: a model grouping or an
// island grouping, optionally a second model (a MIG-like group) and
// unhealthy GPUs.
func genDeviceNode(t *rapid.T, i int) *cluster.Node {
	id := fmt.Sprintf("n%d", i)
	by := rapid.SampledFrom([]string{"model", "island", "numa"}).Draw(t, "group_by")
	n := &cluster.Node{ID: id, Pool: "gpu", Eligible: true, Ready: true, GroupBy: by}
	size := rapid.SampledFrom([]int{4, 8}).Draw(t, "gpus")
	islands := rapid.SampledFrom([]int{1, 2, 4}).Draw(t, "islands")
	mig := rapid.IntRange(0, 3).Draw(t, "mig")
	for k := range size + mig {
		model, isl := "A100", k*islands/size
		if k >= size {
			model, isl = "A100 MIG 1g.10gb", 0
		}
		grp := model
		switch by {
		case "island":
			grp = fmt.Sprintf("%s (island %d)", model, isl)
		case "numa":
			grp = fmt.Sprintf("%s (numa %d)", model, k%2)
		}
		n.GPUs = append(n.GPUs, cluster.GPU{ID: fmt.Sprintf("%s-g%d", id, k), Index: k, Island: isl, Model: model, Group: grp,
			Healthy: rapid.IntRange(0, 9).Draw(t, "healthy") > 0})
	}
	return n
}

func groupOf(n *cluster.Node, id string) string {
	for _, g := range n.GPUs {
		if g.ID == id {
			return g.Group
		}
	}
	return "?"
}

// Property: whatever Place returns names only GPUs each device block can
// get: every block's share lies in ONE device group of its node that the
// block matches, within its own IDs, with the right count; the shares
// partition the allocation; NVLink allocations sit in one island; and a
// group's NVLink allocations sharing a node whose device groups span
// islands share one island (the union of the pins stays exact).
func TestPropertyBlocksGetOnlyTheirDeviceGroups(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		store := cluster.NewStore()
		var nodes []*cluster.Node
		for i := range rapid.IntRange(1, 3).Draw(t, "nodes") {
			n := genDeviceNode(t, i)
			nodes = append(nodes, n)
			if err := store.UpsertNode(n); err != nil {
				t.Fatal(err)
			}
		}
		s := New(store.Snapshot(), nil, NewCache())
		for step := range 4 {
			g := Group{Name: fmt.Sprint("g", step), Count: rapid.IntRange(1, 3).Draw(t, "count"),
				Topology: policy.Topology(rapid.SampledFrom([]string{"", "nvlink", "node", "any"}).Draw(t, "topo"))}
			for range rapid.IntRange(1, 3).Draw(t, "blocks") {
				b := Block{Count: rapid.IntRange(1, 4).Draw(t, "bcount")}
				switch rapid.IntRange(0, 5).Draw(t, "kind") {
				case 0:
					b.Group = "A100 MIG 1g.10gb"
				case 1:
					n := nodes[rapid.IntRange(0, len(nodes)-1).Draw(t, "idnode")]
					for _, gpu := range n.GPUs {
						if rapid.Bool().Draw(t, "id") {
							b.IDs = append(b.IDs, gpu.ID)
						}
					}
				case 2:
					b.None = rapid.IntRange(0, 4).Draw(t, "none") == 0
				}
				g.Blocks = append(g.Blocks, b)
				g.GPUs += b.Count
			}
			before := make([]uint64, s.NumNodes())
			for i := range before {
				before[i] = s.Free(i)
			}
			res, ok := s.Place(Request{Groups: []Group{g}}, Rejections{})
			if !ok {
				continue
			}
			slots := res.Groups[0]
			if len(slots) != g.Count {
				t.Fatalf("%d slots, want %d", len(slots), g.Count)
			}
			if !s.UnionExact(g, slots) {
				t.Fatalf("group %+v: slots %+v break the union rule", g, slots)
			}
			for _, sl := range slots {
				n := s.Node(sl.Node)
				if sl.Mask&^before[sl.Node] != 0 {
					t.Fatalf("slot takes GPUs that were not free")
				}
				split, ok := s.SplitBlocks(sl, g)
				if !ok || len(split) != len(g.Blocks) {
					t.Fatalf("slot %+v of %+v has no block split", sl, g)
				}
				var union uint64
				for bi, m := range split {
					b := g.Blocks[bi]
					if bits.OnesCount64(m) != b.Count {
						t.Fatalf("block %d: %d GPUs, want %d", bi, bits.OnesCount64(m), b.Count)
					}
					if union&m != 0 {
						t.Fatalf("blocks overlap")
					}
					union |= m
					ids := s.GPUIDs(Slot{Node: sl.Node, Mask: m})
					grp := groupOf(n, ids[0])
					for _, id := range ids {
						if groupOf(n, id) != grp {
							t.Fatalf("block %d spans device groups %q and %q", bi, grp, groupOf(n, id))
						}
						if b.IDs != nil && !slices.Contains(b.IDs, id) {
							t.Fatalf("block %d got %s outside its IDs", bi, id)
						}
					}
					if b.None || (b.Group != "" && grp != b.Group) {
						t.Fatalf("block %d (%+v) got group %q", bi, b, grp)
					}
				}
				if union != sl.Mask {
					t.Fatalf("blocks %v do not partition %b", split, sl.Mask)
				}
				if g.Topology == policy.TopologyNVLink {
					isl := map[int]bool{}
					for m := sl.Mask; m != 0; m &= m - 1 {
						isl[n.GPUs[bits.TrailingZeros64(m)].Island] = true
					}
					if len(isl) != 1 {
						t.Fatalf("nvlink slot spans %d islands", len(isl))
					}
				}
			}
		}
	})
}
