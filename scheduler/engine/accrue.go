package engine

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/internal/buffer"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
)

// accruer is the accrue step: it charges fair-share usage for the GPU
// time used since the previous cycle (accrue) and forgets the stops
// ordered earlier that are over (expireInflight). Its state is the
// engine's memory, changed through the cycle's changes.
type accruer struct{ c *cycle }

// accrue charges each project the GPU time its allocations used since the
// previous cycle: the running ones (from the snapshot) up to now, and the
// ones that finished meanwhile (the store's finished log) up to their end,
// so that an allocation that started and ended between two cycles is
// charged too. The first cycle charges nothing: usage before it is what
// WithMemory restored. The charges go to a copy of the usage
// (changes.accrued), which the cycle scores with. facts are the holders'
// (managedFacts): their project index saves a lookup per allocation.
func (ac *accruer) accrue(holders []placement.Holder, facts []*specFacts) {
	e, now := ac.c.e, ac.c.now
	last := e.lastCycle
	finished, next := ac.c.snap.FinishedSince(e.finishedSeq)
	ac.c.mem.finishedSeq, ac.c.mem.lastCycle = next, last
	if last.IsZero() {
		ac.c.mem.lastCycle = now
		return
	}
	if !now.After(last) {
		return
	}
	qc := &e.queue
	// Nearly every allocation ran through the whole interval: those are
	// summed per project index (whole[p]); the others (started within
	// it, finished) are listed as they come, and both are merged in one
	// sorted list of intervals.
	whole := buffer.Zeroed(&e.scratch.whole, len(qc.projNames))
	var parts []charge
	add := func(proj int32, gpus int, start, end time.Time) {
		from := last
		if start.After(from) {
			from = start
		}
		if end.After(now) {
			end = now
		}
		if gpus <= 0 || !end.After(from) {
			return
		}
		if from.Equal(last) && end.Equal(now) {
			whole = growTo(&e.scratch.whole, whole, int(proj)+1)
			whole[proj] += gpus
			return
		}
		parts = append(parts, charge{proj: proj, from: from.UnixNano(), to: end.UnixNano(), gpus: gpus})
	}
	for h := range holders {
		hd := &holders[h]
		if hd.Job == nil || hd.Job.SpecErr != nil {
			continue
		}
		var proj int32
		if f := facts[h]; f != nil {
			proj = f.proj
		} else {
			proj = qc.project(e.pol.ProjectName(hd.Job.Spec))
		}
		for _, a := range hd.Allocs {
			add(proj, len(a.GPUs), a.Start, now)
		}
	}
	for _, f := range finished {
		add(qc.project(e.pol.ProjectName(jobspec.Spec{Project: f.Project})), f.GPUs, f.Start, f.End)
	}
	for p, gpus := range whole {
		if gpus > 0 {
			parts = append(parts, charge{proj: int32(p), from: last.UnixNano(), to: now.UnixNano(), gpus: gpus})
		}
	}
	// One interval per project, start and end, in name order: the same
	// sums, added in the same order, whatever the holders' order.
	slices.SortFunc(parts, func(a, b charge) int {
		return cmp.Or(strings.Compare(qc.projNames[a.proj], qc.projNames[b.proj]), cmp.Compare(a.from, b.from), cmp.Compare(a.to, b.to))
	})
	u := e.usage.Clone()
	for i := 0; i < len(parts); {
		k, sum := parts[i], 0
		for ; i < len(parts) && parts[i].proj == k.proj && parts[i].from == k.from && parts[i].to == k.to; i++ {
			sum += parts[i].gpus
		}
		u.AddInterval(qc.projNames[k.proj], sum, time.Unix(0, k.from), time.Unix(0, k.to))
	}
	ac.c.mem.accrued, ac.c.mem.lastCycle = u, now
}

// charge is GPUs a project used over an interval (Unix nanoseconds).
type charge struct {
	proj     int32
	from, to int64
	gpus     int
}

// growTo extends s (kept in *buf) with zeros to at least n values.
func growTo(buf *[]int, s []int, n int) []int {
	if len(s) >= n {
		return s
	}
	s = append(s, make([]int, n-len(s))...)
	*buf = s
	return s
}

// expireInflight finds the ordered stops that are over: their
// allocations are gone, or the adapter never carried them out within the
// TTL. (Losses older than an hour are dropped by apply; lostFrom does not
// count them meanwhile.)
func (ac *accruer) expireInflight() {
	for id, st := range ac.c.e.inflight {
		if _, ok := ac.c.snap.Alloc(id); !ok || ac.c.now.Sub(st.expires) > ac.c.e.opts.inflightTTL {
			ac.c.mem.endStop(id)
		}
	}
}
