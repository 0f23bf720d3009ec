package engine

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
)

// placer is the place-and-reserve step. It admits a job where every
// group places all-or-nothing on free GPUs (tryAdmit, admit):
// topology-aware, best fit, honouring the job's distinct_hosts and node
// constraints and Nomad's device-group rule (each device block's GPUs
// from one device group it matches, within its own ${device.ids}); the
// admission carries per allocation its GPU IDs and islands and each
// device block's GPUs (what the adapter pins), and a warning for a task
// with several GPU blocks whose driver is not impact-exec. It parks a
// job no node set of its pool can ever hold (tooBig: a block no device
// group can hold gets a reason naming group_by). The first blocked jobs
// (Backfill.Reservations of them), and every blocked job of the
// Backfill.ReserveTiers besides, get a reservation on the GPUs they will
// get when running work ends or may be preempted by them (reserve.go); a
// job that does not place on its pool even empty (placement.State.Empty)
// is parked with each node's reason instead and holds nothing; later
// jobs may use reserved GPUs only if they end (by walltime, or by a
// learned estimate without one: walltime.go) before the reservation is
// needed, or are preemptible by the reserving job (mayBackfill).
type placer struct {
	c *cycle
	// poolMax: per pool, what its largest node sets hold (tooBig).
	poolMax map[string][3]int
	// lastPool...: poolMax's last answer (most jobs share a pool).
	lastPool      string
	lastPoolMax   [3]int
	lastPoolMaxOK bool
	// reservations: this cycle's, in queue order.
	reservations []reservation
	// gathers counts the reservations of gangs gathering their nodes
	// (gather.go): they do not count against the policy's reservations.
	gathers int
	// always counts the reservations of the policy's reserve tiers
	// (reservesAlways): they do not count against the policy's either.
	always int
	// endOrders: holders by expected end, for reservations, by the tier
	// reserving ("" for a tier that may preempt no one: endOrderFor).
	endOrders map[string]*endOrder
}

// full: every reservation the policy allows this cycle is made (those of
// the policy's reserve tiers do not count).
func (p *placer) full() bool {
	return len(p.reservations)-p.gathers-p.always >= p.c.pol.Backfill.Reservations
}

// reservesAlways: q is of one of the policy's reserve tiers, so blocked
// it gets a reservation whatever the count (policy.Backfill.ReserveTiers),
// unless the idle budget of the headroom it would use is spent
// (hrCycle.yields): such a reservation idles GPUs on that account, and
// where urgency has cost the pool its allowance, occupancy wins.
func (p *placer) reservesAlways(q *queued) bool {
	return p.reserveTier(q) && !p.c.hr.yields(q)
}

// yieldsReservation: q is of a reserve tier but gets no reservation
// because the headroom's idle budget is spent (reservesAlways).
func (p *placer) yieldsReservation(q *queued) bool {
	return p.reserveTier(q) && p.c.hr.yields(q)
}

// reserveTier: q is of one of the policy's reserve tiers.
func (p *placer) reserveTier(q *queued) bool {
	return slices.Contains(p.c.pol.Backfill.ReserveTiers, q.f.tier)
}

// idleReserved is, per pool whose headroom's idle budget pays for them
// (hrCycle.pays), the GPUs of reserve tiers' reservations that are free
// after the cycle: no job backfilled them, and they idle until the next.
func (p *placer) idleReserved() map[string]int {
	var out map[string]int
	for _, r := range p.reservations {
		if !r.always {
			continue
		}
		for _, sl := range r.slots {
			n := bits.OnesCount64(sl.Mask & p.c.st.Reserved(sl.Node) &^ p.c.st.Used(sl.Node))
			pool := p.c.st.PoolOf(sl.Node)
			if n == 0 || !p.c.hr.pays(pool, r.tier) {
				continue
			}
			if out == nil {
				out = map[string]int{}
			}
			out[pool] += n
		}
	}
	return out
}

// count is the number of reservations made this cycle.
func (p *placer) count() int { return len(p.reservations) }

