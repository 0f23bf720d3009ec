package engine

// What the steps share besides the cycle's fields: the policy's tiers by
// name, the running gangs by job and pool, and the GPUs each project
// holds (quotas).

import (
	"slices"
	"sort"

	"github.com/impact-sched/nomad-impact/scheduler/internal/buffer"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// tier is the policy's tier of that name (nil: none), remembered for the
// last few names asked: a cycle asks for the same few tiers thousands of
// times (a slot is a length and pointer compare, the map a hash).
func (c *cycle) tier(name string) *policy.Tier {
	for i := range c.tierSlots {
		if sl := &c.tierSlots[i]; sl.t != nil && sl.name == name {
			return sl.t
		}
	}
	t := c.pol.Tiers[name]
	if t != nil {
		copy(c.tierSlots[1:], c.tierSlots[:len(c.tierSlots)-1])
		c.tierSlots[0] = tierSlot{name: name, t: t}
	}
	return t
}

// mayPreempt is policy.MayPreempt through tier.
func (c *cycle) mayPreempt(by, victim string) bool {
	t := c.tier(by)
	return t != nil && slices.Contains(t.MayPreempt, victim)
}

// holderOf finds the holder of a job's allocations.
func (c *cycle) holderOf(jobID string) (int, bool) {
	holders := c.st.Holders()
	i := sort.Search(len(holders), func(i int) bool { return holders[i].JobID >= jobID })
	return i, i < len(holders) && holders[i].JobID == jobID
}

// holderInPool: holder h has GPUs on a node of pool.
func (c *cycle) holderInPool(h int, pool string) bool {
	for _, sl := range c.st.Holders()[h].Slots {
		if c.st.PoolOf(sl.Node) == pool {
			return true
		}
	}
	return false
}

// addProjectGPUs charges gpus to project index p (for quotas).
func (c *cycle) addProjectGPUs(p int32, gpus int) {
	if p < 0 {
		return
	}
	if c.projectGPUs == nil {
		c.projectGPUs = buffer.Zeroed(&c.e.scratch.projGPUs, len(c.e.queue.projNames))
	}
	c.projectGPUs = growTo(&c.e.scratch.projGPUs, c.projectGPUs, int(p)+1)
	c.projectGPUs[p] += gpus
}

// projectGPUsOf is what addProjectGPUs charged to project index p.
func (c *cycle) projectGPUsOf(p int32) int {
	if p < 0 || int(p) >= len(c.projectGPUs) {
		return 0
	}
	return c.projectGPUs[p]
}

// tierSlot is one of tier's recent answers.
type tierSlot struct {
	name string
	t    *policy.Tier
}

// tierPool keys what the cycle works out once per tier and pool.
type tierPool struct{ tier, pool string }

// topTier: the tier has the highest weight of the policy's tiers (ties
// included). A wait for another job's stops costs its jobs most (the
// critical tier's p99 wait), and no tier outranks it.
func (c *cycle) topTier(name string) bool {
	t := c.tier(name)
	if t == nil {
		return false
	}
	for _, o := range c.pol.Tiers {
		if o.Weight > t.Weight {
			return false
		}
	}
	return true
}

// withholdable is what withholdGPUs may take on node ord: its free GPUs
// and its reserved ones no allocation uses.
func withholdable(st *placement.State, ord int) uint64 {
	return st.Free(ord) | st.Reserved(ord)&^st.Used(ord)
}

// withholdGPUs takes the GPUs pick selects among each node's free and
// reserved-but-unused ones (avail), so that the next placement cannot use
// them, and returns what gives them back as they were; nil when it took
// nothing. A headroom keeps its GPUs from work it keeps out so
// (hrCycle.protect), and an undone cut the GPUs of an ended preemptor
// from wider jobs (cutter.protect).
func withholdGPUs(st *placement.State, pick func(ord int, avail uint64) uint64) func() {
	var taken, reserved []placement.Slot
	for ord := range st.NumNodes() {
		avail := withholdable(st, ord)
		if avail == 0 {
			continue
		}
		mask := pick(ord, avail) & avail
		if mask == 0 {
			continue
		}
		res := st.Reserved(ord) &^ st.Used(ord) & mask
		sl := placement.Slot{Node: ord, Mask: mask}
		st.Take(sl)
		taken = append(taken, sl)
		if res != 0 {
			reserved = append(reserved, placement.Slot{Node: ord, Mask: res})
		}
	}
	if len(taken) == 0 {
		return nil
	}
	return func() {
		for _, sl := range taken {
			st.Release(sl)
		}
		for _, sl := range reserved {
			st.Reserve(sl)
		}
	}
}
