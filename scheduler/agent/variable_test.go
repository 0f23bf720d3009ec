package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/agent/agentapi"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

func waitingExplanation() agentapi.Explanation {
	e := agentapi.Explanation{Decision: DecisionWait, GeneratedAt: time.Unix(1_800_000_000, 0), Leader: true}
	e.Namespace, e.Job, e.State, e.Position = "default", "train", agentapi.StateWaiting, 2
	e.Tier, e.Project, e.GPUs, e.Allocations = "high", "olmo", 8, 2
	e.Score = 1050.26
	e.Engine = &engine.Explanation{JobID: "default/train", Position: 2, Status: engine.StatusWaiting, Tier: "high", Project: "olmo", GPUs: 8,
		Score: policy.Score{Total: 1050.26, Tier: 1000, FairShare: 49.96, Deadline: 0, Age: 0.3}, Reason: "needs 8 GPUs, 0 free"}
	e.Since, e.WaitSeconds = time.Unix(1_799_999_000, 0), 1000
	e.Reason = "needs 8 GPUs, 0 free"
	e.Summary = summarize(e)
	return e
}

func TestVariableItems(t *testing.T) {
	e := waitingExplanation()
	got := VariableItems(e, "http://impact:4680/ui/job/default/train")
	want := map[string]string{
		"state": "waiting", "decision": "wait", "position": "2", "summary": "Waiting for 8 free GPUs (2nd in line).",
		"reason": "needs 8 GPUs, 0 free", "tier": "high", "project": "olmo", "gpus": "8", "allocations": "2",
		"score": "1050", "score_tier": "1000", "score_fair_share": "50", "score_deadline": "0", "score_age": "0", "score_short": "0",
		"since": "2027-01-15T07:43:20Z", "page": "http://impact:4680/ui/job/default/train", "status": "waiting",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("item %s = %q, want %q", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected item %s = %q", k, got[k])
		}
	}
	// A job registered again with the work it saved says so, once.
	e.WalltimeSeconds, e.ProgressSeconds = 6*3600, 5*3600
	if got := VariableItems(e, "")["run"]; got != e.RunLine() || !strings.Contains(got, "expected to need 1h00m from its next start") {
		t.Errorf("item run = %q, want the run line %q", got, e.RunLine())
	}
	e.WalltimeSeconds, e.ProgressSeconds = 0, 0
	e.State, e.Position, e.Decision = agentapi.StateRunning, 0, DecisionAdmit
	e.Nodes = map[string][]string{"workers": {"n2", "n1"}, "ps": {"n3"}}
	got = VariableItems(e, "")
	if got["nodes"] != "ps: n3; workers: n2,n1" || got["position"] != "" || got["page"] != "" {
		t.Errorf("running items = %v", got)
	}
	// The planned GPUs of each allocation, with their islands, and the
	// warnings of the admission.
	x := *e.Engine
	x.Placement = []engine.GroupPlacement{{Group: "workers", Allocs: []engine.AllocPlacement{
		{NodeID: "n1", GPUs: []string{"GPU-a", "GPU-b"}, Islands: []int{0, 1}},
		{NodeID: "n2", GPUs: []string{"GPU-c"}, Islands: []int{1}, Blocks: []engine.BlockPlacement{{Task: "t", Index: 1, GPUs: []string{"GPU-c"}}}},
	}}}
	x.Warnings = []string{"w1", "w2"}
	e.Engine = &x
	got = VariableItems(e, "")
	if want := "workers on n1: GPU-a (island 0), GPU-b (island 1)\nworkers on n2: GPU-c (island 1)"; got["placement"] != want {
		t.Errorf("placement item %q, want %q", got["placement"], want)
	}
	if want := "workers on n2: t#1: GPU-c"; got["blocks"] != want {
		t.Errorf("blocks item %q, want %q", got["blocks"], want)
	}
	if got["warnings"] != "w1; w2" {
		t.Errorf("warnings item %q", got["warnings"])
	}
	// What the engine says about a job that waits: the nodes that cannot
	// take it, its reservation, its victims, and its own reason where the
	// agent's replaced it.
	x = *waitingExplanation().Engine
	x.Rejected = map[string]int{"no GPU": 3, "fewer than 8 free GPUs": 1}
	x.ReservedUntil = time.Unix(1_800_003_600, 0)
	x.Victims = []string{"default/a", "default/b"}
	e = waitingExplanation()
	e.Engine, e.Reason = &x, "fits now; the leader admits it (this agent is a standby)"
	e.History = []agentapi.Event{{At: time.Unix(1_799_999_000, 0), State: "waiting", Decision: "wait", Summary: "Waiting."}}
	got = VariableItems(e, "")
	for k, want := range map[string]string{
		"rejected":       "fewer than 8 free GPUs: 1 node(s); no GPU: 3 node(s)",
		"reserved_until": "2027-01-15T09:00:00Z",
		"victims":        "default/a,default/b",
		"engine_reason":  "needs 8 GPUs, 0 free",
		"history":        "2027-01-15T07:43:20Z waiting wait: Waiting.",
	} {
		if got[k] != want {
			t.Errorf("item %s = %q, want %q", k, got[k], want)
		}
	}
}

