package nomad

// Test-only views of the executor's state (no production caller: the agent
// learns what the executor did from Apply's result and the logs).

// Busy reports whether an admission or preemption of the job is under way
// (the engine's plan for it should wait).
func (x *Executor) Busy(jobID string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.busy[jobID] || x.pending[jobID] != nil
}

// Outcome returns the last noteworthy outcome for a job (a rollback or a
// conflict), for explain; "" when none.
func (x *Executor) Outcome(jobID string) string {
	x.mu.Lock()
	defer x.mu.Unlock()
	note, _ := x.outcomes.get(jobID)
	return note
}
