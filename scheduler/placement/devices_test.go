package placement

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
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
		{Name: "c", Count: 1, GPUs: 4, Topology: jobspec.TopologyNVLink, Blocks: []Block{{Count: 4}}},
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
	g := Group{Name: "g", Count: 2, GPUs: 2, Topology: jobspec.TopologyNVLink, Blocks: []Block{{Count: 2}}}
	s := stateOf(t, twoIslandNode("n1", "model"))
	res, ok := s.Place(Request{Groups: []Group{g}}, nil)
	if !ok {
		t.Fatal("2 x 2 NVLink did not place")
	}
	if u := res.Groups[0][0].Mask | res.Groups[0][1].Mask; u != 0x0f && u != 0xf0 {
		t.Fatalf("union %08b is not one island", u)
	}
	big := Group{Name: "g", Count: 2, GPUs: 4, Topology: jobspec.TopologyNVLink, Blocks: []Block{{Count: 4}}}
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
				Topology: jobspec.Topology(rapid.SampledFrom([]string{"", "nvlink", "node", "any"}).Draw(t, "topo"))}
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
				if g.Topology == jobspec.TopologyNVLink {
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

// withGroupFacts gives a twoIslandNode the device group attributes
// impact-gpu reports: island and island_size only on a group in one
// island (group_by "island").
func withGroupFacts(n *cluster.Node) *cluster.Node {
	seen := map[string]bool{}
	for _, g := range n.GPUs {
		if seen[g.Group] {
			continue
		}
		seen[g.Group] = true
		dg := cluster.DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: g.Group, Attributes: map[string]cluster.Attribute{
			"group_by": {Kind: cluster.AttrString, Str: n.GroupBy},
		}}
		if n.GroupBy == "island" {
			dg.Attributes["island"] = cluster.Attribute{Kind: cluster.AttrInt, Int: int64(g.Island)}
			dg.Attributes["island_size"] = cluster.Attribute{Kind: cluster.AttrInt, Int: 4}
		}
		n.DeviceGroups = append(n.DeviceGroups, dg)
	}
	return n
}

var islandSize4 = cluster.DeviceConstraints{cluster.NewDeviceConstraint("${device.attr.island_size}", ">=", "4")}

// A block with a constraint of its own on the device group takes GPUs
// only from groups meeting it: with ${device.attr.island_size} >= 4 never
// from a group_by "model" node (the attribute is absent there), however
// empty, and from a group_by "island" node one island at a time; the
// rejection names the constraint.
func TestDeviceConstraintsChooseGroups(t *testing.T) {
	s := stateOf(t, withGroupFacts(twoIslandNode("m", "model")), withGroupFacts(twoIslandNode("i", "island")))
	g := Group{Name: "g", Count: 1, GPUs: 4, Topology: jobspec.TopologyNVLink, Blocks: []Block{{Count: 4, Cons: islandSize4}}}
	for k := range 2 {
		res, ok := s.Place(Request{Pool: "gpu", Groups: []Group{g}}, nil)
		if !ok {
			t.Fatalf("placement %d failed", k)
		}
		sl := res.Groups[0][0]
		if n := s.Node(sl.Node); n.ID != "i" {
			t.Fatalf("placement %d on node %s, whose device group has no island_size", k, n.ID)
		}
	}
	rej := Rejections{}
	if _, ok := s.Place(Request{Pool: "gpu", Groups: []Group{g}}, rej); ok {
		t.Fatal("a third block placed: only node m is left, whose group fails the constraint")
	}
	found := false
	for r, n := range rej {
		if strings.Contains(r, "no device group of the node meets its constraints (${device.attr.island_size} >= 4)") && n == 1 {
			found = true
		}
	}
	if !found {
		t.Fatalf("rejections %v do not name the constraint", rej)
	}
	// Without the constraint the model node takes it.
	g.Blocks[0].Cons = nil
	if res, ok := s.Place(Request{Pool: "gpu", Groups: []Group{g}}, nil); !ok || s.Node(res.Groups[0][0].Node).ID != "m" {
		t.Fatalf("unconstrained block: placed %v", ok)
	}
}

