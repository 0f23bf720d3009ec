package agent

import (
	"fmt"
	"slices"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/nomad"
)

// What the cycle remembers of what the executor did: the history each
// job's explanation is built from, the preemption records of the durable
// state, the metrics, and what the engine is told (forgotten actions,
// back-offs).

// record updates the agent's memory and metrics from what the executor did.
func (c *cycler) record(plan *engine.Plan, snap *cluster.Snapshot, rep nomad.ApplyReport, now time.Time) {
	c.recordAdmissions(plan, snap, setOf(rep.Admitted), now)
	c.recordRequeues(plan, setOf(rep.Requeued), now)
	c.recordWithdrawals(plan, setOf(rep.Withdrawing))
	c.recordPreemptions(plan, snap, setOf(rep.Preempted), now)
	c.recordReclaims(plan, setOf(rep.Reclaimed), now)
	c.recordReport(plan, rep)
	// Forget jobs that left the model (their Variables are deleted by the
	// explanation writer), and old preemption records.
	for id := range c.history {
		if _, ok := snap.Job(id); !ok {
			delete(c.history, id)
		}
	}
	c.state.expire(now)
}

func (c *cycler) recordAdmissions(plan *engine.Plan, snap *cluster.Snapshot, admitted map[string]bool, now time.Time) {
	for _, adm := range plan.Admissions {
		if !admitted[adm.JobID] {
			continue
		}
		nodes := map[string][]string{}
		for _, g := range adm.Groups {
			nodes[g.Group] = g.Nodes()
		}
		c.history[adm.JobID] = jobHistory{Decision: DecisionAdmit, At: now, Nodes: nodes, Admitted: plan.Explanations[adm.JobID]}
		tier := ""
		waited := time.Duration(0)
		if j, ok := snap.Job(adm.JobID); ok {
			tier = c.o.Policy.TierOf(j.Spec).Name
			waited = now.Sub(j.Submit)
		}
		c.o.Metrics.RecordAdmission(tier, waited)
	}
}

func (c *cycler) recordRequeues(plan *engine.Plan, requeued map[string]bool, now time.Time) {
	for _, p := range plan.Requeues {
		if !requeued[p.JobID] {
			continue
		}
		c.history[p.JobID] = jobHistory{Decision: DecisionRequeued, At: now, Reason: p.Reason, Nodes: c.history[p.JobID].Nodes}
		switch {
		case p.Update:
			c.log.Info("replacing a running job its user re-submitted", "job", p.JobID)
		case p.EndFailed:
			c.history[p.JobID] = jobHistory{Decision: DecisionFailed, At: now, Reason: p.Reason, Nodes: c.history[p.JobID].Nodes}
			c.o.Metrics.RecordGangFailed()
		default:
			c.o.Metrics.RecordGangRequeue()
			c.log.Warn("requeuing an incomplete gang whole", "job", p.JobID, "reason", p.Reason)
		}
	}
}

func (c *cycler) recordPreemptions(plan *engine.Plan, snap *cluster.Snapshot, preempted map[string]bool, now time.Time) {
	for _, p := range plan.Preemptions {
		if !preempted[p.JobID] {
			continue
		}
		before := c.history[p.JobID]
		before.Before, before.Withdrawn = nil, ""
		c.history[p.JobID] = jobHistory{Decision: DecisionPreempted, At: now, PreemptedBy: p.Preemptor, Reason: p.Reason, Before: &before}
		c.state.recordPreemption(p, now)
		tier := ""
		if j, ok := snap.Job(p.JobID); ok {
			tier = c.o.Policy.TierOf(j.Spec).Name
		}
		c.o.Metrics.RecordPreemption(tier, &p)
		if p.Idle {
			c.o.Metrics.RecordReclaimed(p.ReclaimedGPUHours)
		}
	}
}

// recordWithdrawals gives a job whose preemption was withdrawn (it runs
// on) back the history the preemption replaced, with why.
func (c *cycler) recordWithdrawals(plan *engine.Plan, withdrawing map[string]bool) {
	for _, w := range plan.Withdrawals {
		if !withdrawing[w.JobID] {
			continue
		}
		var h jobHistory
		if b := c.history[w.JobID].Before; b != nil {
			h = *b
		}
		h.Withdrawn = w.Reason
		c.history[w.JobID] = h
		c.log.Info("withdrawing a preemption: its preemptor no longer waits", "job", w.JobID, "for", w.Preemptor)
	}
}

