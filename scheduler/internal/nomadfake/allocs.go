package nomadfake

import (
	"fmt"
	"math"
	"net/http"
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
// Another code follows the group's restart policy (restartsLeft): while
// attempts remain the client restarts the task ("Restarting", then
// "Started") and the allocation stays running; once they are spent (at
// once with `restart { attempts = 0 mode = "fail" }`) the task is not
// restarted ("Not Restarting") and the allocation fails. The fake never
// reschedules a failed allocation, as `reschedule { attempts = 0 }`.
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
	attempts, interval := restartPolicy(a)
	failed := false
	for _, ts := range a.TaskStates {
		if ts.Restarts >= uint64(attempts) {
			failed = true
			ts.State, ts.Failed, ts.FinishedAt = "dead", true, now
			ts.Events = append(ts.Events, &api.TaskEvent{Type: "Not Restarting", Time: now.UnixNano(),
				DisplayMessage: fmt.Sprintf("Exceeded allowed attempts %d in interval %s and mode is \"fail\"", attempts, interval),
				Details:        map[string]string{"fails_task": "true", "restart_reason": fmt.Sprintf("Exceeded allowed attempts %d in interval %s and mode is \"fail\"", attempts, interval)}})
			continue
		}
		ts.Restarts++
		ts.LastRestart = now
		ts.Events = append(ts.Events,
			&api.TaskEvent{Type: "Restarting", Time: now.UnixNano(), DisplayMessage: "Task restarting in 15s", Details: map[string]string{"restart_reason": "Restart within policy"}},
			&api.TaskEvent{Type: "Started", Time: now.UnixNano(), DisplayMessage: "Task started by client", Details: map[string]string{}})
	}
	if failed {
		a.ClientStatus = "failed"
		a.ClientDescription = "Failed tasks"
		for _, ts := range a.TaskStates {
			if ts.State != "dead" {
				// The client kills the allocation's other tasks.
				ts.State, ts.FinishedAt = "dead", now
				ts.Events = append(ts.Events, &api.TaskEvent{Type: "Killed", Time: now.UnixNano(), DisplayMessage: "Task successfully killed", Details: map[string]string{}})
			}
		}
	}
	s.publishClientUpdate(a, idx, now)
	if failed {
		s.afterTerminal(a)
	}
}

// restartPolicy is how often the allocation's group lets a failed task
// restart in place (mode "fail"): its restart block's attempts, else
// Nomad's batch default of 3 in 24h.
func restartPolicy(a *api.Allocation) (attempts int, interval time.Duration) {
	attempts, interval = 3, 24*time.Hour
	if a.Job == nil {
		return attempts, interval
	}
	for _, tg := range a.Job.TaskGroups {
		if tg.Name == nil || *tg.Name != a.TaskGroup || tg.RestartPolicy == nil {
			continue
		}
		if tg.RestartPolicy.Attempts != nil {
			attempts = *tg.RestartPolicy.Attempts
		}
		if tg.RestartPolicy.Interval != nil {
			interval = *tg.RestartPolicy.Interval
		}
		if tg.RestartPolicy.Mode != nil && *tg.RestartPolicy.Mode == "delay" {
			attempts = math.MaxInt32 // restarts forever, waiting out each interval
		}
	}
	return attempts, interval
}
