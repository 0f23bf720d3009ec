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
