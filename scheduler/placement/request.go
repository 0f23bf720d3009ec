package placement

import (
	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// Group asks for Count allocations of GPUs GPUs each.
type Group struct {
	Name     string
	Count    int
	GPUs     int
	Topology jobspec.Topology
	// DistinctHosts puts each allocation of the group on a node of its
	// own (Nomad's distinct_hosts).
	DistinctHosts bool
	// Constraints every node of the group must satisfy.
	Constraints []cluster.Constraint
	// Avoid lists node ordinals the group may not use: a caller placing a
	// distinct-hosts group one allocation at a time (preemption) names the
	// nodes taken so far.
	Avoid []int
	// Blocks are the device blocks of one allocation (their counts add up
	// to GPUs): each gets its GPUs from one device group of the node that
	// it may use. Empty: one block of GPUs, any group.
	Blocks []Block
}

// Request is an all-or-nothing placement of every group of one job.
type Request struct {
	// Pool restricts the nodes ("" = any pool).
	Pool   string
	Groups []Group
	// AllowReserved lets the placement use reserved GPUs (a backfill job
	// that cannot delay the reservation).
	AllowReserved bool
	// LocalityLabels are the node labels a multi-node gang tries to share,
	// tightest first.
	LocalityLabels []string
	// DistinctHosts puts every allocation of the job, whatever its group,
	// on a node of its own (a job-level distinct_hosts).
	DistinctHosts bool
}

// GPUs is the total GPUs asked.
func (r Request) GPUs() int {
	n := 0
	for _, g := range r.Groups {
		n += g.Count * g.GPUs
	}
	return n
}

// Result holds the slots of each group, in request order.
type Result struct {
	Groups [][]Slot
}

// Rejections counts nodes by the reason they could not take a job (for
// explain). Keys are short sentences.
type Rejections map[string]int

func (r Rejections) add(reason string, n int) {
	if r != nil && n > 0 {
		r[reason] += n
	}
}
