package nomadfake

import (
	"encoding/json"
	"fmt"
	"net/http"

	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// registerResponse is the body Nomad 2.0.6 answers to a job registration
// (testdata/register-response.json): the RPC reply's fields, flattened.
type registerResponse struct {
	EvalCreateIndex uint64
	EvalID          string
	Index           uint64
	JobModifyIndex  uint64
	KnownLeader     bool
	LastContact     int
	NextToken       string
	Warnings        string
}

type deregisterResponse struct {
	EvalCreateIndex uint64
	EvalID          string
	Index           uint64
	JobModifyIndex  uint64
	KnownLeader     bool
	LastContact     int
	NextToken       string
	VolumeEvalID    string
	VolumeEvalIndex uint64
}

type planResponse struct {
	Annotations        *api.PlanAnnotations
	CreatedEvals       []*api.Evaluation
	Diff               *api.JobDiff
	FailedTGAllocs     map[string]*api.AllocationMetric
	Index              uint64
	JobModifyIndex     uint64
	NextPeriodicLaunch string
	Warnings           string
}

type allocStopResponse struct {
	EvalID string
	Index  uint64
}

type genericResponse struct {
	Index uint64
}

func jobKey(ns, id string) string { return ns + "/" + id }

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func canonicalize(job *api.Job, ns string) {
	def := func(p **string, v string) {
		if *p == nil || **p == "" {
			*p = &v
		}
	}
	def(&job.Namespace, ns)
	def(&job.Name, str(job.ID))
	def(&job.Type, "service")
	def(&job.Region, "global")
	def(&job.NodePool, "default")
	if job.Priority == nil {
		p := 50
		job.Priority = &p
	}
	if len(job.Datacenters) == 0 {
		job.Datacenters = []string{"*"}
	}
	if job.Stop == nil {
		f := false
		job.Stop = &f
	}
	for _, tg := range job.TaskGroups {
		if tg.Count == nil {
			c := 1
			tg.Count = &c
		}
	}
}

// specOf returns the user-controlled part of a job, to tell whether a
// registration changes the job (Nomad bumps Version only then).
func specOf(job *api.Job) string {
	c := *job
	c.Status, c.StatusDescription = nil, nil
	c.CreateIndex, c.ModifyIndex, c.JobModifyIndex = nil, nil, nil
	c.Version, c.SubmitTime, c.Stable = nil, nil, nil
	b, _ := json.Marshal(&c)
	return string(b)
}

func cloneJob(job *api.Job) *api.Job {
	b, _ := json.Marshal(job)
	var out api.Job
	_ = json.Unmarshal(b, &out)
	return &out
}

func (s *Server) registerJob(r *http.Request, id string) (any, uint64, error) {
	var req api.JobRegisterRequest
	if err := decode(r, &req); err != nil {
		return nil, 0, err
	}
	if req.Job == nil {
		return nil, 0, errf(http.StatusBadRequest, "Job must be specified")
	}
	job := req.Job
	if id == "" {
		id = str(job.ID)
	}
	if str(job.ID) != id {
		return nil, 0, errf(http.StatusBadRequest, "Job ID does not match name")
	}
	ns := str(job.Namespace)
	if ns == "" {
		ns = namespaceOf(r)
	}
	canonicalize(job, ns)
	key := jobKey(ns, id)
	existing := s.jobs[key]
	if req.EnforceIndex {
		switch {
		case req.JobModifyIndex == 0 && existing != nil:
			return nil, 0, errf(http.StatusInternalServerError, "Enforcing job modify index 0: job already exists")
		case req.JobModifyIndex != 0 && existing == nil:
			return nil, 0, errf(http.StatusInternalServerError, "Enforcing job modify index %d: job does not exist", req.JobModifyIndex)
		case existing != nil && req.JobModifyIndex != *existing.job.JobModifyIndex:
			return nil, 0, errf(http.StatusInternalServerError,
				"Enforcing job modify index %d: job exists with conflicting job modify index: %d",
				req.JobModifyIndex, *existing.job.JobModifyIndex)
		}
	}
	for _, tg := range job.TaskGroups {
		if *tg.Count < 0 {
			return nil, 0, errf(http.StatusBadRequest, "1 error occurred:\n\t* Task group %s validation failed: Task group count can't be negative", str(tg.Name))
		}
	}
	idx := s.bump("jobs", "evals")
	var version uint64
	createIndex := idx
	if existing != nil {
		version = *existing.job.Version
		createIndex = *existing.job.CreateIndex
		if specOf(existing.job) != specOf(job) {
			version++
		}
	}
	now := s.now().UnixNano()
	job.Version = &version
	job.CreateIndex = &createIndex
	job.ModifyIndex = &idx
	job.JobModifyIndex = &idx
	job.SubmitTime = &now
	stable := false
	job.Stable = &stable
	pending := "pending"
	job.Status = &pending
	empty := ""
	job.StatusDescription = &empty
	if existing == nil {
		existing = &jobState{queued: map[string]int{}}
		s.jobs[key] = existing
	}
	existing.job = job
	if s.onRegister != nil {
		s.onRegister(cloneJob(job))
	}
	// A new registration supersedes the job's blocked evaluation.
	if existing.blocked != "" {
		if be := s.evals[existing.blocked]; be != nil {
			be.Status = "canceled"
			be.StatusDescription = "evaluation superseded by a newer registration"
			be.ModifyIndex = idx
			s.emit(idx, "Evaluation", "EvaluationUpdated", be.ID, ns, []string{id, ""}, "Evaluation", be)
		}
		existing.blocked = ""
	}
	s.updateJobStatus(existing)
	s.emit(idx, "Job", "JobRegistered", id, ns, nil, "Job", job)
	ev := s.newEval(idx, job, "job-register")
	s.emit(idx, "Evaluation", "JobRegistered", ev.ID, ns, []string{id, ""}, "Evaluation", evalStub(ev))
	s.process(existing, ev)
	return registerResponse{EvalCreateIndex: idx, EvalID: ev.ID, Index: idx, JobModifyIndex: idx}, idx, nil
}

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

func (s *Server) deregisterJob(r *http.Request, id string) (any, uint64, error) {
	ns := namespaceOf(r)
	key := jobKey(ns, id)
	js := s.jobs[key]
	if js == nil {
		return nil, 0, errf(http.StatusNotFound, "job not found")
	}
	purge, _ := strconv.ParseBool(r.URL.Query().Get("purge"))
	idx := s.bump("jobs", "evals", "allocs")
	t := true
	js.job.Stop = &t
	js.job.ModifyIndex = &idx
	js.job.JobModifyIndex = &idx
	for _, tg := range js.job.TaskGroups {
		js.queued[*tg.Name] = 0
	}
	if js.blocked != "" {
		if be := s.evals[js.blocked]; be != nil {
			be.Status = "canceled"
			be.ModifyIndex = idx
		}
		js.blocked = ""
	}
	ev := s.newEval(idx, js.job, "job-deregister")
	payload := map[string]any{"Job": js.job}
	if purge {
		payload["Deleted"] = true
		delete(s.jobs, key)
	}
	s.emitRaw(idx, "Job", "JobDeregistered", id, ns, nil, payload)
	s.emit(idx, "Evaluation", "JobDeregistered", ev.ID, ns, []string{id, ""}, "Evaluation", evalStub(ev))
	var stopped []*api.Allocation
	for _, a := range s.sortedAllocs() {
		if purge && a.JobID == id && a.Namespace == ns {
			// Nomad 2.0.6 deletes a purged job's allocations from its
			// state with no allocation event (only the job's
			// JobDeregistered, Deleted); its clients then kill the tasks.
			delete(s.allocs, a.ID)
			continue
		}
		if a.JobID == id && a.Namespace == ns && a.DesiredStatus == "run" && !terminal(a) {
			a.DesiredStatus = "stop"
			a.DesiredDescription = "alloc not needed due to job update"
			a.ModifyIndex = idx
			stopped = append(stopped, a)
			s.emit(idx, "Allocation", "PlanResult", a.ID, ns, []string{id, ""}, "Allocation", allocEvent(a))
		}
	}
	ev.Status = "complete"
	idx2 := s.bump("evals")
	ev.ModifyIndex = idx2
	s.emit(idx2, "Evaluation", "EvaluationUpdated", ev.ID, ns, []string{id, ""}, "Evaluation", ev)
	for _, a := range stopped {
		s.clientStop(a)
	}
	if !purge {
		s.updateJobStatus(js)
	}
	s.unblock("")
	return deregisterResponse{EvalCreateIndex: idx, EvalID: ev.ID, Index: idx, JobModifyIndex: idx}, idx, nil
}

func (s *Server) planJob(r *http.Request, id string) (any, uint64, error) {
	var req api.JobPlanRequest
	if err := decode(r, &req); err != nil {
		return nil, 0, err
	}
	if req.Job == nil {
		return nil, 0, errf(http.StatusBadRequest, "Job must be specified")
	}
	job := req.Job
	canonicalize(job, namespaceOf(r))
	if str(job.ID) != id {
		return nil, 0, errf(http.StatusBadRequest, "Job ID does not match")
	}
	js := &jobState{job: job, queued: map[string]int{}}
	var jmi uint64
	if cur := s.jobs[jobKey(*job.Namespace, id)]; cur != nil {
		jmi = *cur.job.JobModifyIndex
		v := *cur.job.Version
		job.Version = &v
	} else {
		v := uint64(0)
		job.Version = &v
	}
	placements, failed, _ := s.placeJob(js, nil)
	ann := &api.PlanAnnotations{DesiredTGUpdates: map[string]*api.DesiredUpdates{}}
	for _, tg := range job.TaskGroups {
		ann.DesiredTGUpdates[*tg.Name] = &api.DesiredUpdates{}
	}
	for _, p := range placements {
		ann.DesiredTGUpdates[p.tg].Place++
	}
	for tg, m := range failed {
		ann.DesiredTGUpdates[tg].Place += uint64(m.CoalescedFailures + 1)
	}
	if len(failed) == 0 {
		failed = nil
	}
	return planResponse{Annotations: ann, FailedTGAllocs: failed, Index: s.index, JobModifyIndex: jmi,
		NextPeriodicLaunch: "0001-01-01T00:00:00Z"}, s.index, nil
}

// updateJobStatus derives the job's status as Nomad does: running while any
// allocation is live, pending while anything is queued, dead otherwise.
func (s *Server) updateJobStatus(js *jobState) bool {
	j := js.job
	live, queued, any := false, false, false
	for _, a := range s.allocs {
		if a.JobID == *j.ID && a.Namespace == *j.Namespace {
			any = true
			if a.DesiredStatus == "run" && !terminal(a) {
				live = true
			}
		}
	}
	for _, n := range js.queued {
		if n > 0 {
			queued = true
		}
	}
	status := "dead"
	switch {
	case live:
		status = "running"
	case *j.Stop:
		status = "dead"
	case queued || !any:
		status = "pending"
	}
	if status == "dead" && !*j.Stop && *j.Type != "batch" && *j.Type != "sysbatch" {
		status = "pending"
	}
	if *j.Status == status {
		return false
	}
	j.Status = &status
	return true
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
	ns, id := *job.Namespace, *job.ID
	fk := []string{id, ""}
	if *job.Stop {
		js.queued = map[string]int{}
		ev.Status = "complete"
		idx := s.bump("evals")
		ev.ModifyIndex = idx
		s.emit(idx, "Evaluation", "EvaluationUpdated", ev.ID, ns, fk, "Evaluation", ev)
		return
	}
	placements, failed, queued := s.placeJob(js, nil)
	js.queued = queued
	var created []*api.Allocation
	if len(placements) > 0 {
		idx := s.bump("evals", "allocs", "jobs")
		ev.ModifyIndex = idx
		s.emit(idx, "Evaluation", "PlanResult", ev.ID, ns, fk, "Evaluation", evalStub(ev))
		for _, p := range placements {
			a := s.newAlloc(idx, job, ev, p)
			created = append(created, a)
			s.emit(idx, "Allocation", "PlanResult", a.ID, ns, fk, "Allocation", allocEvent(a))
		}
		if s.updateJobStatus(js) {
			job.ModifyIndex = &idx
		}
		s.emit(idx, "Job", "PlanResult", id, ns, nil, "Job", job)
	}
	if len(failed) > 0 {
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
		s.emit(idx, "Evaluation", "EvaluationUpdated", be.ID, ns, fk, "Evaluation", be)
	}
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
	s.emit(idx, "Evaluation", "EvaluationUpdated", ev.ID, ns, fk, "Evaluation", ev)
	if s.updateJobStatus(js) {
		job.ModifyIndex = &idx
		s.emit(idx, "Job", "PlanResult", id, ns, nil, "Job", job)
	}
	for _, a := range created {
		s.clientStart(a)
	}
}

// unblock re-evaluates jobs with blocked evaluations after capacity was
// freed or added (Nomad's blocked-evals tracker). skip names a job key
// that was just evaluated.
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
	// Name index: the lowest index not used by a live allocation of the group.
	used := map[int]bool{}
	for _, a := range s.allocs {
		if a.JobID == *job.ID && a.Namespace == *job.Namespace && a.TaskGroup == p.tg && counts(a, job) {
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
	var tg *api.TaskGroup
	for _, g := range job.TaskGroups {
		if *g.Name == p.tg {
			tg = g
		}
	}
	now := s.now().UnixNano()
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
	a := &api.Allocation{
		ID: s.newID(), Namespace: *job.Namespace, EvalID: ev.ID,
		Name:   fmt.Sprintf("%s.%s[%d]", *job.ID, p.tg, n),
		NodeID: p.node.ID, NodeName: p.node.Name, JobID: *job.ID, Job: cloneJob(job), TaskGroup: p.tg,
		AllocatedResources: ar, TaskResources: taskRes,
		Metrics:       &api.AllocationMetric{NodePool: *job.NodePool, NodesEvaluated: len(s.nodes), NodesAvailable: map[string]int{}},
		DesiredStatus: "run", ClientStatus: "pending",
		CreateIndex: idx, ModifyIndex: idx, AllocModifyIndex: idx, CreateTime: now, ModifyTime: now,
		TaskStates: map[string]*api.TaskState{},
	}
	// A new allocation of a group that lost one of the same job version
	// replaces it (Nomad links the two whenever it places for a lost
	// allocation, at once or later from a blocked evaluation; a new job
	// version places afresh).
	for _, old := range s.sortedAllocs() {
		if old.JobID == a.JobID && old.Namespace == a.Namespace && old.TaskGroup == p.tg &&
			old.ClientStatus == "lost" && old.NextAllocation == "" &&
			old.Job != nil && old.Job.Version != nil && *old.Job.Version == *job.Version {
			a.PreviousAllocation = old.ID
			old.NextAllocation = a.ID
			break
		}
	}
	s.allocs[a.ID] = a
	return a
}

// allocEvent is the allocation as Nomad puts it in events: without the job.
func allocEvent(a *api.Allocation) *api.Allocation {
	c := *a
	c.Job = nil
	return &c
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

// Jobs returns copies of the fake's jobs (test inspection).
func (s *Server) Jobs() []*api.Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*api.Job
	for _, js := range s.jobs {
		out = append(out, cloneJob(js.job))
	}
	sort.Slice(out, func(a, b int) bool { return *out[a].ID < *out[b].ID })
	return out
}

// Job returns a copy of one job in the default namespace, or nil.
func (s *Server) Job(id string) *api.Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	js := s.jobs[jobKey("default", id)]
	if js == nil {
		return nil
	}
	return cloneJob(js.job)
}

// Allocations returns copies of the job's allocations (all when jobID is
// empty), oldest first.
func (s *Server) Allocations(jobID string) []*api.Allocation {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*api.Allocation
	for _, a := range s.sortedAllocs() {
		if jobID == "" || a.JobID == jobID {
			c := *a
			out = append(out, &c)
		}
	}
	return out
}

// Queued returns the number of queued allocations per group of a job.
func (s *Server) Queued(jobID string) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	js := s.jobs[jobKey("default", jobID)]
	if js == nil {
		return nil
	}
	out := map[string]int{}
	for k, v := range js.queued {
		out[k] = v
	}
	return out
}

// UpdateJob lets a test act as a user editing a job in place (e.g. `nomad
// job run` of a new version): fn mutates a copy, which is registered
// without EnforceIndex. It returns the new JobModifyIndex.
func (s *Server) UpdateJob(id string, fn func(j *api.Job)) (uint64, error) {
	j := s.Job(id)
	if j == nil {
		return 0, fmt.Errorf("job %q not found", id)
	}
	fn(j)
	body, _ := json.Marshal(api.JobRegisterRequest{Job: j})
	req, _ := http.NewRequest(http.MethodPost, s.URL()+"/v1/job/"+id, strings.NewReader(string(body)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var rr registerResponse
	if err := json.NewDecoder(resp.Body).Decode(&rr); err != nil {
		return 0, fmt.Errorf("decode register response (status %d): %w", resp.StatusCode, err)
	}
	return rr.JobModifyIndex, nil
}
