package engine

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/internal/buffer"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
)

type reservation struct {
	jobID string
	tier  string
	until time.Time // zero: unknown (running work without walltime)
	// estimated: until rests on a learned walltime estimate (walltime.go).
	estimated bool
	// slots are the GPUs reserved (moveLast lends them to the job).
	slots []placement.Slot
	// gathering: a gang's gathered GPUs (gather.go), which no job
	// backfills.
	gathering bool
}

// mayBackfill: may the job use GPUs reserved for blocked jobs ahead of it?
// Only if no gang is gathering its nodes (gather.go: those GPUs idle until
// the gang starts) and, for every reservation, it ends (by walltime, or
// without one by its learned estimate: walltime.go) before the
// reservation is needed, or the reserving job can take the GPUs back by
// preempting it: the job is preemptible, the reserving job's tier may
// preempt its tier, and preemption is enabled at all. With preemption off
// a backfilled job would hold the reserved GPUs for as long as it runs,
// and the reservation would hold nothing. estimated: some reservation is
// passed by an estimated walltime.
func (p *placer) mayBackfill(q *queued) (ok, estimated bool) {
	if len(p.reservations) == 0 || !p.c.pol.Backfill.Enabled {
		return false, false
	}
	wall, est := q.walltime, false
	if wall <= 0 {
		wall, est = p.c.wall.ofQueued(q)
	}
	reclaimable := q.f.preemptible && p.c.pol.Preemption.Enabled
	for _, r := range p.reservations {
		if r.gathering {
			return false, false
		}
		if endsBefore := wall > 0 && !r.until.IsZero() && !p.c.now.Add(wall).After(r.until); endsBefore {
			estimated = estimated || est
			continue
		}
		if preemptibleByIt := reclaimable && p.c.mayPreempt(r.tier, q.f.tier); !preemptibleByIt {
			return false, false
		}
	}
	return true, estimated
}

func (p *placer) reserveSlots(res placement.Result) {
	for _, g := range res.Groups {
		for _, sl := range g {
			p.c.st.Reserve(sl)
		}
	}
}

// slotsOf lists a placement's slots.
func slotsOf(res placement.Result) []placement.Slot {
	var out []placement.Slot
	for _, g := range res.Groups {
		out = append(out, g...)
	}
	return out
}

// lendReservation returns to the free pool the GPUs of reservation i
// that are still reserved (a backfilled job may have taken some since)
// while its job is decided again (moveLast); the function it returns
// reserves exactly those again.
func (p *placer) lendReservation(i int) func() {
	r := &p.reservations[i]
	lent := make([]placement.Slot, 0, len(r.slots))
	for _, sl := range r.slots {
		if m := sl.Mask & p.c.st.Reserved(sl.Node); m != 0 {
			lent = append(lent, placement.Slot{Node: sl.Node, Mask: m})
			p.c.st.Unreserve(lent[len(lent)-1])
		}
	}
	return func() {
		for _, sl := range lent {
			p.c.st.Reserve(sl)
		}
	}
}

// reserve gives a blocked job a reservation: the GPUs it would get at the
// earliest time running work is expected to end (by walltime). It releases
// running gangs in order of expected end in a scratch transaction until the
// job fits; the GPUs of that placement are withheld from later jobs unless
// they may backfill.
func (p *placer) reserve(q *queued, exp *Explanation) {
	if p.endOrder == nil {
		p.endOrder = p.holdersByEnd()
	}
	holders := p.c.st.Holders()
	req := p.c.request(q, false)
	cp := p.c.st.Checkpoint()
	next := q.gpus
	var found placement.Result
	var until time.Time
	ok, estimated := false, false
	for i := 0; ; i++ {
		h, more := p.endOrder.at(i)
		if !more {
			break
		}
		if p.c.claimed[h] {
			continue
		}
		p.c.st.ReleaseHolder(h)
		if p.endOrder.estimated(i) {
			estimated = true
		}
		free := p.c.st.FreeGPUs(q.pool)
		if free < next {
			continue
		}
		if res, fit := p.c.st.Place(req, nil); fit {
			found, ok = res, true
			until, _ = p.expectedEnd(h, &holders[h])
			break
		}
		// Fragmented: try again only once noticeably more is free, so the
		// shadow schedule costs a few placements, not one per gang.
		next = free + max(1, q.gpus/4)
	}
	if !ok {
		// Every holder not claimed by a preemptor was released and it
		// still does not fit. Either earlier reservations and preemptors'
		// bindings hold what would fit, or the job cannot be placed on its
		// pool even empty: then it is parked with why, and holds nothing.
		rej := p.emptyPoolRejections(req)
		p.c.st.Rollback(cp)
		if rej != nil {
			exp.Status = StatusParked
			exp.Reason = neverFitsReason(q.pool, rej)
			return
		}
		if p.c.explain {
			exp.Reason += "; no reservation possible: it fits its pool, but even once running work has ended GPUs it needs stay held (by earlier reservations, preemptors' bindings or admissions under way)"
		}
		return
	}
	p.c.st.Rollback(cp)
	p.reserveSlots(found)
	estimated = estimated && !until.IsZero()
	p.reservations = append(p.reservations, reservation{jobID: q.job.ID, tier: q.f.tier, until: until, estimated: estimated, slots: slotsOf(found)})
	if p.c.explain {
		p.c.why.addReservationNote(p.reservationNote())
	}
	exp.Status = StatusReserved
	exp.ReservedUntil, exp.ReservedUntilEstimated = until, estimated
	if !p.c.explain {
		return
	}
	switch {
	case until.IsZero():
		exp.Reason += "; GPUs reserved (time unknown: running work has no walltime)"
	case estimated:
		exp.Reason += fmt.Sprintf("; GPUs reserved, expected free by %s (estimated: running work without a walltime is timed by the run times of finished jobs like it)", until.UTC().Format(time.RFC3339))
	default:
		exp.Reason += fmt.Sprintf("; GPUs reserved, expected free by %s", until.UTC().Format(time.RFC3339))
	}
}

