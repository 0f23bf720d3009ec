package nomad

import (
	"context"
	"strings"
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
)

// An admitted gang with the example's `restart { attempts = 0 }` and
// `reschedule { attempts = 0 }` whose members all end is dead in Nomad.
// The model keeps it (running, no allocations, Job.Dead saying how its run
// ended) when a member failed, so that the gang watch requeues it; it was
// dropped like any dead job, and the gang never came back. A gang whose
// every member exited 0 is done and leaves the model.
func TestModelKeepsADeadGangUntilDecided(t *testing.T) {
	for _, tc := range []struct {
		name  string
		codes [2]int // exit codes of the two members, in turn
		dead  string // "" = the job leaves the model
	}{
		{"a member killed, the survivor exits 75", [2]int{137, 75}, "exited 137"},
		{"both exit 75 (preempted, checkpointed)", [2]int{75, 75}, "exited 75"},
		{"both completed", [2]int{0, 0}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 2)
			e.register(withRestart(gpuJob("gang", nil, [2]int{2, 4}), 0, true))
			e.startWatcher(WatcherConfig{})
			x := e.executor(nil)
			admitAndRun(t, e, x, "gang")
			key := cluster.JobKey("default", "gang")
			e.waitFor("both members in the model", func(s *cluster.Snapshot) bool { return len(s.JobAllocs(key)) == 2 })
			for i, a := range e.fake.Allocations("gang") {
				if err := e.fake.ExitTasks(a.ID, tc.codes[i]); err != nil {
					t.Fatal(err)
				}
			}
			if st := *e.fake.Job("gang").Status; st != "dead" {
				t.Fatalf("job status %s in the fake, want dead", st)
			}
			s := e.waitFor("the gang's allocations gone from the model", func(s *cluster.Snapshot) bool { return len(s.JobAllocs(key)) == 0 })
			e.waitIndex()
			s = e.w.Snapshot()
			j, ok := s.Job(key)
			if tc.dead == "" {
				if ok {
					t.Fatalf("completed gang still in the model: %+v", j)
				}
				return
			}
			if !ok {
				t.Fatal("dead gang left the model: nothing would requeue it")
			}
			if j.State != cluster.JobRunning || !j.Dead || !strings.Contains(j.Ended, tc.dead) || !strings.Contains(j.Ended, "failed") {
				t.Fatalf("model job state %v dead %v ended %q, want running, dead, ended saying %q", j.State, j.Dead, j.Ended, tc.dead)
			}
			// A fresh watcher (a resync, or a new leader) sees the same.
			e.cancel()
			<-e.done
			e.startWatcher(WatcherConfig{})
			j, ok = e.w.Snapshot().Job(key)
			if !ok || !j.Dead || !strings.Contains(j.Ended, tc.dead) {
				t.Fatalf("after a resync: in model %v, dead %v, ended %q", ok, j.Dead, j.Ended)
			}
		})
	}
}

// A lost member's node back inside the grace: Nomad's blocked evaluation
// places the replacement on it with no PreviousAllocation (the fake does
// so, as a real 2.0.5 cluster did). The model flags it a replacement by
// its name, from the stream and after a resync; it was taken for a
// member, so the gang looked whole while the orphan ran beside it.
func TestModelFlagsUnlinkedReplacementsByName(t *testing.T) {
	e := newEnv(t, 2)
	e.register(gpuJob("gang", nil, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	x := e.executor(nil)
	admitAndRun(t, e, x, "gang")
	key := cluster.JobKey("default", "gang")
	e.waitFor("both members in the model", func(s *cluster.Snapshot) bool { return len(s.JobAllocs(key)) == 2 })
	var lost string
	for _, a := range e.fake.Allocations("gang") {
		if a.NodeID == "node-1" {
			lost = a.ID
		}
	}
	if err := e.fake.SetNodeStatus("node-1", "down", false); err != nil {
		t.Fatal(err)
	}
	if err := e.fake.SetNodeStatus("node-1", "ready", true); err != nil {
		t.Fatal(err)
	}
	var repl string
	for _, a := range e.fake.Allocations("gang") {
		if a.NodeID == "node-1" && a.ID != lost && a.DesiredStatus == "run" {
			repl = a.ID
			if a.PreviousAllocation != "" {
				t.Fatalf("fake linked the blocked evaluation's replacement to %s", a.PreviousAllocation)
			}
		}
	}
	if repl == "" {
		t.Fatal("no replacement placed on node-1 once it was back")
	}
	check := func(s *cluster.Snapshot) bool {
		a, ok := s.Alloc(repl)
		if !ok || !a.Replacement {
			return false
		}
		for _, b := range s.JobAllocs(key) {
			if b.ID != repl && b.Replacement {
				return false // the surviving member is not one
			}
		}
		return true
	}
	e.waitFor("unlinked replacement flagged from the stream", check)
	e.cancel()
	<-e.done
	e.startWatcher(WatcherConfig{})
	e.waitFor("unlinked replacement flagged after a resync", check)

	// The gang watch's requeue stops the replacement first, then
	// signals only the member of the gang.
	x2 := e.executor(nil)
	var ids []string
	for _, a := range e.w.Snapshot().JobAllocs(key) {
		ids = append(ids, a.ID)
	}
	res := x2.Apply(context.Background(), &engine.Plan{Requeues: []engine.Preemption{{Stop: engine.Stop{JobID: key, Allocs: ids, CheckpointSignal: "SIGUSR1"}, Replacements: []string{repl}, Reason: "test"}}})
	if len(res.Requeued) != 1 {
		t.Fatalf("apply = %+v", res)
	}
	x2.Wait()
	for _, sig := range e.fake.Signals() {
		if sig.AllocID == repl {
			t.Errorf("replacement %s was signalled; it should have been stopped first", repl)
		}
	}
	for _, a := range e.fake.Allocations("gang") {
		if a.ClientStatus == "running" {
			t.Errorf("allocation %s still running after the requeue", a.ID)
		}
	}
}
