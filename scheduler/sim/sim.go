// Package sim is the discrete-event simulator behind `impact sim`: it replays
// a job trace on a simulated GPU cluster under a scheduling policy and
// measures the layers of README.md's "What it optimises" (occupancy,
// impact, lost work, utilisation) so that
// policies can be compared on the same input.
//
// The engine is a heap of events (submit, finish, end of a preemption's
// grace period, scheduling cycle). At each cycle it calls the policy's
// Scheduler with the current State and applies the engine.Plan it returns
// (admissions, preemptions, reclaims), checking it: a policy bug is an
// error, never a corrupt run. A job has one model from trace row to
// engine: the row and the cluster.Job the engine reads, built once when
// the row is read (model.go). Every policy, the baselines and the impact
// core alike, runs through the same engine and the same accounting.
//
// Modelled effects (and only these): jobs checkpoint every
// Model.CheckpointInterval seconds of progress; a preempted job keeps its
// GPUs and keeps running for its grace period, then loses the work done
// since its last checkpoint (with Model.SaveOnSignal, it saves on the
// signal and exits once saved, where its grace allows); every restart
// spends Model.RestartCost seconds before progress resumes. A gang makes
// progress only once every member is placed. Nodes never fail.
// Optionally (Options.Idle, see IdleModel) a share of jobs hang once and
// hold their GPUs at 0% until their walltime ends or the scheduler
// reclaims them.
package sim

