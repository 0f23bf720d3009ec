package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
)

// A gang's whole life against the fake, with the example job's lifecycle
// blocks (`restart { attempts = 0 mode = "fail" }`, `reschedule {
// attempts = 0 }`): a member that dies leaves Nomad nothing to do (the
// job is dead), so only the scheduler can bring the gang back.

// submitNoRestart registers a job like submit, with the example's
// restart and reschedule blocks.
func (c *fakeCluster) submitNoRestart(id string, meta map[string]string, count, gpus int) {
	c.t.Helper()
	job := map[string]any{
		"ID": id, "Name": id, "Type": "batch", "Namespace": "default", "Region": "global", "Priority": 50,
		"NodePool": "impact-queue", "Meta": meta,
		"TaskGroups": []any{map[string]any{
			"Name": "g", "Count": count,
			"RestartPolicy":    map[string]any{"Attempts": 0, "Mode": "fail", "Interval": int64(24 * time.Hour), "Delay": int64(time.Second)},
			"ReschedulePolicy": map[string]any{"Attempts": 0, "Unlimited": false},
			"Tasks": []any{map[string]any{
				"Name": "trainer", "Driver": "raw_exec",
				"Resources": map[string]any{"Devices": []any{map[string]any{"Name": "nvidia/gpu", "Count": gpus}}},
			}},
		}},
	}
	body, _ := json.Marshal(map[string]any{"Job": job})
	resp, err := http.Post(c.fake.URL()+"/v1/jobs", "application/json", bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		c.t.Fatalf("register %s: HTTP %d", id, resp.StatusCode)
	}
}

// runningWhole waits until the job runs count members with its
// admission settled, and returns their allocation IDs.
func (c *fakeCluster) runningWhole(id string, count int, what string) []string {
	c.t.Helper()
	var ids []string
	eventuallyT(c.t, 20*time.Second, what, func() (bool, string) {
		ids = ids[:0]
		for _, a := range c.fake.Allocations(id) {
			if a.ClientStatus == "running" && a.DesiredStatus == "run" {
				ids = append(ids, a.ID)
			}
		}
		v := c.fake.Variable("impact/state/intents/default/" + id)
		return len(ids) == count && v == nil, fmt.Sprintf("%d running, intent %v", len(ids), v)
	})
	return ids
}

// One member killed (exit 137), the survivor checkpoints and exits 75, as
// impact-exec stops a gang together: both allocations fail, the job is
// dead. The gang is requeued whole and runs again; the job's durable
// record counts the run; explain said "requeued" and why. Before, the
// dead job left the model and was never requeued.
func TestFakeNomadDeadGangRequeuedWhole(t *testing.T) {
	c := newFakeCluster(t, 2, 1, 4)
	c.ensurePool()
	c.submitNoRestart("train", map[string]string{"impact_tier": "high", "impact_checkpoint_signal": "SIGUSR1", "impact_grace": "30s"}, 2, 4)
	s := c.start("a1")
	first := c.runningWhole("train", 2, "first run whole")
	if err := c.fake.ExitTasks(first[0], 137); err != nil {
		t.Fatal(err)
	}
	if err := c.fake.ExitTasks(first[1], 75); err != nil {
		t.Fatal(err)
	}
	if st := *c.fake.Job("train").Status; st != "dead" {
		t.Fatalf("job %s after both members failed, want dead", st)
	}
	var sawRequeued string
	eventuallyT(t, 20*time.Second, "requeued whole and running again", func() (bool, string) {
		ex, _ := s.api.Explain(context.Background(), "default", "train")
		if ex.Decision == DecisionRequeued && sawRequeued == "" {
			sawRequeued = ex.Reason
		}
		return c.running("train") == 2 && c.pool("train") == "gpu", fmt.Sprintf("running %d pool %s; explain %s/%s: %s", c.running("train"), c.pool("train"), ex.State, ex.Decision, ex.Reason)
	})
	for _, a := range c.fake.Allocations("train") {
		if (a.ID == first[0] || a.ID == first[1]) && a.ClientStatus == "running" {
			t.Errorf("first run's %s running beside the new one", a.ID)
		}
	}
	if body := scrape(t, s.svc.Agent); !strings.Contains(body, "impact_gangs_requeued_total 1") {
		t.Errorf("metrics do not count one gang requeue")
	}
	if sawRequeued == "" {
		ex, _ := s.api.Explain(context.Background(), "default", "train")
		for _, h := range ex.History {
			if h.Decision == DecisionRequeued {
				sawRequeued = h.Summary
			}
		}
	}
	if !strings.Contains(sawRequeued, "exited 137") && !strings.Contains(sawRequeued, "lost a member") {
		t.Errorf("explain never said the gang was requeued and why (saw %q)", sawRequeued)
	}
	eventuallyT(t, 5*time.Second, "durable gang record", func() (bool, string) {
		v := c.fake.Variable("impact/state/gang-requeues")
		return v != nil && strings.HasPrefix(v["default~2ftrain"], "1@"), fmt.Sprint(v)
	})
}

