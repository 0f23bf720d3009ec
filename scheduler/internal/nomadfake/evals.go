package nomadfake

import (
	"fmt"

	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"
)

func (s *Server) newEval(idx uint64, job *api.Job, trigger string) *api.Evaluation {
	now := s.now().UnixNano()
	ev := &api.Evaluation{
		ID: s.newID(), Priority: *job.Priority, Type: *job.Type, TriggeredBy: trigger,
		Namespace: *job.Namespace, JobID: *job.ID, JobModifyIndex: *job.JobModifyIndex,
		Status: "pending", CreateIndex: idx, ModifyIndex: idx, CreateTime: now, ModifyTime: now,
	}
	s.evals[ev.ID] = ev
	if js := s.jobs[jobKey(*job.Namespace, *job.ID)]; js != nil {
		js.evalIDs = append(js.evalIDs, ev.ID)
	}
	return ev
}

// evalStub is the reduced evaluation Nomad puts in JobRegistered events.
func evalStub(ev *api.Evaluation) map[string]any {
	return map[string]any{
		"CreateIndex": ev.CreateIndex, "CreateTime": ev.CreateTime, "ID": ev.ID, "JobID": ev.JobID,
		"JobModifyIndex": ev.JobModifyIndex, "ModifyIndex": ev.ModifyIndex, "ModifyTime": ev.ModifyTime,
		"Namespace": ev.Namespace, "Priority": ev.Priority, "Status": ev.Status,
		"TriggeredBy": ev.TriggeredBy, "Type": ev.Type,
	}
}

func terminal(a *api.Allocation) bool {
	switch a.ClientStatus {
	case "complete", "failed", "lost":
		return true
	}
	return false
}

// counts reports whether an allocation fills one of its group's slots: it
// is live, or (batch) it finished in the current job version. Failed
// allocations of the current version also count: the fake does not
// reschedule, so a failing client cannot loop forever.
func counts(a *api.Allocation, job *api.Job) bool {
	if a.DesiredStatus != "run" {
		return false
	}
	if !terminal(a) {
		return true
	}
	if a.Job != nil && a.Job.Version != nil && *a.Job.Version == *job.Version {
		return a.ClientStatus == "complete" || a.ClientStatus == "failed"
	}
	return false
}

type placement struct {
	tg      string
	node    *api.Node
	devices map[string][]*api.AllocatedDeviceResource // task -> devices
}

// placeJob finds nodes for every missing allocation of the job. extra are
// placements already decided in the same plan (they use capacity).
func (s *Server) placeJob(js *jobState, extra []placement) ([]placement, map[string]*api.AllocationMetric, map[string]int) {
	job := js.job
	var out []placement
	failed := map[string]*api.AllocationMetric{}
	queued := map[string]int{}
	for _, tg := range job.TaskGroups {
		name := *tg.Name
		have := 0
		for _, a := range s.allocs {
			if a.JobID == *job.ID && a.Namespace == *job.Namespace && a.TaskGroup == name && counts(a, job) {
				have++
			}
		}
		need := *tg.Count - have
		for i := 0; i < need; i++ {
			p, metric := s.selectNode(job, tg, append(extra, out...))
			if p == nil {
				metric.CoalescedFailures = need - i - 1
				failed[name] = metric
				queued[name] = need - i
				break
			}
			out = append(out, *p)
		}
	}
	return out, failed, queued
}

// process runs an evaluation for the job: places what fits, queues the
// rest behind a blocked evaluation, and lets the simulated clients start
// the new allocations.
func (s *Server) process(js *jobState, ev *api.Evaluation) {
	job := js.job
	if *job.Stop {
		js.queued = map[string]int{}
		ev.Status = "complete"
		idx := s.bump("evals")
		ev.ModifyIndex = idx
		s.emit(idx, "Evaluation", "EvaluationUpdated", ev.ID, *job.Namespace, []string{*job.ID, ""}, "Evaluation", ev)
		return
	}
	placements, failed, queued := s.placeJob(js, nil)
	js.queued = queued
	created := s.commitPlacements(js, ev, placements)
	if len(failed) > 0 {
		s.blockEval(js, ev, failed)
	}
	s.completeEval(js, ev, placements, failed, queued)
	for _, a := range created {
		s.clientStart(a)
	}
}

