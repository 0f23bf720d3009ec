package engine

import (
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/preempt"
)

// scratch is memory a cycle fills and drops: the per-holder tables and
// the queue's sort keys. It is kept on the engine so that each cycle
// reuses the previous one's rather than allocating megabytes the garbage
// collector then has to find again (a third of a long cycle's time went
// to it). Nothing in it outlives the cycle that fills it, and no plan
// points into it.
type scratch struct {
	victims     []preempt.Victim
	states      []idleState
	facts       []*specFacts
	holderByJob map[*cluster.Job]int32
	keys        []qkey
	// ordered: the cycle's queue, entries copied in order (queueLayout).
	ordered []queued
	ends    []endKey
	// tierEnds: the end orders of tiers that may preempt (endOrderFor).
	tierEnds map[string][]endKey
	// whole: accrue's GPUs per project index.
	whole      []int
	projGPUs   []int
	holderProj []int32
	// claimed: the cycle's claimed holders (cycle.claimed).
	claimed []bool
	// later: the jobs whose moves the defragment step searches last
	// (defragger.later).
	later []laterMove
}
