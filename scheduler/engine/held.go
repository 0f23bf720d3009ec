package engine

import (
	"maps"
	"slices"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
)

// holdPending keeps the GPUs of admissions planned by earlier cycles whose
// allocations have not appeared yet, and forgets those that did appear,
// whose job is gone, or that outlived the TTL.
func (c *cycle) holdPending() {
	for _, id := range slices.Sorted(maps.Keys(c.e.pending)) {
		p := c.e.pending[id]
		j, ok := c.snap.Job(id)
		var appeared []*cluster.Alloc
		for _, a := range c.snap.JobAllocs(id) {
			if !p.earlier[a.ID] {
				appeared = append(appeared, a)
			}
		}
		// Held until every planned allocation is there: Nomad may place a
		// gang's members one by one. A member that ended before any cycle
		// saw it (completed, failed, lost: Job.Completed and Job.Ended
		// count the admitted registration's) will never appear: the
		// admission is over, and its GPUs held until the TTL would sit
		// idle while the gang watch, which leaves admissions under way
		// alone, never looked at the incomplete gang.
		over := ok && (j.Ended != "" || j.Dead)
		if ok {
			done := len(appeared)
			for _, n := range j.Completed {
				done += n
			}
			over = over || done >= len(p.allocs)
		}
		if !ok || over || c.now.Sub(p.at) > c.e.opts.admissionTTL {
			c.dropPending(id)
			continue
		}
		for _, a := range p.allocs {
			c.st.Hold(a.NodeID, a.GPUs)
		}
		if j.SpecErr == nil {
			// Members already running are charged to the quota as
			// holders (assessHolders); only the rest is added here.
			held := j.GPUs()
			for _, a := range appeared {
				held -= len(a.GPUs)
			}
			c.addProjectGPUs(c.e.queue.project(c.pol.ProjectName(j.Spec)), max(0, held))
		}
	}
	c.st.Commit()
}

// holdBindings withholds the GPUs bound to preemptors (Engine.bindings)
// that are free now from every job but their preemptor, and drops the
// bindings whose preemptor was admitted or left the queue, or that
// expired. A job moved by a defragmenting preemption keeps its binding
// while it is still running (stopping) too.
func (c *cycle) holdBindings() {
	if len(c.e.bindings) == 0 {
		return
	}
	for _, id := range slices.Sorted(maps.Keys(c.e.bindings)) {
		b := c.e.bindings[id]
		j, ok := c.snap.Job(id)
		_, pending := c.pendingOf(id)
		waiting := j != nil && (j.State == cluster.JobQueued || b.moved && j.State == cluster.JobRunning)
		if !ok || !waiting || pending || c.now.After(b.expires) || c.boundOffNode(b) {
			c.dropBinding(id)
			continue
		}
		for _, ap := range b.gpus {
			sl, ok := c.slotOf(ap)
			if !ok {
				continue
			}
			if len(b.movedOut) > 0 {
				c.moveRooms = append(c.moveRooms, boundSlot{owner: id, sl: sl}) // a move's room
			}
			sl.Mask &= c.st.Free(sl.Node)
			if sl.Mask == 0 {
				continue
			}
			c.st.Take(sl)
			if c.bound == nil {
				c.bound = map[string][]placement.Slot{}
			}
			c.bound[id] = append(c.bound[id], sl)
		}
	}
	c.st.Commit()
}

// boundOffNode: some GPUs of the binding are on a node that is gone or
// takes no new work (down, draining, ineligible): the placement they were
// bound for can no longer happen, so none of them is held for it, not
// even for the rest of this cycle.
func (c *cycle) boundOffNode(b binding) bool {
	for _, ap := range b.gpus {
		ord, ok := c.st.Ordinal(ap.NodeID)
		if !ok || !c.st.Schedulable(ord) {
			return true
		}
	}
	return false
}

// bindingSpent: the job's binding has done what it was for and can only
// hold GPUs idle from now on. Its preemption's stops are over (the job
// waits for none: it is not preempting this cycle, and no move of its is
// under way), yet it was not admitted on what they freed. A job moved out
// of another's way keeps its binding: it restarts on those GPUs.
func (c *cycle) bindingSpent(q *queued, exp *Explanation) bool {
	if exp.Status == StatusPreempting {
		return false
	}
	b, ok := c.bindingOf(q.id)
	return ok && !b.moved && !c.defrag.movesUnderWay(q)
}

// slotOf maps a placement by node and GPU IDs to the state's slot.
func (c *cycle) slotOf(ap AllocPlacement) (placement.Slot, bool) {
	ord, ok := c.st.Ordinal(ap.NodeID)
	if !ok {
		return placement.Slot{}, false
	}
	n := c.st.Node(ord)
	var m uint64
	for _, id := range ap.GPUs {
		for gi := range min(len(n.GPUs), cluster.MaxGPUsPerNode) {
			if n.GPUs[gi].ID == id {
				m |= 1 << gi
				break
			}
		}
	}
	return placement.Slot{Node: ord, Mask: m}, m != 0
}

// bind records the GPUs a preemptor's placement takes as bound to it
// (until its victims' longest grace and the admission TTL are over).
// An existing binding keeps its expiry (refreshing it each cycle the
// preemptor waits would hold the GPUs for ever).
func (c *cycle) bind(q *queued, res placement.Result, victims []int) {
	var gpus []AllocPlacement
	for _, g := range res.Groups {
		for _, sl := range g {
			gpus = append(gpus, AllocPlacement{NodeID: c.st.Node(sl.Node).ID, GPUs: c.st.GPUIDs(sl)})
		}
	}
	b, ok := c.bindingOf(q.job.ID)
	if !ok {
		maxGrace := time.Duration(0)
		for _, h := range victims {
			maxGrace = max(maxGrace, c.victims[h].Grace)
		}
		b.expires = c.now.Add(maxGrace + c.e.opts.admissionTTL)
	}
	b.gpus = gpus
	c.setBinding(q.job.ID, b)
}