func (c *cycler) recordReclaims(plan *engine.Plan, reclaimed map[string]bool, now time.Time) {
	for _, r := range plan.Reclaims {
		if !reclaimed[r.JobID] {
			continue
		}
		// Where it ran stays known: its last explanation says it.
		c.history[r.JobID] = jobHistory{Decision: DecisionReclaimed, At: now, Reason: r.Reason, Nodes: c.history[r.JobID].Nodes}
		c.o.Metrics.RecordReclaimed(r.ReclaimedGPUHours)
	}
}

// recordReport logs and counts what did not go as planned.
func (c *cycler) recordReport(plan *engine.Plan, rep nomad.ApplyReport) {
	c.o.Metrics.RecordHeadroom(plan.Headroom)
	c.o.Metrics.RecordCutGPUsKept(plan.CutGPUsKept)
	for range rep.RolledBack {
		c.o.Metrics.RecordRollback()
	}
	c.o.Metrics.RecordPinMismatches(rep.PinMismatches)
	for id, err := range rep.Failed {
		c.log.Error("action failed", "job", id, "error", err)
		c.o.Metrics.RecordActionError("apply")
	}
	for id, why := range rep.Skipped {
		c.log.Debug("action skipped", "job", id, "reason", why)
	}
}

// forgetUnapplied tells the engine which planned actions were not carried
// out (not leading, recovery pending, EnforceIndex conflict, failure), so
// it queues those jobs again and frees their GPUs next cycle instead of
// holding them for its admission TTL, and so a preemption that never
// started is planned afresh (and its lost-work budget given back) rather
// than waited on. rep is nil when nothing was applied. Preemptions that
// started, or were skipped because a stop or admission of the job is
// under way (the executor carries them out after it if the job still
// runs: nomad.SkipDeferred), are under way and must not be forgotten.
func (c *cycler) forgetUnapplied(plan *engine.Plan, rep *nomad.ApplyReport) {
	var admitted, underway, reclaimed map[string]bool
	if rep != nil {
		admitted = setOf(rep.Admitted)
		underway = setOf(append(slices.Clip(rep.Preempted), rep.Requeued...))
		reclaimed = setOf(rep.Reclaimed)
		for id := range rep.Skipped {
			underway[id], reclaimed[id] = true, true
		}
	}
	for _, adm := range plan.Admissions {
		if !admitted[adm.JobID] {
			c.engine.Forget(adm.JobID)
		}
	}
	for _, p := range append(slices.Clip(plan.Preemptions), plan.Requeues...) {
		if !underway[p.JobID] {
			c.engine.Forget(p.JobID)
		}
	}
	for _, r := range plan.Reclaims {
		if !reclaimed[r.JobID] {
			c.engine.Forget(r.JobID)
		}
	}
}

// Back-off after a rolled-back admission: the first retry waits
// rollbackBackoff, each further one in a row twice as long, up to
// maxRollbackBackoff.
const (
	rollbackBackoff    = 30 * time.Second
	maxRollbackBackoff = 30 * time.Minute
)

// deferRolledBack hands rolled-back admissions back to the engine and holds
// them off for a back-off that doubles with each rollback in a row. A job
// Nomad cannot place although the model says it fits (CPU, memory, a
// constraint the model does not read) would otherwise be admitted again at
// once, rolled back at its deadline, and so on, holding GPUs all along.
// The count is kept while the job is in the model (a job that left it,
// stopped or purged, starts afresh if submitted again).
func (c *cycler) deferRolledBack(snap *cluster.Snapshot, rolledBack []string, now time.Time) {
	for id := range c.rollbacks {
		if _, ok := snap.Job(id); !ok {
			delete(c.rollbacks, id)
			c.engine.Forget(id) // drops its deferral with it
		}
	}
	for _, id := range rolledBack {
		c.engine.Forget(id)
		c.rollbacks[id]++
		n := c.rollbacks[id]
		wait := backoffFor(n)
		c.engine.Defer(id, now.Add(wait), fmt.Sprintf("its admission was rolled back %d time(s) in a row (Nomad did not start the whole gang); retrying with back-off", n))
		c.log.Info("admission rolled back; holding the job back", "job", id, "rollbacks", n, "retry_after", wait)
	}
}

// backoffFor is the wait before the retry after the n-th failure in a row
// (n >= 1): rollbackBackoff doubling, at most maxRollbackBackoff.
func backoffFor(n int) time.Duration {
	if n > 16 {
		return maxRollbackBackoff
	}
	return min(maxRollbackBackoff, rollbackBackoff<<(n-1))
}

func setOf(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}
