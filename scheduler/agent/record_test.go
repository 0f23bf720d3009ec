package agent

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/nomad"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

func testCycler(t *testing.T, clk func() time.Time) *cycler {
	t.Helper()
	m, err := NewMetrics()
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Policy: policy.Default(), Metrics: m, Clock: clk, Logger: hclog.NewNullLogger()}
	c, err := newCycler(o, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	c.state = testDurable(t, &memStore{}, &fakeExec{}, clk)
	return c
}

func snapOf(t *testing.T, ids ...string) *cluster.Snapshot {
	t.Helper()
	var jobs []*cluster.Job
	for _, id := range ids {
		jobs = append(jobs, &cluster.Job{ID: "default/" + id, Namespace: "default", Name: id,
			Groups: []cluster.TaskGroup{{Name: "g", Count: 1, GPUs: 4}}})
	}
	snap, err := cluster.Build(nil, jobs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// What the executor reports done is remembered, job by job, with the
// engine's explanation of an admission; what it did not do is not; a job
// that left the model is forgotten.
func TestRecordRemembersWhatWasDone(t *testing.T) {
	clk := newTestClock()
	c := testCycler(t, clk.Now)
	now := clk.Now()
	adm := &engine.Explanation{JobID: "default/a", Status: engine.StatusAdmitted}
	plan := &engine.Plan{
		Admissions: []engine.Admission{
			{JobID: "default/a", Groups: []engine.GroupPlacement{{Group: "g", Allocs: []engine.AllocPlacement{{NodeID: "n1"}, {NodeID: "n1"}, {NodeID: "n2"}}}}},
			{JobID: "default/refused"},
		},
		Preemptions:  []engine.Preemption{{Stop: engine.Stop{JobID: "default/v"}, Preemptor: "default/a", Reason: "room for a", LostGPUHours: 2}},
		Requeues:     []engine.Preemption{{Stop: engine.Stop{JobID: "default/r"}, Reason: "member lost"}},
		Reclaims:     []engine.Reclaim{{Stop: engine.Stop{JobID: "default/hung"}, Reason: "hung"}},
		Explanations: map[string]*engine.Explanation{"default/a": adm},
	}
	c.history["default/hung"] = jobHistory{Decision: DecisionAdmit, Nodes: map[string][]string{"g": {"n3"}}}
	c.history["default/gone"] = jobHistory{Decision: DecisionAdmit}
	rep := nomad.ApplyReport{Admitted: []string{"default/a"}, Preempted: []string{"default/v"},
		Requeued: []string{"default/r"}, Reclaimed: []string{"default/hung"}}
	c.record(plan, snapOf(t, "a", "refused", "v", "r", "hung"), rep, now)

	want := map[string]string{"default/a": DecisionAdmit, "default/v": DecisionPreempted, "default/r": DecisionRequeued, "default/hung": DecisionReclaimed}
	if len(c.history) != len(want) {
		t.Errorf("history %v, want exactly %v", c.history, want)
	}
	for id, d := range want {
		if c.history[id].Decision != d || !c.history[id].At.Equal(now) {
			t.Errorf("history of %s = %+v, want %s at %v", id, c.history[id], d, now)
		}
	}
	if h := c.history["default/a"]; h.Admitted != adm || len(h.Nodes["g"]) != 2 {
		t.Errorf("admission remembered as %+v, want the engine's explanation and nodes n1, n2", h)
	}
	if h := c.history["default/v"]; h.PreemptedBy != "default/a" || h.Reason != "room for a" {
		t.Errorf("preemption remembered as %+v", h)
	}
	if h := c.history["default/hung"]; h.Nodes["g"][0] != "n3" {
		t.Errorf("a reclaimed job forgot where it ran: %+v", h)
	}
	if r := c.state.preemptions["default/v"]; r.Preemptor != "default/a" || r.LostGPUHours != 2 || !r.At.Equal(now) {
		t.Errorf("preemption record %+v", r)
	}
}

// The back-off after failures in a row doubles from 30s and stops at 30m.
func TestBackoffFor(t *testing.T) {
	for n, want := range map[int]time.Duration{
		1: 30 * time.Second, 2: time.Minute, 3: 2 * time.Minute, 6: 16 * time.Minute, 7: 30 * time.Minute, 17: 30 * time.Minute, 64: 30 * time.Minute,
	} {
		if got := backoffFor(n); got != want {
			t.Errorf("backoffFor(%d) = %v, want %v", n, got, want)
		}
	}
}

// Rollbacks and gang requeues are counted in a row while the job is in
// the model, and forgotten once it left; a requeue for a user's update is
// not a failure.
func TestBackoffCountsFollowTheModel(t *testing.T) {
	clk := newTestClock()
	c := testCycler(t, clk.Now)
	now := clk.Now()
	snap := snapOf(t, "a", "b")
	plan := &engine.Plan{Requeues: []engine.Preemption{{Stop: engine.Stop{JobID: "default/b"}}, {Stop: engine.Stop{JobID: "default/u"}, Update: true}}}
	for range 3 {
		c.deferRolledBack(snap, []string{"default/a"}, now)
		c.recordGangRequeues(plan, setOf([]string{"default/b", "default/u"}), now)
	}
	if c.rollbacks["default/a"] != 3 || c.state.gangs["default/b"].Runs != 3 || c.state.gangs["default/u"].Runs != 0 {
		t.Fatalf("rollbacks %v gang requeues %v", c.rollbacks, c.state.gangs)
	}
	left := snapOf(t)
	c.deferRolledBack(left, nil, now)
	c.resetGangRecords(left, now)
	if len(c.rollbacks) != 0 || len(c.state.gangs) != 0 {
		t.Errorf("counts of jobs that left kept: %v %v", c.rollbacks, c.state.gangs)
	}
}

// A preemption the executor withdraws gives the job back the history it
// had (its admission, where it runs) with why it runs on; one the
// executor did not withdraw (too late) leaves it preempted.
func TestRecordWithdrawalRestoresTheAdmission(t *testing.T) {
	clk := newTestClock()
	c := testCycler(t, clk.Now)
	admitted := clk.Now()
	adm := &engine.Explanation{JobID: "default/v", Status: engine.StatusAdmitted}
	for _, id := range []string{"default/v", "default/late"} {
		c.history[id] = jobHistory{Decision: DecisionAdmit, At: admitted, Nodes: map[string][]string{"g": {"n1"}}, Admitted: adm}
	}
	snap := snapOf(t, "v", "late", "urgent")
	preempt := &engine.Plan{Preemptions: []engine.Preemption{
		{Stop: engine.Stop{JobID: "default/v"}, Preemptor: "default/urgent", Reason: "room for urgent"},
		{Stop: engine.Stop{JobID: "default/late"}, Preemptor: "default/urgent", Reason: "room for urgent"},
	}}
	c.record(preempt, snap, nomad.ApplyReport{Preempted: []string{"default/v", "default/late"}}, clk.Now())
	withdraw := &engine.Plan{Withdrawals: []engine.Withdrawal{
		{JobID: "default/v", Preemptor: "default/urgent", Reason: "preemption withdrawn within its grace"},
		{JobID: "default/late", Preemptor: "default/urgent", Reason: "preemption withdrawn within its grace"},
	}}
	c.record(withdraw, snap, nomad.ApplyReport{Withdrawing: []string{"default/v"}}, clk.Now().Add(10*time.Second))
	h := c.history["default/v"]
	if h.Decision != DecisionAdmit || !h.At.Equal(admitted) || h.Admitted != adm || len(h.Nodes["g"]) != 1 || h.Withdrawn != "preemption withdrawn within its grace" {
		t.Errorf("withdrawn: history %+v, want its admission back with why it runs on", h)
	}
	if h := c.history["default/late"]; h.Decision != DecisionPreempted || h.Withdrawn != "" {
		t.Errorf("not withdrawn: history %+v, want it preempted", h)
	}
}