// commitPlacements creates the evaluation's allocations (one plan result)
// and returns them.
func (s *Server) commitPlacements(js *jobState, ev *api.Evaluation, placements []placement) []*api.Allocation {
	if len(placements) == 0 {
		return nil
	}
	job := js.job
	ns, id := *job.Namespace, *job.ID
	fk := []string{id, ""}
	idx := s.bump("evals", "allocs", "jobs")
	ev.ModifyIndex = idx
	s.emit(idx, "Evaluation", "PlanResult", ev.ID, ns, fk, "Evaluation", evalStub(ev))
	var created []*api.Allocation
	for _, p := range placements {
		a := s.newAlloc(idx, job, ev, p)
		created = append(created, a)
		s.emit(idx, "Allocation", "PlanResult", a.ID, ns, fk, "Allocation", allocEvent(a))
	}
	if s.updateJobStatus(js) {
		job.ModifyIndex = &idx
	}
	s.emit(idx, "Job", "PlanResult", id, ns, nil, "Job", job)
	return created
}

// blockEval creates the blocked evaluation that places what could not be
// placed once capacity frees up (unblock).
func (s *Server) blockEval(js *jobState, ev *api.Evaluation, failed map[string]*api.AllocationMetric) {
	job := js.job
	ns, id := *job.Namespace, *job.ID
	idx := s.bump("evals", "jobs")
	now := s.now().UnixNano()
	be := &api.Evaluation{
		ID: s.newID(), Priority: ev.Priority, Type: ev.Type, TriggeredBy: "queued-allocs",
		Namespace: ns, JobID: id, JobModifyIndex: *job.JobModifyIndex, Status: "blocked",
		StatusDescription: "created to place remaining allocations", PreviousEval: ev.ID,
		FailedTGAllocs: failed, SnapshotIndex: ev.CreateIndex, CreateIndex: idx, ModifyIndex: idx,
		CreateTime: now, ModifyTime: now,
	}
	s.evals[be.ID] = be
	js.evalIDs = append(js.evalIDs, be.ID)
	js.blocked = be.ID
	ev.BlockedEval = be.ID
	s.emit(idx, "Evaluation", "EvaluationUpdated", be.ID, ns, []string{id, ""}, "Evaluation", be)
}

// completeEval completes the evaluation with its queued allocations, plan
// annotations and failures, and the job's status if it changed.
func (s *Server) completeEval(js *jobState, ev *api.Evaluation, placements []placement, failed map[string]*api.AllocationMetric, queued map[string]int) {
	job := js.job
	ns, id := *job.Namespace, *job.ID
	idx := s.bump("evals", "jobs")
	ev.Status = "complete"
	ev.ModifyIndex = idx
	ev.QueuedAllocations = map[string]int{}
	ann := &api.PlanAnnotations{DesiredTGUpdates: map[string]*api.DesiredUpdates{}}
	for _, tg := range job.TaskGroups {
		ev.QueuedAllocations[*tg.Name] = queued[*tg.Name]
		ann.DesiredTGUpdates[*tg.Name] = &api.DesiredUpdates{Place: uint64(queued[*tg.Name])}
	}
	for _, p := range placements {
		ann.DesiredTGUpdates[p.tg].Place++
	}
	ev.PlanAnnotations = ann
	if len(failed) > 0 {
		ev.FailedTGAllocs = failed
	}
	s.emit(idx, "Evaluation", "EvaluationUpdated", ev.ID, ns, []string{id, ""}, "Evaluation", ev)
	if s.updateJobStatus(js) {
		job.ModifyIndex = &idx
		s.emit(idx, "Job", "PlanResult", id, ns, nil, "Job", job)
	}
}

