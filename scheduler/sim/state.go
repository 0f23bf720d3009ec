package sim

import (
	"cmp"
	"slices"
	"sort"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// JobState is where a simulated job is in its life.
type JobState int

const (
	// Future: not submitted yet.
	Future JobState = iota
	// Pending: submitted, no member placed (or requeued after preemption).
	Pending
	// Partial: some but not all members placed; the placed ones hold their
	// GPUs idle. Only a scheduler that places gangs partially (nomad-native)
	// produces it.
	Partial
	// Running: every member placed; the job makes progress.
	Running
	// Stopping: preempted, inside its grace period; it keeps its GPUs (and
	// keeps running) until the grace ends, then it is requeued.
	Stopping
	// Done: finished.
	Done
)

func (s JobState) String() string {
	return [...]string{"future", "pending", "partial", "running", "stopping", "done"}[s]
}

// Alloc is one placed member of a job in the simulator's GPU ledger: a
// node and the GPU indices on it.
type Alloc struct {
	Node int
	GPUs []int
}

// Job is a simulated job: the trace row, the engine's model of it
// (Cluster) and where it is in its life. Schedulers read it; only the
// simulator writes it.
type Job struct {
	// Job is the row as read: what only the simulator knows (the true
	// Duration) and what the reports name the job by.
	trace.Job
	// Index is the job's position in State.Jobs (submit order).
	Index int
	// TierRank is the index of Tier in trace.Tiers: 0 is the top tier.
	TierRank int
	// Cluster is the job as the engine models it (cluster.Job with its
	// jobspec.Spec): built once when the job is submitted, one task group
	// GroupName of Count() members of MemberGPUs() GPUs each; nil before
	// and once it is done. Values handed out are never modified: a start
	// (State running) and a requeue (State queued, submitted anew)
	// replace it with an updated copy, so it can go to the engine's store
	// as it is.
	Cluster *cluster.Job
	// Run is the current run's allocations as the engine models them
	// (cluster.Alloc), built when every member is placed; nil when the job
	// does not run. Its values do not change once built.
	Run []*cluster.Alloc

	State JobState
	// Allocs has one entry per member; Node is -1 while unplaced.
	Allocs []Alloc
	Placed int
	// Start is when the current run began (all members placed), -1 if not
	// running. FirstStart is the first such time, -1 before.
	Start, FirstStart int64
	// Saved is the progress (seconds of useful work) kept by checkpoints.
	Saved int64
	// Restarts counts runs after the first; every restart first spends the
	// model's restart cost without progress.
	Restarts int
	// StopAt is the end of the grace period while Stopping.
	StopAt int64
	// Finish is the completion time once Done.
	Finish int64
	// Preempted counts preemptions of this job.
	Preempted int
	// FreeAtSubmit and WidestFreeAtSubmit are the cluster's free GPUs and
	// the most free on one node when the job arrived, before any policy
	// decided on it (JobResult; -1 unless Options.FreeAtSubmit).
	FreeAtSubmit, WidestFreeAtSubmit int

	// hangAt is when the current run hangs (-1: it does not; see
	// IdleModel); hangDone once the job has hung (hangs are transient);
	// reclaiming while a stop it is in is a reclaim, not a preemption.
	hangAt     int64
	hangDone   bool
	reclaiming bool
	// stopProgress is what the stop under way says the job will have
	// saved (engine.Stop.Progress: its tasks run on to the end of the
	// grace, as simulated tasks do); requeue writes it into the contract
	// it queues again with, as the executor writes impact_progress when
	// it parks the job. Saved is the simulator's own count, which the
	// engine is not told.
	stopProgress time.Duration
	// signalSave: the stop under way lets the job save on its signal
	// (Model.SaveOnSignal), at signalAt; signalProgress is then the
	// plan's engine.Stop.ProgressOnSignal, which requeue writes instead.
	signalSave     bool
	signalAt       int64
	signalProgress time.Duration

	epoch     int   // invalidates finish / release events of older runs
	queuedAt  int64 // last time it entered the queue
	partialAt int64
	// count, each: the gang's shape (GangFor), which Cluster's group has.
	count, each int
}

// Count is the gang's number of members (allocations): one for a job that
// fits a node, else ceil(GPUs/node GPUs) whole nodes (GangFor); its model's
// group has as many.
func (j *Job) Count() int { return j.count }

// MemberGPUs is the GPUs each member needs.
func (j *Job) MemberGPUs() int { return j.each }

// TotalGPUs is the GPUs the gang holds when fully placed.
func (j *Job) TotalGPUs() int { return j.Count() * j.MemberGPUs() }

// IsPreemptible is the job's resolved preemptibility (its model's spec),
// while it is submitted and not done.
func (j *Job) IsPreemptible() bool { return j.Cluster.Spec.Preemptible }

// RunStartOverhead is the restart cost this run pays before progress.
func (j *Job) runOverhead(m Model) int64 {
	if j.Restarts > 0 {
		return m.RestartCost
	}
	return 0
}

// ExpectedEnd is when the current run finishes if it is not preempted;
// a run that hangs ends at its walltime estimate instead (killed, see
// IdleModel).
func (j *Job) ExpectedEnd(m Model) int64 {
	if j.hangAt >= 0 {
		return max(j.WalltimeEnd(m), j.hangAt+1)
	}
	return j.Start + j.runOverhead(m) + (j.Duration - j.Saved)
}

// WalltimeEnd is when the current run ends by the job's walltime estimate
// (what a scheduler may know: not the true duration).
func (j *Job) WalltimeEnd(m Model) int64 {
	rem := j.Walltime - j.Saved
	if rem < 0 {
		rem = 0
	}
	return j.Start + j.runOverhead(m) + rem
}

// progressAt is the useful work the current run has done by t.
func (j *Job) progressAt(t int64, m Model) int64 {
	if j.hangAt >= 0 && t > j.hangAt {
		t = j.hangAt // a hung run makes no progress
	}
	w := t - j.Start - j.runOverhead(m)
	if w < 0 {
		return 0
	}
	return min(w, j.Duration-j.Saved)
}

// LastCheckpoint is the time of the current run's last checkpoint (or its
// start if none yet): work after it is lost on preemption.
func (j *Job) LastCheckpoint(t int64, m Model) int64 {
	if m.CheckpointInterval <= 0 {
		return j.Start
	}
	w := j.progressAt(t, m)
	k := (w / m.CheckpointInterval) * m.CheckpointInterval
	if k == 0 {
		return j.Start
	}
	return j.Start + j.runOverhead(m) + k
}

// Node is a simulated node and who holds its GPUs.
type Node struct {
	NodeSpec
	Index int
	// Cluster is the node as the engine models it (its ID is the node's
	// name; GPU g is Cluster.GPUs[g]), built once with the cluster.
	Cluster *cluster.Node
	// Owner is the job index holding each GPU, or -1.
	Owner []int32
	// Free is the number of free GPUs; IslandFree the free GPUs per island.
	Free       int
	IslandFree []int
}

// IslandOf is the NVLink island of GPU g.
func (n *Node) IslandOf(g int) int { return g / (n.GPUs / n.Islands) }

// State is what a scheduler sees at a decision point.
type State struct {
	Nodes []*Node
	// Jobs are all jobs of the trace, in submit order.
	Jobs []*Job
	// Model is the run's modelled effects.
	Model Model
	// FreeGPUs is the total of Node.Free.
	FreeGPUs int
	// MaxNodeFree is the largest Node.Free (a quick reject for placement).
	MaxNodeFree int

	changes []Change
	// byID finds the jobs and nodes a plan names (the model's index,
	// built once with it).
	jobByID  map[string]*Job
	nodeByID map[string]*Node

	pending      []*Job // submitted and waiting (Pending or Partial), in submit order
	pendingDirty bool
	running      map[int]*Job // Running or Stopping
}

// Job returns the job with the given ID, or nil.
func (s *State) Job(id string) *Job { return s.jobByID[id] }

// Queue returns the waiting jobs (Pending and Partial) in submit order.
// The slice is the simulator's: do not modify it.
func (s *State) Queue() []*Job {
	if s.pendingDirty {
		out := s.pending[:0]
		for _, j := range s.pending {
			if j.State == Pending || j.State == Partial {
				out = append(out, j)
			}
		}
		for i := len(out); i < len(s.pending); i++ {
			s.pending[i] = nil
		}
		s.pending = out
		s.pendingDirty = false
	}
	return s.pending
}

// Active returns the running and stopping jobs, ordered by index.
func (s *State) Active() []*Job {
	out := make([]*Job, 0, len(s.running))
	for _, j := range s.running {
		out = append(out, j)
	}
	slices.SortFunc(out, func(a, b *Job) int { return cmp.Compare(a.Index, b.Index) })
	return out
}

func (s *State) enqueue(j *Job) {
	// Keep submit order: a requeued job goes back to its original place.
	q := s.Queue()
	i := sort.Search(len(q), func(i int) bool { return q[i].Index > j.Index })
	q = append(q, nil)
	copy(q[i+1:], q[i:])
	q[i] = j
	s.pending = q
}

func (s *State) refreshFree() {
	s.FreeGPUs, s.MaxNodeFree = 0, 0
	for _, n := range s.Nodes {
		s.FreeGPUs += n.Free
		s.MaxNodeFree = max(s.MaxNodeFree, n.Free)
	}
}

// FreeGPUsOn returns the indices of free GPUs on node n, island by island.
func (n *Node) FreeGPUsOn() []int {
	out := make([]int, 0, n.Free)
	for g, o := range n.Owner {
		if o < 0 {
			out = append(out, g)
		}
	}
	return out
}

// ChangeKind says what happened to a job.
type ChangeKind int

const (
	// Submitted: the job entered the queue for the first time.
	Submitted ChangeKind = iota
	// Started: every member was placed; the job runs.
	Started
	// Stopping: the job was preempted and is in its grace period.
	StopRequested
	// Requeued: a preempted job stopped and is waiting again.
	Requeued
	// Finished: the job completed.
	Finished
	// StopWithdrawn: the scheduler withdrew the job's preemption within
	// its grace; it runs on as before.
	StopWithdrawn
	// Hung: the job's current run hung (its GPUs read 0% from now on;
	// see IdleModel).
	Hung
)

// Change is one state change of a job since the previous cycle.
type Change struct {
	Kind ChangeKind
	Job  *Job
	// Model is the job's model (Job.Cluster) as the change left it: what
	// the engine's store should hold for it now (the last change of a job
	// is its current model; Finished's is the model it ended with).
	Model *cluster.Job
	// At is when it happened (for Started, the run's start).
	At int64
	// Allocs, for Started, Finished and Requeued, are the allocations of
	// the run that started or ended (Job.Run of that run: the job's own is
	// cleared when it releases its GPUs), so that a scheduler that learns
	// of a run only after it ended can still account for it.
	Allocs []*cluster.Alloc
}

// Changes returns what happened to jobs since the previous cycle, in order,
// so that a scheduler can keep its own model up to date incrementally. Each
// change is reported once.
func (s *State) Changes() []Change { return s.changes }
