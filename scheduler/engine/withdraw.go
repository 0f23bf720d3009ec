package engine

import (
	"fmt"
	"maps"
	"slices"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// Withdrawals. A preemption stops its victims only once their grace is
// over, and its preemptor takes whatever frees first: where work ends
// every few seconds it starts on GPUs that work ending on its own freed
// meanwhile, and its victims would then lose their work for a job that no
// longer waits (robustness seed 1, rand-17: 55 preemptions a replica, 13
// once withdrawn ones are not counted). While their grace lasts, such a
// stop is withdrawn (policy preemption withdraw): the victims run on, as
// if never preempted; the adapter withdraws it only while every task
// still runs (one that exited on its checkpoint signal is requeued as
// before). Only a stop ordered for a preemptor (not a move, a requeue or
// a reclaim), whose preemptor no longer waits (admitted, or gone from the
// queue), and whose GPUs no other waiting job is bound to (it claimed the
// stopping gang). The work the stop was expected to lose stays charged
// to the preemption budget of the hour: the budget counts decisions.

// Withdrawal cancels a preemption under way: its victim keeps running.
type Withdrawal struct {
	// JobID of the victim; Allocs its allocations the stop named.
	JobID  string   `json:"job_id"`
	Allocs []string `json:"allocs"`
	// Preemptor is the job it was preempted for.
	Preemptor string `json:"preemptor"`
	// Reason, for people and the job's explain.
	Reason string `json:"reason"`
}

// withdrawStops finds the stops to withdraw, before the cycle counts
// stopping gangs (buildState): they are running work again from this
// cycle on, and leave the engine's memory (endStop). A gang is
// withdrawn whole or not at all: the adapter withdraws a job's stop.
func (c *cycle) withdrawStops() {
	if !c.pol.Preemption.Withdraw || len(c.e.inflight) == 0 {
		return
	}
	byJob := map[string][]string{}
	for id, st := range c.e.inflight {
		if st.preemptor != "" {
			byJob[st.job] = append(byJob[st.job], id)
		}
	}
	var out []Withdrawal
	for _, job := range slices.Sorted(maps.Keys(byJob)) {
		ids := byJob[job]
		slices.Sort(ids)
		if w, ok := c.withdrawal(job, ids); ok {
			out = append(out, w)
		}
	}
	for _, w := range out {
		for _, id := range w.Allocs {
			c.mem.endStop(id)
		}
	}
	c.plan.Withdrawals = out
}

// withdrawal is the withdrawal of job's stop (its allocations ids, in
// flight), when every one of them may be withdrawn: ordered for one
// preemptor that no longer waits, within its grace, its GPUs bound to no
// other waiting job.
func (c *cycle) withdrawal(job string, ids []string) (Withdrawal, bool) {
	w := Withdrawal{JobID: job, Allocs: ids}
	if b, ok := c.e.bindings[job]; ok && b.moved {
		// A move (a new leader learns its preemptor from the intent):
		// it restarts elsewhere at once, never withdrawn.
		return w, false
	}
	var why string
	for _, id := range ids {
		st := c.e.inflight[id]
		if c.mem.expired[id] || !c.now.Before(st.expires) || (w.Preemptor != "" && st.preemptor != w.Preemptor) {
			return w, false
		}
		if w.Preemptor == "" {
			w.Preemptor = st.preemptor
			if why = c.noLongerWaits(st.preemptor); why == "" {
				return w, false
			}
		}
		a, ok := c.snap.Alloc(id)
		if !ok || c.boundToWaiting(st.preemptor, a.NodeID, a.GPUs) {
			return w, false
		}
	}
	w.Reason = fmt.Sprintf("its preemption for %s was withdrawn within its grace: %s %s", w.Preemptor, w.Preemptor, why)
	return w, true
}

// noLongerWaits says how the job id (a preemptor, or a job bound to
// GPUs) no longer waits: "left the queue", "started on GPUs freed
// meanwhile" (running, or admitted by an earlier cycle); "" while it
// waits.
func (c *cycle) noLongerWaits(id string) string {
	j, ok := c.snap.Job(id)
	switch {
	case !ok:
		return "left the queue"
	case j.State != cluster.JobQueued:
		return "started on GPUs freed meanwhile"
	}
	if _, pending := c.mem.pendingJob(j); pending {
		return "started on GPUs freed meanwhile"
	}
	return ""
}

// boundToWaiting: some waiting job other than preemptor has a binding
// naming one of gpus on node.
func (c *cycle) boundToWaiting(preemptor, node string, gpus []string) bool {
	for id, b := range c.e.bindings {
		if id == preemptor || !c.now.Before(b.expires) || c.noLongerWaits(id) != "" {
			continue
		}
		for _, ap := range b.gpus {
			if ap.NodeID != node {
				continue
			}
			for _, g := range ap.GPUs {
				if slices.Contains(gpus, g) {
					return true
				}
			}
		}
	}
	return false
}
