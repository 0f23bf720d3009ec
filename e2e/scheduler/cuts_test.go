package scheduler

// TestCutUndone: a preemption that cuts the pool is undone in shape when
// its preemptor ends (scheduler/engine/cuts.go), on a real Nomad (one
// server, one client process with 8 fake GPUs).
//
// The node is full of scavenger jobs: eight of 1 GPU ("cut"), or six of 1
// GPU and one of 2 ("shape"). A critical job of 2 GPUs ("urgent")
// preempts its way in: it takes two 1-GPU jobs' GPUs (a cut: a 2-GPU block
// where there were single GPUs), or the 2-GPU job's (its own shape: no
// cut). While it runs, a high-tier job of 2 GPUs ("wide") and two
// normal-tier jobs of 1 GPU ("narrow1", "narrow2") arrive; none may
// preempt, so they wait. Then urgent is stopped. With the cut, its 2 GPUs
// go to the two narrow jobs, though wide is ahead of them in the queue,
// and the agent counts the 2 GPUs it kept for them
// (impact_preemption_cut_gpus_kept_total); without it, wide takes them
// and nothing is counted. Checked against Nomad's own allocations.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestCutUndone(t *testing.T) {
	for _, tc := range []struct {
		name string
		// scavenger GPUs per job filling the node.
		fill []int
		// victims urgent must preempt: their count, and who gets its
		// GPUs once it is stopped.
		victims int
		gets    []string
	}{
		{name: "cut", fill: []int{1, 1, 1, 1, 1, 1, 1, 1}, victims: 2, gets: []string{"narrow1", "narrow2"}},
		{name: "shape", fill: []int{2, 1, 1, 1, 1, 1, 1}, victims: 1, gets: []string{"wide"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := setupGPUCluster(t, "impact-e2e-cut-", 1, `
tier "critical" {
  weight      = 1000
  may_preempt = ["scavenger"]
}
tier "high" {
  weight      = 100
  may_preempt = []
}
tier "normal" {
  weight      = 10
  may_preempt = []
  preemptible = true
}
tier "scavenger" {
  weight      = 1
  preemptible = true
}
backfill {
  enabled      = true
  reservations = 0
}
`, "")
			c := w.c
			envDir := filepath.Join(w.dir, "env")
			if err := os.MkdirAll(envDir, 0o777); err != nil {
				t.Fatal(err)
			}
			var fill []string
			for i, g := range tc.fill {
				name := fmt.Sprintf("s%d", i)
				fill = append(fill, name)
				runHCL(t, c.Agent, w.dir, name, dfJob{name: name, tier: "scavenger", gpus: g}.hcl(envDir))
				w.waitRunningN(name, 1, 120*time.Second)
			}
			rec := recordExplanations(t, c.Agent, w.apiURL, "wide")

			runHCL(t, c.Agent, w.dir, "urgent", dfJob{name: "urgent", tier: "critical", gpus: 2}.hcl(envDir))
			w.waitRunningN("urgent", 1, 120*time.Second)
			var preempted []string
			for _, name := range fill {
				if len(w.running(name)) == 0 {
					preempted = append(preempted, name)
				}
			}
			if len(preempted) != tc.victims {
				t.Fatalf("urgent preempted %v, want %d victim(s) (scavenger GPUs per job %v)", preempted, tc.victims, tc.fill)
			}
			t.Logf("urgent preempted %v", preempted)

			for _, j := range []dfJob{{name: "wide", tier: "high", gpus: 2}, {name: "narrow1", tier: "normal", gpus: 1}, {name: "narrow2", tier: "normal", gpus: 1}} {
				runHCL(t, c.Agent, w.dir, j.name, j.hcl(envDir))
			}
			eventually(t, 60*time.Second, "wide and the narrow jobs waiting", func() (bool, string) {
				var info []string
				ok := true
				for _, id := range []string{"wide", "narrow1", "narrow2"} {
					ex := w.explainEngine(id)
					info = append(info, id+": "+ex.String())
					ok = ok && ex.Engine != nil && ex.Engine.Status == "waiting"
				}
				return ok, strings.Join(info, "; ")
			})

			if out, err := w.nomad("job", "stop", "-detach", "urgent"); err != nil {
				t.Fatalf("stop urgent: %v\n%s", err, out)
			}
			for _, id := range tc.gets {
				w.waitRunningN(id, 1, 120*time.Second)
			}
			waitCycles(t, w.apiURL, 3)
			for _, id := range []string{"wide", "narrow1", "narrow2"} {
				gets := false
				for _, g := range tc.gets {
					gets = gets || g == id
				}
				if as := w.allocsOf(id); !gets && len(as) != 0 {
					t.Errorf("%s: allocations %+v, want none (urgent's GPUs went to %v); explain %s", id, as, tc.gets, w.explainEngine(id))
				}
			}
			// The cycle urgent's GPUs freed in kept them for the narrow
			// jobs: /metrics counts them. wide's explanation said why
			// for that one cycle, which the recorder may or may not
			// catch (the next cycle follows within milliseconds).
			kept := cutGPUsKept(t, w.apiURL)
			if tc.name == "cut" && kept != 2 {
				t.Errorf("impact_preemption_cut_gpus_kept_total = %v, want 2 (urgent's GPUs kept for the narrow jobs)", kept)
			}
			if tc.name == "shape" && kept != 0 {
				t.Errorf("impact_preemption_cut_gpus_kept_total = %v, want 0: urgent cut nothing", kept)
			}
			const why = "go first to jobs no wider than the 1-GPU allocations it preempted"
			seen, found := rec.find("wide", func(e recordedExplain) bool {
				return strings.Contains(e.Reason, why) || e.Engine != nil && strings.Contains(e.Engine.Reason, why)
			})
			if tc.name == "shape" && found {
				t.Errorf("wide told %q, but urgent cut nothing", seen.Reason)
			}
			if found {
				t.Logf("wide, in the cycle urgent's GPUs freed: %s", seen.Reason)
			}
			noRollbacks(t, w.apiURL)
			if t.Failed() {
				t.Logf("impact agent output (tail):\n%s", w.impactProc.Output())
			}
		})
	}
}

// cutGPUsKept reads impact_preemption_cut_gpus_kept_total from the
// agent's /metrics (0 when absent: nothing counted yet).
func cutGPUsKept(t *testing.T, apiURL string) float64 {
	t.Helper()
	v, _ := metricValue(t, apiURL, "impact_preemption_cut_gpus_kept_total")
	return v
}

// metricValue reads one series (its name and labels as /metrics prints
// them) from the agent's /metrics; false when it is absent.
func metricValue(t *testing.T, apiURL, series string) (float64, bool) {
	t.Helper()
	var text string
	if err := getAPI(apiURL, "/metrics", &text); err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s %q: %v", series, v, err)
			}
			return f, true
		}
	}
	return 0, false
}
