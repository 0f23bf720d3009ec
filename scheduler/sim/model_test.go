package sim_test

import (
	"strings"
	"testing"
	"time"

	cl "github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// seen is what a scheduler was told of one change: the job's model it
// carries and a copy of it (to tell whether the simulator later modified
// it).
type seen struct {
	kind   sim.ChangeKind
	at     int64
	model  *cl.Job
	copied cl.Job
	allocs []*cl.Alloc
}

// recorder runs scripted and records every change it is told of.
type recorder struct {
	scripted
	seen map[string][]seen
	// bad: jobs seen with a model before their submit or after their end.
	bad []string
}

func (r *recorder) Schedule(st *sim.State, now int64) (*engine.Plan, error) {
	for _, j := range st.Jobs {
		if (j.State == sim.Future || j.State == sim.Done) && j.Cluster != nil {
			r.bad = append(r.bad, j.ID+" "+j.State.String())
		}
	}
	for _, c := range st.Changes() {
		r.seen[c.Job.ID] = append(r.seen[c.Job.ID], seen{kind: c.Kind, at: c.At, model: c.Model, copied: *c.Model, allocs: c.Allocs})
	}
	return r.scripted.Schedule(st, now)
}

// TestOneJobModel: the engine's model of a job is built once from the
// row when it is submitted, and a start and a requeue replace it with
// updated copies (the values handed out never change; a job done has
// none); the run's allocations name the
// nodes' and GPUs' own IDs. The scenario is TestPreemptionAccounting's: L
// is preempted at 250 and stopped at 260 with 200s saved, and restarts at
// 310; X, submitted at 400, waits behind it, so the scheduler is told of
// the restart.
func TestOneJobModel(t *testing.T) {
	m := model()
	m.CheckpointInterval, m.RestartCost, m.Grace = 100, 20, 10
	jobs := []trace.Job{
		job("L", 0, 1000, 1, "scavenger", 1500),
		job("H", 250, 50, 1, "critical", 0),
		job("X", 400, 10, 1, "scavenger", 0),
	}
	rec := &recorder{seen: map[string][]seen{}}
	if _, err := sim.Run(jobs, rec, sim.Options{Cluster: cluster(t, 1, 1), Model: m}); err != nil {
		t.Fatal(err)
	}
	if len(rec.bad) > 0 {
		t.Errorf("jobs with a model before their submit or once done: %v", rec.bad)
	}
	if a := rec.seen["H"]; len(a) != 3 || a[2].kind != sim.Finished || a[2].model != a[1].model || a[2].model.State != cl.JobRunning {
		t.Errorf("H's changes %+v: want it to finish with the model it started with", a)
	}
	l := rec.seen["L"]
	kinds := []sim.ChangeKind{sim.Submitted, sim.Started, sim.StopRequested, sim.Requeued, sim.Started}
	if len(l) < len(kinds) {
		t.Fatalf("L's changes: %+v", l)
	}
	for i, k := range kinds {
		if l[i].kind != k {
			t.Fatalf("L's change %d is %v, want %v", i, l[i].kind, k)
		}
	}
	for i, s := range l {
		if s.model.State != s.copied.State || s.model.Spec != s.copied.Spec {
			t.Errorf("L's model told with change %d was modified afterwards: %+v, now %+v", i, s.copied, *s.model)
		}
	}
	sub, start, stop, requeue, restart := l[0], l[1], l[2], l[3], l[4]
	if sub.model.State != cl.JobQueued || sub.model.Spec.Walltime != 1500*time.Second || !sub.model.Spec.Preemptible ||
		sub.model.Spec.Grace != 10*time.Second || sub.model.Groups[0].Name != sim.GroupName || sub.model.Groups[0].Count != 1 || sub.model.Groups[0].GPUs != 1 {
		t.Errorf("L's model at submit: %+v", *sub.model)
	}
	if start.model == sub.model || start.model.State != cl.JobRunning || start.model.Spec != sub.model.Spec {
		t.Errorf("L's model at start: %+v (at submit %p, now %p)", *start.model, sub.model, start.model)
	}
	if stop.model != start.model || stop.at != 250 {
		t.Errorf("L's stop requested at %d with model %+v, want at 250 the model at start", stop.at, *stop.model)
	}
	// Requeued at 260 with 200s checkpointed, submitted anew then, with
	// the contract it was submitted with and the work its preemption's
	// plan said it saved (scriptedProgress) as its impact_progress:
	// parking re-registers the job as it is on Nomad with that key added,
	// its impact_walltime the whole run's 1500s. The simulator's own count
	// of the work saved (200s, and the restart's 20s) is not told.
	want := sub.model.Spec
	want.Progress = scriptedProgress
	if requeue.model == start.model || requeue.model.State != cl.JobQueued || requeue.model.Spec != want ||
		requeue.model.Groups[0].Spec != requeue.model.Spec || !requeue.model.Submit.Equal(sim.At(260)) {
		t.Errorf("L's model at requeue: %+v", *requeue.model)
	}
	if restart.model.State != cl.JobRunning || restart.model.Spec != requeue.model.Spec {
		t.Errorf("L's model at restart: %+v", *restart.model)
	}
	for _, c := range []struct {
		s  seen
		id string
	}{{start, "L/0/0"}, {requeue, "L/0/0"}, {restart, "L/1/0"}} {
		if len(c.s.allocs) != 1 {
			t.Fatalf("%v change carries %d allocations", c.s.kind, len(c.s.allocs))
		}
		a := c.s.allocs[0]
		if a.ID != c.id || a.JobID != "L" || a.Group != sim.GroupName || a.NodeID != "node-000" || len(a.GPUs) != 1 || a.GPUs[0] != "node-000-g0" {
			t.Errorf("%v change's allocation: %+v", c.s.kind, *a)
		}
	}
	if !start.allocs[0].Start.Equal(sim.At(0)) || !restart.allocs[0].Start.Equal(sim.At(restart.at)) || restart.at != 310 {
		t.Errorf("runs start at %v and %v (change at %d)", start.allocs[0].Start, restart.allocs[0].Start, restart.at)
	}
}

// planned returns plan at its first call with a job waiting, then empty
// plans.
type planned struct {
	plan func(st *sim.State) *engine.Plan
	done bool
}

func (*planned) Name() string { return "planned" }
func (p *planned) Schedule(st *sim.State, _ int64) (*engine.Plan, error) {
	if p.done || len(st.Queue()) == 0 {
		return &engine.Plan{}, nil
	}
	p.done = true
	return p.plan(st), nil
}

// TestBadPlansFailTheRun: a plan naming what the simulation does not have,
// or asking what it cannot do, is an error naming it.
func TestBadPlansFailTheRun(t *testing.T) {
	admit := func(job, group string, allocs ...engine.AllocPlacement) *engine.Plan {
		return &engine.Plan{Admissions: []engine.Admission{{JobID: job, Groups: []engine.GroupPlacement{{Group: group, Allocs: allocs}}}}}
	}
	on := func(node string, gpus ...string) engine.AllocPlacement {
		return engine.AllocPlacement{NodeID: node, GPUs: gpus}
	}
	cases := []struct {
		name string
		plan *engine.Plan
		want string
	}{
		{"unknown job", admit("Z", sim.GroupName, on("node-000", "node-000-g0")), `plan admits unknown job "Z"`},
		{"unknown group", admit("A", "other", on("node-000", "node-000-g0")), `plan admits job "A" with 1 groups, want the one group "main"`},
		{"too many allocations", admit("A", sim.GroupName, on("node-000", "node-000-g0"), on("node-000", "node-000-g1")), `plan admits job "A" with 2 allocations, it has 1 unplaced members`},
		{"unknown node", admit("A", sim.GroupName, on("node-009", "node-009-g0")), `job A: unknown node "node-009"`},
		{"unknown GPU", admit("A", sim.GroupName, on("node-000", "node-001-g0")), `job A: node node-000 has no GPU "node-001-g0"`},
		{"GPU twice", admit("B", sim.GroupName, on("node-000", "node-000-g0", "node-000-g0")), `job B: GPU 0 of node node-000 given twice`},
		{"wrong GPU count", admit("A", sim.GroupName, on("node-000", "node-000-g0", "node-000-g1")), `job A member 0: given 2 GPUs, needs 1`},
		{"preempt waiting job", &engine.Plan{Preemptions: []engine.Preemption{{Stop: engine.Stop{JobID: "A"}}}}, `preemption: job A: stopped while pending`},
		{"reclaim for good", &engine.Plan{Reclaims: []engine.Reclaim{{Stop: engine.Stop{JobID: "A"}, Reason: "idle"}}}, `plan stops job "A" for good (idle)`},
		{"requeue", &engine.Plan{Requeues: []engine.Preemption{{Stop: engine.Stop{JobID: "A"}, Reason: "lost"}}}, `plan requeues incomplete gang "A" (lost)`},
	}
	jobs := []trace.Job{job("A", 0, 10, 1, "normal", 0), job("B", 0, 10, 2, "normal", 0)}
	for _, c := range cases {
		_, err := sim.Run(jobs, &planned{plan: func(*sim.State) *engine.Plan { return c.plan }}, sim.Options{Cluster: cluster(t, 2, 4), Model: model()})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error = %v, want %q", c.name, err, c.want)
		}
	}
}

