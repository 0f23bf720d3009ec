package gang

import "sort"

// statusLocked is what a caller reads of gang g: its members in rank order,
// and once it formed, its nodes and master.
func (r *Registry) statusLocked(g *gangRecord) Status {
	s := Status{ID: g.id, State: g.state, Size: g.size, Generation: g.generation,
		Index: g.index, Reason: g.reason, Members: make([]Member, 0, len(g.members))}
	nodes := map[string]bool{}
	for _, m := range g.members {
		s.Members = append(s.Members, m.Member)
		nodes[m.NodeID] = true
	}
	s.Arrived = len(g.members)
	sortMembers(s.Members)
	if g.state != StateForming {
		s.NNodes = len(nodes)
		for _, m := range s.Members {
			if m.Rank == 0 {
				s.MasterAddr, s.MasterPort = m.Addr, m.Port
			}
		}
	}
	return s
}

// sortMembers orders members as ranks are given: by group, allocation
// index, task, ID.
func sortMembers(ms []Member) {
	sort.Slice(ms, func(i, j int) bool {
		a, b := ms[i], ms[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.AllocIndex != b.AllocIndex {
			return a.AllocIndex < b.AllocIndex
		}
		if a.Task != b.Task {
			return a.Task < b.Task
		}
		return a.ID < b.ID
	})
}

// assignRanks numbers members in a stable order: RANK over all members,
// NODE_RANK over distinct nodes in rank order, LOCAL_RANK within a node.
func assignRanks(g *gangRecord) {
	ms := make([]*memberRecord, 0, len(g.members))
	flat := make([]Member, 0, len(g.members))
	for _, m := range g.members {
		flat = append(flat, m.Member)
	}
	sortMembers(flat)
	for _, f := range flat {
		ms = append(ms, g.members[f.ID])
	}
	nodeRank := map[string]int{}
	local := map[string]int{}
	for i, m := range ms {
		if _, ok := nodeRank[m.NodeID]; !ok {
			nodeRank[m.NodeID] = len(nodeRank)
		}
		m.Rank = i
		m.NodeRank = nodeRank[m.NodeID]
		m.LocalRank = local[m.NodeID]
		local[m.NodeID]++
		m.State = MemberRunning
	}
	for _, m := range ms {
		m.LocalWorldSize = local[m.NodeID]
	}
}
