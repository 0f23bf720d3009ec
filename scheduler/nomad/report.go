package nomad

// ApplyReport says what was done with a plan, for the agent's metrics,
// logs and explanations. Apply fills in everything but RolledBack and
// PinMismatches, which come from CheckDeadlines and PinMismatches (the
// agent's executor adapter adds them).
type ApplyReport struct {
	// Admitted lists the job IDs (cluster.JobKey) re-registered into their
	// target pool.
	Admitted []string
	// Preempted lists the victims whose preemption started (it finishes in
	// the background).
	Preempted []string
	// Requeued lists the incomplete gangs whose whole requeue (stop and
	// park, plan.Requeues) started, in the background like a preemption.
	Requeued []string
	// Reclaimed lists the hung jobs whose reclaim (the idle requeue
	// action) started, in the background like a preemption.
	Reclaimed []string
	// Withdrawing lists the victims whose preemption the plan withdrew
	// while it was under way (engine.Withdrawal): it ends, in the
	// background, with the job running on (OutcomeWithdrawn), unless a
	// task had already ended (then it goes on as before).
	Withdrawing []string
	// RolledBack lists admissions parked again because the gang did not
	// fully start by its deadline.
	RolledBack []string
	// Skipped maps job IDs to why an action was not taken: SkipConflict,
	// SkipUnderway, SkipDeferred or SkipGone.
	Skipped map[string]string
	// Failed maps job IDs to errors.
	Failed map[string]error
	// PinMismatches counts the nodes, since the last report, where Nomad
	// allocated other GPUs than an admission pinned.
	PinMismatches int
}

// Why an action of a plan was skipped (ApplyReport.Skipped).
const (
	// SkipNotUnderway: a withdrawal found no preemption of the job under
	// way here for that preemptor (it ended, or another leader runs it).
	SkipNotUnderway = "no preemption of the job for that preemptor is under way here"
	// SkipConflict: the job changed since the plan was decided (a user
	// update won the EnforceIndex race); the next cycle re-decides.
	SkipConflict = "the job changed since the plan was decided (EnforceIndex conflict); re-deciding"
	// SkipUnderway: an action for the job is already under way.
	SkipUnderway = "an action for the job is already under way"
	// SkipDeferred: a stop (preemption, requeue, reclaim) of a job whose
	// stop, or admission (its gang not yet all running), is under way
	// waits for that one to end; it is then carried out if the job still
	// runs an allocation, dropped if not (its allocations are gone). Like
	// SkipUnderway it is not to be forgotten (the agent's
	// forgetUnapplied): both are under way.
	SkipDeferred = "deferred behind the job's stop or admission under way; carried out after it if the job still runs an allocation"
)
