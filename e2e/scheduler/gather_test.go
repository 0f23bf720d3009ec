package scheduler

// TestGather: the policy's backfill gather on a real two-node Nomad
// cluster (one server, two client processes, each 8 fake GPUs of its own),
// with no reservations (backfill { reservations = 0 }), so a blocked gang
// gets nothing but what gathering holds for it.
//
// client-0 is busy with a long-running high-tier job of 8 GPUs ("long").
// A normal-tier gang of 2 allocations x 8 GPUs ("pair") arrives: it needs
// both nodes whole, may not preempt long, and gets no reservation. Then a
// normal-tier job of 1 GPU ("small") arrives behind it; pair may not
// preempt it.
//
// With gather on, pair holds client-1's 8 GPUs (the node one of its
// allocations fits on now): its explanation (/v1/explain, engine status
// reserved, gathered 1, and `impact explain`) says it holds the GPUs of 1
// of its 2 allocations; small stays waiting, told the GPUs are reserved
// for pair, with no allocation in Nomad, over several cycles, and so does
// a scavenger job of 1 GPU ("scav") that pair may preempt, told that no
// job may use GPUs a gang gathers (preemptible work used to backfill
// them, and could then keep them from the gang); pair has no allocation
// either (nothing is placed partially). Once long is stopped,
// pair starts on both nodes, each allocation on all 8 GPUs of its node as
// planned, both from one evaluation and no other allocation of it ever.
//
// Without gather (the control), small starts on client-1 at once, and
// once long is stopped pair still waits: small keeps one GPU of client-1,
// so the two whole nodes pair needs are never free together.

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestGather(t *testing.T) {
	for _, tc := range []struct {
		name   string
		gather bool
	}{
		{"gather", true},
		{"no gather", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, envDir, nodes := twoNodes(t, "impact-e2e-gather-", fmt.Sprintf(`
backfill {
  enabled      = true
  reservations = 0
  gather       = %t
}
`, tc.gather))
			c := w.c
			node0, node1 := nodes[0], nodes[1]
			explain := w.explainEngine

			runHCL(t, c.Agent, w.dir, "long", dfJob{name: "long", tier: "high", gpus: 8, node: node0.Name}.hcl(envDir))
			if l := w.waitRunningN("long", 1, 120*time.Second)[0]; l.NodeID != node0.ID {
				t.Fatalf("long runs on %s, want %s (its constraint)", l.NodeID, node0.ID)
			}
			runHCL(t, c.Agent, w.dir, "pair", dfJob{name: "pair", tier: "normal", count: 2, gpus: 8}.hcl(envDir))
			eventually(t, 60*time.Second, "pair decided", func() (bool, string) {
				ex := explain("pair")
				if ex.Engine == nil {
					return false, ex.String()
				}
				if tc.gather {
					return ex.Engine.Status == "reserved" && ex.Engine.Gathered == 1, ex.String()
				}
				return ex.Engine.Status == "waiting", ex.String()
			})
			runHCL(t, c.Agent, w.dir, "small", dfJob{name: "small", tier: "normal", gpus: 1}.hcl(envDir))

			if !tc.gather {
				s := w.waitRunningN("small", 1, 120*time.Second)[0]
				if s.NodeID != node1.ID {
					t.Errorf("small runs on %s, want the free node %s", s.NodeID, node1.ID)
				}
				if ex := explain("pair"); ex.Engine == nil || ex.Engine.Status != "waiting" || ex.Engine.Gathered != 0 {
					t.Errorf("pair without gather: %s, want engine status waiting, nothing gathered", ex)
				}
				w.stopJobLeaving(t, "long", 1)
				waitCycles(t, w.apiURL, 3)
				if as := w.allocsOf("pair"); len(as) != 0 {
					t.Errorf("pair without gather: allocations %+v once long stopped, want none (small holds a GPU of client-1)", as)
				}
				t.Logf("without gather, long stopped: pair %s", explain("pair"))
				noRollbacks(t, w.apiURL)
				if t.Failed() {
					t.Logf("impact agent output (tail):\n%s", w.impactProc.Output())
				}
				return
			}

			// small is decided (waiting behind pair's held GPUs), then
			// stays so over several more cycles.
			eventually(t, 60*time.Second, "small waiting for the GPUs held for pair", func() (bool, string) {
				ex := explain("small")
				return ex.Engine != nil && ex.Engine.Status == "waiting" && strings.Contains(ex.Reason, "reserved for default/pair"), ex.String()
			})
			runHCL(t, c.Agent, w.dir, "scav", dfJob{name: "scav", tier: "scavenger", gpus: 1}.hcl(envDir))
			const unusable = "no job may use them while a gang gathers its nodes"
			eventually(t, 60*time.Second, "scav waiting, though pair may preempt it", func() (bool, string) {
				ex := explain("scav")
				return ex.Engine != nil && ex.Engine.Status == "waiting" && strings.Contains(ex.Reason, unusable), ex.String()
			})
			waitCycles(t, w.apiURL, 3)
			for _, id := range []string{"small", "scav"} {
				if as := w.allocsOf(id); len(as) != 0 {
					t.Errorf("%s: allocations %+v, want none (client-1 is held for pair); explain %s", id, as, explain(id))
				}
			}
			if as := w.allocsOf("pair"); len(as) != 0 {
				t.Errorf("pair: allocations %+v while gathering, want none (a gang is placed whole)", as)
			}
			ex := explain("pair")
			const holds = "holds the GPUs of 1 of its 2 allocations"
			if ex.Engine == nil || ex.Engine.Status != "reserved" || ex.Engine.Gathered != 1 || !strings.Contains(ex.Reason, holds) {
				t.Errorf("pair while gathering: %s; want engine status reserved, gathered 1, reason saying it %s", ex, holds)
			}
			t.Logf("pair while gathering: %s", ex)
			t.Logf("small behind it: %s", explain("small"))
			t.Logf("scav behind it: %s", explain("scav"))
			out, err := exec.Command(w.impact, "explain", "-address", w.apiURL, "pair").CombinedOutput()
			if err != nil || !strings.Contains(string(out), holds) {
				t.Errorf("impact explain pair: %v; want it to say it %s:\n%s", err, holds, out)
			}
			t.Logf("impact explain pair:\n%s", out)

			// pair takes both nodes as soon as long's GPUs are free in the
			// model, so there is no moment with all 16 free to wait for.
			stopped := time.Now()
			if out, err := w.nomad("job", "stop", "-detach", "long"); err != nil {
				t.Fatalf("stop long: %v\n%s", err, out)
			}
			ps := exactGPUs(t, c.Agent, w.apiURL, envDir, "pair", 2)
			t.Logf("pair running %s after long was stopped", time.Since(stopped).Round(100*time.Millisecond))
			got := map[string]int{}
			for _, p := range ps {
				got[p.node] = len(p.allocated)
			}
			if got[node0.ID] != 8 || got[node1.ID] != 8 {
				t.Errorf("pair's GPUs by node %v, want 8 on client-0 (%s) and 8 on client-1 (%s)", got, node0.ID, node1.ID)
			}
			as := w.allocs("pair")
			if len(as) != 2 || as[0].EvalID != as[1].EvalID {
				t.Errorf("pair: allocations %+v, want exactly two, from one evaluation (admitted whole)", as)
			}
			for _, id := range []string{"small", "scav"} {
				if as := w.allocsOf(id); len(as) != 0 {
					t.Errorf("%s: allocations %+v, want none (pair holds all 16 GPUs)", id, as)
				}
			}
			noRollbacks(t, w.apiURL)
			if t.Failed() {
				t.Logf("impact agent output (tail):\n%s", w.impactProc.Output())
			}
		})
	}
}
