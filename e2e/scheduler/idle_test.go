package scheduler

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// idlePolicy (added to the suite's policy) makes scavenger jobs
// non-preemptible except when idle (preemptible idle action) and requeues
// hung high jobs once, then stops them; idle means below 5% for 10s.
const idlePolicy = `
tier "scavenger" {
  preemptible = false
  idle {
    action   = "preemptible"
    duration = "10s"
  }
}
tier "high" {
  idle {
    action       = "requeue"
    duration     = "10s"
    max_requeues = 1
  }
}
`

// setAllGPUs writes one utilisation for every GPU of the fake backend.
func (e *env) setAllGPUs(t *testing.T, util int) {
	t.Helper()
	f, err := os.OpenFile(e.ctl, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := range 8 {
		if _, err := fmt.Fprintf(f, "stats %d utilization=%d\n", i, util); err != nil {
			t.Fatal(err)
		}
	}
}

type idleEntry struct {
	State       string
	Decision    string
	Reason      string
	Utilization *float64 `json:"utilization_percent"`
	IdleSeconds float64  `json:"idle_seconds"`
	Idle, Hung  bool
	IdleAction  string `json:"idle_action"`
	IdleNote    string `json:"idle_note"`
}

func metricLine(text, series string) (float64, bool) {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}

func (e *env) markerCount(path string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), "checkpoint")
}

