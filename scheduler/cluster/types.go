package cluster

import (
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
)

// MaxGPUsPerNode is the most GPUs (device instances, MIG slices included)
// the scheduler considers on one node; placement keeps a node's GPUs in a
// 64-bit mask so that best-fit search stays cheap. GPUs beyond it are
// ignored, and said so in explanations.
const MaxGPUsPerNode = 64

// GPU is one schedulable GPU device instance of a node.
type GPU struct {
	// ID is the device instance ID Nomad uses (the GPU UUID or MIG UUID).
	ID string
	// Index is the device's index on the node (as NVML numbers it).
	Index int
	// Island is the NVLink island: GPUs with the same island on the same
	// node are NVLink-connected.
	Island int
	// NUMA is the NUMA node the GPU is attached to (-1 when unknown).
	NUMA int
	// Model is the product name (e.g. "NVIDIA H100 80GB HBM3").
	Model string
	// Healthy is false when the device plugin reports the GPU unhealthy.
	Healthy bool
	// Group is the name of the Nomad device group (vendor "nvidia", type
	// "gpu") the instance is in. Nomad gives all instances of one device
	// block from ONE group, so a block of N GPUs needs N free in one
	// group. "" on every GPU of a node means the model has no group facts
	// (a simulated node): the node then counts as one group.
	Group string
}

// DeviceGroupRule is how Nomad hands out GPUs, for explanations: every
// instance of one device block comes from one device group.
const DeviceGroupRule = "Nomad gives all GPUs of one device block from one device group"

// Node is a client node that may run GPU work.
type Node struct {
	// ID is Nomad's node ID (used in placement pins).
	ID string
	// Name is the node's name, for people.
	Name string
	// Pool is the node pool the node belongs to.
	Pool string
	// Labels hold locality facts such as "rack" and "switch" (from node
	// meta); multi-node gangs prefer nodes sharing them.
	Labels map[string]string
	// Eligible is Nomad's scheduling eligibility.
	Eligible bool
	// Ready is false when the node is down, draining or disconnected.
	Ready bool
	// GPUs of the node, in index order.
	GPUs []GPU
	// Class and Datacenter are Nomad's node class and datacenter, and
	// Attributes its fingerprinted attributes (${attr.*}): what jobs'
	// constraints (TaskGroup.Constraints) may test. Node meta is Labels.
	Class      string
	Datacenter string
	Attributes map[string]string
	// GroupBy is impact-gpu's group_by on the node ("model", "island",
	// "numa"), "" when the GPUs come from another plugin (Nomad's NVIDIA
	// plugin groups by model) or the model does not know. For
	// explanations: it decides the device groups (GPU.Group).
	GroupBy string
	// DeviceGroups are the node's GPU device groups with their attributes
	// (what device blocks' constraints test), one per GPU.Group name;
	// empty when the model has no such facts (a simulated node): its
	// groups may then match any constraint.
	DeviceGroups []DeviceGroup
}

// DeviceAsk is one GPU device block of a task (resources { device
// "nvidia/gpu" { count = N } }): Nomad gives all Count instances from one
// device group whose name the block's Name matches.
type DeviceAsk struct {
	// Task is the task's name and Index the block's position among the
	// task's device blocks (all kinds counted), as in the jobspec.
	Task  string
	Index int
	// Name as written: "gpu", "nvidia/gpu" or "nvidia/gpu/<group name>".
	Name  string
	Count int
	// IDs, when not nil, are the only instances the block may get: the
	// block's own ${device.ids} set_contains_any constraint.
	IDs []string
	// Constraints are the block's own constraints on the device group
	// (${device.attr.<name>}, ${device.model}, ${device.vendor},
	// ${device.type}): it may take GPUs only of a group meeting them all.
	// Constraints on ${device.ids} are not among them (IDs above).
	Constraints DeviceConstraints
	// Driver of the task: impact-exec gives a task the GPUs of all its
	// blocks; other drivers see only the last block's in the visibility
	// variables (Nomad merges the blocks' env last-wins).
	Driver string
}