// TestPartialAdmission: an admission with fewer allocations than the job
// has members places it partially; a later one completes it, and the run
// starts then.
func TestPartialAdmission(t *testing.T) {
	jobs := []trace.Job{job("G", 0, 100, 16, "normal", 0)}
	calls := 0
	s := &funcScheduler{fn: func(st *sim.State, now int64) *engine.Plan {
		calls++
		plan := &engine.Plan{}
		if q := st.Queue(); len(q) == 1 && (now == 0 || now == 300) {
			sim.Place(plan, q[0], st.Nodes[now/300], []int{0, 1, 2, 3, 4, 5, 6, 7})
		}
		return plan
	}}
	res, err := sim.Run(jobs, s, sim.Options{Cluster: cluster(t, 2, 8), Model: model()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Jobs[0].FirstStart != 300 || res.Jobs[0].Finish != 400 {
		t.Fatalf("G started at %d and finished at %d, want 300 and 400", res.Jobs[0].FirstStart, res.Jobs[0].Finish)
	}
}

type funcScheduler struct {
	fn func(st *sim.State, now int64) *engine.Plan
}

func (*funcScheduler) Name() string { return "func" }
func (f *funcScheduler) Schedule(st *sim.State, now int64) (*engine.Plan, error) {
	return f.fn(st, now), nil
}

func TestDuplicateJobIDsAreRejected(t *testing.T) {
	jobs := []trace.Job{job("A", 0, 10, 1, "normal", 0), job("A", 5, 10, 1, "normal", 0)}
	_, err := sim.Run(jobs, mustBaseline(t, "fifo-gang"), sim.Options{Cluster: cluster(t, 1, 2), Model: model()})
	if err == nil || !strings.Contains(err.Error(), `job ID "A" is given twice (jobs 0 and 1 of the trace)`) {
		t.Fatalf("error = %v", err)
	}
}

// TestHungRunKilledQueuesAnew: a hung run killed at its walltime is
// requeued as the gang watch requeues a run that lost a member on Nomad,
// by re-registering it, so the engine's model carries the kill time as
// its submit time.
func TestHungRunKilledQueuesAnew(t *testing.T) {
	rec := &recorder{scripted: scripted{noPreempt: true}, seen: map[string][]seen{}}
	jobs := []trace.Job{job("L", 0, 1000, 1, "scavenger", 1500)}
	opts := sim.Options{Cluster: cluster(t, 1, 1), Model: model(), Idle: sim.IdleModel{HangShare: 1, Seed: 1}}
	if _, err := sim.Run(jobs, rec, opts); err != nil {
		t.Fatal(err)
	}
	for _, s := range rec.seen["L"] {
		if s.kind != sim.Requeued {
			continue
		}
		if s.at != 1500 || !s.model.Submit.Equal(sim.At(s.at)) || s.model.State != cl.JobQueued {
			t.Fatalf("L requeued at %d with submit %v, state %v: want killed at its walltime (1500) and submitted anew then", s.at, s.model.Submit, s.model.State)
		}
		return
	}
	t.Fatalf("L was never requeued: %+v", rec.seen["L"])
}
