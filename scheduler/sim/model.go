package sim

import (
	"fmt"
	"strconv"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// The engine's model of the simulated cluster: every node and job is built
// once, as the engine's own types (cluster.Node, cluster.Job with its
// jobspec.Spec), and every scheduler reads and plans in those terms.
const (
	// Pool is the node pool of every simulated node.
	Pool = "gpu"
	// RackLabel is the node label holding a node's rack (NodeSpec.Rack).
	RackLabel = "rack"
	// GroupName is the task group of every simulated job.
	GroupName = "main"
	// Namespace of every simulated job.
	Namespace = "default"
	// Priority is every simulated job's Nomad priority.
	Priority = 50
)

// At is simulated time t (seconds) as the engine's clock reads it.
func At(t int64) time.Time { return time.Unix(t, 0).UTC() }

// clusterNode builds the engine's model of node n: its ID is its name,
// GPU g has instance ID "<name>-g<g>" and its island as NVLink island and
// NUMA node.
func clusterNode(n *Node) *cluster.Node {
	cn := &cluster.Node{ID: n.Name, Name: n.Name, Pool: Pool, Labels: map[string]string{RackLabel: n.Rack},
		Eligible: true, Ready: true, GPUs: make([]cluster.GPU, n.GPUs)}
	for g := range cn.GPUs {
		cn.GPUs[g] = cluster.GPU{ID: fmt.Sprintf("%s-g%d", n.Name, g), Index: g, Island: n.IslandOf(g), NUMA: n.IslandOf(g), Model: "sim", Healthy: true}
	}
	return cn
}

// jobModel holds a cluster.Job and its one group in one allocation.
type jobModel struct {
	job   cluster.Job
	group [1]cluster.TaskGroup
}

// clusterJob builds the engine's model of a trace row, queued: one group
// of count members of each GPUs.
func clusterJob(tj *trace.Job, count, each int, m Model) *cluster.Job {
	sp := spec(tj, m)
	jm := &jobModel{
		job: cluster.Job{
			ID:        tj.ID,
			Namespace: Namespace,
			Name:      tj.ID,
			Priority:  Priority,
			Submit:    At(tj.Submit),
			State:     cluster.JobQueued,
			Spec:      sp,
		},
		group: [1]cluster.TaskGroup{{Name: GroupName, Count: count, GPUs: each, Spec: sp}},
	}
	jm.job.Groups = jm.group[:]
	return &jm.job
}

// spec is the impact contract a job is submitted with: its jobspec's.
// The executor parks a preempted job by re-registering the job as it is
// (park.go in scheduler/nomad), its impact_walltime still the whole run,
// adding only impact_progress, the work the preemption's plan said the
// run saved (engine.Stop.Progress); queued does the same. The engine
// expects it to need the walltime less that (jobspec.Spec.Left): what
// the plan could tell, not the simulator's own count of the work saved
// (until the twenty-first pass the simulator told the engine the walltime
// left after that count, plus the restart cost: knowledge the live agent
// does not have).
func spec(tj *trace.Job, m Model) jobspec.Spec {
	var walltime time.Duration
	if tj.Walltime != trace.UnknownWalltime {
		walltime = time.Duration(tj.Walltime) * time.Second
	}
	return jobspec.Spec{
		Tier:           tj.Tier,
		Project:        tj.Project,
		Preemptible:    tj.Preemptible != nil && *tj.Preemptible,
		PreemptibleSet: true,
		Grace:          time.Duration(m.Grace) * time.Second,
		Walltime:       walltime,
	}
}

// running replaces j's model by a copy that runs.
func (j *Job) running() {
	cj := *j.Cluster
	cj.State = cluster.JobRunning
	j.Cluster = &cj
}

// queued replaces j's model by a copy queued again at now, with the
// contract it was submitted with (spec) and the work saved, progress, as
// its impact_progress. Under the impact scheduler every
// requeue is a new registration on Nomad: the executor parks a preempted
// or reclaimed job by re-registering it once its grace is over, and the
// gang watch requeues a run that lost a member (a hung run killed at its
// walltime) the same way. Nomad stamps every registration with a new
// SubmitTime, the submit time the engine orders equal scores by and ages
// from, so the job queues behind the jobs of its score already waiting,
// not at its user's first submission. (The baselines order their queue
// by the trace, State.enqueue, and never read this model.)
func (j *Job) queued(now int64, progress time.Duration) {
	jm := &jobModel{job: *j.Cluster, group: [1]cluster.TaskGroup{j.Cluster.Groups[0]}}
	jm.job.State = cluster.JobQueued
	jm.job.Submit = At(now)
	jm.job.Spec.Progress = progress
	jm.group[0].Spec.Progress = progress
	jm.job.Groups = jm.group[:]
	j.Cluster = &jm.job
}

// runAllocs builds the engine's model of the run that starts now: one
// allocation per member, named "<job>/<restarts>/<member>".
func (r *runner) runAllocs(j *Job) []*cluster.Alloc {
	// One block each for the allocations, the pointers and the GPU IDs.
	allocs := make([]cluster.Alloc, len(j.Allocs))
	out := make([]*cluster.Alloc, len(j.Allocs))
	ids := make([]string, j.TotalGPUs())
	start := At(r.now)
	for m, a := range j.Allocs {
		cn := r.st.Nodes[a.Node].Cluster
		ca := &allocs[m]
		*ca = cluster.Alloc{
			ID:     j.ID + "/" + strconv.Itoa(j.Restarts) + "/" + strconv.Itoa(m),
			JobID:  j.ID,
			Group:  GroupName,
			NodeID: cn.ID,
			Start:  start,
			GPUs:   ids[:len(a.GPUs):len(a.GPUs)],
		}
		ids = ids[len(a.GPUs):]
		for k, g := range a.GPUs {
			ca.GPUs[k] = cn.GPUs[g].ID
		}
		out[m] = ca
	}
	return out
}

// Place adds to plan the placement of j's next unplaced member on GPUs
// gpus (indices) of node n: to j's admission if it is the plan's last,
// else to a new one. For schedulers that pick GPUs from the simulator's
// ledger (Node.Owner), as the baselines do.
func Place(plan *engine.Plan, j *Job, n *Node, gpus []int) {
	ap := engine.AllocPlacement{NodeID: n.Cluster.ID, GPUs: make([]string, len(gpus))}
	for k, g := range gpus {
		ap.GPUs[k] = n.Cluster.GPUs[g].ID
	}
	if k := len(plan.Admissions) - 1; k >= 0 && plan.Admissions[k].JobID == j.Cluster.ID {
		g := &plan.Admissions[k].Groups[0]
		g.Allocs = append(g.Allocs, ap)
		return
	}
	// The group and its first allocation in one block: most jobs have one.
	gp := &struct {
		g [1]engine.GroupPlacement
		a [1]engine.AllocPlacement
	}{g: [1]engine.GroupPlacement{{Group: GroupName}}, a: [1]engine.AllocPlacement{ap}}
	gp.g[0].Allocs = gp.a[:]
	plan.Admissions = append(plan.Admissions, engine.Admission{JobID: j.Cluster.ID, Pool: Pool, Groups: gp.g[:]})
}

// apply carries out a plan (see Scheduler for what is read, in which
// order). It reports whether the plan did anything.
func (r *runner) apply(plan *engine.Plan) (bool, error) {
	if len(plan.Requeues) > 0 {
		// Simulated gangs never lose a member: a requeue means the model
		// the scheduler read is wrong.
		return false, fmt.Errorf("plan requeues incomplete gang %q (%s)", plan.Requeues[0].JobID, plan.Requeues[0].Reason)
	}
	for _, w := range plan.Withdrawals {
		if err := r.withdraw(w); err != nil {
			return false, fmt.Errorf("withdrawal: %w", err)
		}
	}
	for _, rc := range plan.Reclaims {
		if !rc.Requeue {
			// The model's hangs are transient (a rerun never hangs), so a
			// job can run out of requeues only with max_requeues = 0.
			return false, fmt.Errorf("plan stops job %q for good (%s): the simulator models no stop without requeue; use max_requeues >= 1", rc.JobID, rc.Reason)
		}
		if err := r.stop(rc.Stop, true); err != nil {
			return false, fmt.Errorf("reclaim: %w", err)
		}
	}
	for _, p := range plan.Preemptions {
		if err := r.stop(p.Stop, false); err != nil {
			return false, fmt.Errorf("preemption: %w", err)
		}
	}
	for _, a := range plan.Admissions {
		if err := r.admit(a); err != nil {
			return false, err
		}
	}
	return len(plan.Withdrawals)+len(plan.Reclaims)+len(plan.Preemptions)+len(plan.Admissions) > 0, nil
}

// admit places the allocations of one admission on j's next unplaced
// members.
func (r *runner) admit(a engine.Admission) error {
	j := r.st.jobByID[a.JobID]
	if j == nil {
		return fmt.Errorf("plan admits unknown job %q", a.JobID)
	}
	if len(a.Groups) != 1 || a.Groups[0].Group != GroupName {
		return fmt.Errorf("plan admits job %q with %d groups, want the one group %q", a.JobID, len(a.Groups), GroupName)
	}
	if len(a.Groups[0].Allocs) == 0 || len(a.Groups[0].Allocs) > j.Count()-j.Placed {
		return fmt.Errorf("plan admits job %q with %d allocations, it has %d unplaced members", a.JobID, len(a.Groups[0].Allocs), j.Count()-j.Placed)
	}
	for _, ap := range a.Groups[0].Allocs {
		if err := r.place(j, ap); err != nil {
			return err
		}
	}
	return nil
}

// gpuIndex resolves GPU instance id on node n (a handful of GPUs: a scan).
func gpuIndex(n *Node, id string) int {
	for g := range n.Cluster.GPUs {
		if n.Cluster.GPUs[g].ID == id {
			return g
		}
	}
	return -1
}
