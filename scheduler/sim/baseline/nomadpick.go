package baseline

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// How Nomad 2.0.5's batch scheduler picks the node for one allocation
// (its scheduler/feasible: stack.go, select.go, rank.go), which the
// nomad-native baseline follows and e2e/scheduler TestNativePlacement
// checks against a real cluster:
//
//   - The nodes are shuffled, and the feasible ones (here: enough free
//     GPUs) are ranked in that order.
//   - A node's score is its bin-packing fit, 20 - 10^(free CPU share) -
//     10^(free memory share) after the allocation, over 18; averaged with
//     the job anti-affinity penalty -(c+1)/count where the node already
//     holds c allocations of the same task group of count allocations.
//   - A limit iterator takes the first 2 ranked nodes (the power of two
//     choices for batch jobs), skipping ahead past up to 3 whose score is
//     at most 0 (taken only if too few others follow), and the higher
//     score of those wins, the first on a tie.
//
// The fit counts CPU and memory only, never devices, and a trace gives
// GPUs only: the baseline takes a job's CPU and memory asks to be in
// proportion to its GPUs (a node's share of them used is its share of
// GPUs used), as a GPU cluster's jobspecs commonly ask.
//
// One difference is left: Nomad shuffles once per evaluation, and a
// group's later allocations walk on from where the previous one stopped
// in that order (its StaticIterator), while the picker draws afresh for
// each. The trace's gangs are whole-node members, whose candidates (the
// empty nodes) all score alike, so either way each goes to an empty node
// drawn at random among those left: the baseline places them alike.

// nomadLimit and nomadMaxSkip are the batch scheduler's limit iterator's
// limit and how many low-scoring nodes it skips ahead past; a score at or
// below nomadSkipScore is low.
const (
	nomadLimit     = 2
	nomadMaxSkip   = 3
	nomadSkipScore = 0.0
)

// NomadScore is the score Nomad's batch scheduler gives a node for an
// allocation: its fit once usedAfter of its total GPUs (and the same share
// of CPU and memory) are in use with the allocation, averaged with the
// anti-affinity penalty when the node already holds collisions
// allocations of the task group of count.
func NomadScore(usedAfter, total, collisions, count int) float64 {
	free := 1 - float64(usedAfter)/float64(total)
	fit := min(18, max(0, 20-2*math.Pow(10, free))) / 18
	if collisions <= 0 {
		return fit
	}
	return (fit - float64(collisions+1)/float64(max(1, count))) / 2
}

// nomadPicker draws nodes as Nomad's batch scheduler does. Its array of
// skipped nodes is reused from pick to pick.
type nomadPicker struct {
	rng     *rand.Rand
	skipped []int
}

// newNomadPicker draws from a fixed seed, so that a run is repeatable.
func newNomadPicker() *nomadPicker {
	return &nomadPicker{rng: rand.New(rand.NewPCG(1, 2))}
}

// pick returns which of the feasible nodes Nomad picks, scored by score;
// -1 when there are none. feasible is shuffled in place, lazily: only as
// far as the limit iterator reads (a partial Fisher-Yates shuffle).
func (p *nomadPicker) pick(feasible []int, score func(node int) float64) int {
	pos := 0
	return limitPick(func() (int, bool) {
		if pos >= len(feasible) {
			return -1, false
		}
		k := pos + p.rng.IntN(len(feasible)-pos)
		feasible[pos], feasible[k] = feasible[k], feasible[pos]
		pos++
		return feasible[pos-1], true
	}, score, &p.skipped)
}

// NomadChances is, for the feasible nodes 0..len(scores)-1 scored so,
// the chance that Nomad's batch scheduler picks each: over every order
// its shuffle may rank them in, each as likely. Exact, by walking every
// order, so for a handful of nodes (at most 8): the fidelity check
// against a real cluster (e2e/scheduler TestNativePlacement) weighs what
// Nomad picked with it.
func NomadChances(scores []float64) ([]float64, error) {
	n := len(scores)
	if n > 8 {
		return nil, fmt.Errorf("NomadChances walks every order of its nodes: %d nodes are too many (at most 8)", n)
	}
	chances := make([]float64, n)
	if n == 0 {
		return chances, nil
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	orders := 0
	var skipped []int
	var walk func(k int)
	walk = func(k int) {
		if k == n {
			pos := 0
			chances[limitPick(func() (int, bool) {
				if pos >= n {
					return -1, false
				}
				pos++
				return order[pos-1], true
			}, func(i int) float64 { return scores[i] }, &skipped)]++
			orders++
			return
		}
		for i := k; i < n; i++ {
			order[k], order[i] = order[i], order[k]
			walk(k + 1)
			order[k], order[i] = order[i], order[k]
		}
	}
	walk(0)
	for i := range chances {
		chances[i] /= float64(orders)
	}
	return chances, nil
}

// limitPick walks the nodes source ranks, in its order, through the limit
// iterator and returns the highest-scoring node it yields, the first on a
// tie; -1 when source has none. skippedBuf is its reused array of skipped
// nodes.
func limitPick(source func() (int, bool), score func(node int) float64, skippedBuf *[]int) int {
	skipped := (*skippedBuf)[:0]
	defer func() { *skippedBuf = skipped }()
	skipIdx := 0
	nextOption := func() (int, bool) {
		if o, ok := source(); ok {
			return o, true
		}
		if skipIdx < len(skipped) {
			skipIdx++
			return skipped[skipIdx-1], true
		}
		return -1, false
	}
	seen := 0
	limitNext := func() (int, bool) {
		if seen == nomadLimit {
			return -1, false
		}
		o, ok := nextOption()
		if !ok {
			return -1, false
		}
		for ok && score(o) <= nomadSkipScore && len(skipped) < nomadMaxSkip {
			skipped = append(skipped, o)
			o, ok = source()
		}
		seen++
		if !ok {
			return nextOption()
		}
		return o, true
	}
	best, bestScore := -1, 0.0
	for {
		o, ok := limitNext()
		if !ok {
			return best
		}
		if s := score(o); best < 0 || s > bestScore {
			best, bestScore = o, s
		}
	}
}
