package engine

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// accrue charges each project the GPU time its allocations used since the
// previous cycle: the running ones (from the snapshot) up to now, and the
// ones that finished meanwhile (the store's finished log) up to their end,
// so that an allocation that started and ended between two cycles is
// charged too. The first cycle charges nothing: usage before it is what
// WithUsage or WithMemory restored.
func (e *Engine) accrue(snap *cluster.Snapshot, holders []placement.Holder, now time.Time) {
	last := e.lastCycle
	finished, next := snap.FinishedSince(e.finishedSeq)
	e.finishedSeq = next
	if last.IsZero() {
		e.lastCycle = now
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
	for _, k := range keys {
		e.usage.AddInterval(k.project, sums[k], time.Unix(0, k.from), time.Unix(0, k.to))
	}
	e.lastCycle = now
}

// expireInflight forgets ordered preemptions whose allocations are gone, or
// that the adapter never carried out within the TTL.
func (e *Engine) expireInflight(snap *cluster.Snapshot, now time.Time) {
	for id, st := range e.inflight {
		if _, ok := snap.Alloc(id); !ok || now.Sub(st.expires) > e.opts.inflightTTL {
			delete(e.inflight, id)
		}
	}
	keep := e.losses[:0]
	for _, l := range e.losses {
		if now.Sub(l.at) < time.Hour {
			keep = append(keep, l)
		}
	}
	e.losses = keep
}
