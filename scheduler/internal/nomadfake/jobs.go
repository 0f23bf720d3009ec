package nomadfake

import (
	"encoding/json"
	"net/http"

	"strconv"

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
	job, err := registeredJob(r, &req, id)
	if err != nil {
		return nil, 0, err
	}
	ns, id := str(job.Namespace), str(job.ID)
	existing := s.jobs[jobKey(ns, id)]
	if err := checkRegister(&req, existing, job); err != nil {
		return nil, 0, err
	}
	idx := s.bump("jobs", "evals")
	s.stampJob(job, existing, idx)
	if existing == nil {
		existing = &jobState{queued: map[string]int{}}
		s.jobs[jobKey(ns, id)] = existing
	}
	existing.job = job
	if s.onRegister != nil {
		s.onRegister(cloneJob(job))
	}
	s.supersedeBlocked(existing, idx)
	s.updateJobStatus(existing)
	s.emit(idx, "Job", "JobRegistered", id, ns, nil, "Job", job)
	ev := s.newEval(idx, job, "job-register")
	s.emit(idx, "Evaluation", "JobRegistered", ev.ID, ns, []string{id, ""}, "Evaluation", evalStub(ev))
	s.process(existing, ev)
	return registerResponse{EvalCreateIndex: idx, EvalID: ev.ID, Index: idx, JobModifyIndex: idx}, idx, nil
}

// registeredJob is the job of a register request, canonicalized in its
// namespace (the request's, else the query's), with Nomad's answers to a
// request without a job or with an ID other than the path's.
func registeredJob(r *http.Request, req *api.JobRegisterRequest, id string) (*api.Job, error) {
	if req.Job == nil {
		return nil, errf(http.StatusBadRequest, "Job must be specified")
	}
	job := req.Job
	if id == "" {
		id = str(job.ID)
	}
	if str(job.ID) != id {
		return nil, errf(http.StatusBadRequest, "Job ID does not match name")
	}
	ns := str(job.Namespace)
	if ns == "" {
		ns = namespaceOf(r)
	}
	canonicalize(job, ns)
	return job, nil
}

// checkRegister refuses a register as Nomad does: an EnforceIndex that
// does not match (HTTP 500 with Nomad's texts), a negative group count.
func checkRegister(req *api.JobRegisterRequest, existing *jobState, job *api.Job) error {
	if req.EnforceIndex {
		switch {
		case req.JobModifyIndex == 0 && existing != nil:
			return errf(http.StatusInternalServerError, "Enforcing job modify index 0: job already exists")
		case req.JobModifyIndex != 0 && existing == nil:
			return errf(http.StatusInternalServerError, "Enforcing job modify index %d: job does not exist", req.JobModifyIndex)
		case existing != nil && req.JobModifyIndex != *existing.job.JobModifyIndex:
			return errf(http.StatusInternalServerError,
				"Enforcing job modify index %d: job exists with conflicting job modify index: %d",
				req.JobModifyIndex, *existing.job.JobModifyIndex)
		}
	}
	for _, tg := range job.TaskGroups {
		if *tg.Count < 0 {
			return errf(http.StatusBadRequest, "1 error occurred:\n\t* Task group %s validation failed: Task group count can't be negative", str(tg.Name))
		}
	}
	return nil
}

// stampJob sets what Nomad sets on a registered job: its version (a new
// one only when the spec changed), indexes, submit time and a pending
// status.
func (s *Server) stampJob(job *api.Job, existing *jobState, idx uint64) {
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
}

// supersedeBlocked cancels the job's blocked evaluation: a new
// registration supersedes it.
func (s *Server) supersedeBlocked(js *jobState, idx uint64) {
	if js.blocked == "" {
		return
	}
	if be := s.evals[js.blocked]; be != nil {
		be.Status = "canceled"
		be.StatusDescription = "evaluation superseded by a newer registration"
		be.ModifyIndex = idx
		s.emit(idx, "Evaluation", "EvaluationUpdated", be.ID, str(js.job.Namespace), []string{str(js.job.ID), ""}, "Evaluation", be)
	}
	js.blocked = ""
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
	stopped := s.stopJobAllocs(ns, id, purge, idx)
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

// stopJobAllocs marks a deregistered job's live allocations desired stop
// (their clients stop them next) and returns them; a purge instead
// deletes every allocation of the job, as Nomad 2.0.6 does: from its state,
// with no allocation event (only the job's JobDeregistered, Deleted), its
// clients then killing the tasks.
func (s *Server) stopJobAllocs(ns, id string, purge bool, idx uint64) []*api.Allocation {
	var stopped []*api.Allocation
	for _, a := range s.sortedAllocs() {
		if a.JobID != id || a.Namespace != ns {
			continue
		}
		if purge {
			delete(s.allocs, a.ID)
			continue
		}
		if a.DesiredStatus == "run" && !terminal(a) {
			a.DesiredStatus = "stop"
			a.DesiredDescription = "alloc not needed due to job update"
			a.ModifyIndex = idx
			stopped = append(stopped, a)
			s.emit(idx, "Allocation", "PlanResult", a.ID, ns, []string{id, ""}, "Allocation", allocEvent(a))
		}
	}
	return stopped
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
