package nomadfake

import (
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

func (s *Server) taskEvent(a *api.Allocation, typ, msg string, details map[string]string) {
	now := s.now()
	for _, ts := range a.TaskStates {
		ts.Events = append(ts.Events, &api.TaskEvent{Type: typ, Time: now.UnixNano(), DisplayMessage: msg, Details: details})
	}
}

func (s *Server) ensureTaskStates(a *api.Allocation) {
	if a.Job == nil {
		return
	}
	for _, tg := range a.Job.TaskGroups {
		if *tg.Name != a.TaskGroup {
			continue
		}
		for _, t := range tg.Tasks {
			if a.TaskStates[t.Name] == nil {
				a.TaskStates[t.Name] = &api.TaskState{State: "pending"}
			}
		}
	}
}

// clientStart is the simulated client receiving a new allocation.
func (s *Server) clientStart(a *api.Allocation) {
	b := s.behavior[a.NodeID]
	if b == ClientHold {
		return
	}
	idx := s.bump("allocs")
	s.ensureTaskStates(a)
	now := s.now()
	switch b {
	case ClientFail:
		a.ClientStatus = "failed"
		a.ClientDescription = "Failed tasks"
		for _, ts := range a.TaskStates {
			ts.State = "dead"
			ts.Failed = true
			ts.FinishedAt = now
		}
		s.taskEvent(a, "Driver Failure", "failed to start task", nil)
	default:
		a.ClientStatus = "running"
		a.ClientDescription = "Tasks are running"
		for _, ts := range a.TaskStates {
			ts.State = "running"
			ts.StartedAt = now
		}
		s.taskEvent(a, "Started", "Task started by client", map[string]string{})
	}
	s.publishClientUpdate(a, idx, now)
	if b == ClientFail {
		s.afterTerminal(a)
	}
}

// publishClientUpdate stamps an allocation the simulated client changed and
// emits what Nomad emits for it: Allocation/AllocationUpdated and, for its
// node, Node/AllocationUpdated.
func (s *Server) publishClientUpdate(a *api.Allocation, idx uint64, now time.Time) {
	a.ModifyIndex = idx
	a.ModifyTime = now.UnixNano()
	s.emit(idx, "Allocation", "AllocationUpdated", a.ID, a.Namespace, []string{a.JobID, a.DeploymentID}, "Allocation", allocEvent(a))
	if n := s.nodes[a.NodeID]; n != nil {
		s.emit(idx, "Node", "AllocationUpdated", n.ID, "", nil, "Node", n)
	}
}

// clientStop is the simulated client killing a stopped allocation.
func (s *Server) clientStop(a *api.Allocation) {
	if terminal(a) {
		return
	}
	idx := s.bump("allocs")
	s.ensureTaskStates(a)
	now := s.now()
	a.ClientStatus = "complete"
	a.ClientDescription = "All tasks have completed"
	for _, ts := range a.TaskStates {
		ts.State = "dead"
		ts.FinishedAt = now
	}
	s.taskEvent(a, "Killed", "Task successfully killed", map[string]string{})
	s.publishClientUpdate(a, idx, now)
}

// afterTerminal updates the job of an allocation that just ended and lets
// blocked evaluations use the freed capacity.
func (s *Server) afterTerminal(a *api.Allocation) {
	// Nomad reports the job's new status at the allocation's index, as a
	// Job/AllocationUpdated event (seen on a real 2.0.6 agent).
	if js := s.jobs[jobKey(a.Namespace, a.JobID)]; js != nil && s.updateJobStatus(js) {
		idx := a.ModifyIndex
		s.tableIndex["jobs"] = idx
		js.job.ModifyIndex = &idx
		s.emit(idx, "Job", "AllocationUpdated", a.JobID, a.Namespace, nil, "Job", js.job)
	}
	s.unblock("")
}

func (s *Server) stopAlloc(id string) (any, uint64, error) {
	a := s.allocs[id]
	if a == nil {
		return nil, 0, errf(http.StatusNotFound, "alloc not found")
	}
	js := s.jobs[jobKey(a.Namespace, a.JobID)]
	idx := s.bump("allocs", "evals")
	a.DesiredStatus = "stop"
	a.DesiredDescription = "alloc is being migrated"
	t, f := true, false
	a.DesiredTransition = api.DesiredTransition{Migrate: &t, Reschedule: &f, NoShutdownDelay: &f}
	a.ModifyIndex = idx
	s.emit(idx, "Allocation", "AllocationUpdateDesiredStatus", a.ID, a.Namespace, []string{a.JobID, ""}, "Allocation", allocEvent(a))
	var ev *api.Evaluation
	if js != nil {
		ev = s.newEval(idx, js.job, "alloc-stop")
	} else {
		ev = &api.Evaluation{ID: s.newID(), Namespace: a.Namespace, JobID: a.JobID, TriggeredBy: "alloc-stop", Status: "pending", CreateIndex: idx, ModifyIndex: idx}
		s.evals[ev.ID] = ev
	}
	s.emit(idx, "Evaluation", "AllocationUpdateDesiredStatus", ev.ID, a.Namespace, []string{a.JobID, ""}, "Evaluation", evalStub(ev))
	s.clientStop(a)
	if js != nil {
		if js.blocked != "" {
			// The job's own blocked evaluation is superseded by this one.
			if be := s.evals[js.blocked]; be != nil {
				i := s.bump("evals")
				be.Status = "canceled"
				be.ModifyIndex = i
				s.emit(i, "Evaluation", "EvaluationUpdated", be.ID, be.Namespace, []string{be.JobID, ""}, "Evaluation", be)
			}
			js.blocked = ""
		}
		s.process(js, ev)
		if s.updateJobStatus(js) {
			i := s.bump("jobs")
			js.job.ModifyIndex = &i
			s.emit(i, "Job", "AllocationUpdated", a.JobID, a.Namespace, nil, "Job", js.job)
		}
	}
	s.unblock(jobKey(a.Namespace, a.JobID))
	return allocStopResponse{EvalID: ev.ID, Index: idx}, idx, nil
}

func (s *Server) signalAlloc(r *http.Request, id string) (any, uint64, error) {
	var req api.AllocSignalRequest
	if err := decode(r, &req); err != nil {
		return nil, 0, err
	}
	a := s.allocs[id]
	if a == nil {
		return nil, 0, errf(http.StatusNotFound, "Unknown allocation %q", id)
	}
	if terminal(a) {
		return nil, 0, errf(http.StatusBadRequest, "Task not running")
	}
	s.ensureTaskStates(a)
	if req.Task != "" && a.TaskStates[req.Task] == nil {
		return nil, 0, errf(http.StatusBadRequest, "Failed to signal task: %s, err: task not found", req.Task)
	}
	if req.Signal == "" {
		req.Signal = "SIGKILL"
	}
	s.signals = append(s.signals, SignalRecord{AllocID: id, Task: req.Task, Signal: req.Signal, Index: s.index})
	s.taskEvent(a, "Signaling", "Task being sent a signal", map[string]string{"signal": req.Signal})
	if s.exitOnSig {
		// The trainer checkpoints and exits.
		s.exitTasks(a, s.sigExitCode)
	}
	return genericResponse{Index: 0}, 0, nil
}

func (s *Server) listAllocs(r *http.Request) []*api.AllocationListStub {
	ns := namespaceOf(r)
	out := []*api.AllocationListStub{}
	for _, a := range s.allocs {
		if ns == "*" || a.Namespace == ns {
			out = append(out, allocStub(a))
		}
	}
	sortStubs(out)
	return out
}

func (s *Server) readAlloc(id string) (any, uint64, error) {
	a := s.allocs[id]
	if a == nil {
		return nil, 0, errf(http.StatusNotFound, "alloc not found")
	}
	return a, s.tableIndex["allocs"], nil
}

// SetClientBehavior sets what the simulated client on a node does with new
// allocations (run, hold pending, fail).
func (s *Server) SetClientBehavior(nodeID string, b ClientBehavior) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.behavior[nodeID] = b
}

