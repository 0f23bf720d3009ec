package engine

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
)

// holdings is the step that holds GPUs for earlier decisions, before the
// queue is decided, so that a cycle that runs before the adapter's
// actions took effect neither admits a job twice nor double-books its
// GPUs: the admissions planned by earlier cycles whose allocations have
// not appeared yet (holdPending; an allocation of the job's earlier run,
// still stopping, is not one of them: a moved job restarts before its
// old allocation ends), and the GPUs bound to preemptors and to moved
// jobs (holdBindings), withheld from every job but theirs (lend). It
// records new bindings (bind).
type holdings struct {
	c *cycle
	// bound: preemptor job ID -> the free GPUs of its binding this cycle
	// withheld from everyone else (holdBindings); released for it alone.
	bound map[string][]placement.Slot
	// moveRooms: the GPUs bound to a job that moved others out of its
	// way (a defragmenting preemption's room, Engine.bindings), free or
	// not, with that job (holdBindings): a gang stopping there is moved
	// for it (boundToOther).
	moveRooms []boundSlot
}

// lent: GPUs bound to q are withheld from the others this cycle.
func (hb *holdings) lent(q *queued) bool { return len(hb.bound[q.id]) > 0 }

// dropSpent frees what is bound to a parked job whose binding is spent:
// it cannot be placed as things are (its pool lost the nodes it
// preempted for, say), so what is bound to it is free for the others now.
func (hb *holdings) dropSpent(q *queued, exp *Explanation) {
	if !hb.bindingSpent(q, exp) {
		return
	}
	for _, sl := range hb.bound[q.id] {
		hb.c.st.Release(sl)
	}
	delete(hb.bound, q.id)
	hb.c.mem.dropBinding(q.id)
}

// lend releases the GPUs bound to q, its own, for it alone while it is
// decided; the function it returns (nil: none bound) ends the loan once
// q is decided: admitted, the GPUs are its; with its binding spent, they
// are free for every job from now on; otherwise those still free are
// withheld again.
func (hb *holdings) lend(q *queued, exp *Explanation) func() {
	slots := hb.bound[q.id]
	if len(slots) == 0 {
		return nil
	}
	st := hb.c.st
	for _, sl := range slots {
		st.Release(sl)
	}
	return func() {
		switch {
		case exp.Status == StatusAdmitted:
		case hb.bindingSpent(q, exp):
			// Nothing it waits for is stopping, and it still does
			// not place on what its victims freed (a node went down,
			// say): the GPUs are free for every job from now on,
			// not held for it until the binding expires.
			hb.c.mem.dropBinding(q.id)
		default:
			for _, sl := range slots {
				if sl.Mask&st.Free(sl.Node) == sl.Mask {
					st.Take(sl)
				}
			}
		}
		delete(hb.bound, q.id)
	}
}