// What grows every cycle (the wait, the decision time) or moves by less
// than a point does not make a Variable stale; a change of state,
// position, reason or a score moving by a point does.
func TestDigestIgnoresChurn(t *testing.T) {
	base := waitingExplanation()
	d := digest(base)
	same := base
	same.WaitSeconds += 600
	same.GeneratedAt = same.GeneratedAt.Add(10 * time.Minute)
	same.Score += 0.2
	x := *base.Engine
	x.Score.Age += 0.15
	same.Engine = &x
	same.Leader = false
	if digest(same) != d {
		t.Errorf("digest changed with the wait time, decision time or sub-point score moves")
	}
	for name, change := range map[string]func(e *agentapi.Explanation){
		"state":    func(e *agentapi.Explanation) { e.State = agentapi.StateRunning },
		"position": func(e *agentapi.Explanation) { e.Position = 1 },
		"reason":   func(e *agentapi.Explanation) { e.Reason = "no placement for the whole gang (8 GPUs) on free GPUs" },
		"score":    func(e *agentapi.Explanation) { e.Score += 1 },
		"decision": func(e *agentapi.Explanation) { e.Decision = DecisionPreempt },
		"victims":  func(e *agentapi.Explanation) { e.Engine.Victims = []string{"default/sweep"} },
		"errors":   func(e *agentapi.Explanation) { e.Errors = []string{"bad"} },
		"rejected": func(e *agentapi.Explanation) { e.Engine.Rejected = map[string]int{"no GPU": 1} },
		"reserved": func(e *agentapi.Explanation) { e.Engine.ReservedUntil = time.Unix(1_800_003_600, 0) },
		"status":   func(e *agentapi.Explanation) { e.Engine.Status = engine.StatusReserved },
		"history":  func(e *agentapi.Explanation) { e.History = []agentapi.Event{{State: "waiting"}} },
	} {
		e := base
		x := *base.Engine
		e.Engine = &x
		change(&e)
		if digest(e) == d {
			t.Errorf("digest unchanged after a change of %s", name)
		}
	}
}

// A job admitted by a previous leader (no history in this agent) is still
// explained from what Nomad says once its allocations run, so its Variable
// follows its state after a failover; before any allocation runs, the
// previous leader's Variable is left as it is.
func TestRunningJobOfPreviousLeaderExplained(t *testing.T) {
	clk := newTestClock()
	n := newFakeNomad(clk.Now)
	n.addNode("node-1", 8, 1, "gpu")
	n.submit("old", tier("normal"), gpuGroup("g", 2, 4))
	j, _ := n.store.Snapshot().Job("default/old")
	run := *j
	run.State = cluster.JobRunning
	if err := n.store.UpsertJob(&run); err != nil {
		t.Fatal(err)
	}
	pol := testPolicy(t)
	v := buildView(n.store.Snapshot(), nil, nil, clk.Now(), true, pol)
	if e := v.explain["default/old"]; e.State != agentapi.StateAdmitting || len(e.Nodes) != 0 {
		t.Fatalf("before its allocations run: %+v", e)
	}
	if items := explainOrder(v, map[string]string{}, map[string]string{}, 10); len(items) != 0 {
		t.Errorf("an admitting job of the previous leader was queued for writing: %+v", items)
	}
	for i := 0; i < 2; i++ {
		if err := n.store.UpsertAlloc(&cluster.Alloc{ID: fmt.Sprintf("a%d", i), JobID: "default/old", Group: "g", NodeID: "node-1",
			GPUs: []string{fmt.Sprintf("node-1-gpu%d", i)}, Start: clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	v = buildView(n.store.Snapshot(), nil, nil, clk.Now(), true, pol)
	e := v.explain["default/old"]
	if e.State != agentapi.StateRunning || strings.Join(e.Nodes["g"], ",") != "node-1" {
		t.Fatalf("once running: state %s nodes %v", e.State, e.Nodes)
	}
	items := explainOrder(v, map[string]string{}, map[string]string{}, 10)
	if len(items) != 1 || VariableItems(items[0].e, "")["state"] != agentapi.StateRunning {
		t.Errorf("the running job of the previous leader is not rewritten: %+v", items)
	}
}