// A pool whose every device group fails a block's constraint can never
// hold it (DeviceConstraintMiss names the constraint and why), one with a
// group meeting it can; a node the model has no group facts of (a
// simulated one) may meet any constraint.
func TestDeviceConstraintMiss(t *testing.T) {
	b := Block{Count: 4, Cons: islandSize4}
	s := stateOf(t, withGroupFacts(twoIslandNode("m", "model")))
	miss, ok := s.DeviceConstraintMiss("gpu", b)
	if !ok || miss.Constraint == nil || miss.Constraint.String() != "${device.attr.island_size} >= 4" {
		t.Fatalf("miss %+v, %v", miss, ok)
	}
	if want := `island_size is set only where a group lies in one island: impact-gpu group_by = "island"`; miss.Hint != want {
		t.Fatalf("hint %q, want %q", miss.Hint, want)
	}
	if n, _ := s.MaxBlockGPUs("gpu", b); n != 0 {
		t.Fatalf("MaxBlockGPUs %d, want 0", n)
	}
	if _, ok := s.DeviceConstraintMiss("other", b); ok {
		t.Fatal("a pool without device groups: not the constraint's doing")
	}
	big := Block{Count: 4, Cons: cluster.DeviceConstraints{cluster.NewDeviceConstraint("${device.attr.island_size}", ">", "4")}}
	s = stateOf(t, withGroupFacts(twoIslandNode("m", "model")), withGroupFacts(twoIslandNode("i", "island")))
	if _, ok := s.DeviceConstraintMiss("gpu", b); ok {
		t.Fatal("node i's groups meet the constraint")
	}
	if miss, ok := s.DeviceConstraintMiss("gpu", big); !ok || !strings.HasPrefix(miss.Hint, "its device groups have island_size 4; island_size is set only") {
		t.Fatalf("miss %+v, %v", miss, ok)
	}
	// Each met somewhere, never together.
	both := Block{Count: 4, Cons: cluster.DeviceConstraints{
		cluster.NewDeviceConstraint("${device.attr.group_by}", "=", "model"), islandSize4[0]}}
	if miss, ok := s.DeviceConstraintMiss("gpu", both); !ok || miss.Constraint != nil {
		t.Fatalf("miss %+v, %v", miss, ok)
	}
	// No facts: may match.
	s = stateOf(t, twoIslandNode("m", "model"))
	if _, ok := s.DeviceConstraintMiss("gpu", b); ok {
		t.Fatal("a node without group facts refused")
	}
	if _, ok := s.Place(Request{Groups: []Group{{Name: "g", Count: 1, GPUs: 4, Blocks: []Block{b}}}}, nil); !ok {
		t.Fatal("a node without group facts refused")
	}
}

// On a node with device groups of two models, a block constrained to one
// model (by ${device.model}) gets GPUs of that group only; a block of the
// same model by name and a failing attribute gets none.
func TestDeviceConstraintsPickModel(t *testing.T) {
	n := &cluster.Node{ID: "n", Pool: "gpu", Eligible: true, Ready: true}
	for k := range 4 {
		grp := "NVIDIA A100"
		if k >= 2 {
			grp = "NVIDIA H100"
		}
		n.GPUs = append(n.GPUs, cluster.GPU{ID: fmt.Sprintf("g%d", k), Index: k, Island: k, Healthy: true, Group: grp})
	}
	for _, name := range []string{"NVIDIA A100", "NVIDIA H100"} {
		n.DeviceGroups = append(n.DeviceGroups, cluster.DeviceGroup{Vendor: "nvidia", Type: "gpu", Name: name,
			Attributes: map[string]cluster.Attribute{"memory": {Kind: cluster.AttrInt, Int: 80, Unit: "GiB"}}})
	}
	s := stateOf(t, n)
	h100 := Block{Count: 1, Cons: cluster.DeviceConstraints{cluster.NewDeviceConstraint("${device.model}", "regexp", "H100$")}}
	for k := range 2 {
		res, ok := s.Place(Request{Groups: []Group{{Name: "g", Count: 1, GPUs: 1, Blocks: []Block{h100}}}}, nil)
		if !ok || res.Groups[0][0].Mask&0b0011 != 0 {
			t.Fatalf("placement %d: %v, mask %b", k, ok, res.Groups[0][0].Mask)
		}
	}
	if _, ok := s.Place(Request{Groups: []Group{{Name: "g", Count: 1, GPUs: 1, Blocks: []Block{h100}}}}, nil); ok {
		t.Fatal("a third H100 block placed on the A100s")
	}
	small := Block{Count: 1, Cons: cluster.DeviceConstraints{cluster.NewDeviceConstraint("${device.attr.memory}", ">", "80 GiB")}}
	if _, ok := s.Place(Request{Groups: []Group{{Name: "g", Count: 1, GPUs: 1, Blocks: []Block{small}}}}, nil); ok {
		t.Fatal("a block asking more memory than any group has placed")
	}
}