// tooBig parks a job no node set of its pool could ever hold.
func (p *placer) tooBig(q *queued) string {
	mx, ok := p.lastPoolMax, p.lastPoolMaxOK && q.pool == p.lastPool
	if !ok {
		mx, ok = p.poolMax[q.pool]
	}
	if !ok {
		n, isl := p.c.st.MaxNodeGPUs(q.pool)
		mx = [3]int{n, isl, p.c.st.MaxDeviceGroup(q.pool)}
		p.poolMax[q.pool] = mx
	}
	p.lastPool, p.lastPoolMax, p.lastPoolMaxOK = q.pool, mx, true
	if int(q.maxAlloc) <= mx[0] && int(q.maxNVLink) <= mx[1] && int(q.maxBlock) <= mx[2] && !q.devCons {
		return "" // the common case, without reading the job's groups
	}
	for gi := range q.job.Groups {
		g := &q.job.Groups[gi]
		if g.GPUs == 0 || g.Count == 0 {
			continue
		}
		topo := g.Spec.Topology
		if topo == jobspec.TopologyUnset {
			topo = q.job.Spec.Topology
		}
		if g.GPUs > mx[0] {
			return fmt.Sprintf("group %q asks %d GPUs per allocation; the largest schedulable node%s has %d", g.Name, g.GPUs, poolSuffix(q.pool), mx[0])
		}
		if topo == jobspec.TopologyNVLink && g.GPUs > mx[1] {
			return fmt.Sprintf("group %q asks %d NVLink-connected GPUs; the largest NVLink island%s has %d", g.Name, g.GPUs, poolSuffix(q.pool), mx[1])
		}
		for _, d := range g.Devices {
			if d.Count <= mx[2] && len(d.Constraints) == 0 {
				continue
			}
			b := placement.BlockOf(d)
			if most, by := p.c.st.MaxBlockGPUs(q.pool, b); d.Count > most {
				if miss, ok := p.c.st.DeviceConstraintMiss(q.pool, b); ok {
					return deviceConstraintReason(g.Name, d, q.pool, miss)
				}
				return fmt.Sprintf("group %q task %q asks %d GPUs in one device block (%q), and no schedulable node%s has a device group of more than %d that it matches (%s%s)",
					g.Name, d.Task, d.Count, d.Name, poolSuffix(q.pool), most, cluster.DeviceGroupRule, placement.GroupByHint(by))
			}
		}
	}
	return ""
}

// deviceConstraintReason says which of a device block's own constraints
// no device group of the pool meets.
func deviceConstraintReason(group string, d cluster.DeviceAsk, pool string, miss placement.ConstraintMiss) string {
	where := "any pool"
	if pool != "" {
		where = fmt.Sprintf("pool %q", pool)
	}
	var why string
	if miss.Constraint != nil {
		why = fmt.Sprintf("group %q task %q device %q: constraint %s matches no device group of %s", group, d.Task, d.Name, miss.Constraint, where)
	} else {
		parts := make([]string, len(d.Constraints))
		for i, c := range d.Constraints {
			parts[i] = c.String()
		}
		why = fmt.Sprintf("group %q task %q device %q: constraints %s, each met by some device group of %s, together match none", group, d.Task, d.Name, strings.Join(parts, ", "), where)
	}
	if miss.Hint != "" {
		why += " (" + miss.Hint + ")"
	}
	return why
}

// estimated: it backfills by an estimated walltime (mayBackfill).
func (p *placer) admit(q *queued, exp *Explanation, res placement.Result, backfilled, estimated bool) {
	j := q.job
	adm := Admission{JobID: j.ID, ModifyIndex: j.ModifyIndex, Pool: q.pool, Score: p.c.order.scoreOf(q), Backfilled: backfilled}
	pools := map[string]bool{}
	req := p.c.request(q, false)
	for gi, g := range j.Groups {
		gp := GroupPlacement{Group: g.Name}
		for _, sl := range res.Groups[gi] {
			n := p.c.st.Node(sl.Node)
			pools[n.Pool] = true
			ap := AllocPlacement{NodeID: n.ID, GPUs: p.c.st.GPUIDs(sl)}
			for m := sl.Mask; m != 0; m &= m - 1 {
				ap.Islands = append(ap.Islands, n.GPUs[bits.TrailingZeros64(m)].Island)
			}
			if len(g.Devices) > 0 {
				split, ok := p.c.st.SplitBlocks(sl, req.Groups[gi])
				if !ok {
					// Place only returns slots its blocks can split;
					// never pin what a block cannot get.
					p.c.e.logger.Error("placement without a device-block split; not admitting", "job", j.ID, "group", g.Name)
					return
				}
				for bi, d := range g.Devices {
					ap.Blocks = append(ap.Blocks, BlockPlacement{Task: d.Task, Index: d.Index,
						GPUs: p.c.st.GPUIDs(placement.Slot{Node: sl.Node, Mask: split[bi]})})
				}
			}
			gp.Allocs = append(gp.Allocs, ap)
		}
		adm.Groups = append(adm.Groups, gp)
	}
	adm.Warnings = blockWarnings(j)
	if adm.Pool == "" {
		if len(pools) == 1 {
			for pool := range pools {
				adm.Pool = pool
			}
		} else if len(pools) > 1 {
			adm.Pool = "all"
		}
	}
	p.c.plan.Admissions = append(p.c.plan.Admissions, adm)
	p.c.cuts.admitted(q)
	var held []AllocPlacement
	for _, g := range adm.Groups {
		held = append(held, g.Allocs...)
	}
	var earlier map[string]bool
	for _, a := range p.c.snap.JobAllocs(j.ID) {
		if earlier == nil {
			earlier = map[string]bool{}
		}
		earlier[a.ID] = true
	}
	p.c.mem.addPending(j.ID, pendingAdmission{at: p.c.now, allocs: held, groups: adm.Groups, warnings: adm.Warnings, earlier: earlier})
	p.c.mem.dropBinding(j.ID)
	p.c.addProjectGPUs(q.f.proj, q.gpus)
	p.c.hr.admit(q, res)
	exp.Status, exp.Reason, exp.Rejected = StatusAdmitted, "", nil
	exp.Placement, exp.Warnings = adm.Groups, adm.Warnings
	for _, w := range adm.Warnings {
		p.c.e.logger.Warn("admitting a task that will not see all its GPUs", "job", j.ID, "warning", w)
	}
	if backfilled {
		exp.Reason = "backfilled ahead of a reservation"
		if estimated {
			exp.Reason += " (it has no walltime: its estimate from finished jobs like it ends before the reservation is needed)"
		}
	}
	if note := p.c.hr.loanNote(q, res); note != "" {
		exp.OnLoan = true
		exp.Reason = strings.TrimPrefix(exp.Reason+"; "+note, "; ")
	}
	if note := p.c.hr.takeBackNote(q, res); note != "" {
		exp.Reason = strings.TrimPrefix(exp.Reason+"; "+note, "; ")
	}
}

