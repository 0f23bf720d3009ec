package scheduler

// TestReserveTiers: the policy's backfill reserve_tiers on a real
// two-node Nomad cluster (one server, two client processes, each 8 fake
// GPUs of its own), with no reservations for anyone else
// (reservations = 0).
//
// client-0 runs a high-tier job of 5 GPUs that declares it ends in 30
// minutes ("h1") and a scavenger job of 2 GPUs ("s1"); client-1 a
// high-tier job of 7 GPUs that ends in 2 hours ("h2"). Each node has one
// GPU free. A critical job of 8 GPUs ("crit") arrives: no node can hold
// it, and it may not preempt the high-tier work on either. Two high-tier
// jobs of 1 GPU and 5 hours ("long1", "long2") and a scavenger job of 1
// GPU ("scav") arrive behind it.
//
// With reserve_tiers = ["critical"], crit holds a reservation on
// client-0, whose unpreemptible work ends first (s1 counts as freed: crit
// may preempt it), expected free by h1's end; long1 takes client-1's free
// GPU, long2 waits, told the GPUs are reserved for crit, and scav
// backfills client-0's free GPU (crit may take it back). When h1 ends
// (stopped here), crit preempts s1 and scav and starts on client-0.
//
// Without reserve_tiers (the control), long1 and long2 take the free GPU
// of each node and crit waits without a reservation; once h1 has ended
// it still waits, long1 or long2 holding a GPU of client-0 it may not
// preempt.

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestReserveTiers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reserve bool
	}{
		{"reserve tiers", true},
		{"no reserve tiers", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tiers := ""
			if tc.reserve {
				tiers = `  reserve_tiers = ["critical"]` + "\n"
			}
			w, envDir, nodes := twoNodes(t, "impact-e2e-rsvtiers-", fmt.Sprintf(`
backfill {
  enabled      = true
  reservations = 0
%s}
`, tiers))
			c := w.c
			node0, node1 := nodes[0], nodes[1]
			explain := w.explainEngine

			for _, j := range []dfJob{
				{name: "h1", tier: "high", gpus: 5, node: node0.Name, walltime: "30m"},
				{name: "s1", tier: "scavenger", gpus: 2, node: node0.Name},
				{name: "h2", tier: "high", gpus: 7, node: node1.Name, walltime: "2h"},
			} {
				runHCL(t, c.Agent, w.dir, j.name, j.hcl(envDir))
				w.waitRunningN(j.name, 1, 120*time.Second)
			}
			runHCL(t, c.Agent, w.dir, "crit", dfJob{name: "crit", tier: "critical", gpus: 8}.hcl(envDir))
			eventually(t, 60*time.Second, "crit decided", func() (bool, string) {
				ex := explain("crit")
				if ex.Engine == nil {
					return false, ex.String()
				}
				if tc.reserve {
					return ex.Engine.Status == "reserved", ex.String()
				}
				return ex.Engine.Status == "waiting", ex.String()
			})
			t.Logf("crit: %s", explain("crit"))
			if ex := explain("crit"); tc.reserve && !strings.Contains(ex.Reason, "counting the running work it may preempt as freed once it may preempt it") {
				t.Errorf("crit: %s; want its reason to say s1 counts as freed", ex)
			}
			for _, j := range []dfJob{
				{name: "long1", tier: "high", gpus: 1, walltime: "5h"},
				{name: "long2", tier: "high", gpus: 1, walltime: "5h"},
			} {
				runHCL(t, c.Agent, w.dir, j.name, j.hcl(envDir))
				if !tc.reserve {
					w.waitRunningN(j.name, 1, 120*time.Second)
				}
			}
			if tc.reserve {
				if l := w.waitRunningN("long1", 1, 120*time.Second)[0]; l.NodeID != node1.ID {
					t.Errorf("long1 runs on %s, want %s (client-0's free GPU is crit's)", l.NodeID, node1.ID)
				}
				eventually(t, 60*time.Second, "long2 waiting for the GPUs reserved for crit", func() (bool, string) {
					ex := explain("long2")
					return ex.Engine != nil && ex.Engine.Status == "waiting" && strings.Contains(ex.Reason, "reserved for default/crit"), ex.String()
				})
				runHCL(t, c.Agent, w.dir, "scav", dfJob{name: "scav", tier: "scavenger", gpus: 1}.hcl(envDir))
				if s := w.waitRunningN("scav", 1, 120*time.Second)[0]; s.NodeID != node0.ID {
					t.Errorf("scav runs on %s, want %s (backfilling crit's reserved GPU)", s.NodeID, node0.ID)
				}
				waitCycles(t, w.apiURL, 3)
				if as := w.allocsOf("long2"); len(as) != 0 {
					t.Errorf("long2: allocations %+v, want none (client-0's GPUs are reserved for crit); explain %s", as, explain("long2"))
				}
			}
			if as := w.allocsOf("crit"); len(as) != 0 {
				t.Fatalf("crit: allocations %+v before h1 ended, want none", as)
			}

			// h1 ends.
			if tc.reserve {
				ended := time.Now()
				if out, err := w.nomad("job", "stop", "-detach", "h1"); err != nil {
					t.Fatalf("stop h1: %v\n%s", err, out)
				}
				r := w.waitRunningN("crit", 1, 120*time.Second)[0]
				t.Logf("crit running on %s %s after h1 ended", r.NodeID, time.Since(ended).Round(100*time.Millisecond))
				if r.NodeID != node0.ID {
					t.Errorf("crit runs on %s, want %s (the node it reserved)", r.NodeID, node0.ID)
				}
				for _, id := range []string{"s1", "scav"} {
					if rs := w.running(id); len(rs) != 0 {
						t.Errorf("%s: still running %+v, want it preempted for crit", id, rs)
					}
				}
			} else {
				// s1, h2, long1 and long2 hold 11 GPUs.
				w.stopJobLeaving(t, "h1", 11)
				waitCycles(t, w.apiURL, 3)
				if as := w.allocsOf("crit"); len(as) != 0 {
					t.Errorf("crit without reserve_tiers: allocations %+v once h1 ended, want none (long1 or long2 holds a GPU of client-0)", as)
				}
				t.Logf("without reserve_tiers, h1 ended: crit %s", explain("crit"))
			}
			noRollbacks(t, w.apiURL)
			if t.Failed() {
				t.Logf("impact agent output (tail):\n%s", w.impactProc.Output())
			}
		})
	}
}

