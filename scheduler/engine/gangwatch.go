package engine

import (
	"fmt"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
)

// watchGangs replaces running jobs their users re-submitted (Job.Parked:
// the old allocations are stopped through a Requeue at once, the new
// version then waits its turn), and finds running gangs missing a member:
// once one has been
// missing for the policy's gangs missing_member_grace, plans to stop the
// gang whole (checkpoint signal, grace, park, stop: a Requeue) so that it
// is requeued whole. A member is missing when its allocation is gone
// without having completed (lost, failed, stopped), was told to stop by
// someone else, sits on a node that is down or draining, or
// is a replacement Nomad placed (a later generation than its peers: a
// replacement waiting at a gang barrier for peers that are gone, or peers
// of an older generation running beside it). Members that completed on
// their own are done, not missing. Gangs with an admission still under
// way (the adapter rolls those back) or a stop already ordered are left
// alone.
//
// The grace is for a member that may come back (a node that returns with
// its allocation). Two gaps cannot heal and are acted on at once: a
// replacement (the member it replaces is gone for good; it is stopped
// first, Preemption.Replacements, so that no member runs twice), and a
// job Nomad marked dead with its work not done (cluster.Job.Dead: its
// restart and reschedule blocks allow no more, so nothing else would
// ever happen to it). A gang whose job says impact_on_failure = "fail"
// is stopped whole the same way and ended failed (Preemption.EndFailed).
func (jd *judger) watchGangs() {
	grace := jd.c.pol.Gangs.MissingMemberGrace
	holders := jd.c.st.Holders()
	for _, run := range jd.c.e.queue.running {
		for _, j := range run {
			if _, ok := jd.c.mem.pendingJob(j); ok {
				continue
			}
			h, hasHolder := jd.holderOfJob(j)
			var allocs []*cluster.Alloc
			var slots []placement.Slot
			if hasHolder {
				allocs, slots = holders[h].Allocs, holders[h].Slots
				if jd.ordered(allocs) {
					continue // a stop we ordered is under way
				}
			}
			if j.Parked && hasHolder && jd.anyRunning(allocs) {
				// Re-submitted by its user while running: Nomad's meaning
				// is a destructive update (the new version replaces the
				// old allocations). Through the queue: the old ones are
				// stopped now (checkpoint signal and grace first) and the
				// new version waits its turn like any queued job.
				r := Preemption{
					Stop: stopOf(j, holders[h].GPUs), Update: true,
					Reason: "re-submitted by its user while running: the old version's allocations are stopped (Nomad's destructive update) and the new version waits its turn in the queue",
				}
				for _, a := range allocs {
					r.Allocs = append(r.Allocs, a.ID)
					jd.c.mem.orderStop(a.ID, inflightStop{job: j.ID, decided: jd.c.now, expires: jd.c.now.Add(j.Spec.Grace)})
				}
				jd.c.pre.claim(h)
				jd.c.plan.Requeues = append(jd.c.plan.Requeues, r)
				jd.c.e.logger.Info("running job updated by its user; replacing it through the queue", "job", j.ID)
				continue
			}
			if grace <= 0 {
				continue // the watch is off
			}
			m := jd.missing(j, allocs, slots)
			if m.why == "" {
				continue
			}
			if j.Dead {
				if idx, ok := jd.c.e.requeuedDead[j.ID]; ok && idx == j.ModifyIndex {
					jd.keepRequeuedDead(j) // requeued; the adapter is parking it
					continue
				}
			}
			since, ok := jd.c.e.broken[j.ID]
			if !ok {
				since = jd.c.now
				jd.c.e.logger.Info("gang missing a member", "job", j.ID, "why", m.why, "grace", grace)
			}
			if !m.atOnce && jd.c.now.Sub(since) < grace {
				if jd.c.mem.broken == nil {
					jd.c.mem.broken = map[string]time.Time{}
				}
				jd.c.mem.broken[j.ID] = since // still missing: watched on
				continue
			}
			r := Preemption{
				Stop:         stopOf(j, 0),
				Replacements: m.replacements,
				EndFailed:    j.Spec.FailOnLoss,
			}
			what := "stopped whole and requeued"
			if r.EndFailed {
				what = `stopped whole and ended failed (impact_on_failure = "fail")`
			}
			if m.atOnce {
				r.Reason = fmt.Sprintf("gang incomplete: %s; %s", m.why, what)
			} else {
				r.Reason = fmt.Sprintf("gang incomplete for %s (gangs missing_member_grace %s): %s; %s",
					jd.c.now.Sub(since).Round(time.Second), grace, m.why, what)
			}
			if hasHolder {
				// Its checkpoints up to the loss, both ways (Stop.Progress).
				saved, _ := runSaved(allocs, j.Spec.CheckpointInterval, since)
				r.Progress += saved
				r.ProgressOnSignal += saved
				r.GPUs = holders[h].GPUs
				for _, a := range allocs {
					r.Allocs = append(r.Allocs, a.ID)
					jd.c.mem.orderStop(a.ID, inflightStop{job: j.ID, decided: jd.c.now, expires: jd.c.now.Add(j.Spec.Grace)})
				}
				jd.c.pre.claim(h)
			}
			if j.Dead {
				jd.keepRequeuedDead(j)
			}
			jd.c.plan.Requeues = append(jd.c.plan.Requeues, r)
			// Only planned: a standby decides too. The agent logs the requeue
			// (at Warn) once the leader carries it out.
			jd.c.e.logger.Debug("planning to requeue an incomplete gang whole", "job", j.ID, "why", m.why, "missing_for", jd.c.now.Sub(since), "end_failed", r.EndFailed)
		}
	}
}