import (
	"fmt"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// Model holds the modelled effects and the cycle, in seconds.
type Model struct {
	// CheckpointInterval is the progress between two checkpoints.
	CheckpointInterval int64
	// RestartCost is the time a restarted job spends (holding its GPUs)
	// before it makes progress again: reloading the checkpoint.
	RestartCost int64
	// Grace is the time between the checkpoint signal and the stop.
	Grace int64
	// SaveOnSignal is how long a job takes to save its work after the
	// checkpoint signal; 0 (the default): jobs never save on the signal
	// and a preempted one loses the work since its last periodic
	// checkpoint, whatever its grace. A preempted job whose stop gives it
	// at least that long keeps the work it had done at the signal and
	// exits once saved, freeing its GPUs then rather than at the end of
	// its grace, as a task that saves and exits with the requeue code
	// does live (example/jobs/train.py); it queues again with the plan's
	// ProgressOnSignal as its impact_progress, as the executor writes for
	// such a task. A hung run never saves. What a stop's grace is worth
	// to its victim, a loan's short one (policy headroom loan_grace)
	// included, shows only with it; work taken back (take_back) stops at
	// once and never saves.
	SaveOnSignal int64
	// Debounce is the time from an event (a submit, a finish, a stop) to
	// the decision it triggers; events inside it are collected into that
	// one decision, as the live agent's cycle.debounce does. 0 decides
	// after every batch of simultaneous events.
	Debounce int64
	// Interval is the timer: while jobs wait, a cycle runs at every
	// multiple of it even when no event happens, so time-dependent
	// decisions (minimum runtimes, aging) are taken, as the live agent's
	// cycle.interval does.
	Interval int64
	// Sample is the step of the time series kept for plots and fair share.
	Sample int64
}

// Cadence says in words when a scheduler under m decides.
func (m Model) Cadence() string {
	ev := "after every batch of simultaneous events"
	if m.Debounce > 0 {
		ev = fmt.Sprintf("%ds after the first event of a burst (events inside it join that decision)", m.Debounce)
	}
	return fmt.Sprintf("%s, and every %ds while jobs wait", ev, m.Interval)
}

// DefaultModel is the model of the standard scenario with the baselines'
// cadence: a decision after every batch of simultaneous events (as Nomad
// evaluates at once) and every 300s while jobs wait. simcmd gives the
// impact scheduler the live agent's cadence instead.
func DefaultModel() Model {
	return Model{
		CheckpointInterval: 1800,
		RestartCost:        120,
		Grace:              60,
		Debounce:           0,
		Interval:           300,
		Sample:             600,
	}
}

// Validate rejects negative or inconsistent values.
func (m Model) Validate() error {
	switch {
	case m.CheckpointInterval < 0:
		return fmt.Errorf("checkpoint interval must not be negative, got %d", m.CheckpointInterval)
	case m.RestartCost < 0:
		return fmt.Errorf("restart cost must not be negative, got %d", m.RestartCost)
	case m.Grace < 0:
		return fmt.Errorf("grace must not be negative, got %d", m.Grace)
	case m.SaveOnSignal < 0:
		return fmt.Errorf("save on signal must not be negative, got %d", m.SaveOnSignal)
	case m.Debounce < 0:
		return fmt.Errorf("debounce must not be negative, got %d", m.Debounce)
	case m.Interval <= 0:
		return fmt.Errorf("interval must be positive, got %d", m.Interval)
	case m.Debounce >= m.Interval:
		return fmt.Errorf("debounce %ds must be shorter than the interval %ds", m.Debounce, m.Interval)
	case m.Sample <= 0:
		return fmt.Errorf("sample step must be positive, got %d", m.Sample)
	}
	return nil
}

// Scheduler is a scheduling policy. Schedule looks at the state and returns
// what to do now as the engine's own plan (engine.Plan), which the
// simulator applies directly: the plan names jobs by Job.Cluster.ID, nodes
// by Node.Cluster.ID and GPUs by their instance IDs in Node.Cluster, as the
// engine's plans always do. Schedule must not modify the state.
//
// The simulator reads, in this order: Withdrawals (a stop under way,
// within its grace, cancelled: the job runs on), Reclaims (each must
// requeue: the simulator models no stop for good), Preemptions (whole
// gangs, with their Grace), then Admissions (one group, GroupName; each allocation places
// the job's next unplaced member, so an admission with fewer allocations
// than the job has unplaced members places it partially, as nomad-native
// does). Requeues are an error: simulated gangs never lose a member. The
// rest of the plan (explanations, queue order, headroom) is the
// scheduler's own business.
//
// A nil plan says the scheduler saw at a glance that there was nothing to
// decide (no room for any waiting job and nothing it may preempt) and did
// not run its decision; such cycles are left out of the decision latency,
// which measures real decisions.
type Scheduler interface {
	Name() string
	Schedule(s *State, now int64) (*engine.Plan, error)
}

// Options configure a run.
type Options struct {
	Cluster ClusterSpec
	Model   Model
	// Window is the submission window [Start, End) in trace seconds over
	// which occupancy and fair share are measured: the contended period the
	// scenario is about, not the drain after the last submission. Zero
	// values mean the first and last submit.
	WindowStart, WindowEnd int64
	// TierWeights weight job completion times by tier (order of
	// trace.Tiers) in WeightedJCT.
	TierWeights []float64
	// FreeAtSubmit records, per job, the GPUs free when it arrived
	// (JobResult.FreeAtSubmit): a diagnostic, off by default because it
	// counts every node's free GPUs at every submit (about 3% more wall
	// time, measured with wide spread, on robustness scenarios of 95 to
	// 125 nodes).
	FreeAtSubmit bool
	// Progress, if set, is called about every ProgressEvery of wall time.
	Progress      func(Progress)
	ProgressEvery time.Duration
	// MaxSimTime stops the run (with unfinished jobs reported) when the
	// simulated clock passes it; 0 means no limit.
	MaxSimTime int64
	// Idle is the model of jobs that hang (off by default).
	Idle IdleModel
}

// Progress is a snapshot of a run for a progress line.
type Progress struct {
	Policy    string
	Now       int64
	Done      int
	Total     int
	Queue     int
	Elapsed   time.Duration
	WindowEnd int64
}

// DefaultTierWeights are the report's JCT weights per tier (critical, high,
// normal, scavenger).
var DefaultTierWeights = []float64{8, 4, 2, 1}

type eventKind int

// Events at the same time are handled in this order: capacity is released
// before anything arrives, and the cycle comes last.
const (
	evFinish eventKind = iota
	evRelease
	evHang
	evSubmit
	evCycle
)

type event struct {
	t     int64
	kind  eventKind
	job   int
	epoch int
	seq   uint64
}

type eventHeap []event

func (h eventHeap) less(a, b int) bool {
	x, y := h[a], h[b]
	if x.t != y.t {
		return x.t < y.t
	}
	if x.kind != y.kind {
		return x.kind < y.kind
	}
	return x.seq < y.seq
}

func (h *eventHeap) push(e event) {
	*h = append(*h, e)
	i := len(*h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		(*h)[i], (*h)[p] = (*h)[p], (*h)[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	old := *h
	top := old[0]
	n := len(old) - 1
	old[0] = old[n]
	*h = old[:n]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && h.less(l, m) {
			m = l
		}
		if r < n && h.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		(*h)[i], (*h)[m] = (*h)[m], (*h)[i]
		i = m
	}
	return top
}

// GangFor splits a job of gpus GPUs into gang members for nodes of
// nodeGPUs: one member of gpus if it fits a node, else ceil(gpus/nodeGPUs)
// whole-node members.
func GangFor(gpus, nodeGPUs int) (count, each int) {
	if gpus <= nodeGPUs {
		return 1, gpus
	}
	return (gpus + nodeGPUs - 1) / nodeGPUs, nodeGPUs
}

// Run replays jobs (labelled, sorted by submit) under sched.
func Run(jobs []trace.Job, sched Scheduler, opts Options) (*Result, error) {
	if err := opts.Cluster.Validate(); err != nil {
		return nil, err
	}
	if err := opts.Model.Validate(); err != nil {
		return nil, err
	}
	if err := opts.Idle.Validate(); err != nil {
		return nil, err
	}
	if len(opts.TierWeights) == 0 {
		opts.TierWeights = DefaultTierWeights
	}
	r, err := newRunner(jobs, sched, opts)
	if err != nil {
		return nil, err
	}
	if err := r.loop(); err != nil {
		return nil, fmt.Errorf("policy %s: %w", sched.Name(), err)
	}
	return r.result(), nil
}