// ExecDriver is the task driver that gives a task the GPUs of all its
// device blocks (see device.EnvBlockPrefix).
const ExecDriver = "impact-exec"

// blockWarnings names the tasks of a job with several GPU device blocks
// whose driver is not impact-exec: Nomad merges the blocks' visibility
// variables last-wins, so such a task sees only its last block's GPUs in
// CUDA_VISIBLE_DEVICES (its device nodes are all mounted).
func blockWarnings(j *cluster.Job) []string {
	var out []string
	for _, g := range j.Groups {
		blocks := map[string]int{}
		driver := map[string]string{}
		var tasks []string
		for _, d := range g.Devices {
			if blocks[d.Task] == 0 {
				tasks = append(tasks, d.Task)
			}
			blocks[d.Task]++
			driver[d.Task] = d.Driver
		}
		for _, t := range tasks {
			if blocks[t] > 1 && driver[t] != ExecDriver {
				out = append(out, fmt.Sprintf("group %q task %q has %d GPU device blocks and driver %q: Nomad merges their CUDA_VISIBLE_DEVICES last-wins, so the task sees only the last block's GPUs (impact-exec lists them all; or use one device block)",
					g.Name, t, blocks[t], driver[t]))
			}
		}
	}
	return out
}

// tryAdmit admits the job where it fits on free GPUs (reserved ones too
// when it may backfill); otherwise it says why not.
func (p *placer) tryAdmit(q *queued, exp *Explanation, pos int) bool {
	backfill, estimated := p.mayBackfill(q)
	free := p.c.st.FreeGPUs(q.pool)
	if backfill {
		free += p.c.st.ReservedFreeGPUs(q.pool)
	}
	if q.gpus > free {
		if p.c.explain {
			exp.Reason = p.c.why.reason(reasonKey{kind: reasonNeeds, gpus: q.gpus, free: free, pool: q.pool, kept: p.c.hr.withheldNote(), note: p.c.why.noteFor(backfill)})
			if pos <= explainRejectionsUpTo {
				exp.Rejected = placement.Rejections{}
				p.c.st.Explain(p.c.request(q, backfill), exp.Rejected)
			}
		}
		return false
	}
	// A headroom's placement preferences first (preemptible work onto its
	// nodes, work it keeps out off them), else best fit.
	req := p.c.request(q, backfill)
	res, ok := p.c.hr.prefer(q, req)
	if !ok {
		res, ok = p.c.hr.avoid(q, req)
	}
	var rej placement.Rejections
	if !ok {
		if p.c.explain {
			rej = placement.Rejections{}
		}
		res, ok = p.c.st.Place(req, rej)
	}
	if ok {
		p.admit(q, exp, res, backfill && len(p.reservations) > 0, estimated)
		return true
	}
	if p.c.explain {
		exp.Rejected = rej
		exp.Reason = p.c.why.reason(reasonKey{kind: reasonNoPlacement, gpus: q.gpus, kept: p.c.hr.withheldNote(), note: p.c.why.noteFor(backfill)})
	}
	return false
}
