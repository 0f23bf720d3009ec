package placement

import (
	"fmt"
	"math/bits"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// reject summarises, cheaply (from the index, not per node), why the pool
// cannot take the whole request.
func (s *State) reject(req Request, ix *index, rej Rejections) {
	if rej == nil {
		return
	}
	s.rejectPool(req.Pool, ix, rej)
	for _, g := range req.Groups {
		if g.Count > 0 && g.GPUs > 0 {
			s.rejectNodes(g, ix, rej)
		}
	}
	rej.add(fmt.Sprintf("pool has %d free GPUs in all, job needs %d", ix.free, req.GPUs()), ix.nodes)
}

// Explain fills rej with why the nodes cannot take req now, without
// placing anything; it costs O(GPUs per node), not O(nodes).
func (s *State) Explain(req Request, rej Rejections) {
	ix := s.indexFor(req.Pool)
	if ix == nil {
		rej.add(fmt.Sprintf("no node in pool %q", req.Pool), s.all.total)
		return
	}
	s.reject(req, ix, rej)
}

func (s *State) rejectPool(pool string, ix *index, rej Rejections) {
	if pool != "" {
		rej.add(fmt.Sprintf("not in node pool %q", pool), s.all.total-ix.total)
	}
	rej.add("node ineligible, down or draining", ix.total-ix.nodes)
}

func (s *State) rejectGroup(g Group, ix *index, pool string, rej Rejections) {
	if rej == nil {
		return
	}
	s.rejectPool(pool, ix, rej)
	s.rejectNodes(g, ix, rej)
}

func (s *State) rejectNodes(g Group, ix *index, rej Rejections) {
	if len(g.Constraints) > 0 {
		bad := 0
		for k := range ix.buckets {
			for _, o := range ix.buckets[k] {
				if !s.Allowed(int(o), Group{Constraints: g.Constraints}) {
					bad++
				}
			}
		}
		rej.add(fmt.Sprintf("does not meet the constraints of group %q", g.Name), bad)
	}
	small := 0
	for k := 0; k < g.GPUs && k <= cluster.MaxGPUsPerNode; k++ {
		small += len(ix.buckets[k])
	}
	rej.add(fmt.Sprintf("fewer than %d free GPUs", g.GPUs), small)
	big := ix.nodes - small
	if big == 0 {
		return
	}
	if dev := s.rejectDeviceGroups(g, ix, rej); dev > 0 {
		big -= dev
		if big == 0 {
			return
		}
	}
	if g.Topology == jobspec.TopologyNVLink {
		noIsland := 0
		for k := g.GPUs; k <= cluster.MaxGPUsPerNode; k++ {
			for _, o := range ix.buckets[k] {
				if _, c := s.scopeFor(int(o), &g); c == 0 {
					noIsland++
				}
			}
		}
		rej.add(fmt.Sprintf("no %d free GPUs in one NVLink island", g.GPUs), noIsland)
		big -= noIsland
		if g.Count > 1 && !g.DistinctHosts {
			// The union rule (scopeFor): where the node's device group spans
			// islands, the group's allocations there must share one island.
			shared := 0
			for k := g.GPUs; k <= cluster.MaxGPUsPerNode; k++ {
				for _, o := range ix.buckets[k] {
					ns := &s.nodes[o]
					if !ns.unionScoped(&g) {
						continue
					}
					if _, c := s.scopeFor(int(o), &g); c < g.Count && s.capacityIn(int(o), ns.free(), &g) > c {
						shared++
					}
				}
			}
			rej.add("its NVLink allocations may share this node only inside one island, since the node's device group spans islands (impact-gpu's group_by) and Nomad splits a group's pinned GPUs among its allocations as it likes; one allocation per node (distinct_hosts), impact_topology = \"node\" or group_by = \"island\" lift this", shared)
			big -= shared
		}
	}
	if g.Count > 1 {
		rej.add(fmt.Sprintf("gang of %d x %d GPUs does not fit on the nodes with room", g.Count, g.GPUs), big)
	}
}

// consString writes a block's constraints for explanations.
func consString(cs cluster.DeviceConstraints) string {
	out := ""
	for i, c := range cs {
		if i > 0 {
			out += ", "
		}
		out += c.String()
	}
	return out
}

// rejectDeviceGroups counts the nodes with enough free GPUs where a device
// block of the group finds no device group with enough of them free
// (cluster.DeviceGroupRule), naming the nodes' group_by.
func (s *State) rejectDeviceGroups(g Group, ix *index, rej Rejections) int {
	bad := 0
	for k := g.GPUs; k <= cluster.MaxGPUsPerNode; k++ {
		for _, o := range ix.buckets[k] {
			ns := &s.nodes[o]
			if ns.trivial(&g) {
				continue
			}
			for _, b := range g.blocks() {
				if len(b.Cons) > 0 && len(ns.allowed(b)) == 0 {
					unc := b
					unc.Cons = nil
					if len(ns.allowed(unc)) > 0 {
						rej.add(fmt.Sprintf("device block of %d GPUs: no device group of the node meets its constraints (%s)", b.Count, consString(b.Cons)), 1)
						bad++
						break
					}
				}
				most := 0
				for _, m := range ns.allowed(b) {
					most = max(most, bits.OnesCount64(m&ns.free()))
				}
				if most < b.Count {
					rej.add(fmt.Sprintf("device block of %d GPUs: at most %d free in one matching device group (%s%s)",
						b.Count, most, cluster.DeviceGroupRule, GroupByHint(ns.node.GroupBy)), 1)
					bad++
					break
				}
			}
		}
	}
	return bad
}
