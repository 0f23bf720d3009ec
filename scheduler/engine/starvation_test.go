package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// A 64-GPU gang is not starved by a stream of 1-GPU jobs: as the oldest
// job it holds a reservation, and the small jobs (no walltime, not
// preemptible by it) may not take reserved GPUs. The control run without
// reservations shows the gang does starve there, so the test can fail.
func TestGangNotStarvedByStream(t *testing.T) {
	run := func(pol *policy.Policy) (startedAt time.Duration, smallStarted int) {
		var nodes []*cluster.Node
		for i := range 16 {
			nodes = append(nodes, mkNode(fmt.Sprintf("n%02d", i), 8, 2))
		}
		s := newTsim(t, pol, nodes)
		rng := rand.New(rand.NewPCG(1, 2))
		seq := 0
		small := func() {
			seq++
			s.submit(mkJob(fmt.Sprintf("small-%04d", seq)), time.Duration(30+rng.IntN(150))*time.Minute)
		}
		// Fill the cluster with small jobs first.
		for range 128 {
			small()
		}
		s.step(time.Minute)
		s.submit(mkJob("gang", group("w", 8, 8)), 2*time.Hour)
		started := map[string]bool{}
		for i := range 12 * 12 { // 12 hours of 5-minute steps
			for range 10 {
				small()
			}
			plan := s.step(5 * time.Minute)
			for _, a := range plan.Admissions {
				if a.JobID == "gang" {
					return time.Duration(i) * 5 * time.Minute, len(started)
				}
				started[a.JobID] = true
			}
		}
		return -1, len(started)
	}

	at, small := run(policy.Default())
	if at < 0 {
		t.Fatalf("gang never started in 12h (%d small jobs started meanwhile)", small)
	}
	// Every small job ends within 3h of its start; the reservation must
	// not wait longer than that.
	if at > 3*time.Hour+5*time.Minute {
		t.Fatalf("gang started after %s, want within the longest small job (3h)", at)
	}
	if small == 0 {
		t.Fatalf("no small job started while the gang waited: the cluster idled")
	}

	strict := policy.Default()
	strict.Backfill.Reservations = 0
	if at, _ := run(strict); at >= 0 {
		t.Fatalf("control without reservations: gang started after %s; the scenario does not exercise starvation", at)
	}
}