// emptyPoolRejections places the request on its pool as if the pool were
// empty (nothing running, managed or not, nothing held or reserved) and
// returns nil when it fits there, else why each node refused it. It runs
// inside reserve's scratch transaction, which rolls its changes back.
func (p *placer) emptyPoolRejections(req placement.Request) placement.Rejections {
	p.c.st.Empty(req.Pool)
	rej := placement.Rejections{}
	if _, ok := p.c.st.Place(req, rej); ok {
		return nil
	}
	return rej
}

// neverFitsReason says why a job cannot be placed on its pool even empty,
// naming each node-refusal reason with its count (largest first).
func neverFitsReason(pool string, rej placement.Rejections) string {
	reasons := make([]string, 0, len(rej))
	for r := range rej {
		reasons = append(reasons, r)
	}
	slices.SortFunc(reasons, func(a, b string) int { return cmp.Or(cmp.Compare(rej[b], rej[a]), strings.Compare(a, b)) })
	var b strings.Builder
	fmt.Fprintf(&b, "cannot be placed%s even with no other work running", poolSuffix(pool))
	for i, r := range reasons {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s (%d node(s))", r, rej[r])
	}
	return b.String()
}

// reservationNote tells jobs that may not backfill why reserved GPUs are
// not theirs; built once per reservation, shared by every waiting job.
func (p *placer) reservationNote() string {
	var b strings.Builder
	b.WriteString("; some GPUs are reserved for ")
	gathering := false
	for i, r := range p.reservations {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(r.jobID)
		if r.gathering {
			b.WriteString(" (gathering its nodes)")
			gathering = true
		}
		if !r.until.IsZero() {
			fmt.Fprintf(&b, " (needed by %s", r.until.UTC().Format(time.RFC3339))
			if r.estimated {
				b.WriteString(", estimated")
			}
			b.WriteString(")")
		}
	}
	if gathering {
		b.WriteString(": no job may use them while a gang gathers its nodes (they idle until it starts, as the placed allocations of a partially placed Nomad job would)")
		return b.String()
	}
	b.WriteString(": a job may use them only if its impact_walltime ")
	if p.c.wall.notes() {
		b.WriteString("(or, without one, its walltime estimated from finished jobs like it) ")
	}
	b.WriteString("ends before they are needed, or it is preemptible by the reserving job")
	return b.String()
}

// expectedEnd of holder h: now when stopping, start + walltime when
// known (never before now), else start + its estimate when the policy
// estimates running work (estimated: always after now, see
// walltimes.ofHolder), zero when unknown.
func (p *placer) expectedEnd(h int, hd *placement.Holder) (time.Time, bool) {
	if hd.Stopping {
		return p.c.now, false
	}
	wall, est := p.c.wall.ofHolder(h, hd)
	if wall <= 0 {
		return time.Time{}, false
	}
	end := earliestStart(hd.Allocs).Add(wall)
	if end.Before(p.c.now) {
		return p.c.now, false
	}
	return end, est
}

// endKey is a holder's place in the order of expected ends.
type endKey struct {
	h          int
	known, est bool
	end        int64
	start      int64
}

// endOrder yields the holders by expected end (known ends first, earliest
// first; unknown ends oldest first; then job ID). A reservation releases
// holders in that order only until the job fits, mostly a few of
// thousands, so the order is drawn from a heap as far as it is read
// rather than sorted whole.
type endOrder struct {
	holders []placement.Holder
	heap    []endKey
	sorted  []int
	// est: the i-th holder's end is estimated (walltimes).
	est []bool
}

func (p *placer) holdersByEnd() *endOrder {
	holders := p.c.st.Holders()
	o := &endOrder{holders: holders, heap: buffer.Zeroed(&p.c.e.scratch.ends, len(holders))}
	for i := range holders {
		end, est := p.expectedEnd(i, &holders[i])
		o.heap[i] = endKey{h: i, known: !end.IsZero(), est: est, end: end.UnixNano(), start: earliestStart(holders[i].Allocs).UnixNano()}
	}
	for i := len(o.heap)/2 - 1; i >= 0; i-- {
		o.down(i)
	}
	return o
}

// at returns the i-th holder by expected end; false past the last.
func (o *endOrder) at(i int) (int, bool) {
	for len(o.sorted) <= i {
		n := len(o.heap)
		if n == 0 {
			return 0, false
		}
		o.sorted = append(o.sorted, o.heap[0].h)
		o.est = append(o.est, o.heap[0].est)
		o.heap[0] = o.heap[n-1]
		o.heap = o.heap[:n-1]
		o.down(0)
	}
	return o.sorted[i], true
}

// estimated: the i-th holder's end (at(i) read first) is estimated.
func (o *endOrder) estimated(i int) bool { return o.est[i] }

func (o *endOrder) less(a, b endKey) bool {
	if a.known != b.known {
		return a.known
	}
	if a.known && a.end != b.end {
		return a.end < b.end
	}
	// Unknown ends: oldest first is the best guess.
	if a.start != b.start {
		return a.start < b.start
	}
	return o.holders[a.h].JobID < o.holders[b.h].JobID
}

func (o *endOrder) down(i int) {
	h := o.heap
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && o.less(h[r], h[l]) {
			m = r
		}
		if !o.less(h[m], h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}