// holdPending keeps the GPUs of admissions planned by earlier cycles whose
// allocations have not appeared yet, and forgets those that did appear,
// whose job is gone, or that outlived the TTL.
func (hb *holdings) holdPending() {
	for _, id := range slices.Sorted(maps.Keys(hb.c.e.pending)) {
		p := hb.c.e.pending[id]
		j, ok := hb.c.snap.Job(id)
		var appeared []*cluster.Alloc
		for _, a := range hb.c.snap.JobAllocs(id) {
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
		if !ok || over || hb.c.now.Sub(p.at) > hb.c.e.opts.admissionTTL {
			hb.c.mem.dropPending(id)
			continue
		}
		for _, a := range p.allocs {
			hb.c.st.Hold(a.NodeID, a.GPUs)
		}
		if j.SpecErr == nil {
			// Members already running are charged to the quota as
			// holders (assessHolders); only the rest is added here.
			held := j.GPUs()
			for _, a := range appeared {
				held -= len(a.GPUs)
			}
			hb.c.addProjectGPUs(hb.c.e.queue.project(hb.c.pol.ProjectName(j.Spec)), max(0, held))
		}
	}
	hb.c.st.Commit()
}

// holdBindings withholds the GPUs bound to preemptors (Engine.bindings)
// that are free now from every job but their preemptor (the newest
// binding's where two name the same GPUs: newestFirst), and drops the
// bindings whose preemptor was admitted or left the queue, or that
// expired. A job moved by a defragmenting preemption keeps its binding
// while it is still running (stopping) too.
func (hb *holdings) holdBindings() {
	if len(hb.c.e.bindings) == 0 {
		return
	}
	for _, id := range hb.newestFirst() {
		b := hb.c.e.bindings[id]
		j, ok := hb.c.snap.Job(id)
		_, pending := hb.c.mem.pendingOf(id)
		waiting := j != nil && (j.State == cluster.JobQueued || b.moved && j.State == cluster.JobRunning)
		if !ok || !waiting || pending || hb.c.now.After(b.expires) || hb.boundOffNode(b) {
			hb.c.mem.dropBinding(id)
			continue
		}
		for _, ap := range b.gpus {
			sl, ok := hb.slotOf(ap)
			if !ok {
				continue
			}
			if len(b.movedOut) > 0 {
				hb.moveRooms = append(hb.moveRooms, boundSlot{owner: id, sl: sl}) // a move's room
			}
			sl.Mask &= hb.c.st.Free(sl.Node)
			if sl.Mask == 0 {
				continue
			}
			hb.c.st.Take(sl)
			if hb.bound == nil {
				hb.bound = map[string][]placement.Slot{}
			}
			hb.bound[id] = append(hb.bound[id], sl)
		}
	}
	hb.c.st.Commit()
}

// newestFirst is the bound jobs, the newest binding first (then by job
// ID): where two bindings name the same GPUs, the newer takes them
// (binding.made).
func (hb *holdings) newestFirst() []string {
	bs := hb.c.e.bindings
	return slices.SortedFunc(maps.Keys(bs), func(a, b string) int {
		if c := bs[b].made.Compare(bs[a].made); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
}

// boundOffNode: some GPUs of the binding are on a node that is gone or
// takes no new work (down, draining, ineligible): the placement they were
// bound for can no longer happen, so none of them is held for it, not
// even for the rest of this cycle.
func (hb *holdings) boundOffNode(b binding) bool {
	for _, ap := range b.gpus {
		ord, ok := hb.c.st.Ordinal(ap.NodeID)
		if !ok || !hb.c.st.Schedulable(ord) {
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
func (hb *holdings) bindingSpent(q *queued, exp *Explanation) bool {
	if exp.Status == StatusPreempting {
		return false
	}
	b, ok := hb.c.mem.bindingOf(q.id)
	return ok && !b.moved && !hb.c.defrag.movesUnderWay(q)
}

// slotOf maps a placement by node and GPU IDs to the state's slot.
func (hb *holdings) slotOf(ap AllocPlacement) (placement.Slot, bool) {
	ord, ok := hb.c.st.Ordinal(ap.NodeID)
	if !ok {
		return placement.Slot{}, false
	}
	n := hb.c.st.Node(ord)
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
func (hb *holdings) bind(q *queued, res placement.Result, victims []int) {
	var gpus []AllocPlacement
	for _, g := range res.Groups {
		for _, sl := range g {
			gpus = append(gpus, AllocPlacement{NodeID: hb.c.st.Node(sl.Node).ID, GPUs: hb.c.st.GPUIDs(sl)})
		}
	}
	b, ok := hb.c.mem.bindingOf(q.job.ID)
	if !ok {
		maxGrace := time.Duration(0)
		for _, h := range victims {
			maxGrace = max(maxGrace, hb.c.pre.graceOf(q, h))
		}
		b.expires = hb.c.now.Add(maxGrace + hb.c.e.opts.admissionTTL)
	}
	b.gpus, b.made = gpus, hb.c.now
	hb.c.mem.setBinding(q.job.ID, b)
}

// boundToOther: some GPUs of holder h are a move's room bound to a job
// other than q (holdBindings): h is being moved out of that job's way.
func (hb *holdings) boundToOther(q *queued, h int) bool {
	if len(hb.moveRooms) == 0 {
		return false
	}
	for _, sl := range hb.c.st.Holders()[h].Slots {
		for _, b := range hb.moveRooms {
			if b.owner != q.id && b.sl.Node == sl.Node && b.sl.Mask&sl.Mask != 0 {
				return true
			}
		}
	}
	return false
}

// boundSlot is GPUs of one node bound to job owner.
type boundSlot struct {
	owner string
	sl    placement.Slot
}