// MatchesGroup reports whether the block may take GPUs of a device group
// of the model (vendor "nvidia", type "gpu"): Nomad matches "gpu" and
// "nvidia/gpu" against any such group, "nvidia/gpu/<name>" only against
// the group of that name, and other vendors against none. An empty group
// (a node without group facts) matches every NVIDIA request.
func (d DeviceAsk) MatchesGroup(group string) bool {
	parts := strings.SplitN(d.Name, "/", 3)
	switch len(parts) {
	case 1:
		return parts[0] == "gpu"
	case 2:
		return parts[0] == "nvidia" && parts[1] == "gpu"
	default:
		return parts[0] == "nvidia" && parts[1] == "gpu" && (group == "" || parts[2] == group)
	}
}

// Constraint is a job's constraint on a node fact that the scheduler
// checks itself, so that it never admits a job Nomad would then refuse to
// place: Target is one of ${node.class}, ${node.datacenter},
// ${node.unique.id}, ${node.unique.name}, ${node.pool}, ${meta.KEY},
// ${attr.KEY}; Operand is "=" or "!=" (Nomad's "==", "is" and "not" are
// normalised to them), "is_set" or "is_not_set".
type Constraint struct {
	Target  string
	Operand string
	Value   string
}

// Lookup resolves a constraint target on the node; ok is false when the
// node does not have the fact (or the target is not one the model knows).
func (n *Node) Lookup(target string) (string, bool) {
	switch target {
	case "${node.class}":
		return n.Class, true
	case "${node.datacenter}":
		return n.Datacenter, true
	case "${node.unique.id}":
		return n.ID, true
	case "${node.unique.name}":
		return n.Name, true
	case "${node.pool}":
		return n.Pool, true
	}
	if k, ok := strings.CutPrefix(target, "${meta."); ok && strings.HasSuffix(k, "}") {
		v, ok := n.Labels[k[:len(k)-1]]
		return v, ok
	}
	if k, ok := strings.CutPrefix(target, "${attr."); ok && strings.HasSuffix(k, "}") {
		v, ok := n.Attributes[k[:len(k)-1]]
		return v, ok
	}
	return "", false
}

// Satisfies reports whether the node meets a constraint, as Nomad judges
// it: "=" needs the fact present and equal, "!=" holds when it is absent
// or different.
func (n *Node) Satisfies(c Constraint) bool {
	v, ok := n.Lookup(c.Target)
	switch c.Operand {
	case "=":
		return ok && v == c.Value
	case "!=":
		return !ok || v != c.Value
	case "is_set":
		return ok
	case "is_not_set":
		return !ok
	}
	return false
}

// Schedulable reports whether new work may be placed on the node.
func (n *Node) Schedulable() bool { return n.Eligible && n.Ready }

// JobState says where a managed job is in its life.
type JobState int

const (
	// JobQueued: parked in the parking pool, waiting for admission.
	JobQueued JobState = iota
	// JobRunning: admitted; its allocations are in the snapshot.
	JobRunning
)

func (s JobState) String() string {
	switch s {
	case JobQueued:
		return "queued"
	case JobRunning:
		return "running"
	}
	return "unknown"
}

// TaskGroup is one task group of a job: Count allocations, each wanting
// GPUs GPUs on one node.
type TaskGroup struct {
	Name string
	// Count is the number of allocations (gang members) of the group.
	Count int
	// GPUs per allocation (0 for groups that need no GPU; they are not
	// placed by the scheduler).
	GPUs int
	// Spec is the group's effective impact contract (job meta with the
	// group's overrides, jobspec.ParseGroupMeta).
	Spec jobspec.Spec
	// DistinctHosts: no two allocations of the group on one node (a
	// group-level distinct_hosts constraint).
	DistinctHosts bool
	// Constraints every node of the group must satisfy: the job's, the
	// group's and its tasks' simple node constraints.
	Constraints []Constraint
	// Devices are the GPU device blocks of one allocation, in task then
	// block order; their counts add up to GPUs. Empty with GPUs > 0 means
	// one block of GPUs matching any group (simulated jobs).
	Devices []DeviceAsk
}

