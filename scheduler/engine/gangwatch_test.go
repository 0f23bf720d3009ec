package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// A running gang missing a member for longer than the policy's gangs
// missing_member_grace is requeued whole (its remaining allocations
// stopped with its checkpoint signal and grace); shorter absences are
// ridden out, members that completed are not missing, and a gang is
// requeued once.
func TestGangWatchRequeuesIncompleteGangs(t *testing.T) {
	long := t0.Add(-time.Hour)
	gang := func(opts ...jobOpt) *cluster.Job {
		return mkJob("g", append([]jobOpt{running(), meta("impact_tier", "normal", "impact_checkpoint_signal", "SIGUSR1", "impact_grace", "30s"), group("main", 2, 4)}, opts...)...)
	}
	down := func(n *cluster.Node) { n.Ready = false }
	for _, tc := range []struct {
		name   string
		nodes  []*cluster.Node
		job    *cluster.Job
		allocs []*cluster.Alloc
		why    string // "" = never requeued
		atOnce bool   // requeued without waiting for the grace
	}{
		{name: "member lost", nodes: []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)}, job: gang(),
			allocs: []*cluster.Alloc{alloc("a1", "g", "n1", long, 0, 1, 2, 3)},
			why:    "group main has 1 of 2 members"},
		{name: "member on a down node", nodes: []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2, down)}, job: gang(),
			allocs: []*cluster.Alloc{alloc("a1", "g", "n1", long, 0, 1, 2, 3), alloc("a2", "g", "n2", long, 0, 1, 2, 3)},
			why:    "is on node n2, which is down or draining"},
		{name: "replacement of a later generation", nodes: []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)}, job: gang(),
			allocs: []*cluster.Alloc{alloc("a1", "g", "n1", long, 0, 1, 2, 3), func() *cluster.Alloc {
				a := alloc("a3", "g", "n2", t0, 0, 1, 2, 3)
				a.Replacement = true
				return a
			}()},
			why: "allocation a3 of group main is a replacement", atOnce: true},
		{name: "dead: Nomad ended the run", nodes: []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)},
			job: func() *cluster.Job {
				j := gang()
				j.Dead, j.Ended = true, "allocation a2 of group main failed: task t exited 137"
				return j
			}(),
			why: "Nomad ended its run (its restart and reschedule blocks allow no more): allocation a2 of group main failed", atOnce: true},
		{name: "member stopped by someone", nodes: []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)}, job: gang(),
			allocs: []*cluster.Alloc{alloc("a1", "g", "n1", long, 0, 1, 2, 3), func() *cluster.Alloc {
				a := alloc("a2", "g", "n2", long, 0, 1, 2, 3)
				a.Stopping = true
				return a
			}()},
			why: "allocation a2 of group main was told to stop"},
		{name: "member completed", nodes: []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)},
			job:    func() *cluster.Job { j := gang(); j.Completed = map[string]int{"main": 1}; return j }(),
			allocs: []*cluster.Alloc{alloc("a1", "g", "n1", long, 0, 1, 2, 3)}},
		{name: "whole gang running", nodes: []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)}, job: gang(),
			allocs: []*cluster.Alloc{alloc("a1", "g", "n1", long, 0, 1, 2, 3), alloc("a2", "g", "n2", long, 0, 1, 2, 3)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := policy.Default()
			grace := pol.Gangs.MissingMemberGrace
			e := mustEngine(t, pol)
			snap := mustSnap(t, tc.nodes, []*cluster.Job{tc.job}, tc.allocs)
			at := grace
			if tc.atOnce {
				at = 0
			}
			for _, before := range []time.Duration{0, grace / 2, grace - time.Second} {
				if before >= at {
					break
				}
				if plan := e.Decide(snap, t0.Add(before)); len(plan.Requeues) != 0 {
					t.Fatalf("at +%v requeued %+v, before the grace of %v", before, plan.Requeues, grace)
				}
			}
			plan := e.Decide(snap, t0.Add(at))
			if tc.why == "" {
				if len(plan.Requeues) != 0 {
					t.Fatalf("requeued %+v, want nothing", plan.Requeues)
				}
				return
			}
			if len(plan.Requeues) != 1 {
				t.Fatalf("requeues = %+v, want g", plan.Requeues)
			}
			r := plan.Requeues[0]
			if r.JobID != "g" || r.Update || len(r.Allocs) != len(tc.allocs) || r.CheckpointSignal != "SIGUSR1" || r.Grace != 30*time.Second ||
				r.RequeueExitCode != jobspec.DefaultRequeueExitCode || r.Preemptor != "" || !strings.Contains(r.Reason, tc.why) {
				t.Fatalf("requeue = %+v, want all %d allocations of g, its signal and grace, reason with %q", r, len(tc.allocs), tc.why)
			}
			var repl []string
			for _, a := range tc.allocs {
				if a.Replacement {
					repl = append(repl, a.ID)
				}
			}
			if strings.Join(r.Replacements, ",") != strings.Join(repl, ",") || r.EndFailed {
				t.Fatalf("requeue replacements %v end failed %v, want %v, not ended", r.Replacements, r.EndFailed, repl)
			}
			if plan := e.Decide(snap, t0.Add(at+10*time.Second)); len(plan.Requeues) != 0 {
				t.Fatalf("requeued again while the first is under way: %+v", plan.Requeues)
			}
		})
	}
}

