package nomadfake

import (
	"net/http"

	"sort"
	"strings"

	"github.com/hashicorp/nomad/api"
)

func (s *Server) readJob(r *http.Request, id string) (any, uint64, error) {
	js := s.jobs[jobKey(namespaceOf(r), id)]
	if js == nil {
		return nil, 0, errf(http.StatusNotFound, "job not found")
	}
	return js.job, s.tableIndex["jobs"], nil
}

func (s *Server) listJobs(r *http.Request) []map[string]any {
	q := r.URL.Query()
	ns := namespaceOf(r)
	withMeta := q.Get("meta") == "true"
	prefix := q.Get("prefix")
	out := []*api.JobListStub{}
	for _, js := range s.jobs {
		j := js.job
		if (ns != "*" && *j.Namespace != ns) || !strings.HasPrefix(*j.ID, prefix) {
			continue
		}
		stub := &api.JobListStub{
			ID: *j.ID, ParentID: str(j.ParentID), Name: *j.Name, Namespace: *j.Namespace,
			Datacenters: j.Datacenters, Type: *j.Type, Priority: *j.Priority, Stop: *j.Stop,
			Status: *j.Status, StatusDescription: str(j.StatusDescription),
			JobSummary: s.summary(js), CreateIndex: *j.CreateIndex, ModifyIndex: *j.ModifyIndex,
			JobModifyIndex: *j.JobModifyIndex, SubmitTime: *j.SubmitTime,
		}
		if withMeta {
			stub.Meta = j.Meta
		}
		out = append(out, stub)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	// Nomad's stubs carry the job's node pool, which api.JobListStub lacks.
	res := make([]map[string]any, 0, len(out))
	for _, stub := range out {
		m := shape(stub, "jobstub", false).(map[string]any)
		m["NodePool"] = *s.jobs[jobKey(stub.Namespace, stub.ID)].job.NodePool
		if !withMeta {
			delete(m, "Meta")
		}
		res = append(res, m)
	}
	return res
}

func (s *Server) summary(js *jobState) *api.JobSummary {
	j := js.job
	sum := &api.JobSummary{JobID: *j.ID, Namespace: *j.Namespace, Summary: map[string]api.TaskGroupSummary{},
		Children: &api.JobChildrenSummary{}, CreateIndex: *j.CreateIndex, ModifyIndex: *j.ModifyIndex}
	for _, tg := range j.TaskGroups {
		sum.Summary[*tg.Name] = api.TaskGroupSummary{Queued: js.queued[*tg.Name]}
	}
	for _, a := range s.allocs {
		if a.JobID != *j.ID || a.Namespace != *j.Namespace {
			continue
		}
		tgs := sum.Summary[a.TaskGroup]
		switch a.ClientStatus {
		case "pending":
			tgs.Starting++
		case "running":
			tgs.Running++
		case "complete":
			tgs.Complete++
		case "failed":
			tgs.Failed++
		case "lost":
			tgs.Lost++
		}
		sum.Summary[a.TaskGroup] = tgs
	}
	return sum
}

func (s *Server) jobSummary(r *http.Request, id string) (any, uint64, error) {
	js := s.jobs[jobKey(namespaceOf(r), id)]
	if js == nil {
		return nil, 0, errf(http.StatusNotFound, "job not found")
	}
	return s.summary(js), s.tableIndex["jobs"], nil
}

func (s *Server) jobAllocs(r *http.Request, id string) (any, uint64, error) {
	ns := namespaceOf(r)
	out := []*api.AllocationListStub{}
	for _, a := range s.allocs {
		if a.JobID == id && a.Namespace == ns {
			out = append(out, allocStub(a))
		}
	}
	sortStubs(out)
	return out, s.tableIndex["allocs"], nil
}

func (s *Server) jobEvals(r *http.Request, id string) (any, uint64, error) {
	ns := namespaceOf(r)
	out := []*api.Evaluation{}
	for _, e := range s.evals {
		if e.JobID == id && e.Namespace == ns {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].CreateIndex > out[b].CreateIndex })
	return out, s.tableIndex["evals"], nil
}

func (s *Server) listEvals(r *http.Request) []*api.Evaluation {
	ns := namespaceOf(r)
	q := r.URL.Query()
	out := []*api.Evaluation{}
	for _, e := range s.evals {
		if (ns == "*" || e.Namespace == ns) && (q.Get("job") == "" || e.JobID == q.Get("job")) &&
			(q.Get("status") == "" || e.Status == q.Get("status")) {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].CreateIndex > out[b].CreateIndex })
	return out
}

func (s *Server) readEval(id string) (any, uint64, error) {
	e := s.evals[id]
	if e == nil {
		return nil, 0, errf(http.StatusNotFound, "eval not found")
	}
	return e, s.tableIndex["evals"], nil
}

func allocStub(a *api.Allocation) *api.AllocationListStub {
	var ver uint64
	jt := ""
	if a.Job != nil {
		ver = *a.Job.Version
		jt = *a.Job.Type
	}
	return &api.AllocationListStub{
		ID: a.ID, EvalID: a.EvalID, Name: a.Name, Namespace: a.Namespace, NodeID: a.NodeID,
		NodeName: a.NodeName, JobID: a.JobID, JobType: jt, JobVersion: ver, TaskGroup: a.TaskGroup,
		DesiredStatus: a.DesiredStatus, DesiredDescription: a.DesiredDescription,
		ClientStatus: a.ClientStatus, ClientDescription: a.ClientDescription, TaskStates: a.TaskStates,
		DeploymentStatus: a.DeploymentStatus, FollowupEvalID: a.FollowupEvalID,
		NextAllocation: a.NextAllocation, RescheduleTracker: a.RescheduleTracker,
		PreemptedAllocations: a.PreemptedAllocations, PreemptedByAllocation: a.PreemptedByAllocation,
		CreateIndex: a.CreateIndex, ModifyIndex: a.ModifyIndex, CreateTime: a.CreateTime, ModifyTime: a.ModifyTime,
		AllocatedResources: a.AllocatedResources,
	}
}

func sortStubs(out []*api.AllocationListStub) {
	sort.Slice(out, func(a, b int) bool {
		if out[a].CreateIndex != out[b].CreateIndex {
			return out[a].CreateIndex > out[b].CreateIndex
		}
		return out[a].Name < out[b].Name
	})
}

func (s *Server) sortedAllocs() []*api.Allocation {
	out := make([]*api.Allocation, 0, len(s.allocs))
	for _, a := range s.allocs {
		out = append(out, a)
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].CreateIndex != out[b].CreateIndex {
			return out[a].CreateIndex < out[b].CreateIndex
		}
		return out[a].Name < out[b].Name
	})
	return out
}
