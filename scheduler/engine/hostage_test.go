package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// A job that cannot be placed on its pool, even empty, holds nothing: the
// 2 x 4 NVLink gang without distinct_hosts on one 8-GPU node whose device
// group spans both islands (group_by "model": its two allocations would
// have to share one island) is parked with why and how to lift it, never
// "preempting 0 gang(s)" with the pool's GPUs bound to it, and a 1-GPU
// critical job submitted after it starts at once. With group_by "island"
// the same gang runs.
func TestNoJobHoldsThePoolHostage(t *testing.T) {
	gang := func() *cluster.Job {
		return mkJob("gang", group("workers", 2, 4), submitted(t0.Add(-2*time.Minute)),
			meta("impact_tier", "high", "impact_preemptible", "true", "impact_topology", "nvlink", "impact_pool", "gpu"))
	}
	cases := []struct {
		groupBy    string
		wantGang   Status
		wantReason string
	}{
		{"model", StatusParked, `cannot be placed in pool "gpu" even with no other work running: its NVLink allocations may share this node only inside one island`},
		{"island", StatusAdmitted, ""},
	}
	for _, tc := range cases {
		t.Run(tc.groupBy, func(t *testing.T) {
			e := mustEngine(t, nil)
			jobs := []*cluster.Job{gang()}
			if tc.wantGang == StatusParked {
				jobs = append(jobs, mkJob("crit", meta("impact_tier", "critical", "impact_pool", "gpu")))
			}
			snap := mustSnap(t, []*cluster.Node{mkNode("n1", 8, 2, grouped(tc.groupBy))}, jobs, nil)
			for cycle := range 3 { // the same answer every cycle: nothing is held over
				p := e.Decide(snap, t0.Add(time.Duration(cycle)*10*time.Second))
				ex := p.Explanations["gang"]
				if len(p.Preemptions) > 0 || ex.Status != tc.wantGang || !strings.Contains(ex.Reason, tc.wantReason) {
					t.Fatalf("cycle %d: gang %s (%q), preemptions %v; want %s (%q)", cycle, ex.Status, ex.Reason, preemptedIDs(p), tc.wantGang, tc.wantReason)
				}
				if tc.wantGang == StatusParked && p.Explanations["crit"].Status != StatusAdmitted {
					t.Fatalf("cycle %d: the critical 1-GPU job waits beside a parked gang: %s (%q)", cycle, p.Explanations["crit"].Status, p.Explanations["crit"].Reason)
				}
				if tc.wantGang == StatusAdmitted {
					break // admitted: the next snapshot would show it running
				}
			}
		})
	}
}
