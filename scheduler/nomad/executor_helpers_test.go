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

// conflicts counts the actions Apply skipped because the job changed since
// the plan was decided.
func conflicts(res ApplyReport) int {
	n := 0
	for _, why := range res.Skipped {
		if why == SkipConflict {
			n++
		}
	}
	return n
}
