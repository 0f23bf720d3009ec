package scheduler

// TestOutsideStateHeals deletes, under a running impact agent on a real
// Nomad, what the agent keeps there and checks that it is written again
// (issue 39, "reconcile the other outside state", nomad_reconcile.go in
// scheduler/agent): the parking pool (deletable while no job is queued),
// the durable-state Variables (usage, timeline) and the lease; Nomad
// itself refuses to delete the lock while it is held and the parking pool
// while a job waits in it. Each repair is counted in
// impact_nomad_state_repairs_total{what}, and the agent keeps leading.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/e2e/internal/nomadagent"
)

func TestOutsideStateHeals(t *testing.T) {
	c, impact := startGPUClusterWith(t, "impact-e2e-outside-", 1, "")
	e := &lcEnv{c: c, env: &env{t: t, a: c.Agent, dir: c.Dir, impact: impact, logLevel: "info",
		apiURL: fmt.Sprintf("http://127.0.0.1:%d", nomadagent.FreePorts(t, 1)[0])}}
	e.impactProc = e.startImpact(t)
	repairs := func(what string) string {
		return e.metric(fmt.Sprintf(`impact_nomad_state_repairs_total{what=%q}`, what))
	}
	exists := func(path string) bool {
		var v map[string]any
		return e.a.Get(path, &v) == nil
	}

	// The parking pool, with no job in it.
	if out, err := e.nomad("node", "pool", "delete", "impact-queue"); err != nil {
		t.Fatalf("deleting the empty parking pool: %v\n%s", err, out)
	}
	deleted := time.Now()
	eventually(t, 30*time.Second, "the parking pool created again", func() (bool, string) {
		return exists("/v1/node/pool/impact-queue") && repairs("parking_pool") == "1", "repairs " + repairs("parking_pool")
	})
	t.Logf("parking pool back %v after its deletion", time.Since(deleted).Round(10*time.Millisecond))

	// A job goes through the queue again, and Nomad refuses to delete the
	// pool while a job waits in it (a filler holds every GPU).
	runHCL(t, e.a, e.dir, "out-filler", latJob("plain", "out-filler", 8, "", `trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done`))
	e.waitRunningN("out-filler", 8, 60*time.Second)
	runHCL(t, e.a, e.dir, "out-job", latJob("impact", "out-job", 1, "", `trap 'exit 0' TERM; while true; do sleep 1 & wait $!; done`))
	eventually(t, 30*time.Second, "out-job waiting", func() (bool, string) {
		ex := e.explain("out-job")
		return strings.HasPrefix(ex, "waiting/"), ex
	})
	if out, err := e.nomad("node", "pool", "delete", "impact-queue"); err == nil || !strings.Contains(out, "non-terminal jobs") {
		t.Errorf("deleting the parking pool with a job in it: %v\n%s; want Nomad's refusal", err, out)
	}
	if out, err := e.nomad("job", "stop", "-purge", "-detach", "out-filler"); err != nil {
		t.Fatalf("stopping out-filler: %v\n%s", err, out)
	}
	e.waitRunningN("out-job", 1, 60*time.Second)

	// The durable state: usage and the timeline (which now holds out-job).
	eventually(t, 30*time.Second, "usage and timeline saved", func() (bool, string) {
		return exists("/v1/var/impact/state/usage") && exists("/v1/var/impact/state/timeline"), ""
	})
	for _, v := range []string{"impact/state/usage", "impact/state/timeline"} {
		if out, err := e.nomad("var", "purge", v); err != nil {
			t.Fatalf("purging %s: %v\n%s", v, err, out)
		}
	}
	deleted = time.Now()
	eventually(t, 30*time.Second, "usage and timeline written again", func() (bool, string) {
		return exists("/v1/var/impact/state/usage") && exists("/v1/var/impact/state/timeline") &&
			repairs("usage") == "1" && repairs("timeline") == "1", "repairs " + repairs("usage") + " " + repairs("timeline")
	})
	t.Logf("usage and timeline back %v after their deletion", time.Since(deleted).Round(10*time.Millisecond))
	var tl struct{ Items map[string]string }
	if err := e.a.Get("/v1/var/impact/state/timeline", &tl); err != nil || len(tl.Items) == 0 {
		t.Errorf("timeline written again: %+v, %v; want out-job's history", tl, err)
	}

	// The lease; the lock itself cannot be deleted while held.
	if out, err := e.nomad("var", "purge", "impact/leader"); err == nil {
		t.Errorf("Nomad deleted the held leader lock:\n%s", out)
	}
	if out, err := e.nomad("var", "purge", "impact/leader/lease"); err != nil {
		t.Fatalf("purging the lease: %v\n%s", err, out)
	}
	deleted = time.Now()
	eventually(t, 30*time.Second, "the lease written again", func() (bool, string) {
		var l struct{ Items map[string]string }
		err := e.a.Get("/v1/var/impact/leader/lease", &l)
		return err == nil && l.Items["holder"] == "e2e" && repairs("lease") == "1", fmt.Sprintf("%+v %v", l, err)
	})
	t.Logf("lease back %v after its deletion", time.Since(deleted).Round(10*time.Millisecond))
	var h health
	if err := getAPI(e.apiURL, "/v1/health", &h); err != nil || !h.Leader || h.Status != "ok" {
		t.Errorf("health %+v, %v after the repairs; want ok and leading", h, err)
	}
	if got := e.metric("impact_leader"); got != "1" {
		t.Errorf("impact_leader %q; want 1 (no step-down)", got)
	}
}