// impact_on_failure = "fail": the first lost member ends the job failed
// (deregistered, not purged), and explain says so and why after it left
// the model.
func TestFakeNomadOnFailureFailEndsFailed(t *testing.T) {
	c := newFakeCluster(t, 2, 1, 4)
	c.ensurePool()
	c.submitNoRestart("once", map[string]string{"impact_tier": "high", "impact_on_failure": "fail"}, 2, 4)
	s := c.start("a1")
	ids := c.runningWhole("once", 2, "running whole")
	if err := c.fake.ExitTasks(ids[0], 1); err != nil {
		t.Fatal(err)
	}
	eventuallyT(t, 20*time.Second, "ended failed", func() (bool, string) {
		j := c.fake.Job("once")
		ex, err := s.api.Explain(context.Background(), "default", "once")
		return j != nil && j.Stop != nil && *j.Stop && c.running("once") == 0 && err == nil && ex.State == agentapi.StateFailed,
			fmt.Sprintf("stop %v running %d; explain %s: %s (%v)", j != nil && *j.Stop, c.running("once"), ex.State, ex.Reason, err)
	})
	ex, _ := s.api.Explain(context.Background(), "default", "once")
	if !strings.Contains(ex.Reason, "exited 1") || !strings.Contains(ex.Reason, "ended failed") {
		t.Errorf("explain reason %q does not say how the member ended and that the job ended failed", ex.Reason)
	}
	body := scrape(t, s.svc.Agent)
	if !strings.Contains(body, "impact_gangs_failed_total 1") || !strings.Contains(body, "impact_gangs_requeued_total 0") {
		t.Errorf("metrics: want one gang failed, none requeued")
	}
}

