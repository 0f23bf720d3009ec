package nomad

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/internal/nomadfake"
)

func TestAdmissionDeadlineRollsBackHalfPlacedGang(t *testing.T) {
	e := newEnv(t, 2)
	e.fake.SetClientBehavior("node-1", nomadfake.ClientHold)
	e.register(gpuJob("slow", nil, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	s := e.waitFor("job", func(s *cluster.Snapshot) bool { return s.NumJobs() == 1 })
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	x := e.executor(clk)
	if res := x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{admission(t, s, "slow")}}); len(res.Admitted) != 1 {
		t.Fatalf("apply = %+v", res)
	}
	if rolled := x.CheckDeadlines(context.Background()); len(rolled) != 0 {
		t.Fatalf("rolled back before the deadline: %v", rolled)
	}
	if !x.Busy(cluster.JobKey("default", "slow")) {
		t.Errorf("pending admission not busy")
	}
	clk.Add(2 * time.Minute)
	rolled := x.CheckDeadlines(context.Background())
	if len(rolled) != 1 {
		t.Fatalf("rolled = %v, want the half-placed gang", rolled)
	}
	job := e.fake.Job("slow")
	if *job.NodePool != parking || pinnedAPI(job) {
		t.Errorf("after rollback pool %s pinned %v", *job.NodePool, pinnedAPI(job))
	}
	for _, a := range e.fake.Allocations("slow") {
		if a.DesiredStatus != "stop" {
			t.Errorf("alloc %s on %s still desired %s", a.ID, a.NodeID, a.DesiredStatus)
		}
	}
	if !strings.Contains(x.Outcome(cluster.JobKey("default", "slow")), "rolled back") {
		t.Errorf("outcome = %q", x.Outcome(cluster.JobKey("default", "slow")))
	}
	e.waitFor("parked again", func(s *cluster.Snapshot) bool {
		j, ok := s.Job(cluster.JobKey("default", "slow"))
		return ok && j.State == cluster.JobQueued
	})
}

func TestUnplaceableAdmissionRolledBackWithNomadsReason(t *testing.T) {
	e := newEnv(t, 2)
	// Someone else's job takes island 1 of node-0 outside the scheduler's
	// knowledge (the plan below is stale).
	e.register(gpuJob("gang", nil, [2]int{2, 4}))
	e.startWatcher(WatcherConfig{})
	s := e.waitFor("job", func(s *cluster.Snapshot) bool { return s.NumJobs() == 1 })
	adm := admission(t, s, "gang")
	for i := 0; i < 2; i++ {
		other := gpuJob(fmt.Sprintf("squatter-%d", i), nil, [2]int{1, 4})
		gpu := "gpu"
		other.NodePool = &gpu
		other.Constraints = []*api.Constraint{{LTarget: "${node.unique.id}", RTarget: "node-0", Operand: "="}}
		e.register(other)
	}
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	x := e.executor(clk)
	x.cfg.PlacementWait = -1
	if res := x.Apply(context.Background(), &engine.Plan{Admissions: []engine.Admission{adm}}); len(res.Admitted) != 1 {
		t.Fatalf("apply = %+v", res)
	}
	if rolled := x.CheckDeadlines(context.Background()); len(rolled) != 0 {
		t.Fatalf("rolled back within the blocked grace: %v", rolled)
	}
	clk.Add(45 * time.Second) // past BlockedGrace (30s), before AdmitDeadline (1m)
	rolled := x.CheckDeadlines(context.Background())
	if len(rolled) != 1 {
		t.Fatalf("rolled = %v", rolled)
	}
	out := x.Outcome(adm.JobID)
	if !strings.Contains(out, "Nomad could not place") || !strings.Contains(out, "devices") {
		t.Errorf("outcome = %q, want Nomad's reason (devices exhausted)", out)
	}
	if j := e.fake.Job("gang"); *j.NodePool != parking {
		t.Errorf("not parked again: %s", *j.NodePool)
	}
	for _, a := range e.fake.Allocations("gang") {
		if a.ClientStatus == "running" {
			t.Errorf("half-placed member %s still running on %s", a.ID, a.NodeID)
		}
	}
}
