// Package impact drives the project's scheduling core (scheduler/engine)
// inside the simulator, as the `impact` policy: the very engine the live
// service runs, fed through a cluster.Store the way the Nomad adapter feeds
// it, its plans handed to the simulator as they are.
//
// The simulator models every node and job as the engine's own types
// (sim.Node.Cluster, sim.Job.Cluster, sim.Job.Run), so the adapter only
// puts them in the store, incrementally from the simulator's change feed
// (submits, starts, stop requests, requeues, finishes): a cycle costs the
// engine's decision, not a rebuild or a translation of the model. Running
// allocations carry their last checkpoint time, updated as the simulated
// jobs checkpoint, so the engine weighs the work a preemption would lose as
// it would live. cadence.go holds which of the live agent's decisions the
// replay skips, because their plan would repeat the last one's.
package impact

import (
	"container/heap"
	_ "embed"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
	"github.com/impact-sched/nomad-impact/scheduler/sim"
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

	running map[int]*runInfo // by job index
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
	// hrTurnAt: when the last plan's first headroom would yield or be
	// kept again by its idle budget (engine.HeadroomIdleBudget.TurnsAt;
	// 0: none).
	hrTurnAt int64
	// Refresh bounds how long ticks with nothing changed are skipped
	// (seconds; 0: never skipped), see quiet.
	Refresh int64
	// hung: runs the idleness model hung, by job index (idle.go).
	hung map[int]*hungRun
	// tierNames: a trace tier -> the policy's tier it resolves to.
	tierNames map[string]string
	// reasons traces the waiting reasons (WithReasons; nil: off).
	reasons *reasonTrace
}

type runInfo struct {
	job    *sim.Job
	spec   *jobspec.Spec // the run's contract (its job's model's)
	allocs []*cluster.Alloc
	ckpt   int64 // last checkpoint time told to the store
	// watched: the run has an entry in the checkpoint heap (watchCkpt);
	// a stopping run's is dropped, and a withdrawn stop watches again.
	watched bool
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
	if s.model.CheckpointInterval > 0 && ri.spec.Preemptible && !ri.watched {
		ri.watched = true
		heap.Push(&s.ckpts, runAt{t: s.nextCkpt(ri), ri: ri})
	}
}

// DefaultRefresh is Scheduler.Refresh unless set: the baselines' timer in
// the standard scenario.
const DefaultRefresh = 300

// New builds the scheduler for a validated policy.
func New(pol *policy.Policy, logger hclog.Logger, opts ...Option) (*Scheduler, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	engOpts := []engine.Option{engine.WithLogger(logger.Named("sim")), engine.WithLocalityLabels(sim.RackLabel)}
	var reasons *reasonTrace
	if o.reasons != nil {
		reasons = newReasonTrace(o.reasons)
	} else {
		// Nobody reads waiting reasons in a replay: skip formatting them.
		engOpts = append(engOpts, engine.WithoutExplanations())
	}
	eng, err := engine.New(pol, engOpts...)
	if err != nil {
		return nil, fmt.Errorf("impact scheduler: %w", err)
	}
	return &Scheduler{
		reasons:   reasons,
		pol:       pol,
		eng:       eng,
		store:     cluster.NewStore(),
		hung:      map[int]*hungRun{},
		running:   map[int]*runInfo{},
		tierNames: map[string]string{},
		lastLook:  -1,
		Refresh:   DefaultRefresh,
	}, nil
}

// Name implements sim.Scheduler.
func (s *Scheduler) Name() string { return Name }

