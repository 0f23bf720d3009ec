// Package preempt chooses victims: the cheapest set of whole running gangs
// whose GPUs let a waiting job's gang fit.
//
// It decides only; it never acts. Select works on a placement.State inside
// the caller's transaction: on success the victims' GPUs are released and
// the preemptor's placed, so the caller can weigh the result (gain against
// cost, the policy's limits) and roll it back. Which gangs may be victims at
// all (preemptible, of a tier the preemptor may preempt, past their minimum
// runtime, not already stopping) is the caller's policy: Select only sees
// the candidates it is given, so nothing else can ever be chosen.
//
// Cost is the caller's: typically the victim's impact x (GPU-hours of work
// lost since its last checkpoint + restart cost). See WorkLost.
package preempt

import (
	"math/bits"
	"sort"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
)

// Candidate is a gang that may be preempted, with what preempting it costs.
type Candidate struct {
	// Holder indexes placement.State.Holders().
	Holder int
	// Cost of preempting the whole gang.
	Cost float64
}

// WorkLost is the GPU-hours of work a gang loses if stopped at now: per
// allocation, its GPUs x the time since its last checkpoint (or start).
func WorkLost(allocs []*cluster.Alloc, now time.Time) float64 {
	sum := 0.0
	for _, a := range allocs {
		since := a.Start
		if a.LastCheckpoint.After(since) {
			since = a.LastCheckpoint
		}
		if d := now.Sub(since); d > 0 {
			sum += float64(len(a.GPUs)) * d.Hours()
		}
	}
	return sum
}

// Select frees the cheapest whole gangs among cands so that req fits, and
// places req. It works allocation by allocation: an allocation that fits
// in what is free (or was freed for an earlier one) takes it; otherwise the
// node where the cheapest set of candidate gangs makes room is chosen, those
// gangs are released (all their allocations, everywhere) and the allocation
// is placed there. On failure the state is as it was.
//
// It returns the chosen holders (in the order chosen) and the placement.
func Select(st *placement.State, req placement.Request, cands []Candidate) ([]int, placement.Result, bool) {
	cp := st.Checkpoint()
	cost := make(map[int]float64, len(cands))
	for _, c := range cands {
		cost[c.Holder] = c.Cost
	}
	holders := st.Holders()
	released := map[int]bool{}
	var victims []int
	res := placement.Result{Groups: make([][]placement.Slot, len(req.Groups))}

	order := make([]int, len(req.Groups))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return req.Groups[order[a]].GPUs > req.Groups[order[b]].GPUs })

	for _, gi := range order {
		g := req.Groups[gi]
		if g.Count == 0 || g.GPUs == 0 {
			continue
		}
		for range g.Count {
			one := placement.Request{Pool: req.Pool, Groups: []placement.Group{{Name: g.Name, Count: 1, GPUs: g.GPUs, Topology: g.Topology}}}
			if r, ok := st.Place(one, nil); ok {
				res.Groups[gi] = append(res.Groups[gi], r.Groups[0]...)
				continue
			}
			bestOrd, bestCost, bestN := -1, 0.0, 0
			var bestSet []int
			var bestMask uint64
			for ord := range st.NumNodes() {
				if !st.Schedulable(ord) || (req.Pool != "" && st.PoolOf(ord) != req.Pool) {
					continue
				}
				var vs []vic
				for _, h := range st.NodeHolders(ord) {
					c, ok := cost[h]
					if !ok || released[h] {
						continue
					}
					var m uint64
					for _, sl := range holders[h].Slots {
						if sl.Node == ord {
							m |= sl.Mask
						}
					}
					// Only GPUs still in use by the gang count (it may
					// share the node with itself across allocations).
					m &= st.Used(ord) &^ st.Reserved(ord)
					if m == 0 {
						continue
					}
					vs = append(vs, vic{h: h, perGPU: c / float64(bits.OnesCount64(m)), onNode: m, fullCost: c})
				}
				if len(vs) == 0 {
					continue
				}
				sort.Slice(vs, func(a, b int) bool {
					if vs[a].perGPU != vs[b].perGPU {
						return vs[a].perGPU < vs[b].perGPU
					}
					return holders[vs[a].h].JobID < holders[vs[b].h].JobID
				})
				free := st.Free(ord)
				sum := 0.0
				var set []int
				for _, v := range vs {
					free |= v.onNode
					sum += v.fullCost
					set = append(set, v.h)
					if bestOrd >= 0 && (sum > bestCost || (sum == bestCost && len(set) >= bestN)) {
						break
					}
					if m, ok := st.Pick(ord, free, g.GPUs, g.Topology); ok {
						// Drop victims the pick did not need (a cheaper
						// per-GPU gang elsewhere on the node may suffice).
						set, sum = trim(set, onNodeMasks(vs), m, cost)
						if bestOrd < 0 || sum < bestCost || (sum == bestCost && len(set) < bestN) {
							bestOrd, bestCost, bestN, bestSet, bestMask = ord, sum, len(set), set, m
						}
						break
					}
				}
			}
			if bestOrd < 0 {
				st.Rollback(cp)
				return nil, placement.Result{}, false
			}
			for _, h := range bestSet {
				released[h] = true
				victims = append(victims, h)
				st.ReleaseHolder(h)
			}
			sl := placement.Slot{Node: bestOrd, Mask: bestMask}
			if bestMask&^st.Free(bestOrd) != 0 {
				// The mask was computed against the node's GPUs before
				// release; it must be free now.
				st.Rollback(cp)
				return nil, placement.Result{}, false
			}
			st.Take(sl)
			res.Groups[gi] = append(res.Groups[gi], sl)
		}
	}
	return victims, res, true
}

// vic is a candidate gang as seen from one node.
type vic struct {
	h        int
	perGPU   float64
	onNode   uint64
	fullCost float64
}

func onNodeMasks(vs []vic) map[int]uint64 {
	m := make(map[int]uint64, len(vs))
	for _, v := range vs {
		m[v.h] = v.onNode
	}
	return m
}

// trim keeps only the victims whose GPUs the chosen mask uses.
func trim(set []int, onNode map[int]uint64, mask uint64, cost map[int]float64) ([]int, float64) {
	var out []int
	sum := 0.0
	for _, h := range set {
		if onNode[h]&mask != 0 {
			out = append(out, h)
			sum += cost[h]
		}
	}
	return out, sum
}
