package engine

import (
	"fmt"

	"github.com/impact-sched/nomad-impact/scheduler/placement"
)

// Gathering (the policy's backfill gather). A gang is placed whole or not
// at all, so without a reservation a job of several whole-node
// allocations starts only when that many nodes are free at once, which a
// stream of smaller jobs behind it never leaves in a busy pool: plain
// Nomad places such a job's allocations one by one as nodes free, and
// they hold their GPUs, idle, until the last one is placed. Gathering
// gives a blocked gang the same progress without starting a partial gang:
// in queue order, after every reservation the policy allows is taken,
// each blocked job of several allocations holds the free GPUs where its
// allocations fit now, one allocation at a time, as reserved GPUs that
// no later job backfills (mayBackfill): they idle as the placed
// allocations of Nomad's partial placement would. Work the gang may
// preempt used to backfill them; the gang could then find them taken when
// the rest of its nodes freed, by jobs its preemption could not take
// back at once (younger than the minimum runtime, or costing more than
// the gain), and the whole-node jobs behind it waited too (robustness
// suite, seeds 1-6: tiers' p99 above nomad-native's 69 -> 47 times, all
// failed checks 340 -> 328; example/sim/README.md, "Fifth pass").
// Nothing is remembered between cycles: held GPUs stay free, so the
// next cycle finds them again, with whatever freed since, and the gang
// is admitted once all of its allocations fit. A job ahead of it in the
// queue may take them first, as it may take any free GPU.

// mayGather: deciding q could gather GPUs for it: the policy gathers, q
// has several allocations, and its pool has a free GPU.
func (p *placer) mayGather(q *queued) bool {
	return p.c.pol.Backfill.Gather && q.gpus > int(q.maxAlloc) && p.c.st.FreeGPUs(q.pool) > 0
}

// gather holds, for a blocked job q (every reservation taken), the GPUs of
// each of its allocations that fits on free GPUs now, placed one at a
// time (best fit, the group's topology and constraints; distinct hosts is
// checked when the gang is placed whole).
func (p *placer) gather(q *queued, exp *Explanation) {
	if !p.mayGather(q) {
		return
	}
	req := p.c.request(q, false)
	cp := p.c.st.Checkpoint()
	var held []placement.Slot
	gathered, allocs := 0, 0
	for _, g := range req.Groups {
		if g.GPUs <= 0 {
			continue
		}
		allocs += g.Count
		one := req
		one.Groups = []placement.Group{g}
		one.Groups[0].Count = 1
		for range g.Count {
			res, ok := p.c.st.Place(one, nil)
			if !ok {
				break
			}
			for _, sls := range res.Groups {
				held = append(held, sls...)
			}
			gathered++
		}
	}
	p.c.st.Rollback(cp)
	if gathered == 0 {
		return
	}
	for _, sl := range held {
		p.c.st.Reserve(sl)
	}
	p.reservations = append(p.reservations, reservation{jobID: q.job.ID, tier: q.f.tier, slots: held, gathering: true})
	p.gathers++
	exp.Status, exp.Gathered = StatusReserved, gathered
	if !p.c.explain {
		return
	}
	p.c.why.addReservationNote(p.reservationNote())
	exp.Reason += fmt.Sprintf("; gathering its nodes: holds the GPUs of %d of its %d allocations, which fit now (as Nomad places allocations one by one); it starts once all of them fit", gathered, allocs)
}
