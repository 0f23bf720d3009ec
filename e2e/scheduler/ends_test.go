package scheduler

// TestTopTierWeighsNaturalEnds: the policy's preemption weigh_ends on a
// real two-node Nomad cluster (one server, two client processes, each 8
// fake GPUs of its own).
//
// Sixteen batch jobs of one 1-GPU allocation each ("done-0".."done-15")
// run to their end: 16 ends of work ending on its own in the last hour,
// which the agent learns from Nomad's allocation updates. Then a
// scavenger job of 8 GPUs fills each node ("s0", "s1"; a 5 minute grace,
// a checkpoint every 10 seconds, so preempting one loses little), and a
// critical job of 1 GPU ("crit") arrives, in a project of so small a
// weight that preempting is worth about twice what it costs.
//
// With weigh_ends (the default), 16 ends in the last hour make it likely
// (about 74%) that another end frees a GPU before a victim's 5 minute
// grace is over, so the preemption would save a wait worth less than its
// cost: crit waits (holding the reservation the agent's default policy
// gives the queue's blocked head), says so, and preempts nothing: neither
// is told to checkpoint; when s0 ends (stopped here), crit starts on its
// node. With weigh_ends = false (the control) crit preempts one of them
// at once: it is told to checkpoint (its 5 minute grace then runs). So
// it does with weigh_ends when the 16 GPUs were freed by one job of 16
// allocations ending together ("done", count 16): one end in the hour,
// an 8% chance of another within the grace.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
)

func TestTopTierWeighsNaturalEnds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		weigh bool
		// gang: the 16 ends are one job's, not 16 jobs'.
		gang bool
	}{
		{"weigh_ends", true, false},
		{"weigh_ends, the ends one job's", true, true},
		{"weigh_ends off", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, envDir, nodes := twoNodes(t, "impact-e2e-ends-", `
project "lab" {
  weight = 0.0003
}
`, func(e *env) {
				if !tc.weigh {
					e.preemptionExtra = "  weigh_ends = false\n"
				}
			})
			c := w.c
			explain := w.explainEngine

			done := []string{"done"}
			if tc.gang {
				runHCL(t, c.Agent, w.dir, "done", parkedJob{name: "done", meta: map[string]string{"impact_tier": "normal"},
					count: 16, gpus: 1, script: "exit 0"}.hcl())
			} else {
				done = done[:0]
				for i := range 16 {
					name := fmt.Sprintf("done-%d", i)
					done = append(done, name)
					runHCL(t, c.Agent, w.dir, name, parkedJob{name: name, meta: map[string]string{"impact_tier": "normal"},
						count: 1, gpus: 1, script: "exit 0"}.hcl())
				}
			}
			eventually(t, 120*time.Second, "16 allocations complete", func() (bool, string) {
				n := 0
				for _, name := range done {
					for _, a := range w.allocsOf(name) {
						if a.ClientStatus == "complete" {
							n++
						}
					}
				}
				return n == 16, explain(done[0]).String()
			})
			w.fillWithScavengers(envDir, nodes, "5m")
			runHCL(t, c.Agent, w.dir, "crit", dfJob{name: "crit", tier: "critical", gpus: 1, project: "lab"}.hcl(envDir))
			signalled := func() []string { return w.signalled(envDir, "s0", "s1") }
			if !tc.weigh || tc.gang {
				eventually(t, 60*time.Second, "crit preempting one scavenger job, which is told to checkpoint", func() (bool, string) {
					ex := explain("crit")
					return ex.Engine != nil && ex.Engine.Status == "preempting" && len(signalled()) == 1, fmt.Sprintf("%s; signalled %v", ex, signalled())
				})
				t.Logf("crit: %s", explain("crit"))
				noRollbacks(t, w.apiURL)
				return
			}
			eventually(t, 60*time.Second, "crit waiting for running work to end", func() (bool, string) {
				ex := explain("crit")
				// Waiting, or holding the reservation the agent's default
				// policy gives the queue's blocked head.
				return ex.Engine != nil && (ex.Engine.Status == "waiting" || ex.Engine.Status == "reserved") &&
					strings.Contains(ex.Reason, "ending on its own is likely"), ex.String()
			})
			t.Logf("crit: %s", explain("crit"))
			waitCycles(t, w.apiURL, 3)
			for _, id := range []string{"s0", "s1"} {
				if rs := w.running(id); len(rs) != 1 {
					t.Fatalf("%s: running %+v, want it left running (crit waits for an end instead)", id, rs)
				}
			}
			if as := w.allocsOf("crit"); len(as) != 0 {
				t.Fatalf("crit: allocations %+v before anything ended", as)
			}
			if s := signalled(); len(s) != 0 {
				t.Fatalf("%v told to checkpoint: crit preempted", s)
			}
			ended := time.Now()
			if out, err := w.nomad("job", "stop", "-detach", "s0"); err != nil {
				t.Fatalf("stop s0: %v\n%s", err, out)
			}
			r := w.waitRunningN("crit", 1, 120*time.Second)[0]
			t.Logf("crit running on %s %s after s0 was stopped", r.NodeID, time.Since(ended).Round(100*time.Millisecond))
			if r.NodeID != nodes[0].ID {
				t.Errorf("crit runs on %s, want %s (s0's node)", r.NodeID, nodes[0].ID)
			}
			if rs := w.running("s1"); len(rs) != 1 {
				t.Errorf("s1: running %+v, want it never preempted", rs)
			}
			noRollbacks(t, w.apiURL)
			if t.Failed() {
				t.Logf("impact agent output (tail):\n%s", w.impactProc.Output())
			}
		})
	}
}

