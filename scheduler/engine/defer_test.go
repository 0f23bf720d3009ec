package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// An admission rolled back by the adapter is deferred: the job keeps its
// place but is not admitted, and its GPUs go to the next job, until the
// deferral ends; Forget clears it.
func TestDeferredJobIsHeldBackUntilItsTime(t *testing.T) {
	nodes := []*cluster.Node{mkNode("n1", 8, 2)}
	jobs := []*cluster.Job{mkJob("big", group("w", 1, 8)), mkJob("next", group("w", 1, 8))}
	snap := mustSnap(t, nodes, jobs, nil)

	e := mustEngine(t, nil)
	first := join(admittedIDs(e.Decide(snap, t0)))
	if first == "" || strings.Contains(first, ",") {
		t.Fatalf("first cycle admitted %q, want exactly one job", first)
	}
	held := first
	other := "next"
	if held == "next" {
		other = "big"
	}
	e.Forget(held) // what the agent does when Nomad could not place it
	e.Defer(held, t0.Add(time.Minute), "Nomad could not place it")

	plan := e.Decide(snap, t0.Add(time.Second))
	if got := join(admittedIDs(plan)); got != other {
		t.Fatalf("while %s is deferred admitted %q, want %q", held, got, other)
	}
	exp := plan.Explanations[held]
	if exp == nil || exp.Status != StatusWaiting || !strings.Contains(exp.Reason, "held back until") || !strings.Contains(exp.Reason, "Nomad could not place it") {
		t.Fatalf("explanation of the deferred job = %+v", exp)
	}

	// After the deferral (and with the other job forgotten, so its GPUs
	// are free again in this snapshot) the job is admitted again.
	e.Forget(other)
	if got := join(admittedIDs(e.Decide(snap, t0.Add(2*time.Minute)))); !strings.Contains(got, held) {
		t.Fatalf("after the deferral admitted %q, want %s among them", got, held)
	}

	// Forget clears a deferral.
	e2 := mustEngine(t, nil)
	e2.Defer("big", t0.Add(time.Hour), "x")
	e2.Defer("next", t0.Add(time.Hour), "x")
	e2.Forget("big")
	if got := join(admittedIDs(e2.Decide(snap, t0))); got != "big" {
		t.Fatalf("after Forget admitted %q, want big", got)
	}
}
