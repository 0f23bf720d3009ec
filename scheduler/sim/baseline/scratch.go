// Package baseline holds the policies `impact sim` compares the impact core
// with, each a sim.Scheduler:
//
//   - nomad-native: what plain Nomad does for batch jobs. Evaluations are
//     handled in priority order (then submit order); every allocation is
//     placed on its own with binpacking, so a gang is placed partially when
//     only some members fit, and the placed members hold their GPUs idle
//     until the rest are placed. No preemption (Nomad's default for batch).
//     Lower-priority jobs are placed whenever a higher one is blocked.
//     Each allocation goes to the node Nomad 2.0.5's batch scheduler would
//     pick (nomadpick.go): the better-packed of two feasible nodes drawn at
//     random (the power of two choices), a node already holding one of the
//     job's allocations avoided (job anti-affinity), the job's CPU and
//     memory asks taken to be in proportion to its GPUs.
//   - fifo-gang: strict first-in first-out with all-or-nothing gangs; the
//     head of the queue blocks everything behind it until it fits.
//   - backfill: Slurm-like priority scheduling with EASY backfill: jobs start
//     in priority order while they fit; the first that does not gets a
//     reservation at the earliest time the running jobs' walltimes free
//     enough GPUs, and later jobs start now only if they fit and either end
//     (by walltime) before that time or use GPUs the reservation does not
//     need. No preemption.
//
// Priority is the job's tier (trace.Tiers order).
package baseline

import (
	"cmp"
	"slices"

	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/sim"
)

// scratch is a cycle's working copy of free GPUs: placements decided
// earlier in the same cycle are taken out of it. plan is the cycle's plan
// so far. A baseline keeps one and reuses its arrays from cycle to cycle
// (reset).
type scratch struct {
	st   *sim.State
	free []int
	// taken: per node index, the GPUs placed this cycle (nil: none yet).
	taken [][]bool
	plan  *engine.Plan
}

// reset readies s for a cycle on st: the free GPUs as they are, nothing
// taken, a new plan.
func (s *scratch) reset(st *sim.State) *scratch {
	s.st = st
	if len(s.free) != len(st.Nodes) {
		s.free = make([]int, len(st.Nodes))
		s.taken = make([][]bool, len(st.Nodes))
	}
	for i, n := range st.Nodes {
		s.free[i] = n.Free
	}
	for _, t := range s.taken {
		clear(t)
	}
	s.plan = &engine.Plan{}
	return s
}

func (s *scratch) maxFree() int {
	m := 0
	for _, f := range s.free {
		m = max(m, f)
	}
	return m
}

func (s *scratch) isFree(n *sim.Node, g int) bool {
	if n.Owner[g] >= 0 {
		return false
	}
	t := s.taken[n.Index]
	return t == nil || !t[g]
}

// bestFit returns the node with the fewest free GPUs that still has need,
// preferring one with an NVLink island that can hold it whole; -1 if none.
// limit, if not nil, caps what may be used per node.
func (s *scratch) bestFit(need int, limit []int) int {
	best, bestFree, bestIsland := -1, 1<<30, false
	for i, f := range s.free {
		if limit != nil {
			f = min(f, limit[i])
		}
		if f < need {
			continue
		}
		isl := s.islandFits(s.st.Nodes[i], need)
		if (isl && !bestIsland) || (isl == bestIsland && s.free[i] < bestFree) {
			best, bestFree, bestIsland = i, s.free[i], isl
		}
	}
	return best
}

func (s *scratch) islandFits(n *sim.Node, need int) bool {
	per := n.GPUs / n.Islands
	if need > per {
		return false
	}
	for k := 0; k < n.Islands; k++ {
		c := 0
		for g := k * per; g < (k+1)*per; g++ {
			if s.isFree(n, g) {
				c++
			}
		}
		if c >= need {
			return true
		}
	}
	return false
}

// take picks need free GPUs on node i, inside the fullest island that can
// hold them if there is one, and places j's next member there.
func (s *scratch) take(j *sim.Job, i, need int) {
	n := s.st.Nodes[i]
	per := n.GPUs / n.Islands
	var gpus []int
	bestIsl, bestFree := -1, 1<<30
	for k := 0; k < n.Islands && need <= per; k++ {
		c := 0
		for g := k * per; g < (k+1)*per; g++ {
			if s.isFree(n, g) {
				c++
			}
		}
		if c >= need && c < bestFree {
			bestIsl, bestFree = k, c
		}
	}
	lo, hi := 0, n.GPUs
	if bestIsl >= 0 {
		lo, hi = bestIsl*per, (bestIsl+1)*per
	}
	for g := lo; g < hi && len(gpus) < need; g++ {
		if s.isFree(n, g) {
			gpus = append(gpus, g)
		}
	}
	t := s.taken[i]
	if t == nil {
		t = make([]bool, n.GPUs)
		s.taken[i] = t
	}
	for _, g := range gpus {
		t[g] = true
	}
	s.free[i] -= need
	sim.Place(s.plan, j, n, gpus)
}

// gangNodes finds nodes for every unplaced member of j at once (best fit,
// distinct nodes for a multi-node gang), or nil if they do not all fit.
// limit, if not nil, caps the GPUs usable per node.
func (s *scratch) gangNodes(j *sim.Job, limit []int) []int {
	need := j.MemberGPUs()
	if j.Count() == 1 {
		i := s.bestFit(need, limit)
		if i < 0 {
			return nil
		}
		return []int{i}
	}
	var cand []int
	for i, f := range s.free {
		if limit != nil {
			f = min(f, limit[i])
		}
		if f >= need {
			cand = append(cand, i)
		}
	}
	if len(cand) < j.Count() {
		return nil
	}
	slices.SortStableFunc(cand, func(a, b int) int { return cmp.Compare(s.free[a], s.free[b]) })
	return cand[:j.Count()]
}

// placeGang places all members of j on nodes.
func (s *scratch) placeGang(j *sim.Job, nodes []int) {
	for _, i := range nodes {
		s.take(j, i, j.MemberGPUs())
	}
}

// byPriority returns the queue ordered by tier, then submit order, without
// sorting: the queue is already in submit order.
func byPriority(q []*sim.Job, tiers int) []*sim.Job {
	out := make([]*sim.Job, 0, len(q))
	for t := 0; t < tiers; t++ {
		for _, j := range q {
			if j.TierRank == t {
				out = append(out, j)
			}
		}
	}
	return out
}
