package topology

import (
	"fmt"
	"sort"
)

// Unknown marks an unknown NUMA node or island.
const Unknown = -1

// GPU is one schedulable GPU instance as topology sees it: a physical GPU,
// or a MIG instance (Parent set), which shares its parent's island and NUMA
// node.
type GPU struct {
	// ID is the instance ID (GPU UUID or MIG UUID).
	ID string
	// Index orders GPUs like nvidia-smi; MIG instances carry their
	// parent's index.
	Index int
	// Model is the device model; GPUs of different models never share a
	// device group.
	Model string
	// NUMA is the NUMA node, or Unknown.
	NUMA int
	// Parent is the physical GPU's ID for a MIG instance, "" otherwise.
	Parent string
}

// Link is a pairwise connection between two physical GPUs.
type Link struct {
	A, B string
	// NVLinks counts direct links (0 through an NVSwitch).
	NVLinks int
	// NVLinkP2P says the GPUs can reach each other peer-to-peer over
	// NVLink (directly or through an NVSwitch).
	NVLinkP2P bool
}

// Placed is a GPU with the island it belongs to.
type Placed struct {
	GPU
	Island int
}

// Island is a maximal set of GPUs connected to each other over NVLink
// (transitively). A GPU without NVLink is an island of its own.
type Island struct {
	ID int
	// GPUs are instance IDs, by index then ID.
	GPUs []string
}

// Topology is the NVLink/NUMA structure of one node.
type Topology struct {
	// GPUs by index then ID.
	GPUs []Placed
	// Islands by ID; IDs are 0..n-1, numbered by their lowest GPU index,
	// so they are stable as long as the hardware is.
	Islands []Island
	// NVSwitch says the node's NVLinks go through NVSwitches.
	NVSwitch bool

	byID  map[string]int
	lanes map[pair]int
}

type pair struct{ a, b string }

func mkpair(a, b string) pair {
	if b < a {
		a, b = b, a
	}
	return pair{a, b}
}

// Build computes the islands of a node: union-find over the pairs with
// NVLink P2P. Links between MIG instances are ignored; a MIG instance joins
// its parent's island. On an NVSwitch system every GPU pair reports NVLink
// P2P, so the node is one island.
func Build(gpus []GPU, links []Link, nvswitch bool) (Topology, error) {
	t := Topology{NVSwitch: nvswitch, byID: map[string]int{}, lanes: map[pair]int{}}
	sorted := append([]GPU(nil), gpus...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].Index != sorted[j].Index {
			return sorted[i].Index < sorted[j].Index
		}
		return sorted[i].ID < sorted[j].ID
	})
	parent := map[string]string{}
	for i, g := range sorted {
		if g.ID == "" {
			return Topology{}, fmt.Errorf("GPU at index %d has an empty ID", g.Index)
		}
		if _, dup := t.byID[g.ID]; dup {
			return Topology{}, fmt.Errorf("GPU %s listed twice", g.ID)
		}
		t.byID[g.ID] = i
		if g.Parent == "" {
			parent[g.ID] = g.ID
		}
	}
	for _, g := range sorted {
		if g.Parent == "" {
			continue
		}
		if _, ok := parent[g.Parent]; !ok {
			return Topology{}, fmt.Errorf("MIG instance %s: parent GPU %s is not a physical GPU of this node", g.ID, g.Parent)
		}
	}
	find := func(x string) string {
		for parent[x] != x {
			parent[x] = parent[parent[x]]
			x = parent[x]
		}
		return x
	}
	for _, l := range links {
		_, okA := parent[l.A]
		_, okB := parent[l.B]
		if !okA || !okB {
			return Topology{}, fmt.Errorf("link %s-%s names a GPU that is not a physical GPU of this node", l.A, l.B)
		}
		if l.A == l.B {
			return Topology{}, fmt.Errorf("link %s-%s connects a GPU to itself", l.A, l.B)
		}
		if l.NVLinks > 0 {
			t.lanes[mkpair(l.A, l.B)] += l.NVLinks
		}
		if l.NVLinkP2P || l.NVLinks > 0 {
			ra, rb := find(l.A), find(l.B)
			if ra != rb {
				parent[rb] = ra
			}
		}
	}
	// Number islands by first appearance in index order.
	islandOf := map[string]int{}
	for _, g := range sorted {
		phys := g.ID
		if g.Parent != "" {
			phys = g.Parent
		}
		root := find(phys)
		id, ok := islandOf[root]
		if !ok {
			id = len(t.Islands)
			islandOf[root] = id
			t.Islands = append(t.Islands, Island{ID: id})
		}
		t.GPUs = append(t.GPUs, Placed{GPU: g, Island: id})
		t.Islands[id].GPUs = append(t.Islands[id].GPUs, g.ID)
	}
	return t, nil
}

// GPU returns the placed GPU with the given ID.
func (t Topology) GPU(id string) (Placed, bool) {
	i, ok := t.byID[id]
	if !ok {
		return Placed{}, false
	}
	return t.GPUs[i], true
}

// NVLinks returns the number of direct NVLink links between two GPUs.
func (t Topology) NVLinks(a, b string) int {
	return t.lanes[mkpair(a, b)]
}

// NUMANodes returns the distinct known NUMA nodes, ascending.
func (t Topology) NUMANodes() []int {
	seen := map[int]bool{}
	var out []int
	for _, g := range t.GPUs {
		if g.NUMA != Unknown && !seen[g.NUMA] {
			seen[g.NUMA] = true
			out = append(out, g.NUMA)
		}
	}
	sort.Ints(out)
	return out
}

// Order returns ids in an NVLink-friendly order: island by island, and
// inside an island a greedy path that always steps to the not yet visited
// GPU with the most direct NVLink links to the current one (lowest index on
// ties), so that neighbouring ranks of a ring are directly linked where the
// hardware allows. IDs unknown to the topology come last, in input order.
func (t Topology) Order(ids []string) []string {
	var known, unknown []string
	for _, id := range ids {
		if _, ok := t.byID[id]; ok {
			known = append(known, id)
		} else {
			unknown = append(unknown, id)
		}
	}
	sort.SliceStable(known, func(i, j int) bool {
		gi, gj := t.GPUs[t.byID[known[i]]], t.GPUs[t.byID[known[j]]]
		if gi.Island != gj.Island {
			return gi.Island < gj.Island
		}
		return t.byID[known[i]] < t.byID[known[j]]
	})
	out := make([]string, 0, len(ids))
	for start := 0; start < len(known); {
		end := start
		island := t.GPUs[t.byID[known[start]]].Island
		for end < len(known) && t.GPUs[t.byID[known[end]]].Island == island {
			end++
		}
		out = append(out, t.greedyPath(known[start:end])...)
		start = end
	}
	return append(out, unknown...)
}

func (t Topology) greedyPath(ids []string) []string {
	if len(ids) == 0 {
		return nil
	}
	visited := make([]bool, len(ids))
	path := []string{ids[0]}
	visited[0] = true
	cur := ids[0]
	for len(path) < len(ids) {
		best, bestLanes := -1, -1
		for i, id := range ids {
			if visited[i] {
				continue
			}
			if l := t.NVLinks(t.physical(cur), t.physical(id)); l > bestLanes {
				best, bestLanes = i, l
			}
		}
		visited[best] = true
		cur = ids[best]
		path = append(path, cur)
	}
	return path
}

func (t Topology) physical(id string) string {
	if g, ok := t.GPU(id); ok && g.Parent != "" {
		return g.Parent
	}
	return id
}
