package engine

import (
	"fmt"
	"math/bits"
	"strings"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// tooBig parks a job no node set of its pool could ever hold.
func (c *cycle) tooBig(q *queued) string {
	mx, ok := c.lastPoolMax, c.lastPoolMaxOK && q.pool == c.lastPool
	if !ok {
		mx, ok = c.poolMax[q.pool]
	}
	if !ok {
		n, isl := c.st.MaxNodeGPUs(q.pool)
		mx = [3]int{n, isl, c.st.MaxDeviceGroup(q.pool)}
		c.poolMax[q.pool] = mx
	}
	c.lastPool, c.lastPoolMax, c.lastPoolMaxOK = q.pool, mx, true
	if int(q.maxAlloc) <= mx[0] && int(q.maxNVLink) <= mx[1] && int(q.maxBlock) <= mx[2] && !q.devCons {
		return "" // the common case, without reading the job's groups
	}
	for gi := range q.job.Groups {
		g := &q.job.Groups[gi]
		if g.GPUs == 0 || g.Count == 0 {
			continue
		}
		topo := g.Spec.Topology
		if topo == policy.TopologyUnset {
			topo = q.job.Spec.Topology
		}
		if g.GPUs > mx[0] {
			return fmt.Sprintf("group %q asks %d GPUs per allocation; the largest schedulable node%s has %d", g.Name, g.GPUs, poolSuffix(q.pool), mx[0])
		}
		if topo == policy.TopologyNVLink && g.GPUs > mx[1] {
			return fmt.Sprintf("group %q asks %d NVLink-connected GPUs; the largest NVLink island%s has %d", g.Name, g.GPUs, poolSuffix(q.pool), mx[1])
		}
		for _, d := range g.Devices {
			if d.Count <= mx[2] && len(d.Constraints) == 0 {
				continue
			}
			b := placement.BlockOf(d)
			if most, by := c.st.MaxBlockGPUs(q.pool, b); d.Count > most {
				if miss, ok := c.st.DeviceConstraintMiss(q.pool, b); ok {
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

func (c *cycle) admit(q *queued, exp *Explanation, res placement.Result, backfilled bool) {
	j := q.job
	adm := Admission{JobID: j.ID, ModifyIndex: j.ModifyIndex, Pool: q.pool, Score: c.scoreOf(q), Backfilled: backfilled}
	pools := map[string]bool{}
	req := c.request(q, false)
	for gi, g := range j.Groups {
		gp := GroupPlacement{Group: g.Name}
		for _, sl := range res.Groups[gi] {
			n := c.st.Node(sl.Node)
			pools[n.Pool] = true
			ap := AllocPlacement{NodeID: n.ID, GPUs: c.st.GPUIDs(sl)}
			for m := sl.Mask; m != 0; m &= m - 1 {
				ap.Islands = append(ap.Islands, n.GPUs[bits.TrailingZeros64(m)].Island)
			}
			if len(g.Devices) > 0 {
				split, ok := c.st.SplitBlocks(sl, req.Groups[gi])
				if !ok {
					// Place only returns slots its blocks can split;
					// never pin what a block cannot get.
					c.e.logger.Error("placement without a device-block split; not admitting", "job", j.ID, "group", g.Name)
					return
				}
				for bi, d := range g.Devices {
					ap.Blocks = append(ap.Blocks, BlockPlacement{Task: d.Task, Index: d.Index,
						GPUs: c.st.GPUIDs(placement.Slot{Node: sl.Node, Mask: split[bi]})})
				}
			}
			gp.Allocs = append(gp.Allocs, ap)
		}
		adm.Groups = append(adm.Groups, gp)
	}
	adm.Warnings = blockWarnings(j)
	if adm.Pool == "" {
		if len(pools) == 1 {
			for p := range pools {
				adm.Pool = p
			}
		} else if len(pools) > 1 {
			adm.Pool = "all"
		}
	}
	c.plan.Admissions = append(c.plan.Admissions, adm)
	var held []AllocPlacement
	for _, g := range adm.Groups {
		held = append(held, g.Allocs...)
	}
	var earlier map[string]bool
	for _, a := range c.snap.JobAllocs(j.ID) {
		if earlier == nil {
			earlier = map[string]bool{}
		}
		earlier[a.ID] = true
	}
	c.addPending(j.ID, pendingAdmission{at: c.now, allocs: held, groups: adm.Groups, warnings: adm.Warnings, earlier: earlier})
	c.dropBinding(j.ID)
	c.addProjectGPUs(q.f.proj, q.gpus)
	c.headroomAdmit(q, res)
	exp.Status, exp.Reason, exp.Rejected = StatusAdmitted, "", nil
	exp.Placement, exp.Warnings = adm.Groups, adm.Warnings
	for _, w := range adm.Warnings {
		c.e.logger.Warn("admitting a task that will not see all its GPUs", "job", j.ID, "warning", w)
	}
	if backfilled {
		exp.Reason = "backfilled ahead of a reservation"
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