// An absence shorter than the grace resets it: a node that comes back
// before the grace ends leaves the gang alone, and a later absence starts
// a new grace.
func TestGangWatchGraceResets(t *testing.T) {
	long := t0.Add(-time.Hour)
	j := mkJob("g", running(), group("main", 2, 4))
	allocs := []*cluster.Alloc{alloc("a1", "g", "n1", long, 0, 1, 2, 3), alloc("a2", "g", "n2", long, 0, 1, 2, 3)}
	up := []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)}
	downNodes := []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2, func(n *cluster.Node) { n.Ready = false })}
	pol := policy.Default()
	grace := pol.Gangs.MissingMemberGrace
	e := mustEngine(t, pol)
	steps := []struct {
		at    time.Duration
		nodes []*cluster.Node
		want  int
	}{
		{0, downNodes, 0}, {grace - time.Second, up, 0}, {grace + time.Second, downNodes, 0},
		{2 * grace, downNodes, 0}, {2*grace + time.Second, downNodes, 1},
	}
	for _, st := range steps {
		plan := e.Decide(mustSnap(t, st.nodes, []*cluster.Job{j}, allocs), t0.Add(st.at))
		if len(plan.Requeues) != st.want {
			t.Fatalf("at +%v: %d requeues, want %d", st.at, len(plan.Requeues), st.want)
		}
	}
}

// A gang whose admission is still under way (its members not all in the
// model yet) is the adapter's to roll back, not the watch's; a gang
// requeued is not also chosen as a victim in the same cycle; and with the
// watch off nothing is requeued.
func TestGangWatchLeavesAdmissionsAndOff(t *testing.T) {
	nodes := []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)}
	j := mkJob("g", group("main", 2, 8))
	pol := policy.Default()
	e := mustEngine(t, pol)
	plan := e.Decide(mustSnap(t, nodes, []*cluster.Job{j}, nil), t0)
	adm := admission(plan, "g")
	if adm == nil {
		t.Fatalf("not admitted: %+v", plan.Explanations["g"])
	}
	// One member appeared; the other has not yet.
	run := mkJob("g", running(), group("main", 2, 8))
	one := adm.Groups[0].Allocs[0]
	a := &cluster.Alloc{ID: "a1", JobID: "g", Group: "main", NodeID: one.NodeID, GPUs: one.GPUs, Start: t0}
	snap := mustSnap(t, nodes, []*cluster.Job{run}, []*cluster.Alloc{a})
	for _, at := range []time.Duration{time.Minute, 2 * pol.Gangs.MissingMemberGrace} {
		if plan := e.Decide(snap, t0.Add(at)); len(plan.Requeues) != 0 {
			t.Fatalf("at +%v requeued a gang whose admission is under way: %+v", at, plan.Requeues)
		}
	}

	off := mustPolicy(t, "gangs {\n  missing_member_grace = \"0s\"\n}\n")
	e = mustEngine(t, off)
	for _, at := range []time.Duration{0, time.Hour} {
		if plan := e.Decide(snap, t0.Add(at)); len(plan.Requeues) != 0 {
			t.Fatalf("watch off, at +%v requeued %+v", at, plan.Requeues)
		}
	}
}