func (s *Server) unblock(skip string) {
	keys := make([]string, 0, len(s.jobs))
	for k, js := range s.jobs {
		if js.blocked != "" && k != skip {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(a, b int) bool {
		ja, jb := s.jobs[keys[a]].job, s.jobs[keys[b]].job
		if *ja.Priority != *jb.Priority {
			return *ja.Priority > *jb.Priority
		}
		return *ja.CreateIndex < *jb.CreateIndex
	})
	for _, k := range keys {
		js := s.jobs[k]
		if js == nil || js.blocked == "" {
			continue
		}
		// Only worth an evaluation when something can be placed now.
		if p, _, _ := s.placeJob(js, nil); len(p) == 0 {
			continue
		}
		be := s.evals[js.blocked]
		js.blocked = ""
		idx := s.bump("evals")
		be.Status = "pending"
		be.ModifyIndex = idx
		s.emit(idx, "Evaluation", "EvaluationUpdated", be.ID, be.Namespace, []string{be.JobID, ""}, "Evaluation", be)
		s.process(js, be)
	}
}

func (s *Server) newAlloc(idx uint64, job *api.Job, ev *api.Evaluation, p placement) *api.Allocation {
	var tg *api.TaskGroup
	for _, g := range job.TaskGroups {
		if *g.Name == p.tg {
			tg = g
		}
	}
	now := s.now().UnixNano()
	ar, taskRes := allocatedResources(tg, p)
	a := &api.Allocation{
		ID: s.newID(), Namespace: *job.Namespace, EvalID: ev.ID,
		Name:   fmt.Sprintf("%s.%s[%d]", *job.ID, p.tg, s.nameIndex(job, p.tg)),
		NodeID: p.node.ID, NodeName: p.node.Name, JobID: *job.ID, Job: cloneJob(job), TaskGroup: p.tg,
		AllocatedResources: ar, TaskResources: taskRes,
		Metrics:       &api.AllocationMetric{NodePool: *job.NodePool, NodesEvaluated: len(s.nodes), NodesAvailable: map[string]int{}},
		DesiredStatus: "run", ClientStatus: "pending",
		CreateIndex: idx, ModifyIndex: idx, AllocModifyIndex: idx, CreateTime: now, ModifyTime: now,
		TaskStates: map[string]*api.TaskState{},
	}
	if ev.TriggeredBy != "queued-allocs" {
		s.linkReplacement(a, job)
	}
	s.allocs[a.ID] = a
	return a
}

// nameIndex is the index in a new allocation's name: the lowest not used
// by a live allocation of the group.
func (s *Server) nameIndex(job *api.Job, group string) int {
	used := map[int]bool{}
	for _, a := range s.allocs {
		if a.JobID == *job.ID && a.Namespace == *job.Namespace && a.TaskGroup == group && counts(a, job) {
			if i := strings.LastIndex(a.Name, "["); i >= 0 {
				n, _ := strconv.Atoi(strings.TrimSuffix(a.Name[i+1:], "]"))
				used[n] = true
			}
		}
	}
	n := 0
	for used[n] {
		n++
	}
	return n
}

// allocatedResources are a placement's resources per task: the devices
// placement chose, the tasks' CPU and memory asks.
func allocatedResources(tg *api.TaskGroup, p placement) (*api.AllocatedResources, map[string]*api.Resources) {
	ar := &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{}, Shared: api.AllocatedSharedResources{DiskMB: 300}}
	taskRes := map[string]*api.Resources{}
	for _, t := range tg.Tasks {
		atr := &api.AllocatedTaskResources{Devices: p.devices[t.Name]}
		if t.Resources != nil {
			if t.Resources.CPU != nil {
				atr.Cpu.CpuShares = int64(*t.Resources.CPU)
			}
			if t.Resources.MemoryMB != nil {
				atr.Memory.MemoryMB = int64(*t.Resources.MemoryMB)
			}
		}
		ar.Tasks[t.Name] = atr
		taskRes[t.Name] = t.Resources
	}
	return ar, taskRes
}

// linkReplacement makes a new allocation of a group that lost one of the
// same job version its replacement, as Nomad links the two when it places
// for a lost allocation at once (a new job version places afresh). One
// placed later from a blocked evaluation is not linked: its
// PreviousAllocation is empty (seen on a real 2.0.5 cluster, a client
// back inside the grace); it only takes over the lost one's name.
func (s *Server) linkReplacement(a *api.Allocation, job *api.Job) {
	for _, old := range s.sortedAllocs() {
		if old.JobID == a.JobID && old.Namespace == a.Namespace && old.TaskGroup == a.TaskGroup &&
			old.ClientStatus == "lost" && old.NextAllocation == "" &&
			old.Job != nil && old.Job.Version != nil && *old.Job.Version == *job.Version {
			a.PreviousAllocation = old.ID
			old.NextAllocation = a.ID
			return
		}
	}
}

func allocEvent(a *api.Allocation) *api.Allocation {
	c := *a
	c.Job = nil
	return &c
}