func (s *Scheduler) init(st *sim.State) error {
	s.model = st.Model
	for _, n := range st.Nodes {
		if err := s.store.UpsertNode(n.Cluster); err != nil {
			return err
		}
	}
	s.inited = true
	return nil
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
			ca.LastCheckpoint = sim.At(ckpt)
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
// completed: the run ended on its own (the job finished), not stopped
// or requeued, so its run time is one the engine may learn from.
func (s *Scheduler) finishAllocs(ri *runInfo, end int64, completed bool) {
	for _, a := range ri.allocs {
		if completed {
			s.store.CompleteAlloc(a.ID, sim.At(end))
		} else {
			s.store.FinishAlloc(a.ID, sim.At(end))
		}
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
		return s.store.UpsertJob(c.Model)
	case sim.Started:
		return s.started(c)
	case sim.StopRequested:
		ri := s.running[j.Index]
		if ri == nil || j.State != sim.Stopping {
			return nil // already stopped or finished: the next change says which
		}
		ri.allocs = restamp(ri.allocs, ri.ckpt, true)
		return s.upsertAllocs(ri.allocs)
	case sim.StopWithdrawn:
		ri := s.running[j.Index]
		if ri == nil || j.State != sim.Running {
			return nil // stopped again or finished since: the next change says which
		}
		ri.allocs = restamp(ri.allocs, ri.ckpt, false)
		s.watchCkpt(ri)
		return s.upsertAllocs(ri.allocs)
	case sim.Requeued:
		if ri := s.running[j.Index]; ri != nil {
			s.finishAllocs(ri, c.At, false)
			delete(s.running, j.Index)
		}
		return s.store.UpsertJob(c.Model)
	case sim.Hung:
		if ri := s.running[j.Index]; ri != nil {
			s.hung[j.Index] = &hungRun{ri: ri, fed: -1}
			s.changed = true
		}
	case sim.Finished:
		if ri := s.running[j.Index]; ri != nil {
			s.finishAllocs(ri, c.At, true)
			delete(s.running, j.Index)
		}
		s.store.DeleteJob(j.ID)
	}
	return nil
}

// started records a run that started. A run that already ended is
// recorded too: its Finished or Requeued change follows and charges its
// GPU time.
func (s *Scheduler) started(c sim.Change) error {
	j := c.Job
	if err := s.store.UpsertJob(c.Model); err != nil {
		return err
	}
	ri := &runInfo{job: j, spec: &c.Model.Spec, ckpt: c.At, allocs: c.Allocs}
	s.running[j.Index] = ri
	if j.State == sim.Running {
		s.watchCkpt(ri)
		if s.pol.Preemption.Enabled && ri.spec.Preemptible {
			heap.Push(&s.youngUntil, runAt{t: c.At + int64(s.pol.MinRuntime(*ri.spec)/time.Second), ri: ri})
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
			ri.watched = false
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

// Schedule implements sim.Scheduler: update the store, run one engine
// cycle and hand its plan to the simulator (nil when the cycle is skipped:
// see quiet and idle).
func (s *Scheduler) Schedule(st *sim.State, now int64) (*engine.Plan, error) {
	if !s.inited {
		if err := s.init(st); err != nil {
			return nil, err
		}
	}
	if err := s.apply(st, now); err != nil {
		return nil, fmt.Errorf("update model: %w", err)
	}
	s.feedIdle(now)
	if s.quiet(st, now) {
		return nil, nil
	}
	if s.idle(st) && now < s.idleDue() {
		s.looked(now, nil)
		return nil, nil
	}
	plan := s.eng.Decide(s.store.Snapshot(), sim.At(now))
	s.looked(now, plan)
	if s.reasons != nil {
		if err := s.reasons.record(now, plan); err != nil {
			return nil, err
		}
	}
	return plan, checkAdmissions(st, plan)
}

// checkAdmissions holds the engine to its contract that an admission
// places every member of the job (the simulator would take fewer as a
// partial placement, which only nomad-native makes).
func checkAdmissions(st *sim.State, plan *engine.Plan) error {
	for _, a := range plan.Admissions {
		j := st.Job(a.JobID)
		if j == nil {
			return fmt.Errorf("plan admits unknown job %q", a.JobID)
		}
		if len(a.Groups) != 1 || len(a.Groups[0].Allocs) != j.Count() {
			return fmt.Errorf("plan admits job %q with %d groups, want 1 group of %d allocations", a.JobID, len(a.Groups), j.Count())
		}
	}
	return nil
}
