package nomad

import (
	"context"
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// The model tells the gang watch what it needs: members that completed on
// their own (Job.Completed, current version only), and allocations Nomad
// placed to replace a lost member (Alloc.Replacement), from the event
// stream and after a resync alike (the allocation list has no
// PreviousAllocation; the lost one's NextAllocation names it).
func TestModelCompletedMembersAndReplacements(t *testing.T) {
	e := newEnv(t, 2)
	e.register(gpuJob("gang", nil, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	x := e.executor(nil)
	admitAndRun(t, e, x, "gang")
	key := cluster.JobKey("default", "gang")
	var onNode1, onNode0 string
	for _, a := range e.fake.Allocations("gang") {
		if a.NodeID == "node-1" {
			onNode1 = a.ID
		} else {
			onNode0 = a.ID
		}
	}
	if err := e.fake.FinishAlloc(onNode1, false); err != nil {
		t.Fatal(err)
	}
	e.waitFor("one member completed", func(s *cluster.Snapshot) bool {
		j, ok := s.Job(key)
		return ok && j.Completed["g0"] == 1 && len(s.JobAllocs(key)) == 1
	})
	// node-0 goes down: its member is lost; Nomad replaces it on node-1
	// (the pins allow it, the completed member no longer holds GPUs).
	if err := e.fake.SetNodeStatus("node-0", "down", false); err != nil {
		t.Fatal(err)
	}
	check := func(s *cluster.Snapshot) bool {
		as := s.JobAllocs(key)
		j, _ := s.Job(key)
		return len(as) == 1 && as[0].ID != onNode0 && as[0].Replacement && j != nil && j.Completed["g0"] == 1
	}
	e.waitFor("replacement flagged from the stream", check)
	// A fresh watcher (resync) sees the same.
	e.cancel()
	<-e.done
	e.startWatcher(WatcherConfig{})
	e.waitFor("replacement flagged after a resync", check)
	_ = context.Background()
}

// `nomad job stop -purge` of a running job: Nomad deletes its allocations
// without allocation events (only Job/JobDeregistered with Deleted), so
// the model drops them when the job's deletion arrives, not at the next
// resync (10 minutes).
func TestPurgedRunningJobLeavesTheModelAtOnce(t *testing.T) {
	e := newEnv(t, 2)
	e.register(gpuJob("gone", nil, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	x := e.executor(nil)
	admitAndRun(t, e, x, "gone")
	if n := len(e.w.Snapshot().JobAllocs(cluster.JobKey("default", "gone"))); n != 2 {
		t.Fatalf("%d allocations in the model, want 2", n)
	}
	if _, _, err := e.c.api.Jobs().Deregister("gone", true, nil); err != nil {
		t.Fatal(err)
	}
	e.waitFor("purged job and its allocations gone", func(s *cluster.Snapshot) bool {
		_, ok := s.Job(cluster.JobKey("default", "gone"))
		return !ok && s.NumAllocs() == 0
	})
	if got := e.fake.Allocations("gone"); len(got) != 0 {
		t.Errorf("fake still lists %d allocations of the purged job", len(got))
	}
}
