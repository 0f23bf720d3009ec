package engine

// The per-job steps of a cycle, in queue order: held back, else placed,
// else preempting (or waiting for the jobs moved out of its way), else
// reserving, else gathering its nodes; once the whole queue is decided,
// moving small jobs out of the way of those left waiting (defrag.go).

import (
	"fmt"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
)

func earliestStart(allocs []*cluster.Alloc) time.Time {
	var t time.Time
	for _, a := range allocs {
		if t.IsZero() || a.Start.Before(t) {
			t = a.Start
		}
	}
	return t
}

func (c *cycle) request(q *queued, allowReserved bool) placement.Request {
	req := placement.Request{Pool: q.pool, AllowReserved: allowReserved, LocalityLabels: c.e.opts.localityLabels, DistinctHosts: q.job.DistinctHosts}
	for gi := range q.job.Groups {
		g := &q.job.Groups[gi]
		topo := g.Spec.Topology
		if topo == jobspec.TopologyUnset {
			topo = q.job.Spec.Topology
		}
		pg := placement.Group{Name: g.Name, Count: g.Count, GPUs: g.GPUs, Topology: topo,
			DistinctHosts: g.DistinctHosts, Constraints: g.Constraints}
		if len(g.Devices) > 0 {
			pg.Blocks = make([]placement.Block, len(g.Devices))
			for i, d := range g.Devices {
				pg.Blocks[i] = placement.BlockOf(d)
			}
		}
		req.Groups = append(req.Groups, pg)
	}
	return req
}

// decide settles one queued job, in queue order: held back (parked,
// admitted already, deferred, too big, over quota, kept out of a
// headroom), admitted where it fits, else preempting, else waiting for
// the jobs moved out of its way, else reserving, else (every reservation
// taken) gathering its allocations' nodes (gather.go). Left waiting or
// holding a reservation (not gathering), it is noted for the moves
// searched once the whole queue is decided (defragger.moveLast). It
// returns where the job stands (its explanation's status).
func (c *cycle) decide(q *queued, pos int) Status {
	exp := c.why.explanation(q, pos)
	if c.heldBack(q, exp) {
		if exp.Status == StatusParked {
			c.holds.dropSpent(q, exp)
		}
		return exp.Status
	}
	if give := c.hr.protect(q); give != nil {
		defer give()
	}
	if give := c.cuts.protect(q, pos, exp); give != nil {
		defer give()
	}
	if back := c.holds.lend(q, exp); back != nil {
		defer back()
	}
	if c.place.tryAdmit(q, exp, pos) {
		return exp.Status
	}
	exp.Status = StatusWaiting
	if c.pre.tryPreempt(q, exp) || c.defrag.waitsForMoves(q, exp) {
		return exp.Status
	}
	if !c.place.full() || c.place.reservesAlways(q) {
		c.place.reserve(q, exp)
	} else if c.pol.Backfill.Gather {
		c.place.gather(q, exp)
	}
	if c.explain && exp.Status == StatusWaiting && c.place.yieldsReservation(q) {
		exp.Reason += "; no reservation for its tier: the headroom's idle budget is spent (it pays for the GPUs such reservations hold idle), until the allowance has caught up"
	}
	switch {
	case exp.Status == StatusWaiting:
		c.defrag.consider(pos, -1)
	case exp.Status == StatusReserved && exp.Gathered == 0:
		// A gang gathering its nodes is not moved for: moves would
		// free it whole nodes sooner than they free by themselves,
		// which the suite measured worse (example/sim/README.md).
		c.defrag.consider(pos, c.place.count()-1)
	}
	return exp.Status
}

// onlyWaits reports, for an engine without explanations, that deciding q
// could only leave it waiting and change nothing: it needs more GPUs than
// are free (reserved ones too) in all pools, no GPU is bound to it, every
// reservation is taken and its tier is no reserve tier, it would gather
// nothing (mayGather), no headroom keeps it out (see below), and it may
// not preempt: its tier may preempt no one (and no job is idle), or no
// preemption may be ordered or waited for any more this cycle. GPUs bound
// to other preemptors are theirs alone, and only a job that may preempt
// waits for gangs already stopping (tryPreempt), so neither matters to
// it. A long queue behind a full cluster is then settled without a look
// at each job beyond its size (its explanation is not kept anyway). The
// one thing decide would still note, an expired deferral, is noted here.
func (c *cycle) onlyWaits(q *queued, pos int) bool {
	if c.holds.lent(q) || !c.place.full() || c.place.reservesAlways(q) || c.place.mayGather(q) {
		return false
	}
	if c.cuts.withholds(q, pos) {
		return false // as for a headroom below: protect takes and gives back
	}
	if c.hr.keepsOut(q) {
		// hrCycle.protect would take the headroom's free GPUs and give
		// them back, which reorders placement's buckets of nodes by free
		// GPUs: later placements break ties by that order, so skipping it
		// would decide otherwise than an engine with explanations.
		return false
	}
	if c.pre.mayTryPreempting(q) {
		if c.pre.unclaimedStoppingGPUs() != 0 {
			return false // it may wait for those
		}
		if !c.pre.spent() {
			return false
		}
	}
	if q.gpus <= c.st.FreeGPUs("")+c.st.ReservedFreeGPUs("") {
		return false
	}
	if d, ok := c.e.deferred[q.id]; ok && !c.now.Before(d.until) {
		c.mem.deferralsOver = append(c.mem.deferralsOver, q.id)
	}
	return true
}

// heldBack settles a job that may not be placed this cycle whatever is
// free: parked, admitted by an earlier cycle, deferred, larger than any
// node set of its pool, over its project's quota, or kept out by a
// headroom.
func (c *cycle) heldBack(q *queued, exp *Explanation) bool {
	if q.parked {
		exp.Status, exp.Reason = StatusParked, q.parkedReason(c.pol)
		return true
	}
	if p, ok := c.mem.pendingJob(q.job); ok {
		exp.Status, exp.Reason = StatusAdmitted, "admitted; waiting for its allocations to start"
		exp.Placement, exp.Warnings = p.groups, p.warnings
		return true
	}
	if d, ok := c.e.deferred[q.id]; ok {
		if c.now.Before(d.until) {
			exp.Status = StatusWaiting
			if c.explain {
				exp.Reason = fmt.Sprintf("held back until %s: %s", d.until.UTC().Format(time.RFC3339), d.why)
			}
			return true
		}
		c.mem.deferralsOver = append(c.mem.deferralsOver, q.id)
	}
	if why := c.place.tooBig(q); why != "" {
		exp.Status, exp.Reason = StatusParked, why
		return true
	}
	if held := c.projectGPUsOf(q.f.proj); q.f.quota > 0 && held+q.gpus > q.f.quota {
		exp.Status = StatusWaiting
		if c.explain {
			exp.Reason = fmt.Sprintf("project %q quota: holds %d of %d GPUs, job needs %d", q.f.project, held, q.f.quota, q.gpus)
		}
		return true
	}
	if why := c.hr.blocks(q); why != "" {
		exp.Status, exp.Reason = StatusWaiting, why
		return true
	}
	return false
}