// TestReserveTiersIdleBudget: the reserve tiers' reservations are paid
// from the headroom's idle budget, on the same two-node cluster, with
// reserve_tiers = ["critical"] and a headroom of 8 GPUs for the
// critical tier whose idle budget is a tenth of a percent of the pool
// (0.016 GPU-seconds a second).
//
// h1 (high, 7 GPUs, 30 minutes) runs on client-0; h2 (high, 7 GPUs, 2
// hours) on client-1 once the headroom, which keeps it out while its 8
// GPUs are free, has idled past its allowance and yields. crit
// (critical, 8 GPUs) then fits no node and may preempt nothing: with the
// account overspent it gets no reservation, and says so, and long1 and
// long2 (high, 1 GPU each) take the free GPU of each node. In
// TestReserveTiers, without a headroom, crit's reservation keeps long2
// off client-0.
func TestReserveTiersIdleBudget(t *testing.T) {
	w, envDir, nodes := twoNodes(t, "impact-e2e-rsvbudget-", `
backfill {
  enabled       = true
  reservations  = 0
  reserve_tiers = ["critical"]
}
headroom "default" {
  tiers       = ["critical"]
  gpus        = 8
  idle_budget = 0.001
}
`)
	c := w.c
	explain := w.explainEngine
	for _, j := range []dfJob{
		{name: "h1", tier: "high", gpus: 7, node: nodes[0].Name, walltime: "30m"},
		{name: "h2", tier: "high", gpus: 7, node: nodes[1].Name, walltime: "2h"},
	} {
		runHCL(t, c.Agent, w.dir, j.name, j.hcl(envDir))
		w.waitRunningN(j.name, 1, 120*time.Second)
	}
	runHCL(t, c.Agent, w.dir, "crit", dfJob{name: "crit", tier: "critical", gpus: 8}.hcl(envDir))
	eventually(t, 60*time.Second, "crit waiting without a reservation, the idle budget spent", func() (bool, string) {
		ex := explain("crit")
		return ex.Engine != nil && ex.Engine.Status == "waiting" && strings.Contains(ex.Reason, "no reservation for its tier: the headroom's idle budget is spent"), ex.String()
	})
	t.Logf("crit: %s", explain("crit"))
	on := map[string]bool{}
	for _, j := range []dfJob{
		{name: "long1", tier: "high", gpus: 1, walltime: "5h"},
		{name: "long2", tier: "high", gpus: 1, walltime: "5h"},
	} {
		runHCL(t, c.Agent, w.dir, j.name, j.hcl(envDir))
		on[w.waitRunningN(j.name, 1, 120*time.Second)[0].NodeID] = true
	}
	if !on[nodes[0].ID] || !on[nodes[1].ID] {
		t.Errorf("long1 and long2 run on %v, want one on each node (no GPU reserved for crit)", on)
	}
	// The yield is counted (impact_headroom_yields_total); the gauge
	// impact_headroom_yielded may read kept again by now, once a small
	// overspending has been paid back (TestHeadroomIdleBudget).
	yields, ok := metricValue(t, w.apiURL, `impact_headroom_yields_total{pool="default"}`)
	reserved, rok := metricValue(t, w.apiURL, `impact_headroom_idle_reserved_gpus{pool="default"}`)
	t.Logf("impact_headroom_yields_total %v (present %v), impact_headroom_idle_reserved_gpus %v (present %v)", yields, ok, reserved, rok)
	if !ok || yields < 1 || !rok || reserved != 0 {
		t.Errorf("impact_headroom_yields_total %v (present %v), impact_headroom_idle_reserved_gpus %v (present %v): want at least 1 and 0", yields, ok, reserved, rok)
	}
	noRollbacks(t, w.apiURL)
	if t.Failed() {
		t.Logf("impact agent output (tail):\n%s", w.impactProc.Output())
	}
}
