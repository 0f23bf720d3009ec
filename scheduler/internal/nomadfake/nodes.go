package nomadfake

import (
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// ---- nodes and node pools ----

// UpsertNode registers or updates a client node (e.g. one with GPU
// devices, built with GPUNode). Missing fields get Nomad's defaults.
func (s *Server) UpsertNode(n *api.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := *n
	if c.Status == "" {
		c.Status = "ready"
	}
	if c.SchedulingEligibility == "" {
		c.SchedulingEligibility = "eligible"
	}
	if c.NodePool == "" {
		c.NodePool = "default"
	}
	if c.Datacenter == "" {
		c.Datacenter = "dc1"
	}
	idx := s.bump("nodes")
	if old := s.nodes[c.ID]; old != nil {
		c.CreateIndex = old.CreateIndex
	} else {
		c.CreateIndex = idx
	}
	c.ModifyIndex = idx
	s.nodes[c.ID] = &c
	if s.pools[c.NodePool] == nil {
		s.pools[c.NodePool] = &api.NodePool{Name: c.NodePool, CreateIndex: idx, ModifyIndex: idx}
		s.tableIndex["node_pools"] = idx
	}
	s.emit(idx, "Node", "NodeRegistration", c.ID, "", nil, "Node", &c)
	s.unblock("")
}

// SetNodeStatus changes a node's status ("ready", "down") and eligibility.
func (s *Server) SetNodeStatus(nodeID, status string, eligible bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nodes[nodeID]
	if n == nil {
		return fmt.Errorf("node %q not found", nodeID)
	}
	idx := s.bump("nodes")
	n.Status = status
	n.SchedulingEligibility = "eligible"
	if !eligible {
		n.SchedulingEligibility = "ineligible"
	}
	n.ModifyIndex = idx
	s.emit(idx, "Node", "NodeStatusUpdate", n.ID, "", nil, "Node", n)
	if status == "down" {
		var lost []*api.Allocation
		for _, a := range s.sortedAllocs() {
			if a.NodeID == nodeID && !terminal(a) {
				i := s.bump("allocs")
				a.ClientStatus = "lost"
				a.DesiredStatus = "stop"
				a.ModifyIndex = i
				a.ModifyTime = s.now().UnixNano()
				lost = append(lost, a)
				s.emit(i, "Allocation", "AllocationUpdated", a.ID, a.Namespace, []string{a.JobID, ""}, "Allocation", allocEvent(a))
			}
		}
		s.replaceLost(lost)
	}
	s.unblock("")
	return nil
}

// replaceLost is Nomad's node-update evaluation of the jobs that lost
// allocations: lost allocations are always replaced (whatever the
// reschedule policy), on nodes the job's constraints allow; a replacement
// carries PreviousAllocation and the lost one NextAllocation. What cannot
// be placed (the job is pinned to the lost node) waits in a blocked
// evaluation, as on Nomad.
func (s *Server) replaceLost(lost []*api.Allocation) {
	seen := map[string]bool{}
	var keys []string
	for _, a := range lost {
		k := jobKey(a.Namespace, a.JobID)
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		js := s.jobs[k]
		if js == nil || *js.job.Stop {
			continue
		}
		ev := s.newEval(s.bump("evals"), js.job, "node-update")
		if js.blocked != "" {
			if be := s.evals[js.blocked]; be != nil {
				be.Status = "canceled"
			}
			js.blocked = ""
		}
		s.process(js, ev)
	}
}

func (s *Server) listNodes(r *http.Request) []*api.NodeListStub {
	prefix := r.URL.Query().Get("prefix")
	out := []*api.NodeListStub{}
	for _, n := range s.nodes {
		if !strings.HasPrefix(n.ID, prefix) {
			continue
		}
		stub := &api.NodeListStub{
			Address: n.HTTPAddr, ID: n.ID, Datacenter: n.Datacenter, Name: n.Name, NodeClass: n.NodeClass,
			NodePool: n.NodePool, Version: n.Attributes["nomad.version"], Drain: n.Drain,
			SchedulingEligibility: n.SchedulingEligibility, Status: n.Status, StatusDescription: n.StatusDescription,
			Drivers: n.Drivers, LastDrain: n.LastDrain,
			CreateIndex: n.CreateIndex, ModifyIndex: n.ModifyIndex,
		}
		if r.URL.Query().Get("resources") == "true" {
			stub.NodeResources = n.NodeResources
			stub.ReservedResources = n.ReservedResources
		}
		out = append(out, stub)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out
}

func (s *Server) readNode(id string) (any, uint64, error) {
	n := s.nodes[id]
	if n == nil {
		return nil, 0, errf(http.StatusNotFound, "node not found")
	}
	return n, s.tableIndex["nodes"], nil
}

func (s *Server) listPools() []*api.NodePool {
	out := make([]*api.NodePool, 0, len(s.pools))
	for _, p := range s.pools {
		out = append(out, p)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

func (s *Server) readPool(name string) (any, uint64, error) {
	p := s.pools[name]
	if p == nil {
		return nil, 0, errf(http.StatusNotFound, "node pool not found")
	}
	return p, s.tableIndex["node_pools"], nil
}

func (s *Server) upsertPool(r *http.Request) (any, uint64, error) {
	var p api.NodePool
	if err := decode(r, &p); err != nil {
		return nil, 0, err
	}
	if p.Name == "" {
		return nil, 0, errf(http.StatusBadRequest, "must specify node pool name")
	}
	if p.Name == "all" || p.Name == "default" {
		if old := s.pools[p.Name]; old != nil && old.Description != p.Description {
			return nil, 0, errf(http.StatusBadRequest, "modifying node pool %q is not allowed", p.Name)
		}
	}
	idx := s.bump("node_pools")
	if old := s.pools[p.Name]; old != nil {
		p.CreateIndex = old.CreateIndex
	} else {
		p.CreateIndex = idx
	}
	p.ModifyIndex = idx
	s.pools[p.Name] = &p
	s.emit(idx, "NodePool", "NodePoolUpserted", p.Name, "", nil, "NodePool", &p)
	return nil, idx, nil
}

// deletePool deletes a node pool as Nomad 2.0.5 does (checked on a real
// agent): an empty 200 answer; a 500 naming the pool when it does not
// exist, still has nodes or jobs that are not dead (`node pool "p" has
// non-terminal jobs in regions: [global]`), or is built in.
func (s *Server) deletePool(name string) (any, uint64, error) {
	p := s.pools[name]
	if p == nil {
		return nil, 0, errf(http.StatusInternalServerError, "node pool %s not found", name)
	}
	var problems []string
	for _, js := range s.jobs {
		if str(js.job.NodePool) == name && str(js.job.Status) != "dead" {
			problems = append(problems, fmt.Sprintf("node pool %q has non-terminal jobs in regions: [global]", name))
			break
		}
	}
	for _, n := range s.nodes {
		if n.NodePool == name {
			problems = append(problems, fmt.Sprintf("node pool %q has nodes in regions: [global]", name))
			break
		}
	}
	if len(problems) > 0 {
		msg := fmt.Sprintf("%d error occurred:\n", len(problems))
		if len(problems) > 1 {
			msg = fmt.Sprintf("%d errors occurred:\n", len(problems))
		}
		for _, pr := range problems {
			msg += "\t* " + pr + "\n"
		}
		return nil, 0, errf(http.StatusInternalServerError, "%s\n", msg)
	}
	if name == "all" || name == "default" {
		return nil, 0, errf(http.StatusInternalServerError, "deleting node pool %q is not allowed", name)
	}
	idx := s.bump("node_pools")
	delete(s.pools, name)
	p.ModifyIndex = idx
	s.emit(idx, "NodePool", "NodePoolDeleted", name, "", nil, "NodePool", p)
	return nil, idx, nil
}

// GPUNode builds a ready client node in pool with one device group per
// entry of groups (each a list of GPU instance IDs), with the given
// per-group attributes (may be nil). It is a convenience for tests.
func GPUNode(id, name, pool string, groups map[string][]string, attrs map[string]map[string]*api.Attribute) *api.Node {
	n := &api.Node{
		ID: id, Name: name, NodePool: pool, Datacenter: "dc1", Status: "ready",
		SchedulingEligibility: "eligible", HTTPAddr: "127.0.0.1:4646",
		Attributes: map[string]string{"nomad.version": "2.0.6", "unique.hostname": name},
		NodeResources: &api.NodeResources{
			Cpu:    api.NodeCpuResources{CpuShares: 64000},
			Memory: api.NodeMemoryResources{MemoryMB: 512 * 1024},
		},
	}
	names := make([]string, 0, len(groups))
	for g := range groups {
		names = append(names, g)
	}
	sort.Strings(names)
	for _, g := range names {
		dg := &api.NodeDeviceResource{Vendor: "nvidia", Type: "gpu", Name: g, Attributes: attrs[g]}
		for _, id := range groups[g] {
			dg.Instances = append(dg.Instances, &api.NodeDevice{ID: id, Healthy: true})
		}
		n.NodeResources.Devices = append(n.NodeResources.Devices, dg)
	}
	return n
}
