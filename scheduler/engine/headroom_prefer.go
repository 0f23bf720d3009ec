package engine

import (
	"math/bits"

	"github.com/impact-sched/nomad-impact/scheduler/placement"
)

// prefer places preemptible work of a tier that does not use the
// headroom on the nodes a headroom keeps whole, if it fits there: those
// nodes may hold only such work (and urgent work), so filling them first
// leaves the other nodes to the non-preemptible work the headroom keeps
// out, instead of preemptible work taking both. ok is false (and nothing
// is placed) when the job is not such work or does not fit there; the
// caller then places it as usual.
func (hr *hrCycle) prefer(q *queued, req placement.Request) (placement.Result, bool) {
	if hr == nil || !q.f.preemptible || hr.isUrgent(q.f.tier) {
		return placement.Result{}, false
	}
	room := 0
	for ord, prot := range hr.protected {
		if prot && (q.pool == "" || hr.c.st.PoolOf(ord) == q.pool) {
			room += bits.OnesCount64(hr.c.st.Free(ord))
		}
	}
	if room < q.gpus {
		return placement.Result{}, false
	}
	giveBack := hr.withhold(func(ord int) bool { return !hr.protected[ord] })
	res, ok := hr.c.st.Place(req, nil)
	if giveBack != nil {
		giveBack()
	}
	return res, ok
}

// avoid places non-preemptible work a headroom keeps out off the
// headroom's nodes when it fits elsewhere: on a node the headroom keeps
// only in part, the GPUs beyond the kept ones may take such work, and
// every one it takes is one an urgent job as wide as the node cannot
// clear by preemption (the robustness suite's saturated scenario, seed
// 1: an 8-GPU critical job waited 5.2h beside a 6.4-GPU headroom, every
// node holding non-preemptible work of unknown length). Such work goes
// there only when no other node fits it. ok is false (nothing placed)
// when the job is not such work or fits nowhere else; the caller then
// places it as usual. Robustness suite, seeds 1-6: failed checks 328
// either way, scenarios passing 167 -> 170, critical gain failures 28 ->
// 23; held-out seeds 7-9: 178 -> 176, 73 -> 74 (example/sim/README.md,
// "Fifth pass").
func (hr *hrCycle) avoid(q *queued, req placement.Request) (placement.Result, bool) {
	if hr == nil || !hr.keepsOut(q) {
		return placement.Result{}, false
	}
	giveBack := hr.withhold(func(ord int) bool { return hr.protected[ord] })
	if giveBack == nil {
		return placement.Result{}, false // nothing to avoid: place as usual
	}
	res, ok := hr.c.st.Place(req, nil)
	giveBack()
	return res, ok
}