// A lost member's node back inside the grace: Nomad's blocked evaluation
// places a replacement there with no PreviousAllocation. It is recognised,
// stopped before anything else (never signalled, never left running
// beside the members of the run it does not belong to), and the gang is
// requeued whole at once and runs again. Before, the replacement was
// taken for a member: the gang looked whole with a member restarted from
// scratch.
func TestFakeNomadNodeBackInsideGraceNoMemberTwice(t *testing.T) {
	c := newFakeCluster(t, 2, 1, 4)
	c.fake.SetExitOnSignal(true) // the survivor checkpoints and exits 75
	c.fake.SetSignalExitCode(75)
	c.ensurePool()
	c.submit("g2", map[string]string{"impact_tier": "high", "impact_checkpoint_signal": "SIGUSR1", "impact_grace": "30s"}, 2, 4)
	s := c.start("a1")
	first := c.runningWhole("g2", 2, "running whole")
	var lostNode string
	for _, a := range c.fake.Allocations("g2") {
		if a.ID == first[0] {
			lostNode = a.NodeID
		}
	}
	// Watch, from now on, for two live allocations with one name.
	var mu sync.Mutex
	var twice []string
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			seen := map[string]string{}
			for _, a := range c.fake.Allocations("g2") {
				if a.ClientStatus != "running" || a.DesiredStatus != "run" {
					continue
				}
				if other, ok := seen[a.Name]; ok {
					mu.Lock()
					twice = append(twice, a.Name+": "+other+" and "+a.ID)
					mu.Unlock()
				}
				seen[a.Name] = a.ID
			}
		}
	}()
	if err := c.fake.SetNodeStatus(lostNode, "down", false); err != nil {
		t.Fatal(err)
	}
	if err := c.fake.SetNodeStatus(lostNode, "ready", true); err != nil {
		t.Fatal(err)
	}
	var repl string
	for _, a := range c.fake.Allocations("g2") {
		if a.NodeID == lostNode && a.ID != first[0] && a.PreviousAllocation == "" && a.DesiredStatus == "run" {
			repl = a.ID
		}
	}
	if repl == "" {
		t.Fatal("the fake placed no unlinked replacement on the node back")
	}
	eventuallyT(t, 20*time.Second, "requeued whole and running again", func() (bool, string) {
		ids := map[string]bool{}
		for _, a := range c.fake.Allocations("g2") {
			if a.ClientStatus == "running" && a.DesiredStatus == "run" {
				ids[a.ID] = true
			}
		}
		ex, _ := s.api.Explain(context.Background(), "default", "g2")
		return len(ids) == 2 && !ids[repl] && !ids[first[1]] && c.pool("g2") == "gpu",
			fmt.Sprintf("running %v; explain %s: %s", ids, ex.State, ex.Reason)
	})
	close(stop)
	<-done
	for _, r := range c.fake.Signals() {
		if r.AllocID == repl {
			t.Errorf("the replacement %s was signalled: it should have been stopped first", repl)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(twice) > 0 {
		t.Errorf("a member ran twice: %v", twice[0])
	}
	if body := scrape(t, s.svc.Agent); !strings.Contains(body, "impact_gangs_requeued_total 1") {
		t.Errorf("metrics do not count one gang requeue")
	}
}

// A preempted job that checkpoints and exits 75, under restart attempts
// 0, is dead until the executor sees it ended (it polls every second)
// and parks it. It stays in the model meanwhile, so its history,
// "Preempted by" and outcome survive: explain of the waiting job still
// shows it ran and was preempted. Before, it left the model at the next
// cycle (every 200ms here) and its timeline started over.
func TestFakeNomadPreemptedHistorySurvivesRequeue(t *testing.T) {
	c := newFakeCluster(t, 1, 1, 4)
	c.ensurePool()
	s := c.start("a1")
	eventuallyT(t, 5*time.Second, "leader", func() (bool, string) { return s.svc.Agent.IsLeader(), "" })
	c.submitNoRestart("sweep", map[string]string{"impact_tier": "scavenger", "impact_checkpoint_signal": "SIGUSR1", "impact_grace": "30s"}, 1, 4)
	ids := c.runningWhole("sweep", 1, "scavenger running")
	eventuallyT(t, 5*time.Second, "scavenger's history shows it running", func() (bool, string) {
		ex, _ := s.api.Explain(context.Background(), "", "sweep")
		return ex.State == agentapi.StateRunning, ex.State
	})
	time.Sleep(1100 * time.Millisecond) // past the policy's min runtime
	c.submit("incident", map[string]string{"impact_tier": "critical"}, 1, 4)
	eventuallyT(t, 10*time.Second, "checkpoint signal", func() (bool, string) { return len(c.fake.Signals()) > 0, "" })
	exited := time.Now()
	if err := c.fake.ExitTasks(ids[0], 75); err != nil {
		t.Fatal(err)
	}
	if st := *c.fake.Job("sweep").Status; st != "dead" {
		t.Fatalf("job %s, want dead", st)
	}
	eventuallyT(t, 20*time.Second, "critical running, scavenger parked", func() (bool, string) {
		return c.running("incident") == 1 && c.pool("sweep") == "impact-queue", fmt.Sprintf("incident=%d pool(sweep)=%s", c.running("incident"), c.pool("sweep"))
	})
	eventuallyT(t, 10*time.Second, "explain of the parked scavenger keeps its history", func() (bool, string) {
		ex, err := s.api.Explain(context.Background(), "", "sweep")
		ran := false
		for _, h := range ex.History {
			ran = ran || (h.State == agentapi.StateRunning && h.At.Before(exited))
		}
		// The first submit time too: parking set a new one (Since).
		first := !ex.Submitted.IsZero() && ex.Submitted.Before(exited) && ex.Since.After(ex.Submitted)
		return err == nil && ex.State == agentapi.StateWaiting && ex.PreemptedBy == "default/incident" && ran && first,
			fmt.Sprintf("%s preempted by %q, submitted %v since %v, history %+v (%v)", ex.State, ex.PreemptedBy, ex.Submitted, ex.Since, ex.History, err)
	})
	var body string
	eventuallyT(t, 10*time.Second, "preemption outcome counted as requeued", func() (bool, string) {
		body = scrape(t, s.svc.Agent)
		return strings.Contains(body, `impact_preemption_outcomes_total{outcome="requeued"} 1`), ""
	})
	if !strings.Contains(body, "impact_gangs_requeued_total 0") {
		t.Errorf("a preemption counted as a gang requeue")
	}
}
