package cli

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/scheduler/agent"
	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

type fixedView struct {
	q agentapi.Queue
	e map[string]agentapi.Explanation
}

func (f fixedView) Health() agentapi.Health { return agentapi.Health{Status: agentapi.StatusOK} }
func (f fixedView) Queue() agentapi.Queue   { return f.q }
func (f fixedView) Explain(ns, job string) (agentapi.Explanation, bool) {
	if ns == "" {
		ns = "default"
	}
	e, ok := f.e[ns+"/"+job]
	return e, ok
}

func testAgent(t *testing.T) string {
	t.Helper()
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	a := agentapi.Entry{Namespace: "default", Job: "train-a", Position: 1, State: agentapi.StateWaiting,
		Tier: "high", Project: "olmo", GPUs: 8, Allocations: 2, Score: 12.5, Since: now.Add(-750 * time.Second),
		WaitSeconds: 750, Reason: "needs 8 GPUs, 4 free", Summary: "Waiting for 8 free GPUs (first in line).",
		WalltimeSeconds: 6 * 3600, ProgressSeconds: 4*3600 + 30*60}
	bad := agentapi.Entry{Namespace: "research", Job: "bad-meta", Position: 0, State: agentapi.StateInvalid,
		Since: now.Add(-time.Minute), WaitSeconds: 60, Errors: []string{`impact_tier "urgent" is not a tier of the policy`}}
	run := agentapi.Entry{Namespace: "default", Job: "eval", State: agentapi.StateRunning, Tier: "normal", Project: "tulu",
		GPUs: 1, Allocations: 1, Since: now.Add(-time.Hour)}
	zero := 0.0
	hung := agentapi.Entry{Namespace: "default", Job: "stuck", State: agentapi.StateRunning, Tier: "scavenger", Project: "tulu",
		GPUs: 8, Allocations: 2, Since: now.Add(-3 * time.Hour), Utilization: &zero, IdleSeconds: 2700, Idle: true, Hung: true,
		IdleAction: "requeue", IdleNote: "hung: every member below 5% for 45m0s"}
	v := fixedView{
		q: agentapi.Queue{GeneratedAt: now, Leader: true, Jobs: []agentapi.Entry{a, bad, run, hung},
			Cluster: agentapi.ClusterSummary{HealthyGPUs: 16, AllocatedGPUs: 12, WaitingJobs: 1, WaitingGPUs: 8}},
		e: map[string]agentapi.Explanation{
			"default/train-a": {Entry: a, GeneratedAt: now, Leader: true, Decision: "wait",
				Engine: &engine.Explanation{JobID: "default/train-a", Position: 1, Status: engine.StatusWaiting,
					Score: policy.Score{Total: 12.5, Tier: 10, FairShare: 2.5}, Reason: "needs 8 GPUs, 4 free",
					Rejected: map[string]int{"fewer than 8 free GPUs": 2}, ReservedUntil: now.Add(time.Hour)},
				History: []agentapi.Event{{At: now.Add(-750 * time.Second), State: "waiting", Decision: "wait", Summary: "Waiting for 8 free GPUs (first in line)."}}},
			"research/bad-meta": {Entry: bad, GeneratedAt: now, Leader: true, Decision: "none"},
			"default/eval": {Entry: run, GeneratedAt: now, Leader: false, Decision: "admit", Nodes: map[string][]string{"w": {"node-1", "node-2"}},
				Engine: &engine.Explanation{JobID: "default/eval", Status: engine.StatusAdmitted, Victims: []string{"default/sweep"},
					Placement: []engine.GroupPlacement{{Group: "w", Allocs: []engine.AllocPlacement{{NodeID: "node-1",
						GPUs: []string{"GPU-a", "GPU-b", "GPU-c"}, Islands: []int{0, 0, 1},
						Blocks: []engine.BlockPlacement{{Task: "t", Index: 0, GPUs: []string{"GPU-a", "GPU-b", "GPU-c"}}}}}}},
					Warnings: []string{"group \"w\" task \"t\" has 2 GPU device blocks"}}},
		},
	}
	srv := httptest.NewServer(agent.NewHandler(v, agent.HandlerOptions{}, hclog.NewNullLogger()))
	t.Cleanup(srv.Close)
	return srv.URL
}

