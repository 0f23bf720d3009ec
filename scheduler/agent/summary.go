package agent

import (
	"fmt"
	"strings"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
)

// summarize says in one short sentence what a job waits for, or where it
// stands, for people reading the queue, the job's page or its Variable
// (Reason keeps the scheduler's full account). It reads the explanation's
// state and decision and recognises the engine's reason sentences by
// their opening words; a reason it does not recognise still gets a true,
// generic sentence (the details are in Reason).
func summarize(e agentapi.Explanation) string {
	switch {
	case e.State == agentapi.StateFailed:
		return "Ended failed: its gang lost a member and it is not requeued (impact_on_failure, impact_max_failures); see the reason."
	case (e.State == agentapi.StateRunning || e.State == agentapi.StateAdmitting) && e.Decision == DecisionRequeued:
		return "Its gang lost a member: being stopped whole; it goes back to the queue."
	case e.State == agentapi.StateAdmitting && (e.Decision == DecisionPreempted || e.Decision == DecisionReclaimed):
		// Some members already stopped: it is on its way back to the
		// queue, not being started (saying "Admitted: waiting for Nomad
		// to start" at the moment it was requeued would be wrong).
		return summarizeRunning(e)
	}
	switch e.State {
	case agentapi.StateInvalid:
		return summarizeInvalid(e)
	case agentapi.StateRunning:
		return summarizeRunning(e)
	case agentapi.StateAdmitting:
		return fmt.Sprintf("Admitted: waiting for Nomad to start its %d allocation(s).", e.Allocations)
	}
	return summarizeWaiting(e)
}

func summarizeInvalid(e agentapi.Explanation) string {
	switch {
	case len(e.Errors) > 0:
		return "Cannot be scheduled as written: fix its impact_* meta and submit it again."
	case strings.HasPrefix(e.Reason, "group "):
		return "Cannot be scheduled as written: it asks more GPUs per allocation than any node can give."
	case strings.HasPrefix(e.Reason, "cannot be placed"):
		return "Cannot be scheduled as written: it does not fit its pool even with nothing else running; the reason says which rule each node breaks."
	}
	return "Cannot be scheduled as written: change the job and submit it again."
}

func summarizeRunning(e agentapi.Explanation) string {
	switch {
	case e.Decision == DecisionPreempted && strings.HasPrefix(e.Reason, "moved out of the way of "):
		return "Being moved out of the way of " + e.PreemptedBy + ": it restarts at once on GPUs kept for it elsewhere."
	case e.Decision == DecisionPreempted:
		return "Being preempted for " + e.PreemptedBy + "; it goes back to the queue."
	case e.Decision == DecisionReclaimed && strings.Contains(e.Reason, "left stopped"):
		return "Hung: being stopped by its tier's idle action, for good (no requeues left)."
	case e.Decision == DecisionReclaimed:
		return "Hung: being stopped by its tier's idle action; it goes back to the queue."
	case e.Hung:
		return "Running but hung: every allocation's GPUs are idle."
	case e.Idle:
		return "Running but idle: its GPUs' utilisation is below its tier's idle threshold."
	case e.Engine != nil && e.Engine.OnLoan:
		return fmt.Sprintf("Running on loan: all %d allocation(s) on GPUs kept for urgent work, which may stop it at short notice.", e.Allocations)
	}
	return fmt.Sprintf("Running: all %d allocation(s) admitted and started.", e.Allocations)
}

func summarizeWaiting(e agentapi.Explanation) string {
	r := e.Reason
	place := "first in line"
	if e.Position > 1 {
		place = fmt.Sprintf("%s in line", ordinal(e.Position))
	}
	switch {
	case e.Decision == DecisionAdmit:
		return "Fits now; the leader will admit it (this agent is a standby)."
	case e.Decision == DecisionRequeued && strings.Contains(r, "held back until"):
		return "Requeued whole after its gang lost a member; held back before it runs again (back-off)."
	case e.Decision == DecisionRequeued:
		return fmt.Sprintf("Requeued whole after its gang lost a member; waiting to run again (%s).", place)
	case strings.HasPrefix(r, "admission planned but not carried out"):
		return "Its admission did not go through this cycle; the scheduler decides again."
	case e.Decision == DecisionPreempt && strings.HasPrefix(r, "waiting for preempted gangs"):
		return "Starts as soon as the gangs preempted for it have stopped."
	case e.Decision == DecisionPreempt && strings.HasPrefix(r, "defragmenting:"):
		// Defragment, decided or under way (its moved jobs stopping):
		// the victims may be of its own tier, and restart.
		return fmt.Sprintf("Starts next: moving %d small job(s) out of its way (they restart at once on GPUs free elsewhere).", max(1, len(e.Decided().Victims)))
	case e.Decision == DecisionPreempt:
		return fmt.Sprintf("Starts next: stopping %d lower-priority gang(s) to make room.", max(1, len(e.Decided().Victims)))
	case strings.HasPrefix(r, "held back until"):
		return "Held back after a start that failed; it is retried later."
	case strings.HasPrefix(r, "project ") && strings.Contains(r, " quota:"):
		return fmt.Sprintf("Waiting for its project's GPU quota (%s).", place)
	case strings.HasPrefix(r, "headroom: "):
		return fmt.Sprintf("Waiting: its pool keeps room free for urgent work, which non-preemptible work of its tier may not take (%s).", place)
	case strings.HasPrefix(r, "needs "):
		return fmt.Sprintf("Waiting for %d free GPUs (%s).%s", e.GPUs, place, keptNote(r))
	case strings.HasPrefix(r, "no placement for the whole gang"):
		return fmt.Sprintf("Waiting for room for the whole gang of %d GPUs together (%s).%s", e.GPUs, place, keptNote(r))
	case strings.HasPrefix(r, "not yet considered"):
		return "Not yet considered by a scheduling cycle."
	case e.PreemptedBy != "" && strings.HasPrefix(r, "moved out of the way of "):
		return fmt.Sprintf("Moved out of the way of %s; restarts at once on GPUs kept for it (%s).", e.PreemptedBy, place)
	case e.PreemptedBy != "":
		return fmt.Sprintf("Preempted for %s; waiting to run again (%s).", e.PreemptedBy, place)
	case e.Position > 0:
		return fmt.Sprintf("Waiting for its turn (%s).", place)
	}
	return "Waiting."
}

// ordinal writes 2 as "2nd", 13 as "13th".
func ordinal(n int) string {
	suffix := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return fmt.Sprintf("%d%s", n, suffix)
}

// keptNote is what the summary adds when the engine's reason says a
// headroom withheld free GPUs from the job (engine hrCycle.withheldNote):
// without it a reader sees free GPUs the job was not given.
func keptNote(reason string) string {
	if strings.Contains(reason, "; the headroom keeps ") {
		return " Some free GPUs are kept for urgent work, which non-preemptible work of its tier may not take."
	}
	return ""
}
