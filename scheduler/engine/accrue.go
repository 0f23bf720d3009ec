package engine

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/placement"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// accrue charges each project the GPU time its allocations used since the
// previous cycle: the running ones (from the snapshot) up to now, and the
// ones that finished meanwhile (the store's finished log) up to their end,
// so that an allocation that started and ended between two cycles is
// charged too. The first cycle charges nothing: usage before it is what
// WithUsage or WithMemory restored. The charges go to a copy of the usage
// (changes.accrued), which the cycle scores with.
func (c *cycle) accrue(holders []placement.Holder) {
	e, now := c.e, c.now
	last := e.lastCycle
	finished, next := c.snap.FinishedSince(e.finishedSeq)
	c.ch.finishedSeq, c.ch.lastCycle = next, last
	if last.IsZero() {
		c.ch.lastCycle = now
		return
	}
	if !now.After(last) {
		return
	}
	type key struct {
		project  string
		from, to int64
	}
	sums := map[key]int{}
	charge := func(project string, gpus int, start, end time.Time) {
		from := last
		if start.After(from) {
			from = start
		}
		if end.After(now) {
			end = now
		}
		if gpus > 0 && end.After(from) {
			sums[key{project, from.UnixNano(), end.UnixNano()}] += gpus
		}
	}
	for i := range holders {
		hd := &holders[i]
		if hd.Job == nil || hd.Job.SpecErr != nil {
			continue
		}
		project := e.pol.ProjectName(hd.Job.Spec)
		for _, a := range hd.Allocs {
			charge(project, len(a.GPUs), a.Start, now)
		}
	}
	for _, f := range finished {
		charge(e.pol.ProjectName(policy.Spec{Project: f.Project}), f.GPUs, f.Start, f.End)
	}
	keys := make([]key, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(strings.Compare(a.project, b.project), cmp.Compare(a.from, b.from), cmp.Compare(a.to, b.to))
	})
	u := e.usage.Clone()
	for _, k := range keys {
		u.AddInterval(k.project, sums[k], time.Unix(0, k.from), time.Unix(0, k.to))
	}
	c.ch.accrued, c.ch.lastCycle = u, now
}

// expireInflight finds the ordered stops that are over: their
// allocations are gone, or the adapter never carried them out within the
// TTL. (Losses older than an hour are dropped by apply; lostFrom does not
// count them meanwhile.)
func (c *cycle) expireInflight() {
	for id, st := range c.e.inflight {
		if _, ok := c.snap.Alloc(id); !ok || c.now.Sub(st.expires) > c.e.opts.inflightTTL {
			if c.ch.expired == nil {
				c.ch.expired = map[string]bool{}
			}
			c.ch.expired[id] = true
		}
	}
}