// TestIdle: on a real Nomad agent with impact-gpu's fake backend, a
// running scavenger gang whose GPUs are set to 0% through the control file
// is reported idle (explain, queue, metrics); with the preemptible idle
// action a waiting normal job preempts it (it is not preemptible
// otherwise), its checkpoint signal seen; a hung high gang (requeue
// action, max_requeues 1) is stopped with its checkpoint signal and queued
// again, and stopped for good when it hangs again.
func TestIdle(t *testing.T) {
	e := setup(t, false)
	e.policyExtra = idlePolicy
	// Reads open: the test reads explain without a token. (auth.read =
	// "auto" should open them on a Nomad without ACLs, but Nomad 2.0.6
	// answers /v1/acl/token/self without "ACL support disabled" there, so
	// "auto" requires tokens.)
	e.extra = "auth {\n  read = \"open\"\n}\n"
	e.logLevel = "info"
	e.setAllGPUs(t, 90)
	agent := e.startImpact(t)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, l := range strings.Split(agent.Output(), "\n") {
			if strings.Contains(l, "impact.") && !strings.Contains(l, "request refused") && !strings.Contains(l, "cycle decided") {
				t.Log(l)
			}
		}
	})
	// One island held outside the scheduler: one 4-GPU job fits at a time.
	e.run(job{name: "blocker", pool: "default", count: 1, gpus: 4, seconds: 900, marker: filepath.Join(e.dir, "blocker.mark")})
	e.waitRunning(t, "blocker", 60*time.Second)

	idler := filepath.Join(e.dir, "idler.mark")
	e.run(job{name: "idler", tier: "scavenger", pool: "impact-queue", count: 2, gpus: 2, seconds: 900, marker: idler})
	eventually(t, 60*time.Second, "idler gang running", func() (bool, string) {
		return e.runningAllocs("idler") == 2, fmt.Sprintf("%+v", e.allocs("idler"))
	})
	eventually(t, 30*time.Second, "idler busy at 90%", func() (bool, string) {
		var x idleEntry
		err := getAPI(e.apiURL, "/v1/explain/idler", &x)
		return err == nil && x.Utilization != nil && *x.Utilization == 90 && !x.Idle, fmt.Sprintf("%+v %v", x, err)
	})

	t.Run("reported idle", func(t *testing.T) {
		e.setAllGPUs(t, 0)
		var x idleEntry
		eventually(t, 60*time.Second, "idler reported idle", func() (bool, string) {
			err := getAPI(e.apiURL, "/v1/explain/idler", &x)
			return err == nil && x.Idle && x.Hung && x.Utilization != nil && *x.Utilization == 0 && x.IdleSeconds >= 10,
				fmt.Sprintf("%+v %v", x, err)
		})
		t.Logf("explain idler: utilisation %.0f%%, idle %.0fs, hung %v, action %s: %s", *x.Utilization, x.IdleSeconds, x.Hung, x.IdleAction, x.IdleNote)
		var text string
		eventually(t, 30*time.Second, "idle metrics", func() (bool, string) {
			if err := getAPI(e.apiURL, "/metrics", &text); err != nil {
				return false, err.Error()
			}
			secs, ok1 := metricLine(text, `impact_job_idle_seconds{job="default/idler"}`)
			gpus, ok2 := metricLine(text, `impact_idle_gpus{pool="default"}`)
			return ok1 && ok2 && secs >= 10 && gpus == 4, fmt.Sprintf("idle seconds %v %v, idle gpus %v %v", secs, ok1, gpus, ok2)
		})
		secs, _ := metricLine(text, `impact_job_idle_seconds{job="default/idler"}`)
		gpus, _ := metricLine(text, `impact_idle_gpus{pool="default"}`)
		t.Logf("impact_job_idle_seconds{job=\"default/idler\"} %.0f; impact_idle_gpus{pool=\"default\"} %.0f", secs, gpus)
		out, err := exec.Command(e.impact, "queue", "-address", e.apiURL).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "hung") {
			t.Errorf("impact queue does not show the hung gang: %v\n%s", err, out)
		}
		t.Logf("impact queue:\n%s", out)
	})

	t.Run("preemptible: a waiting normal job preempts the idle gang", func(t *testing.T) {
		e.run(job{name: "urgent", tier: "normal", pool: "impact-queue", count: 1, gpus: 4, seconds: 900, marker: filepath.Join(e.dir, "urgent.mark")})
		eventually(t, 90*time.Second, "urgent running", func() (bool, string) {
			return e.runningAllocs("urgent") == 1, fmt.Sprintf("urgent %+v idler %+v", e.allocs("urgent"), e.allocs("idler"))
		})
		if n := e.markerCount(idler); n == 0 {
			t.Errorf("the idle gang did not receive its checkpoint signal")
		}
		eventually(t, 30*time.Second, "idler parked again", func() (bool, string) {
			st := e.job("idler")
			return st.Status == "pending" && st.NodePool == "impact-queue", fmt.Sprintf("%+v", st)
		})
		// The engine logs the decision with the numbers behind it.
		if out := agent.Output(); !strings.Contains(out, "preempting idle job: victim=default/idler preemptor=default/urgent") {
			t.Errorf("no idle preemption in the agent's log")
		} else {
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "preempting idle job") {
					t.Log(strings.TrimSpace(l))
				}
			}
		}
		// Clear the way for the next part.
		for _, id := range []string{"urgent", "idler"} {
			if out, err := e.nomad("job", "stop", id); err != nil {
				t.Fatalf("nomad job stop %s: %v\n%s", id, err, out)
			}
		}
	})

	t.Run("requeue: a hung gang is stopped and queued again, then stopped", func(t *testing.T) {
		stuck := filepath.Join(e.dir, "stuck.mark")
		e.run(job{name: "stuck", tier: "high", pool: "impact-queue", count: 2, gpus: 2, seconds: 900, marker: stuck})
		eventually(t, 120*time.Second, "stuck requeued and admitted again", func() (bool, string) {
			as := e.allocs("stuck")
			var x idleEntry
			err := getAPI(e.apiURL, "/v1/explain/stuck", &x)
			return len(as) >= 4 && e.markerCount(stuck) >= 1, fmt.Sprintf("%d allocations, %d checkpoints: %+v; explain %+v %v", len(as), e.markerCount(stuck), as, x, err)
		})
		t.Logf("stuck: checkpoint signal seen, %d allocations after the requeue", len(e.allocs("stuck")))
		var j struct {
			Stop   bool
			Status string
		}
		eventually(t, 120*time.Second, "stuck stopped for good after hanging again", func() (bool, string) {
			err := e.a.Get("/v1/job/stuck", &j)
			running := e.runningAllocs("stuck")
			return err == nil && j.Stop && running == 0, fmt.Sprintf("%+v running %d %v", j, running, err)
		})
		if n := e.markerCount(stuck); n < 2 {
			t.Errorf("%d checkpoint signals, want one per reclaim (2)", n)
		}
		var text string
		if err := getAPI(e.apiURL, "/metrics", &text); err == nil {
			v, ok := metricLine(text, "impact_idle_reclaimed_gpu_hours_total")
			t.Logf("impact_idle_reclaimed_gpu_hours_total %v (present %v; the jobs declare no walltime, so 0)", v, ok)
		}
		t.Logf("stuck: stop=%v status=%s, %d allocations, %d checkpoint signals", j.Stop, j.Status, len(e.allocs("stuck")), e.markerCount(stuck))
	})
}