func run(cmd Command, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := cmd.Run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func noEnv(string) string { return "" }

func TestQueueTable(t *testing.T) {
	addr := testAgent(t)
	code, out, errs := run(queueCmd(noEnv), "-address", addr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.Contains(lines[0], "12/16 healthy GPUs allocated, 1 jobs waiting for 8 GPUs") {
		t.Errorf("summary line: %q", lines[0])
	}
	want := [][]string{
		{"POS", "JOB", "STATE", "TIER", "PROJECT", "GPUS", "ALLOCS", "SCORE", "WAITED", "NEEDS", "UTIL", "IDLE", "REASON"},
		{"1", "train-a", "waiting", "high", "olmo", "8", "2", "12.50", "12m30s", "1h30m", "-", "-", "Waiting"},
		{"-", "research/bad-meta", "invalid", "-", "-", "0", "0", "0.00", "1m00s", "-", "-", "-", "invalid", "meta:"},
		{"-", "eval", "running", "normal", "tulu", "1", "1", "0.00", "-", "-", "-", "-", "-"},
		{"-", "stuck", "running", "scavenger", "tulu", "8", "2", "0.00", "-", "-", "0%", "45m00s", "hung", "hung:", "every", "member"},
	}
	for i, w := range want {
		got := strings.Fields(lines[2+i])
		for j := range w {
			if j >= len(got) || got[j] != w[j] {
				t.Errorf("row %d: got %q, want prefix %q", i, got, w)
				break
			}
		}
	}
}

func TestQueueJSONAndEnvAddress(t *testing.T) {
	addr := testAgent(t)
	env := func(k string) string {
		if k == agentapi.AddressEnv {
			return addr
		}
		return ""
	}
	code, out, errs := run(queueCmd(env), "-json", "-waiting")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var q agentapi.Queue
	if err := json.Unmarshal([]byte(out), &q); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(q.Jobs) != 2 || q.Jobs[0].Job != "train-a" || q.Jobs[1].Job != "bad-meta" {
		t.Errorf("-waiting must keep waiting and invalid jobs in order: %+v", q.Jobs)
	}
}

func TestQueueErrors(t *testing.T) {
	code, _, errs := run(queueCmd(noEnv), "-address", "http://127.0.0.1:1")
	if code != 1 || !strings.Contains(errs, "reaching impact agent") || !strings.Contains(errs, "IMPACT_ADDR") {
		t.Errorf("unreachable agent: exit %d, %q", code, errs)
	}
	code, out, _ := run(queueCmd(noEnv), "-h")
	if code != 0 || !strings.Contains(out, "Usage: impact queue") || !strings.Contains(out, "IMPACT_ADDR") {
		t.Errorf("-h: exit %d, %q", code, out)
	}
	code, _, errs = run(queueCmd(noEnv), "-bogus")
	if code != 1 || !strings.Contains(errs, "flag provided but not defined: -bogus") {
		t.Errorf("bad flag: exit %d, %q", code, errs)
	}
	code, _, errs = run(queueCmd(noEnv), "extra")
	if code != 1 || !strings.Contains(errs, `unexpected argument "extra"`) {
		t.Errorf("extra arg: exit %d, %q", code, errs)
	}
}

func TestExplainTable(t *testing.T) {
	addr := testAgent(t)
	// Flags after the job, as people type them.
	code, out, errs := run(explainCmd(noEnv), "train-a", "-address", addr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{
		"Job       default/train-a",
		"State     waiting (position 1 in the queue)",
		"GPUs      8 in 2 allocation(s)",
		"Run       6h00m (impact_walltime), 4h30m of it saved by earlier runs (impact_progress): expected to need 1h30m from its next start",
		"(waiting 12m30s)",
		"Summary   Waiting for 8 free GPUs (first in line).",
		"Reason    needs 8 GPUs, 4 free",
		"History (changes this agent saw):",
		"  2026-11-30T07:47:30Z  waiting  wait  Waiting for 8 free GPUs (first in line).",
		"Impact score 12.500 =",
		"tier",
		"+10.000",
		"fair_share",
		"+2.500",
		"Rejected        fewer than 8 free GPUs: 2 node(s)",
		"Reserved until  2026-11-30T09:00:00Z",
		"Engine          waiting",
	} {
		// Column widths follow the longest row name: compare words.
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("explain output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = run(explainCmd(noEnv), "-address", addr, "-namespace", "research", "bad-meta")
	if code != 0 || !strings.Contains(out, "stays parked until its impact_* meta is fixed") || !strings.Contains(out, `"urgent" is not a tier`) {
		t.Errorf("invalid meta explanation: %d\n%s", code, out)
	}
	code, out, _ = run(explainCmd(noEnv), "-address", addr, "eval")
	if code != 0 || !strings.Contains(out, "Placement  w: node-1, node-2") || !strings.Contains(out, "by the standby") {
		t.Errorf("placement explanation: %d\n%s", code, out)
	}
	if strings.Contains(out, "Run ") {
		t.Errorf("a job that gives no walltime and saved nothing has a Run row:\n%s", out)
	}
	if !strings.Contains(out, "Pinned     w on node-1: GPU-a, GPU-b (island 0), GPU-c (island 1)") || !strings.Contains(out, `Warning    group "w" task "t" has 2 GPU device blocks`) ||
		!strings.Contains(out, "Preempts   default/sweep") {
		t.Errorf("explanation lacks the planned GPUs and islands, the warning or the victims:\n%s", out)
	}
	code, out, _ = run(explainCmd(noEnv), "-json", "-address", addr, "eval")
	var e agentapi.Explanation
	if err := json.Unmarshal([]byte(out), &e); code != 0 || err != nil || e.Engine == nil || len(e.Engine.Placement) != 1 ||
		e.Engine.Placement[0].Allocs[0].Islands[2] != 1 || e.Engine.Placement[0].Allocs[0].Blocks[0].Task != "t" {
		t.Errorf("json placement: %d %v %+v", code, err, e.Engine)
	}
	if len(e.Engine.Victims) != 1 || !strings.Contains(out, `"victims"`) {
		t.Errorf("json lacks the engine's victims:\n%s", out)
	}
}

func TestExplainJSONAndErrors(t *testing.T) {
	addr := testAgent(t)
	code, out, errs := run(explainCmd(noEnv), "-json", "-address", addr, "train-a")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var e agentapi.Explanation
	if err := json.Unmarshal([]byte(out), &e); err != nil || e.Job != "train-a" || e.Decision != "wait" || len(e.Terms()) != 5 ||
		e.Engine.Score.FairShare != 2.5 || e.Engine.Rejected["fewer than 8 free GPUs"] != 2 || e.Engine.ReservedUntil.IsZero() {
		t.Errorf("json: %v %+v", err, e)
	}
	code, _, errs = run(explainCmd(noEnv), "-address", addr, "ghost")
	if code != 1 || !strings.Contains(errs, "404") || !strings.Contains(errs, "not managed") {
		t.Errorf("unknown job: %d %q", code, errs)
	}
	code, _, errs = run(explainCmd(noEnv), "-address", addr)
	if code != 1 || !strings.Contains(errs, "want exactly one JOB") {
		t.Errorf("no job: %d %q", code, errs)
	}
}

func TestFormatDuration(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"}, {45 * time.Second, "45s"}, {750 * time.Second, "12m30s"},
		{3*time.Hour + 20*time.Minute, "3h20m"}, {52 * time.Hour, "2d04h"},
	} {
		if got := formatDuration(tc.d); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.d, got, tc.want)
		}
	}
}
