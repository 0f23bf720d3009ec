package agent

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

func TestAllocSamples(t *testing.T) {
	n := utilNomad(t)
	if err := n.store.UpsertAlloc(&cluster.Alloc{ID: "al-2", JobID: "default/x", NodeID: "node-b",
		GPUs: []string{"node-b-gpu0", "node-b-gpu1"}}); err != nil {
		t.Fatal(err)
	}
	got := allocSamples(n.store.Snapshot(), []GPUStat{
		{NodeID: "node-a", DeviceID: "node-a-gpu0", Utilization: 10},
		{NodeID: "node-a", DeviceID: "node-a-gpu1", Utilization: 30},
		{NodeID: "node-b", DeviceID: "node-b-gpu0", Utilization: 0},
		// node-b-gpu1 has no stats: al-2 is unknown, never idle.
	})
	want := []engine.AllocUtilization{
		{AllocID: "al-1", JobID: "default/other", GPUs: 2, Percent: 20},
		{AllocID: "al-2", JobID: "default/x", GPUs: 2, Percent: -1},
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	// A GPU whose stats say "unknown" is missing too.
	got = allocSamples(n.store.Snapshot(), []GPUStat{
		{NodeID: "node-a", DeviceID: "node-a-gpu0", Utilization: 0},
		{NodeID: "node-a", DeviceID: "node-a-gpu1", Utilization: -1},
	})
	if got[0].Percent != -1 {
		t.Fatalf("unknown utilisation counted: %+v", got[0])
	}
}

// idleAgent runs an agent over one 4-GPU node whose GPUs all report
// utilisation util (a function the test may change), on a test clock that
// each poll advances by a minute.
func idleAgent(t *testing.T, pol string) (*fakeNomad, *Agent, *scriptedStats, *testClock, *fakeExec) {
	t.Helper()
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-a", 4, 1, "gpu")
	p, err := policy.LoadBytes([]byte(pol), "idle.hcl")
	if err != nil {
		t.Fatal(err)
	}
	src := &scriptedStats{calls: make(chan []string, 1)}
	src.set(func([]string) ([]GPUStat, map[string]error) { return nil, nil })
	ex := &fakeExec{n: n, agent: "a1"}
	opts := fakeOptions(t, n, ex, clk.Now)
	opts.Policy, opts.Utilization, opts.StatsInterval = p, src, 2*time.Millisecond
	a := runTestAgent(t, opts)
	return n, a, src, clk, ex
}

func (e *fakeExec) plansSeen() []*engine.Plan {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*engine.Plan(nil), e.plans...)
}

// zeroStats reports every GPU of node-a at util percent, advancing the
// clock a minute per poll.
func zeroStats(clk *testClock, util float64) func([]string) ([]GPUStat, map[string]error) {
	return func([]string) ([]GPUStat, map[string]error) {
		clk.Advance(time.Minute)
		var out []GPUStat
		for i := range 4 {
			out = append(out, GPUStat{NodeID: "node-a", DeviceID: "node-a-gpu" + strconv.Itoa(i), Utilization: util})
		}
		return out, nil
	}
}

func metricValue(out, series string) (float64, bool) {
	m := regexp.MustCompile(regexp.QuoteMeta(series) + ` ([0-9.e+-]+)`).FindStringSubmatch(out)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}