// Job is a job the scheduler manages.
type Job struct {
	// The fields every cycle reads of every job come first, so that
	// reading them touches as few cache lines as possible (a cold
	// engine's cycle reads them for thousands of jobs).

	// ID identifies the job uniquely across namespaces; use JobKey.
	ID string
	// State of the job.
	State JobState
	// Priority is Nomad's job priority; it breaks score ties.
	Priority int
	// Submit is when the job (this version) entered the queue; aging counts
	// from here.
	Submit time.Time
	// SpecErr, when not nil, is why the job's metadata is unusable; the job
	// stays parked and explain shows the error.
	SpecErr error
	// Groups of the job; a job is admitted only when every group with
	// GPUs > 0 is placed.
	Groups []TaskGroup
	// Spec is the job's impact contract (jobspec.ParseMeta(jobMeta, nil)).
	Spec jobspec.Spec
	// Namespace and Name as Nomad knows them.
	Namespace string
	Name      string
	// DistinctHosts: no two allocations of the job, whatever their group,
	// on one node (a job-level distinct_hosts constraint).
	DistinctHosts bool
	// ModifyIndex is Nomad's JobModifyIndex when the model read the job;
	// plans carry it so that the adapter can enforce it on re-register.
	ModifyIndex uint64
	// Parked is true for a running job (allocations still live) whose
	// current registration is in the parking pool without the scheduler's
	// pins: its user re-submitted it while it ran (or a preemption is
	// parking it). The engine treats a user's re-submission as Nomad's
	// destructive update, through the queue: the old allocations are
	// stopped and the new version waits its turn.
	Parked bool
	// Completed counts, per group, the allocations of the job's current
	// version that ended on their own with success (every task exited 0):
	// gang members that are done, not missing.
	Completed map[string]int
	// Ended says how members of the job's current registration ended
	// without completing (failed, with the task's exit code; lost;
	// stopped), for the reasons the gang watch gives; "" when none did.
	Ended string
	// Dead says that Nomad marked this admitted job dead with its work
	// not done (Ended says how its run ended): none of its allocations
	// runs and Nomad places none (the job's restart and reschedule blocks
	// allow no more, e.g. `restart { attempts = 0 }` and `reschedule {
	// attempts = 0 }`). The model keeps such a job, as running with no
	// allocations, until the scheduler has decided what it is (requeued
	// whole, or ended failed); a job whose every member completed is done
	// and leaves the model.
	Dead bool
}

// GPUs is the total number of GPUs the job asks for.
func (j *Job) GPUs() int {
	n := 0
	for _, g := range j.Groups {
		n += g.Count * g.GPUs
	}
	return n
}

// Group returns the named task group, or nil.
func (j *Job) Group(name string) *TaskGroup {
	for i := range j.Groups {
		if j.Groups[i].Name == name {
			return &j.Groups[i]
		}
	}
	return nil
}

// JobKey builds the Job.ID the model uses for a Nomad job.
func JobKey(namespace, id string) string {
	if namespace == "" {
		namespace = "default"
	}
	return namespace + "/" + id
}

// Alloc is a running allocation holding GPUs. Allocations whose job is not
// in the snapshot (jobs outside the parking pool) count as used capacity and
// are never preempted.
type Alloc struct {
	// ID is Nomad's allocation ID.
	ID string
	// JobID is the Job.ID of the allocation's job.
	JobID string
	// Group is the task group name.
	Group string
	// NodeID is where it runs.
	NodeID string
	// GPUs are the device instance IDs it holds.
	GPUs []string
	// Start is when it started running (for min runtime and work lost).
	Start time.Time
	// LastCheckpoint is the last time the job saved its work (zero: never;
	// work lost then counts from Start).
	LastCheckpoint time.Time
	// Stopping is true once the allocation has been told to stop (a
	// preemption under way); its GPUs are about to be freed.
	Stopping bool
	// Replacement is true for an allocation Nomad placed to replace a
	// lost, failed or stopped one of the same job (its reschedule or
	// migration): a gang member of a later generation than its peers.
	Replacement bool
}

// Finished records the GPU time of an allocation that stopped. Fair-share
// usage is charged per cycle from the allocations in the snapshot; an
// allocation that ended since the last cycle (or started and ended between
// two cycles, never appearing in one) is charged from these records.
type Finished struct {
	AllocID string
	JobID   string
	// Project and Tier are the job's impact_project and impact_tier as
	// written ("" = the policy's default).
	Project, Tier string
	// GPUs the allocation held, on node NodeID.
	GPUs   int
	NodeID string
	// Start and End of the allocation's run.
	Start, End time.Time
	// Progress is the work the job's earlier runs had saved when this one
	// started (its impact_progress): the run finished the job from there,
	// so the job ran Progress + End - Start in all.
	Progress time.Duration
	// Completed: the allocation ran to its end on its own
	// (Store.CompleteAlloc), rather than being stopped, failing or being
	// lost: End - Start is a run time the engine may learn from.
	Completed bool
}
