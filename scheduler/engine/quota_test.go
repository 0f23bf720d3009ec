package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// A project's gpu_quota caps the GPUs it holds at once: running gangs and
// admissions not yet running both count, each GPU once, and another
// project is not held back by it.
func TestProjectQuota(t *testing.T) {
	pol := mustPolicy(t, `project "p" { gpu_quota = 12 }`)
	store := cluster.NewStore()
	for _, n := range []string{"n1", "n2", "n3"} {
		_ = store.UpsertNode(mkNode(n, 8, 2))
	}
	_ = store.UpsertJob(mkJob("a", group("main", 2, 4), meta("impact_project", "p")))
	e := mustEngine(t, pol)
	p1 := e.Decide(store.Snapshot(), t0)
	adm := admission(p1, "a")
	if adm == nil {
		t.Fatalf("a (8 GPUs, quota 12) not admitted: %+v", p1.Explanations["a"])
	}
	// Nomad has placed one of a's two allocations so far; b (4 GPUs) and
	// c (8 GPUs) of p arrive, and d of another project.
	a := mkJob("a", group("main", 2, 4), meta("impact_project", "p"), running())
	_ = store.UpsertJob(a)
	first := adm.Groups[0].Allocs[0]
	_ = store.UpsertAlloc(&cluster.Alloc{ID: "a1", JobID: "a", Group: "main", NodeID: first.NodeID, GPUs: first.GPUs, Start: t0})
	_ = store.UpsertJob(mkJob("b", group("main", 1, 4), meta("impact_project", "p"), submitted(t0)))
	_ = store.UpsertJob(mkJob("c", group("main", 1, 8), meta("impact_project", "p"), submitted(t0.Add(time.Second))))
	_ = store.UpsertJob(mkJob("d", group("main", 1, 8), meta("impact_project", "q")))
	p2 := e.Decide(store.Snapshot(), t0.Add(time.Minute))
	if err := ValidatePlan(pol, store.Snapshot(), p2); err != nil {
		t.Fatal(err)
	}
	// a holds 8 (4 running + 4 planned): b fits the quota exactly, c not.
	if admission(p2, "b") == nil {
		t.Fatalf("b not admitted with 8 of 12 GPUs held: %+v", p2.Explanations["b"])
	}
	if admission(p2, "c") != nil {
		t.Fatal("c admitted beyond project p's quota")
	}
	if exp := p2.Explanations["c"]; exp.Status != StatusWaiting || !strings.Contains(exp.Reason, `project "p" quota: holds 12 of 12 GPUs`) {
		t.Fatalf("c: %s %q, want waiting on the quota", exp.Status, exp.Reason)
	}
	if admission(p2, "d") == nil {
		t.Fatalf("d of another project held back: %+v", p2.Explanations["d"])
	}
}
