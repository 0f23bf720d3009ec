// Package impact drives the project's scheduling core (scheduler/engine)
// inside the simulator, as the `impact` policy: the very engine the live
// service runs, fed through a cluster.Store the way the Nomad adapter feeds
// it, and its plans translated into simulator actions.
//
// The adapter keeps the store up to date incrementally from the simulator's
// change feed (submits, starts, stop requests, requeues, finishes), so a
// cycle costs the engine's decision, not a rebuild of the model. Running
// allocations carry their last checkpoint time, updated as the simulated
// jobs checkpoint, so the engine weighs the work a preemption would lose as
// it would live. cadence.go holds which of the live agent's decisions the
// replay skips, because their plan would repeat the last one's.
package impact

import (
	"container/heap"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// Name is the policy's name in reports.
const Name = "impact"

// DefaultPolicyHCL is the policy the simulator runs the engine with unless
// told otherwise (example/sim/policy.hcl holds the same text).
//
//go:embed policy.hcl
var DefaultPolicyHCL []byte

// DefaultPolicy parses DefaultPolicyHCL.
func DefaultPolicy() (*policy.Policy, error) {
	return policy.LoadBytes(DefaultPolicyHCL, "builtin:sim/policy.hcl")
}

// Scheduler is the impact engine as a sim.Scheduler.
type Scheduler struct {
	// hrPools, hrSteps: the pools with a headroom and their idle kept
	// GPUs over time (recordHeadroom).
	hrPools map[string]bool
	hrSteps []hrStep

	pol    *policy.Policy
	eng    *engine.Engine
	store  *cluster.Store
	model  sim.Model
	inited bool

	nodeIndex map[string]int
	gpuIndex  map[string]int // GPU instance ID -> index on its node
	gpuIDs    [][]string     // node index -> GPU instance IDs
	nodeIDs   []string

	jobs    map[string]*sim.Job
	running map[int]*runInfo // by job index
	cjobs   map[int]*cluster.Job
	// ckpts holds the next checkpoint of every running preemptible job,
	// earliest first, so a cycle visits only the jobs that checkpointed
	// since the last one instead of every running job.
	ckpts runHeap

	// Quiet ticks (see quiet): the time of the last look (a decision or
	// an idle check; -1: none), whether the model changed since, and the
	// first time after it at which a time-dependent input crosses a
	// threshold.
	lastLook int64
	changed  bool
	wakeAt   int64
	preempts []int64 // times of this run's preemption orders, oldest first
	// weighed: the last look's plan weighed its victims' costs
	// (engine.Plan.CostsWeighed; false after an idle check, which proves
	// no waiting job may preempt or move anyone).
	weighed bool
	// youngUntil: when the runs started so far pass their minimum
	// runtime (preemptible ones, with preemption on), earliest first. A
	// run that ended before is left in: wakeMatters skips it.
	youngUntil runHeap
	// Refresh bounds how long ticks with nothing changed are skipped
	// (seconds; 0: never skipped), see quiet.
	Refresh int64
	// hung: runs the idleness model hung, by job index (idle.go).
	hung map[int]*hungRun
	// tierNames: a trace tier -> the policy's tier it resolves to.
	tierNames map[string]string
}

type runInfo struct {
	job    *sim.Job
	allocs []*cluster.Alloc
	ckpt   int64 // last checkpoint time told to the store
}

// nextCkpt is when the run of ri takes its next checkpoint: the first
// CheckpointInterval of progress after the last one told.
func (s *Scheduler) nextCkpt(ri *runInfo) int64 {
	if ri.ckpt > ri.job.Start {
		return ri.ckpt + s.model.CheckpointInterval
	}
	return ri.job.ExpectedEnd(s.model) - (ri.job.Duration - ri.job.Saved) + s.model.CheckpointInterval
}

type runAt struct {
	t  int64
	ri *runInfo
}

// runHeap holds runs by a time of theirs (the next checkpoint, the end
// of the minimum runtime): a min-heap by time, then job index
// (deterministic order).
type runHeap []runAt

func (h runHeap) Len() int { return len(h) }
func (h runHeap) Less(a, b int) bool {
	if h[a].t != h[b].t {
		return h[a].t < h[b].t
	}
	return h[a].ri.job.Index < h[b].ri.job.Index
}
func (h runHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *runHeap) Push(x any)   { *h = append(*h, x.(runAt)) }
func (h *runHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// watchCkpt schedules the next checkpoint of a running preemptible job.
// Only those: the engine reads a checkpoint only to price a job as a victim.
func (s *Scheduler) watchCkpt(ri *runInfo) {
	if s.model.CheckpointInterval > 0 && ri.job.IsPreemptible {
		heap.Push(&s.ckpts, runAt{t: s.nextCkpt(ri), ri: ri})
	}
}

// DefaultRefresh is Scheduler.Refresh unless set: the baselines' timer in
// the standard scenario.
const DefaultRefresh = 300

// New builds the scheduler for a validated policy.
func New(pol *policy.Policy, logger hclog.Logger) (*Scheduler, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	eng, err := engine.New(pol, engine.WithLogger(logger.Named("sim")), engine.WithLocalityLabels("rack"),
		// Nobody reads waiting reasons in a replay: skip formatting them.
		engine.WithoutExplanations())
	if err != nil {
		return nil, fmt.Errorf("impact scheduler: %w", err)
	}
	return &Scheduler{
		pol:       pol,
		eng:       eng,
		store:     cluster.NewStore(),
		nodeIndex: map[string]int{},
		gpuIndex:  map[string]int{},
		jobs:      map[string]*sim.Job{},
		hung:      map[int]*hungRun{},
		running:   map[int]*runInfo{},
		cjobs:     map[int]*cluster.Job{},
		tierNames: map[string]string{},
		lastLook:  -1,
		Refresh:   DefaultRefresh,
	}, nil
}

// Name implements sim.Scheduler.
func (s *Scheduler) Name() string { return Name }

func at(t int64) time.Time { return time.Unix(t, 0).UTC() }

func (s *Scheduler) init(st *sim.State) error {
	s.model = st.Model
	for _, n := range st.Nodes {
		cn := &cluster.Node{ID: n.Name, Name: n.Name, Pool: "gpu", Labels: map[string]string{"rack": n.Rack}, Eligible: true, Ready: true}
		ids := make([]string, n.GPUs)
		for g := 0; g < n.GPUs; g++ {
			ids[g] = fmt.Sprintf("%s-g%d", n.Name, g)
			s.gpuIndex[ids[g]] = g
			cn.GPUs = append(cn.GPUs, cluster.GPU{ID: ids[g], Index: g, Island: n.IslandOf(g), NUMA: n.IslandOf(g), Model: "sim", Healthy: true})
		}
		if err := s.store.UpsertNode(cn); err != nil {
			return err
		}
		s.nodeIndex[n.Name] = n.Index
		s.nodeIDs = append(s.nodeIDs, n.Name)
		s.gpuIDs = append(s.gpuIDs, ids)
	}
	s.inited = true
	return nil
}

// spec is the impact contract the simulated job would carry in its meta.
func (s *Scheduler) spec(j *sim.Job) jobspec.Spec {
	wall := j.Walltime - j.Saved
	if j.Restarts > 0 {
		wall += s.model.RestartCost
	}
	var walltime time.Duration
	if j.Walltime != trace.UnknownWalltime {
		walltime = time.Duration(max(wall, 1)) * time.Second
	}
	return jobspec.Spec{
		Tier:           j.Tier,
		Project:        j.Project,
		Preemptible:    j.IsPreemptible,
		PreemptibleSet: true,
		Grace:          time.Duration(s.model.Grace) * time.Second,
		Walltime:       walltime,
	}
}

func (s *Scheduler) clusterJob(j *sim.Job, state cluster.JobState) *cluster.Job {
	sp := s.spec(j)
	return &cluster.Job{
		ID:        j.ID,
		Namespace: "default",
		Name:      j.ID,
		Priority:  50,
		Submit:    at(j.Submit),
		State:     state,
		Groups:    []cluster.TaskGroup{{Name: "main", Count: len(j.Members), GPUs: j.Members[0], Spec: sp}},
		Spec:      sp,
	}
}

// runAllocs describes a run of j on held, started at start.
func (s *Scheduler) runAllocs(j *sim.Job, held []sim.Alloc, start int64) []*cluster.Alloc {
	out := make([]*cluster.Alloc, 0, len(held))
	for m, a := range held {
		ca := &cluster.Alloc{
			ID:     j.ID + "/" + strconv.Itoa(j.Restarts) + "/" + strconv.Itoa(m),
			JobID:  j.ID,
			Group:  "main",
			NodeID: s.nodeIDs[a.Node],
			Start:  at(start),
		}
		for _, g := range a.GPUs {
			ca.GPUs = append(ca.GPUs, s.gpuIDs[a.Node][g])
		}
		out = append(out, ca)
	}
	return out
}

// restamp copies a run's allocations with its last checkpoint (none if
// ckpt is the start) and whether it is stopping.
func restamp(prev []*cluster.Alloc, ckpt int64, stopping bool) []*cluster.Alloc {
	out := make([]*cluster.Alloc, 0, len(prev))
	for _, p := range prev {
		ca := *p
		ca.Stopping = stopping
		ca.LastCheckpoint = time.Time{}
		if ckpt > p.Start.Unix() {
			ca.LastCheckpoint = at(ckpt)
		}
		out = append(out, &ca)
	}
	return out
}

func (s *Scheduler) upsertAllocs(as []*cluster.Alloc) error {
	for _, a := range as {
		if err := s.store.UpsertAlloc(a); err != nil {
			return err
		}
	}
	return nil
}

// finishAllocs tells the store a run ended at end, as the live watcher
// does: the engine charges the run's GPU time up to end to its project's
// fair-share usage, even if no cycle saw it running.
func (s *Scheduler) finishAllocs(ri *runInfo, end int64) {
	for _, a := range ri.allocs {
		s.store.FinishAlloc(a.ID, at(end))
	}
}

// apply brings the store up to date with what happened since the last
// cycle.
func (s *Scheduler) apply(st *sim.State, now int64) error {
	if len(st.Changes()) > 0 {
		s.changed = true
	}
	for _, c := range st.Changes() {
		if err := s.applyChange(c); err != nil {
			return err
		}
	}
	return s.applyCheckpoints(st, now)
}

// applyChange tells the store of one change of a job.
func (s *Scheduler) applyChange(c sim.Change) error {
	j := c.Job
	switch c.Kind {
	case sim.Submitted:
		s.jobs[j.ID] = j
		return s.store.UpsertJob(s.clusterJob(j, cluster.JobQueued))
	case sim.Started:
		return s.started(c)
	case sim.StopRequested:
		ri := s.running[j.Index]
		if ri == nil || j.State != sim.Stopping {
			return nil // already stopped or finished: the next change says which
		}
		ri.allocs = restamp(ri.allocs, ri.ckpt, true)
		return s.upsertAllocs(ri.allocs)
	case sim.Requeued:
		if ri := s.running[j.Index]; ri != nil {
			s.finishAllocs(ri, c.At)
			delete(s.running, j.Index)
		}
		return s.store.UpsertJob(s.clusterJob(j, cluster.JobQueued))
	case sim.Hung:
		if ri := s.running[j.Index]; ri != nil {
			s.hung[j.Index] = &hungRun{ri: ri, fed: -1}
			s.changed = true
		}
	case sim.Finished:
		if ri := s.running[j.Index]; ri != nil {
			s.finishAllocs(ri, c.At)
			delete(s.running, j.Index)
		}
		s.store.DeleteJob(j.ID)
		delete(s.jobs, j.ID)
	}
	return nil
}

// started records a run that started. A run that already ended is
// recorded too: its Finished change follows and charges its GPU time.
func (s *Scheduler) started(c sim.Change) error {
	j := c.Job
	if err := s.store.UpsertJob(s.clusterJob(j, cluster.JobRunning)); err != nil {
		return err
	}
	ri := &runInfo{job: j, ckpt: c.At, allocs: s.runAllocs(j, c.Allocs, c.At)}
	s.running[j.Index] = ri
	if j.State == sim.Running {
		s.watchCkpt(ri)
		if s.pol.Preemption.Enabled && j.IsPreemptible {
			heap.Push(&s.youngUntil, runAt{t: c.At + int64(s.pol.MinRuntime(s.spec(j))/time.Second), ri: ri})
		}
	}
	return s.upsertAllocs(ri.allocs)
}

// applyCheckpoints tells the store of the checkpoints taken since the last
// cycle. A run that ended (its runInfo is gone or replaced) or is stopping
// is dropped: a stopping job's checkpoints no longer matter, it is not a
// victim again.
func (s *Scheduler) applyCheckpoints(st *sim.State, now int64) error {
	var v victimTiers
	for len(s.ckpts) > 0 && s.ckpts[0].t <= now {
		ri := heap.Pop(&s.ckpts).(runAt).ri
		j := ri.job
		if s.running[j.Index] != ri || j.State != sim.Running {
			continue
		}
		if ck := j.LastCheckpoint(now, s.model); ck > ri.ckpt {
			// A victim's cost fell: that can change the plan only if the
			// last one weighed costs and some waiting job may preempt it.
			s.changed = s.changed || s.weighed && v.mayPreempt(s, st, j)
			ri.ckpt = ck
			ri.allocs = restamp(ri.allocs, ck, false)
			if err := s.upsertAllocs(ri.allocs); err != nil {
				return err
			}
		}
		// Always later than now, so this loop ends even if the model and
		// nextCkpt ever disagreed.
		heap.Push(&s.ckpts, runAt{t: max(s.nextCkpt(ri), now+1), ri: ri})
	}
	return nil
}

// Schedule implements sim.Scheduler: update the model, run one engine
// cycle, translate the plan.
func (s *Scheduler) Schedule(st *sim.State, now int64) (sim.Actions, error) {
	if !s.inited {
		if err := s.init(st); err != nil {
			return sim.Actions{}, err
		}
	}
	if err := s.apply(st, now); err != nil {
		return sim.Actions{}, fmt.Errorf("update model: %w", err)
	}
	s.feedIdle(now)
	if s.quiet(st, now) {
		return sim.Actions{Skipped: true}, nil
	}
	if s.idle(st) && now < s.idleDue() {
		s.looked(now, nil)
		return sim.Actions{Skipped: true}, nil
	}
	plan := s.eng.Decide(s.store.Snapshot(), at(now))
	s.looked(now, plan)
	return s.actions(plan)
}

// actions translates an engine plan into simulator actions, checking that
// it names only jobs, nodes and GPUs the simulation has.
func (s *Scheduler) actions(plan *engine.Plan) (sim.Actions, error) {
	var acts sim.Actions
	if len(plan.Requeues) > 0 {
		// Simulated gangs never lose a member: a requeue means the model
		// fed to the engine is wrong.
		return acts, fmt.Errorf("plan requeues incomplete gang %q (%s)", plan.Requeues[0].JobID, plan.Requeues[0].Reason)
	}
	if err := s.reclaims(plan, &acts); err != nil {
		return acts, err
	}
	for _, p := range plan.Preemptions {
		j := s.jobs[p.JobID]
		if j == nil {
			return acts, fmt.Errorf("plan preempts unknown job %q", p.JobID)
		}
		if j.State != sim.Running {
			return acts, fmt.Errorf("plan preempts job %q which is %s", p.JobID, j.State)
		}
		acts.Preempt = append(acts.Preempt, sim.Preemption{Job: j, Grace: int64(p.Grace / time.Second)})
	}
	for _, a := range plan.Admissions {
		if err := s.admission(a, &acts); err != nil {
			return acts, err
		}
	}
	return acts, nil
}

// admission adds the placements of one admitted job to acts.
func (s *Scheduler) admission(a engine.Admission, acts *sim.Actions) error {
	j := s.jobs[a.JobID]
	if j == nil {
		return fmt.Errorf("plan admits unknown job %q", a.JobID)
	}
	if len(a.Groups) != 1 || len(a.Groups[0].Allocs) != len(j.Members) {
		return fmt.Errorf("plan admits job %q with %d groups, want 1 group of %d allocations", a.JobID, len(a.Groups), len(j.Members))
	}
	for m, ap := range a.Groups[0].Allocs {
		n, ok := s.nodeIndex[ap.NodeID]
		if !ok {
			return fmt.Errorf("plan admits job %q on unknown node %q", a.JobID, ap.NodeID)
		}
		gpus := make([]int, len(ap.GPUs))
		for k, id := range ap.GPUs {
			g, ok := s.gpuIndex[id]
			if !ok {
				return fmt.Errorf("plan admits job %q on unknown GPU %q", a.JobID, id)
			}
			gpus[k] = g
		}
		acts.Place = append(acts.Place, sim.Placement{Job: j, Member: m, Alloc: sim.Alloc{Node: n, GPUs: gpus}})
	}
	return nil
}
