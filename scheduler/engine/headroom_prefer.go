package engine

import (
	"math/bits"

	"github.com/impact-sched/nomad-impact/scheduler/placement"
)

// headroomPrefer places preemptible work of a tier that does not use the
// headroom on the nodes a headroom keeps whole, if it fits there: those
// nodes may hold only such work (and urgent work), so filling them first
// leaves the other nodes to the non-preemptible work the headroom keeps
// out, instead of preemptible work taking both. ok is false (and nothing
// is placed) when the job is not such work or does not fit there; the
// caller then places it as usual.
func (c *cycle) headroomPrefer(q *queued, req placement.Request) (placement.Result, bool) {
	if c.hr == nil || !q.f.preemptible || c.hr.isUrgent(q.f.tier) {
		return placement.Result{}, false
	}
	room := 0
	for ord, prot := range c.hr.protected {
		if prot && (q.pool == "" || c.st.PoolOf(ord) == q.pool) {
			room += bits.OnesCount64(c.st.Free(ord))
		}
	}
	if room < q.gpus {
		return placement.Result{}, false
	}
	giveBack := c.withhold(func(ord int) bool { return !c.hr.protected[ord] })
	res, ok := c.st.Place(req, nil)
	if giveBack != nil {
		giveBack()
	}
	return res, ok
}