// StartPending starts allocations the client held pending (ClientHold).
func (s *Server) StartPending(nodeID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.behavior[nodeID] = ClientRun
	for _, a := range s.sortedAllocs() {
		if a.NodeID == nodeID && a.ClientStatus == "pending" && a.DesiredStatus == "run" {
			s.clientStart(a)
		}
	}
}

// FinishAlloc makes an allocation's tasks exit on their own (status
// complete or failed), as a finished or crashed training job does.
func (s *Server) FinishAlloc(allocID string, failed bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.allocs[allocID]
	if a == nil {
		return fmt.Errorf("alloc %q not found", allocID)
	}
	idx := s.bump("allocs")
	s.ensureTaskStates(a)
	a.ClientStatus = "complete"
	if failed {
		a.ClientStatus = "failed"
	}
	now := s.now()
	for _, ts := range a.TaskStates {
		ts.State = "dead"
		ts.Failed = failed
		ts.FinishedAt = now
	}
	s.publishClientUpdate(a, idx, now)
	s.afterTerminal(a)
	return nil
}

// ExitTasks makes every task of an allocation exit on its own with an exit
// code, as Nomad's client reports it: each task gets a Terminated event
// whose Details carry "exit_code" (and the deprecated ExitCode field).
// Code 0 completes the allocation (a batch task that exits 0 is done).
// Another code follows the default batch restart policy (3 attempts in
// 24h, mode fail): the client restarts the task ("Restarting", then
// "Started") and the allocation stays running; only once attempts run
// out would it fail (FinishAlloc with failed models that end).
func (s *Server) ExitTasks(allocID string, code int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.allocs[allocID]
	if a == nil {
		return fmt.Errorf("alloc %q not found", allocID)
	}
	if terminal(a) {
		return fmt.Errorf("alloc %q is %s", allocID, a.ClientStatus)
	}
	s.exitTasks(a, code)
	return nil
}

