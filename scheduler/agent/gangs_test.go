package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/nomad"
)

// runningGang is a snapshot of one running 2-member gang whose members
// started at start (stopping: the second is told to stop), and its meta.
func runningGang(t *testing.T, start time.Time, meta map[string]string, stopping bool) *cluster.Snapshot {
	t.Helper()
	spec, err := jobspec.ParseMeta(meta, nil)
	if err != nil {
		t.Fatal(err)
	}
	j := &cluster.Job{ID: "default/g", Namespace: "default", Name: "g", State: cluster.JobRunning, Spec: spec,
		Groups: []cluster.TaskGroup{{Name: "w", Count: 2, GPUs: 4}}}
	var nodes []*cluster.Node
	var allocs []*cluster.Alloc
	for i, n := range []string{"n1", "n2"} {
		node := &cluster.Node{ID: n, Ready: true, Eligible: true, Pool: "gpu"}
		var ids []string
		for k := range 4 {
			id := n + "-gpu" + string(rune('0'+k))
			node.GPUs = append(node.GPUs, cluster.GPU{ID: id, Index: k, Healthy: true})
			ids = append(ids, id)
		}
		nodes = append(nodes, node)
		allocs = append(allocs, &cluster.Alloc{ID: "a" + n, JobID: j.ID, Group: "w", NodeID: n, GPUs: ids, Start: start,
			Stopping: stopping && i == 1})
	}
	snap, err := cluster.Build(nodes, []*cluster.Job{j}, allocs)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// A gang's run that stays whole for wholeRunResets since its last
// requeue resets its count (back-off and retry limit start afresh); one
// not whole, or whole for less, keeps it.
func TestGangRecordResetsAfterAWholeRun(t *testing.T) {
	clk := newTestClock()
	now := clk.Now()
	for _, tc := range []struct {
		name     string
		started  time.Duration // before now
		last     time.Duration // the last requeue, before now
		stopping bool
		reset    bool
	}{
		{"whole for longer than the reset", 2 * wholeRunResets, wholeRunResets + time.Minute, false, true},
		{"whole, but requeued since", 2 * wholeRunResets, time.Minute, false, false},
		{"whole for less", wholeRunResets / 2, 2 * wholeRunResets, false, false},
		{"not whole", 2 * wholeRunResets, 2 * wholeRunResets, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testCycler(t, clk.Now)
			c.state.gangs["default/g"] = nomad.GangRequeue{Runs: 3, Last: now.Add(-tc.last)}
			c.resetGangRecords(runningGang(t, now.Add(-tc.started), nil, tc.stopping), now)
			if _, kept := c.state.gangs["default/g"]; kept == tc.reset {
				t.Errorf("record kept %v, want reset %v", kept, tc.reset)
			}
		})
	}
}

// The retry limit: the requeue that would be the job's
// impact_max_failures-th run in a row to lose a member ends it failed
// instead (at once with impact_on_failure = "fail"); the ending shows in
// explain as failed, with the reason, after the job left the model.
func TestGangRetryLimitEndsFailed(t *testing.T) {
	for _, tc := range []struct {
		meta     map[string]string
		before   int // runs already requeued
		endsHere bool
	}{
		{nil, 0, false},
		{nil, jobspec.DefaultMaxFailures - 2, false},
		{nil, jobspec.DefaultMaxFailures - 1, true},
		{map[string]string{"impact_max_failures": "2"}, 0, false},
		{map[string]string{"impact_max_failures": "2"}, 1, true},
		{map[string]string{"impact_on_failure": "fail"}, 0, true},
	} {
		clk := newTestClock()
		now := clk.Now()
		c := testCycler(t, clk.Now)
		if tc.before > 0 {
			c.state.gangs["default/g"] = nomad.GangRequeue{Runs: tc.before, Last: now.Add(-time.Minute)}
		}
		snap := runningGang(t, now.Add(-time.Hour), tc.meta, true)
		plan := &engine.Plan{Requeues: []engine.Preemption{{Stop: engine.Stop{JobID: "default/g"}, Reason: "gang incomplete: a member failed", EndFailed: tc.meta["impact_on_failure"] == "fail"}}}
		c.limitFailures(plan, snap)
		r := plan.Requeues[0]
		if r.EndFailed != tc.endsHere {
			t.Fatalf("%v after %d: end failed %v, want %v (%s)", tc.meta, tc.before, r.EndFailed, tc.endsHere, r.Reason)
		}
		c.recordGangRequeues(plan, setOf([]string{"default/g"}), now)
		v := buildView(snap, plan, c.history, now, true, c.o.Policy)
		c.showEnded(v, snap, now)
		ex := v.explain["default/g"]
		if !tc.endsHere {
			if got := c.state.gangs["default/g"].Runs; got != tc.before+1 {
				t.Errorf("%v: runs %d, want %d", tc.meta, got, tc.before+1)
			}
			continue
		}
		if ex.State != "failed" || ex.Decision != DecisionFailed || !strings.Contains(ex.Reason, "a member failed") {
			t.Errorf("%v: explain %s/%s: %s", tc.meta, ex.State, ex.Decision, ex.Reason)
		}
		if _, ok := c.state.gangs["default/g"]; ok {
			t.Errorf("record of a gang ended failed kept")
		}
		// Deregistered: it left the model; explain still says why.
		gone := snapOf(t)
		v = buildView(gone, &engine.Plan{}, c.history, now.Add(time.Minute), true, c.o.Policy)
		c.showEnded(v, gone, now.Add(time.Minute))
		if ex := v.explain["default/g"]; ex.State != "failed" || !strings.Contains(ex.Reason, "a member failed") || !strings.HasPrefix(ex.Summary, "Ended failed") {
			t.Errorf("after it left the model: explain %+v", ex)
		}
	}
}

// A gang's record survives a leader change: saved with the durable
// state, loaded by the next leader, whose engine then holds the gang back
// for what is left of its back-off (deferrals are engine memory, which a
// new leader does not have).
func TestGangRecordSurvivesFailover(t *testing.T) {
	clk := newTestClock()
	now := clk.Now()
	store := &memStore{}
	old := testCycler(t, clk.Now)
	old.state = testDurable(t, store, &fakeExec{}, clk.Now)
	plan := &engine.Plan{Requeues: []engine.Preemption{{Stop: engine.Stop{JobID: "default/g"}, Reason: "gang incomplete"}}}
	for range 3 {
		old.recordGangRequeues(plan, setOf([]string{"default/g"}), now)
	}
	old.state.save(context.Background(), now, true, old.engine)

	next := testCycler(t, clk.Now)
	next.state = testDurable(t, store, &fakeExec{}, clk.Now)
	if _, ok := next.state.load(context.Background()); !ok {
		t.Fatal("nothing loaded")
	}
	if g := next.state.gangs["default/g"]; g.Runs != 3 || !g.Last.Equal(now) {
		t.Fatalf("loaded record %+v, want 3 runs at %v", g, now)
	}
	next.holdBackGangs(now.Add(time.Second))
	snap := runningGang(t, now.Add(-time.Hour), nil, false)
	// Queued again: the deferral shows in the engine's explanation.
	j, _ := snap.Job("default/g")
	j.State = cluster.JobQueued
	qs, err := cluster.Build(nil, []*cluster.Job{j}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := next.engine.Decide(qs, now.Add(2*time.Second))
	if x := p.Explanations["default/g"]; x == nil || !strings.Contains(x.Reason, "requeued 3 times in a row") {
		t.Fatalf("new leader's engine does not hold the gang back: %+v", x)
	}
}