// TestPreemptionWithdrawn: a preemption whose preemptor started on GPUs
// that freed meanwhile is withdrawn within its victim's grace, on a real
// two-node Nomad cluster (one server, two client processes, each 8 fake
// GPUs of its own).
//
// A scavenger job of 8 GPUs fills each node ("s0", "s1"; a minute's
// grace; its tasks note the checkpoint signal and run on), and a
// critical job of 1 GPU ("crit") arrives with weigh_ends off: it
// preempts one of them at once, which is told to checkpoint. Then the
// other ends (stopped here, as work ending on its own): crit starts on
// its node, and the engine withdraws the preemption it no longer needs.
// The victim runs on past the grace it would have had, never parked or
// stopped; impact explain says why, and the agent counts the outcome
// withdrawn.
func TestPreemptionWithdrawn(t *testing.T) {
	w, envDir, nodes := twoNodes(t, "impact-e2e-withdraw-", "", func(e *env) {
		e.preemptionExtra = "  weigh_ends = false\n"
	})
	c := w.c
	explain := w.explainEngine
	w.fillWithScavengers(envDir, nodes, "1m")
	runHCL(t, c.Agent, w.dir, "crit", dfJob{name: "crit", tier: "critical", gpus: 1}.hcl(envDir))
	signalled := func() []string { return w.signalled(envDir, "s0", "s1") }
	eventually(t, 60*time.Second, "crit preempting one scavenger job, which is told to checkpoint", func() (bool, string) {
		ex := explain("crit")
		return ex.Engine != nil && ex.Engine.Status == "preempting" && len(signalled()) == 1, fmt.Sprintf("%s; signalled %v", ex, signalled())
	})
	signalledAt := time.Now()
	victim, other, otherNode := "s0", "s1", nodes[1].ID
	if signalled()[0] == "s1" {
		victim, other, otherNode = "s1", "s0", nodes[0].ID
	}
	victimAlloc := w.running(victim)[0].ID
	if out, err := w.nomad("job", "stop", "-detach", other); err != nil {
		t.Fatalf("stop %s: %v\n%s", other, err, out)
	}
	r := w.waitRunningN("crit", 1, 120*time.Second)[0]
	t.Logf("crit running on %s %s after the preemption of %s", r.NodeID, time.Since(signalledAt).Round(100*time.Millisecond), victim)
	if r.NodeID != otherNode {
		t.Fatalf("crit runs on %s, want %s (%s's node)", r.NodeID, otherNode, other)
	}
	eventually(t, 60*time.Second, "the preemption of "+victim+" withdrawn", func() (bool, string) {
		v := w.metric(`impact_preemption_outcomes_total{outcome="withdrawn"}`)
		return v == "1", "impact_preemption_outcomes_total{outcome=\"withdrawn\"} = " + v
	})
	// Past the grace it had (the wait is for that instant, not for a
	// condition): still the same allocation, running, not requeued.
	time.Sleep(time.Until(signalledAt.Add(time.Minute + 15*time.Second)))
	rs := w.running(victim)
	if len(rs) != 1 || rs[0].ID != victimAlloc {
		t.Errorf("%s: running %+v, want its allocation %s running on past its grace", victim, rs, victimAlloc)
	}
	if ex := explain(victim); ex.State != "running" || !strings.Contains(ex.Reason, "withdrawn") {
		t.Errorf("%s: %s, want running, its reason saying its preemption was withdrawn", victim, ex)
	}
	for _, v := range []string{"stopped", "requeued", "completed"} {
		if n := w.metric(`impact_preemption_outcomes_total{outcome="` + v + `"}`); n != "" && n != "0" {
			t.Errorf("impact_preemption_outcomes_total{outcome=%q} = %s, want none", v, n)
		}
	}
	noRollbacks(t, w.apiURL)
	if t.Failed() {
		t.Logf("impact agent output (tail):\n%s", w.impactProc.Output())
	}
}

// signalled lists the jobs of ids (dfJob's, writing to envDir) told to
// checkpoint: a preemption's first step (their grace follows).
func (e *lcEnv) signalled(envDir string, ids ...string) []string {
	var out []string
	for _, id := range ids {
		for _, a := range e.allocsOf(id) {
			if b, err := os.ReadFile(filepath.Join(envDir, id+"-"+a.ID+".ckpt")); err == nil && len(b) > 0 {
				out = append(out, id)
			}
		}
	}
	return out
}

// fillWithScavengers runs a scavenger dfJob of 8 GPUs on each of the two
// nodes ("s0", "s1"; a checkpoint every 10 seconds, the grace given) and
// waits until each runs on its node.
func (e *lcEnv) fillWithScavengers(envDir string, nodes []nomadagent.Node, grace string) {
	e.t.Helper()
	for i, n := range nodes[:2] {
		j := dfJob{name: fmt.Sprint("s", i), tier: "scavenger", gpus: 8, node: n.Name, grace: grace, checkpoint: "10s"}
		runHCL(e.t, e.c.Agent, e.dir, j.name, j.hcl(envDir))
		if r := e.waitRunningN(j.name, 1, 120*time.Second)[0]; r.NodeID != n.ID {
			e.t.Fatalf("%s runs on %s, want %s", j.name, r.NodeID, n.ID)
		}
	}
}