func (s *Server) exitTasks(a *api.Allocation, code int) {
	idx := s.bump("allocs")
	s.ensureTaskStates(a)
	now := s.now()
	for _, ts := range a.TaskStates {
		ts.Events = append(ts.Events, &api.TaskEvent{Type: "Terminated", Time: now.UnixNano(), ExitCode: code,
			DisplayMessage: fmt.Sprintf("Exit Code: %d", code), Details: map[string]string{"exit_code": fmt.Sprint(code), "signal": "0", "oom_killed": "false"}})
	}
	if code == 0 {
		a.ClientStatus = "complete"
		a.ClientDescription = "All tasks have completed"
		for _, ts := range a.TaskStates {
			ts.State = "dead"
			ts.FinishedAt = now
		}
		s.publishClientUpdate(a, idx, now)
		s.afterTerminal(a)
		return
	}
	for _, ts := range a.TaskStates {
		ts.Restarts++
		ts.LastRestart = now
		ts.Events = append(ts.Events,
			&api.TaskEvent{Type: "Restarting", Time: now.UnixNano(), DisplayMessage: "Task restarting in 15s", Details: map[string]string{"restart_reason": "Restart within policy"}},
			&api.TaskEvent{Type: "Started", Time: now.UnixNano(), DisplayMessage: "Task started by client", Details: map[string]string{}})
	}
	s.publishClientUpdate(a, idx, now)
}

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

// EventRecord identifies one event the fake emitted.
type EventRecord struct {
	Index            uint64
	Topic, Type, Key string
}

// Events returns the buffered events (oldest first).
func (s *Server) Events() []EventRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]EventRecord, 0, len(s.events))
	for _, e := range s.events {
		out = append(out, EventRecord{Index: e.wire.Index, Topic: e.wire.Topic, Type: e.wire.Type, Key: e.wire.Key})
	}
	return out
}
