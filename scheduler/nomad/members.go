package nomad

import (
	"fmt"
	"sort"
	"strings"
)

// What the model says of a gang's members beyond their own allocation:
// how a member that ended without completing ended (endedWhy), which live
// allocation replaces a member (replacesByName), and whether an admitted
// job's run is over with its work not done (endedReason, deadRun). The gang watch
// (engine/gangwatch.go) acts on them: a gang is whole or requeued, never
// mixed, and its life never ends silently.

// maxDeadReasons bounds the members an ended reason names.
const maxDeadReasons = 3

// endedWhy says how an allocation that did not complete on its own ended,
// in the words of an explanation: failed (with its task's exit code,
// signal or OOM kill when Nomad reported one), lost, or stopped.
func endedWhy(a *wireAlloc) string {
	who := fmt.Sprintf("allocation %s (%s) of group %s", shortID(a.ID), a.Name, a.TaskGroup)
	if a.Name == "" {
		who = fmt.Sprintf("allocation %s of group %s", shortID(a.ID), a.TaskGroup)
	}
	switch {
	case a.ClientStatus == "lost":
		return who + " was lost (its node went down or disconnected)"
	case a.ClientStatus == "failed":
		if how := taskEnd(a); how != "" {
			return who + " failed: " + how
		}
		return who + " failed"
	case a.DesiredStatus != "run":
		return who + " was stopped"
	}
	return who + " ended"
}

// taskEnd is how the allocation's failed task ended, from its last
// Terminated event: "task t exited 137 (signal 9)", "... (OOM killed)";
// "" when no task reported one.
func taskEnd(a *wireAlloc) string {
	names := make([]string, 0, len(a.TaskStates))
	for n := range a.TaskStates {
		names = append(names, n)
	}
	sort.Strings(names)
	var fallback string
	for _, n := range names {
		ts := a.TaskStates[n]
		for i := len(ts.Events) - 1; i >= 0; i-- {
			ev := ts.Events[i]
			if ev.Type != "Terminated" {
				continue
			}
			s := fmt.Sprintf("task %s exited %s", n, ev.Details["exit_code"])
			if sig := ev.Details["signal"]; sig != "" && sig != "0" {
				s += " (signal " + sig + ")"
			}
			if ev.Details["oom_killed"] == "true" {
				s += " (OOM killed)"
			}
			if ts.Failed {
				return s
			}
			if fallback == "" {
				fallback = s
			}
			break
		}
	}
	return fallback
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// replacesByName reports whether a live allocation of job j replaces a
// member of the same registration: another allocation with its name
// ended there without completing (failed, lost, stopped), or is still
// meant to run and was created before it. Nomad gives a replacement the
// name of the member it replaces, but links the two (PreviousAllocation)
// only when it places at once: one placed later from a blocked evaluation
// (a lost node back inside the grace, seen on a real 2.0.5 cluster) has
// no PreviousAllocation and would otherwise look like a member, running
// beside the orphaned one it replaces.
func (m *mirror) replacesByName(key string, j *wireJob, a *wireAlloc, live []*wireAlloc) bool {
	if a.Name == "" {
		return false
	}
	for _, e := range m.ended[key] {
		if e.name == a.Name && !e.completed && e.current(j, a.JobVersion, a.listed) {
			return true
		}
	}
	for _, b := range live {
		if b != a && b.Name == a.Name && b.DesiredStatus == "run" && b.CreateIndex < a.CreateIndex {
			return true
		}
	}
	return false
}

// endedReason says how the members of job j's current registration that
// ended without completing ended (failed, lost, stopped), "" when none
// did (or Nomad has garbage-collected them: nothing is known).
func (m *mirror) endedReason(key string, j *wireJob) string {
	var why []string
	for _, e := range m.ended[key] {
		if !e.completed && e.why != "" && e.current(j, 0, false) {
			why = append(why, e.why)
		}
	}
	if len(why) == 0 {
		return ""
	}
	sort.Strings(why)
	if n := len(why); n > maxDeadReasons {
		why = append(why[:maxDeadReasons], fmt.Sprintf("and %d more", n-maxDeadReasons))
	}
	return strings.Join(why, "; ")
}

// deadRun reports whether an admitted job's run is over with its work not
// done: Nomad marked it dead with nothing live (its restart and reschedule
// blocks allow no more) and members of its current registration ended
// without completing (ended, endedReason). A dead job whose members all
// completed is done; one never admitted (not pinned) has nothing to
// requeue.
func deadRun(j *wireJob, live int, ended string) bool {
	return j != nil && j.Status == "dead" && live == 0 && pinned(j) && ended != ""
}
