package agent

import (
	"fmt"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// A gang's life, as the agent keeps it across requeues and leaders: how
// many of its runs in a row lost a member (the durable gang requeue
// record, nomad.GangRequeue in Variables), the back-off before each
// requeued run is admitted again, the retry limit past which a gang ends
// failed (the job's impact_max_failures, or impact_on_failure = "fail"),
// and what `impact explain` says of a gang that ended failed once Nomad
// no longer runs it.

// wholeRunResets: a gang that has run whole (every member running, none
// missing) this long since its last requeue had a successful run; its next
// lost member starts a new count, with no back-off. Ten minutes is well
// past the gang barrier and the first checkpoint of a real trainer, and
// short enough that a job losing a node a day never ends failed for it.
const wholeRunResets = 10 * time.Minute

// maxEnded bounds the ended-failed explanations kept; endedFor is how
// long one is shown.
const (
	maxEnded = 1000
	endedFor = 24 * time.Hour
)

// endedJob is a gang the agent ended failed: its last explanation,
// shown by `impact explain` after the job left the model.
type endedJob struct {
	at time.Time
	ex agentapi.Explanation
}

// limitFailures turns the plan's gang requeues that would exceed the
// job's retry limit (its runs in a row that lost a member reaching
// impact_max_failures) into ends: the gang is stopped the same way and
// ended failed instead of parked. Called before the plan is applied.
func (c *cycler) limitFailures(plan *engine.Plan, snap *cluster.Snapshot) {
	for i := range plan.Requeues {
		r := &plan.Requeues[i]
		if r.Update || r.EndFailed {
			continue
		}
		j, ok := snap.Job(r.JobID)
		if !ok {
			continue
		}
		runs := c.state.gangs[r.JobID].Runs + 1
		if max := j.Spec.MaxFailedRuns(); runs >= max {
			r.EndFailed = true
			r.Reason = fmt.Sprintf("%s; ended failed: %d run(s) in a row lost a member (impact_max_failures %d)", r.Reason, runs, max)
		}
	}
}

// recordGangRequeues counts the gang requeues the executor started (a
// user's update is not one) in the job's durable record, and holds the
// job back from its second requeued run in a row on: a lost node is ridden
// out by one requeue (run again at once, elsewhere), but a job whose
// member fails every time it runs would otherwise be requeued and
// re-admitted in a loop, holding GPUs. The wait is rollbackBackoff
// doubling up to maxRollbackBackoff. A gang ended failed leaves the
// record; its explanation is kept once the view is built (showEnded).
func (c *cycler) recordGangRequeues(plan *engine.Plan, requeued map[string]bool, now time.Time) {
	for _, r := range plan.Requeues {
		if !requeued[r.JobID] || r.Update {
			continue
		}
		if r.EndFailed {
			delete(c.state.gangs, r.JobID)
			c.ending[r.JobID] = r
			c.log.Warn("gang ended failed", "job", r.JobID, "reason", r.Reason)
			continue
		}
		g := c.state.gangs[r.JobID]
		g.Runs++
		g.Last = now
		c.state.gangs[r.JobID] = g
		if g.Runs < 2 {
			continue
		}
		wait := backoffFor(g.Runs - 1)
		c.engine.Defer(r.JobID, now.Add(wait), fmt.Sprintf("its gang was requeued %d times in a row (a member lost, failed or stopped); retrying with back-off", g.Runs))
		c.log.Info("gang requeued again; holding the job back", "job", r.JobID, "requeues", g.Runs, "retry_after", wait)
	}
}

// holdBackGangs re-applies, at the start of a term, the back-off of the
// gangs whose durable record says they were requeued twice or more in a
// row and whose wait is not over: the engine's deferrals are its own
// memory, which a new leader's engine does not have, and without this a
// failover would re-admit a crashing gang at once.
func (c *cycler) holdBackGangs(now time.Time) {
	for id, g := range c.state.gangs {
		if g.Runs < 2 {
			continue
		}
		if until := g.Last.Add(backoffFor(g.Runs - 1)); until.After(now) {
			c.engine.Defer(id, until, fmt.Sprintf("its gang was requeued %d times in a row (a member lost, failed or stopped); retrying with back-off", g.Runs))
		}
	}
}

// resetGangRecords forgets the record of a job that left the model, and of
// one that has run whole for wholeRunResets since its last requeue: that
// run was a success, and the back-off and the retry limit start afresh.
// A new leader's records come from the durable state, so a failover keeps
// both.
func (c *cycler) resetGangRecords(snap *cluster.Snapshot, now time.Time) {
	for id, g := range c.state.gangs {
		j, ok := snap.Job(id)
		if !ok || (j.State == cluster.JobRunning && runningWholeSince(snap, j, g.Last, now) >= wholeRunResets) {
			delete(c.state.gangs, id)
			if ok {
				c.log.Info("gang ran whole again; its requeue count is reset", "job", id, "after_runs", g.Runs)
			}
		}
	}
}

// runningWholeSince is how long every member of the running job j has
// run (none stopping or a replacement, as many as its GPU groups ask),
// counted from its latest member's start and no earlier than since; 0
// when it is not whole.
func runningWholeSince(snap *cluster.Snapshot, j *cluster.Job, since, now time.Time) time.Duration {
	if j.Dead {
		return 0
	}
	want := 0
	for _, g := range j.Groups {
		if g.GPUs > 0 {
			want += g.Count - j.Completed[g.Name]
		}
	}
	have := 0
	start := since
	for _, a := range snap.JobAllocs(j.ID) {
		if a.Stopping || a.Replacement {
			return 0
		}
		have++
		if a.Start.After(start) {
			start = a.Start
		}
	}
	if want == 0 || have < want {
		return 0
	}
	return now.Sub(start)
}

// showEnded puts the gangs ended failed into the view: those ended this
// cycle get their explanation (the job is still in the model) turned to
// failed, with the reason, and kept; those that left the model keep
// showing it, for `impact explain`, until endedFor has passed or the job
// is queued again (submitted anew: its new life is shown instead).
func (c *cycler) showEnded(v *view, snap *cluster.Snapshot, now time.Time) {
	for id, r := range c.ending {
		ex, ok := v.explain[id]
		if !ok {
			ex = agentapi.Explanation{}
			ex.Namespace, ex.Job = splitJobKey(id)
		}
		ex.State, ex.Decision, ex.Reason, ex.Position = agentapi.StateFailed, DecisionFailed, r.Reason, 0
		ex.Summary = summarize(ex)
		if len(c.ended) >= maxEnded {
			c.expireEnded(now, true)
		}
		c.ended[id] = endedJob{at: now, ex: ex}
	}
	clear(c.ending)
	c.expireEnded(now, false)
	for id, e := range c.ended {
		if j, ok := snap.Job(id); ok && j.State == cluster.JobQueued && j.Submit.After(e.at) {
			delete(c.ended, id) // submitted again
			continue
		}
		ex := e.ex
		ex.GeneratedAt, ex.Leader = now, v.queue.Leader
		if old, ok := v.explain[id]; ok {
			// Still in the model while it stops: keep its nodes.
			ex.Nodes = old.Nodes
		}
		v.explain[id] = ex
	}
}

// expireEnded forgets ended gangs older than endedFor, or, when full, the
// oldest one.
func (c *cycler) expireEnded(now time.Time, full bool) {
	oldest := ""
	for id, e := range c.ended {
		if now.Sub(e.at) > endedFor {
			delete(c.ended, id)
			continue
		}
		if oldest == "" || e.at.Before(c.ended[oldest].at) {
			oldest = id
		}
	}
	if full && oldest != "" {
		delete(c.ended, oldest)
	}
}

// splitJobKey splits a model job key into namespace and job.
func splitJobKey(key string) (ns, job string) {
	ns, job, ok := strings.Cut(key, "/")
	if !ok {
		return "default", key
	}
	return ns, job
}
