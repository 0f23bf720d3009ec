package nomadfake

import (
	"encoding/json"
	"fmt"
	"net/http"

	"sort"
	"strings"

	"github.com/hashicorp/nomad/api"
)

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
			out = append(out, cloneAlloc(a))
		}
	}
	return out
}

// cloneAlloc copies an allocation deeply enough for a caller to read it
// outside the lock: the fake appends task events and replaces task states
// in place, so the map and the event slices are copied (the job it points
// to is replaced, never changed, on a new version).
func cloneAlloc(a *api.Allocation) *api.Allocation {
	c := *a
	if a.TaskStates != nil {
		c.TaskStates = make(map[string]*api.TaskState, len(a.TaskStates))
		for name, ts := range a.TaskStates {
			t := *ts
			t.Events = append([]*api.TaskEvent(nil), ts.Events...)
			c.TaskStates[name] = &t
		}
	}
	return &c
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
