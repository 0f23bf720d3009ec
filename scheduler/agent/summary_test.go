package agent

import (
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// Each state and each of the engine's reason sentences gets its one-line
// summary; an unknown reason still gets a true, generic one.
func TestSummarize(t *testing.T) {
	w := func(pos int, decision, reason string) agentapi.Explanation {
		e := agentapi.Explanation{Decision: decision}
		e.State, e.Position, e.Reason, e.GPUs, e.Allocations = agentapi.StateWaiting, pos, reason, 8, 2
		return e
	}
	preempted := w(2, DecisionWait, "needs 8 GPUs, 0 free")
	preempted.PreemptedBy = "default/urgent"
	unknown := w(4, DecisionWait, "something the engine says one day")
	invalid := agentapi.Explanation{}
	invalid.State, invalid.Errors = agentapi.StateInvalid, []string{`impact_grace: "soon" is not a duration`}
	tooBig := agentapi.Explanation{}
	tooBig.State, tooBig.Reason = agentapi.StateInvalid, `group "w" asks 16 GPUs per allocation; the largest schedulable node has 8`
	neverFits := agentapi.Explanation{}
	neverFits.State, neverFits.Reason = agentapi.StateInvalid, `cannot be placed in pool "gpu" even with no other work running: its NVLink allocations may share this node only inside one island (1 node(s))`
	stoppingVictim := agentapi.Explanation{Decision: DecisionPreempted, PreemptedBy: "default/urgent"}
	stoppingVictim.State, stoppingVictim.Allocations = agentapi.StateAdmitting, 2
	running := agentapi.Explanation{Decision: DecisionAdmit}
	running.State, running.Allocations = agentapi.StateRunning, 2
	onLoan := running
	onLoan.Engine = &engine.Explanation{Status: engine.StatusAdmitted, OnLoan: true, Reason: `on loan on the GPUs the headroom of pool "gpu" keeps for [critical]: a job of those tiers may stop it after 0s (loan_grace), not its impact_grace of 1m0s`}
	victim := agentapi.Explanation{Decision: DecisionPreempted, PreemptedBy: "default/urgent"}
	victim.State = agentapi.StateRunning
	admitting := agentapi.Explanation{Decision: DecisionAdmit}
	admitting.State, admitting.Allocations = agentapi.StateAdmitting, 2
	moving := w(1, DecisionPreempt, "defragmenting: the pool has GPUs enough but not where it could use them, so 2 small job(s) move out of its way and restart at once elsewhere: default/a to n1 (g1), default/b to n1 (g2)")
	moving.Engine = &engine.Explanation{Status: engine.StatusPreempting, Victims: []string{"default/a", "default/b"}}
	moved := agentapi.Explanation{Decision: DecisionPreempted, PreemptedBy: "default/whole"}
	moved.State, moved.Reason = agentapi.StateRunning, "moved out of the way of default/whole (tier normal, score 100.0), for which the pool has GPUs enough but not where it could use them: restarts at once on n1 (g1), on GPUs bound to it"
	movedWaiting := w(1, DecisionWait, moved.Reason)
	movedWaiting.PreemptedBy = "default/whole"
	preempting := w(1, DecisionPreempt, "preempting 2 gang(s): default/a, default/b")
	preempting.Engine = &engine.Explanation{Status: engine.StatusPreempting, Victims: []string{"default/a", "default/b"}}

	for _, tc := range []struct {
		name string
		e    agentapi.Explanation
		want string
	}{
		{"needs GPUs, first", w(1, DecisionWait, `needs 8 GPUs, 2 free in pool "gpu"; GPUs reserved (time unknown: running work has no walltime)`), "Waiting for 8 free GPUs (first in line)."},
		{"needs GPUs, 3rd", w(3, DecisionWait, "needs 8 GPUs, 0 free"), "Waiting for 8 free GPUs (3rd in line)."},
		{"gang does not fit", w(12, DecisionWait, "no placement for the whole gang (8 GPUs) on free GPUs; preempting eligible gangs would not make room"), "Waiting for room for the whole gang of 8 GPUs together (12th in line)."},
		{"gang does not fit beside the headroom", w(2, DecisionWait, "no placement for the whole gang (8 GPUs) on free GPUs; the headroom keeps 2 more free GPUs from it (free of non-preemptible work but that of [critical])"), "Waiting for room for the whole gang of 8 GPUs together (2nd in line). Some free GPUs are kept for urgent work, which non-preemptible work of its tier may not take."},
		{"needs GPUs beside the headroom", w(1, DecisionWait, "needs 8 GPUs, 1 free; the headroom keeps 7 more free GPUs from it (free of non-preemptible work but that of [critical])"), "Waiting for 8 free GPUs (first in line). Some free GPUs are kept for urgent work, which non-preemptible work of its tier may not take."},
		{"kept out by the headroom", w(4, DecisionWait, `headroom: pool "gpu" keeps 8 GPUs (8 GPUs) free of non-preemptible work but that of [critical]; such work holds 8 of its 16 GPUs, this job needs 8`), "Waiting: its pool keeps room free for urgent work, which non-preemptible work of its tier may not take (4th in line)."},
		{"quota", w(2, DecisionWait, `project "olmo" quota: holds 8 of 8 GPUs, job needs 8`), "Waiting for its project's GPU quota (2nd in line)."},
		{"held back", w(1, DecisionWait, "held back until 2026-01-01T00:00:00Z: its admission was rolled back 1 time(s)"), "Held back after a start that failed; it is retried later."},
		{"preempting", preempting, "Starts next: stopping 2 lower-priority gang(s) to make room."},
		{"defragmenting", moving, "Starts next: moving 2 small job(s) out of its way (they restart at once on GPUs free elsewhere)."},
		{"moved jobs stopping", w(1, DecisionPreempt, "defragmenting: waiting for the 1 small job(s) moved out of its way to stop; they restart at once elsewhere: default/small-a to n1 (GPU-1)"), "Starts next: moving 1 small job(s) out of its way (they restart at once on GPUs free elsewhere)."},
		{"being moved", moved, "Being moved out of the way of default/whole: it restarts at once on GPUs kept for it elsewhere."},
		{"moved, queued again", movedWaiting, "Moved out of the way of default/whole; restarts at once on GPUs kept for it (first in line)."},
		{"victims stopping", w(1, DecisionPreempt, "waiting for preempted gangs to stop"), "Starts as soon as the gangs preempted for it have stopped."},
		{"standby", w(1, DecisionAdmit, "fits now; the leader admits it (this agent is a standby)"), "Fits now; the leader will admit it (this agent is a standby)."},
		{"not carried out", w(1, DecisionWait, "admission planned but not carried out this cycle (job changed or Nomad refused); re-deciding"), "Its admission did not go through this cycle; the scheduler decides again."},
		{"not yet considered", w(0, DecisionWait, "not yet considered by a cycle"), "Not yet considered by a scheduling cycle."},
		{"requeued after preemption", func() agentapi.Explanation { e := preempted; e.Reason = "preempted for default/urgent"; return e }(), "Preempted for default/urgent; waiting to run again (2nd in line)."},
		{"unknown reason", unknown, "Waiting for its turn (4th in line)."},
		{"bad meta", invalid, "Cannot be scheduled as written: fix its impact_* meta and submit it again."},
		{"preempted, members stopping", stoppingVictim, "Being preempted for default/urgent; it goes back to the queue."},
		{"too big", tooBig, "Cannot be scheduled as written: it asks more GPUs per allocation than any node can give."},
		{"never fits its pool", neverFits, "Cannot be scheduled as written: it does not fit its pool even with nothing else running; the reason says which rule each node breaks."},
		{"running", running, "Running: all 2 allocation(s) admitted and started."},
		{"running on loan", onLoan, "Running on loan: all 2 allocation(s) on GPUs kept for urgent work, which may stop it at short notice."},
		{"being preempted", victim, "Being preempted for default/urgent; it goes back to the queue."},
		{"admitting", admitting, "Admitted: waiting for Nomad to start its 2 allocation(s)."},
	} {
		if got := summarize(tc.e); got != tc.want {
			t.Errorf("%s: summarize = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestOrdinal(t *testing.T) {
	for n, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 102: "102nd", 111: "111th"} {
		if got := ordinal(n); got != want {
			t.Errorf("ordinal(%d) = %q, want %q", n, got, want)
		}
	}
}