// A running job its user re-submitted (its registration back in the
// parking pool, allocations of the old version still running) is Nomad's
// destructive update, through the queue: the old allocations are stopped
// at once (a Requeue with the job's signal and grace), whether or not the
// gang watch is on; the new version is then queued like any job.
func TestUserUpdateOfARunningJobReplacesItThroughTheQueue(t *testing.T) {
	long := t0.Add(-time.Hour)
	nodes := []*cluster.Node{mkNode("n1", 8, 2)}
	j := mkJob("u", running(), meta("impact_checkpoint_signal", "SIGUSR1", "impact_grace", "20s"), group("main", 1, 4))
	j.Parked = true
	allocs := []*cluster.Alloc{alloc("a1", "u", "n1", long, 0, 1, 2, 3)}
	for _, src := range []string{"", "gangs {\n  missing_member_grace = \"0s\"\n}\n"} {
		pol := policy.Default()
		if src != "" {
			pol = mustPolicy(t, src)
		}
		e := mustEngine(t, pol)
		plan := e.Decide(mustSnap(t, nodes, []*cluster.Job{j}, allocs), t0)
		if len(plan.Requeues) != 1 || plan.Requeues[0].JobID != "u" || len(plan.Requeues[0].Allocs) != 1 ||
			plan.Requeues[0].CheckpointSignal != "SIGUSR1" || !plan.Requeues[0].Update || !strings.Contains(plan.Requeues[0].Reason, "re-submitted by its user") {
			t.Fatalf("policy %q: requeues = %+v, want the old version of u stopped", src, plan.Requeues)
		}
		// Under way: not ordered twice.
		if plan := e.Decide(mustSnap(t, nodes, []*cluster.Job{j}, allocs), t0.Add(time.Second)); len(plan.Requeues) != 0 {
			t.Fatalf("ordered again: %+v", plan.Requeues)
		}
	}
}

// A dead gang (Nomad ended its run, cluster.Job.Dead) is requeued at once
// and once per run: not again while the adapter parks it, again after
// Forget (the requeue was not carried out). With impact_on_failure =
// "fail" the same stop ends the job failed.
func TestGangWatchDeadGangRequeuedOnceOrEndedFailed(t *testing.T) {
	for _, fail := range []bool{false, true} {
		j := mkJob("g", running(), group("main", 2, 4))
		if fail {
			j = mkJob("g", running(), meta("impact_on_failure", "fail"), group("main", 2, 4))
		}
		j.Dead, j.Ended, j.ModifyIndex = true, "allocation a1 of group main failed: task t exited 1", 7
		pol := policy.Default()
		e := mustEngine(t, pol)
		snap := mustSnap(t, []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)}, []*cluster.Job{j}, nil)
		plan := e.Decide(snap, t0)
		if len(plan.Requeues) != 1 || plan.Requeues[0].EndFailed != fail || !strings.Contains(plan.Requeues[0].Reason, "exited 1") {
			t.Fatalf("fail=%v: requeues %+v, want one at once, end failed %v", fail, plan.Requeues, fail)
		}
		if fail && !strings.Contains(plan.Requeues[0].Reason, "ended failed") {
			t.Errorf("reason %q does not say the job ends failed", plan.Requeues[0].Reason)
		}
		if plan := e.Decide(snap, t0.Add(time.Second)); len(plan.Requeues) != 0 {
			t.Fatalf("requeued the same dead run again: %+v", plan.Requeues)
		}
		e.Forget("g")
		if plan := e.Decide(snap, t0.Add(2*time.Second)); len(plan.Requeues) != 1 {
			t.Fatalf("after Forget: %d requeues, want the dead run requeued again", len(plan.Requeues))
		}
	}
}