// The report action: a running job whose GPUs sit at 0% is shown idle in
// the queue, its explanation and the metrics; nothing is done to it.
func TestIdleJobReported(t *testing.T) {
	n, a, src, clk, _ := idleAgent(t, "idle {\n  duration = \"10m\"\n}\n")
	n.submit("lazy", map[string]string{"impact_tier": "scavenger"}, cluster.TaskGroup{Name: "main", Count: 1, GPUs: 4})
	id := cluster.JobKey("default", "lazy")
	waitFor(t, "admitted", func() bool { st, _ := n.jobState(id); return st == cluster.JobRunning })
	src.set(zeroStats(clk, 0))
	waitFor(t, "idle shown", func() bool {
		e, ok := a.Explain("default", "lazy")
		return ok && e.Idle && e.Utilization != nil && *e.Utilization == 0 && e.IdleSeconds >= 600
	})
	e, _ := a.Explain("default", "lazy")
	if e.Hung != true || e.IdleAction != "report" || !strings.Contains(e.IdleNote, "reported only") || e.State != agentapi.StateRunning {
		t.Fatalf("explanation %+v", e)
	}
	// The job's Variable says it, without the idle time that grows.
	items := VariableItems(e, "")
	if items["idle"] != "hung" || items["idle_since"] == "" || !strings.Contains(items["idle_note"], "reported only") ||
		!strings.Contains(items["summary"], "hung") {
		t.Fatalf("variable items %v", items)
	}
	out := scrape(t, a)
	if v, ok := metricValue(out, `impact_job_idle_seconds{job="default/lazy"}`); !ok || v < 600 {
		t.Fatalf("impact_job_idle_seconds = %v, %v", v, ok)
	}
	if v, ok := metricValue(out, `impact_idle_gpus{pool="gpu"}`); !ok || v != 4 {
		t.Fatalf("impact_idle_gpus = %v, %v", v, ok)
	}
	// Busy again: no longer idle, the gauges follow.
	src.set(zeroStats(clk, 80))
	waitFor(t, "busy again", func() bool {
		e, _ := a.Explain("default", "lazy")
		out := scrape(t, a)
		v, _ := metricValue(out, `impact_idle_gpus{pool="gpu"}`)
		return !e.Idle && e.Utilization != nil && *e.Utilization == 80 && v == 0
	})
	if st, _ := n.jobState(id); st != cluster.JobRunning || n.stops[id] != 0 {
		t.Fatalf("report action acted: state %v stops %d", st, n.stops[id])
	}
	// Missing stats: unknown, not idle, and no idle series for the job.
	src.set(func([]string) ([]GPUStat, map[string]error) {
		clk.Advance(time.Minute)
		return nil, map[string]error{"node-a": errors.New("timeout")}
	})
	waitFor(t, "unknown utilisation", func() bool {
		e, _ := a.Explain("default", "lazy")
		_, has := metricValue(scrape(t, a), `impact_job_idle_seconds{job="default/lazy"}`)
		return e.Utilization == nil && !e.Idle && !has
	})
}

// The requeue action through the agent: a hung job is stopped with its
// checkpoint signal and queued again, then, past max_requeues, stopped
// for good with the reason in its explanation.
func TestHungJobRequeuedThenStopped(t *testing.T) {
	n, a, src, clk, ex := idleAgent(t, `
tier "scavenger" {
  idle {
    action       = "requeue"
    duration     = "5m"
    max_requeues = 1
  }
}
`)
	src.set(zeroStats(clk, 0))
	n.submit("stuck", map[string]string{"impact_tier": "scavenger", "impact_checkpoint_signal": "SIGUSR1", "impact_walltime": "10h"},
		cluster.TaskGroup{Name: "main", Count: 1, GPUs: 4})
	id := cluster.JobKey("default", "stuck")
	waitFor(t, "requeued and admitted again", func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.registers[id] >= 2
	})
	waitFor(t, "stopped for good", func() bool { _, ok := n.jobState(id); return !ok })
	n.mu.Lock()
	sigs, stops := n.signals[id], n.stops[id]
	n.mu.Unlock()
	if len(sigs) != 2 || sigs[0] != "SIGUSR1" || stops != 2 {
		t.Fatalf("signals %v stops %d", sigs, stops)
	}
	// The plans carried the reclaims with their reasons: queued again
	// once, then stopped for good.
	var reasons []string
	for _, p := range ex.plansSeen() {
		for _, r := range p.Reclaims {
			if r.JobID == id {
				reasons = append(reasons, r.Reason)
			}
		}
	}
	if len(reasons) != 2 || !strings.Contains(reasons[0], "queued again (requeue 1 of 1)") ||
		!strings.Contains(reasons[1], "left stopped (requeued 1 times, max_requeues 1)") {
		t.Fatalf("reclaim reasons %q", reasons)
	}
	if v, ok := metricValue(scrape(t, a), "impact_idle_reclaimed_gpu_hours_total"); !ok || v <= 0 || v > 2*4*10 {
		t.Fatalf("impact_idle_reclaimed_gpu_hours_total = %v, %v", v, ok)
	}
}