// keepRequeuedDead remembers that the dead gang j's run is requeued.
func (jd *judger) keepRequeuedDead(j *cluster.Job) {
	if jd.c.mem.requeuedDead == nil {
		jd.c.mem.requeuedDead = map[string]uint64{}
	}
	jd.c.mem.requeuedDead[j.ID] = j.ModifyIndex
}

// anyRunning reports whether some allocation is not told to stop.
func (jd *judger) anyRunning(allocs []*cluster.Alloc) bool {
	for _, a := range allocs {
		if !a.Stopping {
			return true
		}
	}
	return false
}

// holderOfJob finds the holder of a running job's allocations: by the
// job object (the holders' jobs are the snapshot's), else by ID.
func (jd *judger) holderOfJob(j *cluster.Job) (int, bool) {
	if h, ok := jd.holderByJob[j]; ok {
		return int(h), true
	}
	return jd.c.holderOf(j.ID)
}

// ordered reports whether the engine ordered a stop of any of the allocs.
func (jd *judger) ordered(allocs []*cluster.Alloc) bool {
	for _, a := range allocs {
		if jd.c.mem.stopOrdered(a) {
			return true
		}
	}
	return false
}

// gap is what missing found of a running gang: why it is not whole ("":
// it is), whether to act at once rather than after the grace (atOnce:
// the gang cannot become whole again: Nomad ended its run, or placed a
// replacement, whose member is gone for good), and the replacements.
type gap struct {
	why          string
	atOnce       bool
	replacements []string
}

// missing says which members of a running gang are missing.
// slots are the holder's slots of allocs (nil without a holder): a
// member's node is read from the cycle's state by ordinal, not looked up
// by ID, and the common complete gang allocates nothing.
func (jd *judger) missing(j *cluster.Job, allocs []*cluster.Alloc, slots []placement.Slot) gap {
	type count struct {
		group string
		n     int
	}
	var present []count
	var why []string
	var g gap
	if j.Dead {
		why = append(why, "Nomad ended its run (its restart and reschedule blocks allow no more): "+j.Ended)
		g.atOnce = true
	}
	for i, a := range allocs {
		var n *cluster.Node
		ok := false
		if i < len(slots) {
			n, ok = jd.c.st.Node(slots[i].Node), true
		} else {
			n, ok = jd.c.snap.Node(a.NodeID)
		}
		switch {
		case a.Replacement:
			why = append(why, fmt.Sprintf("allocation %s of group %s is a replacement Nomad placed for a lost, failed or stopped member (stopped at once)", a.ID, a.Group))
			g.atOnce = true
			g.replacements = append(g.replacements, a.ID)
		case a.Stopping:
			why = append(why, fmt.Sprintf("allocation %s of group %s was told to stop", a.ID, a.Group))
		case !ok || !n.Ready:
			why = append(why, fmt.Sprintf("allocation %s of group %s is on node %s, which is down or draining", a.ID, a.Group, a.NodeID))
		default:
			k := 0
			for k < len(present) && present[k].group != a.Group {
				k++
			}
			if k == len(present) {
				present = append(present, count{group: a.Group})
			}
			present[k].n++
		}
	}
	for _, tg := range j.Groups {
		if tg.GPUs == 0 {
			// Only GPU groups are gang members the scheduler placed (an
			// admission places every group with GPUs).
			continue
		}
		have := 0
		for _, p := range present {
			if p.group == tg.Name {
				have = p.n
			}
		}
		if short := tg.Count - have - j.Completed[tg.Name]; short > 0 && len(why) == 0 {
			how := "the others lost, failed or stopped"
			if j.Ended != "" {
				how = j.Ended
			}
			why = append(why, fmt.Sprintf("group %s has %d of %d members (%s)", tg.Name, tg.Count-short, tg.Count, how))
		}
	}
	g.why = strings.Join(why, "; ")
	return g
}
