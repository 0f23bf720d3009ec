package placement

import (
	"sort"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

type cand struct {
	ord, cap, free int
	// scope is the mask the node's allocations go in (scopeFor).
	scope uint64
}

// placeGang places a multi-allocation group on the fewest nodes, preferring
// nodes that share a locality label, best fit on the last node.
func (s *State) placeGang(ix *index, g Group, labels []string) ([]Slot, bool) {
	var cands []cand
	total := 0
	for k := g.GPUs; k <= cluster.MaxGPUsPerNode; k++ {
		for _, o := range ix.buckets[k] {
			ord := int(o)
			if !s.Allowed(ord, g) {
				continue
			}
			scope, c := s.scopeFor(ord, &g)
			if g.DistinctHosts {
				c = min(c, 1)
			}
			if c > 0 {
				cands = append(cands, cand{ord: ord, cap: min(c, g.Count), free: k, scope: scope})
				total += min(c, g.Count)
			}
		}
	}
	if total < g.Count {
		return nil, false
	}
	sort.Slice(cands, func(a, b int) bool {
		if cands[a].cap != cands[b].cap {
			return cands[a].cap > cands[b].cap
		}
		if cands[a].free != cands[b].free {
			return cands[a].free < cands[b].free
		}
		return cands[a].ord < cands[b].ord
	})
	minNodes := nodesNeeded(cands, g.Count)
	chosen := cands
	for _, label := range labels {
		if sub, ok := s.bestDomain(cands, label, g.Count, minNodes); ok {
			chosen = sub
			break
		}
	}
	picked := selectNodes(chosen, g.Count)
	var slots []Slot
	for _, c := range picked {
		for range c.cap {
			sl, _, ok := s.pickSlot(c.ord, s.nodes[c.ord].free()&c.scope, &g)
			if !ok {
				return nil, false // cannot happen: capacity said it fits
			}
			s.Take(sl)
			slots = append(slots, sl)
		}
	}
	return slots, len(slots) == g.Count
}

// nodesNeeded: how many of the (capacity-sorted) candidates cover count.
func nodesNeeded(cands []cand, count int) int {
	sum := 0
	for i, c := range cands {
		sum += c.cap
		if sum >= count {
			return i + 1
		}
	}
	return len(cands) + 1
}

// bestDomain returns the candidates of the label value (rack, switch) that
// covers the gang with the fewest nodes, if that is the global minimum.
func (s *State) bestDomain(cands []cand, label string, count, minNodes int) ([]cand, bool) {
	domains := map[string][]cand{}
	var names []string
	for _, c := range cands {
		v, ok := s.nodes[c.ord].node.Labels[label]
		if !ok || v == "" {
			continue
		}
		if _, seen := domains[v]; !seen {
			names = append(names, v)
		}
		domains[v] = append(domains[v], c)
	}
	sort.Strings(names)
	bestName, bestN, bestLeft := "", 1<<30, 1<<30
	for _, name := range names {
		d := domains[name]
		n := nodesNeeded(d, count)
		if n > len(d) || n > minNodes {
			continue
		}
		left := 0
		for _, c := range d[:n] {
			left += c.free
		}
		if n < bestN || (n == bestN && left < bestLeft) {
			bestName, bestN, bestLeft = name, n, left
		}
	}
	if bestName == "" {
		return nil, false
	}
	return domains[bestName], true
}

// selectNodes picks nodes from capacity-sorted candidates: while the rest
// does not fit one node, take the largest; then the smallest node that
// holds the rest (best fit).
func selectNodes(cands []cand, count int) []cand {
	var out []cand
	used := make([]bool, len(cands))
	left := count
	for left > 0 {
		best := -1
		for i, c := range cands {
			if used[i] || c.cap < left {
				continue
			}
			if best < 0 || c.cap < cands[best].cap || (c.cap == cands[best].cap && c.free < cands[best].free) {
				best = i
			}
		}
		if best < 0 {
			for i := range cands {
				if !used[i] {
					best = i
					break
				}
			}
			if best < 0 {
				return out
			}
		}
		used[best] = true
		c := cands[best]
		c.cap = min(c.cap, left)
		left -= c.cap
		out = append(out, c)
	}
	return out
}
