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
	// always: made for a reserve tier (policy backfill reserve_tiers);
	// a headroom's idle budget pays for its idle GPUs (idleReserved).
	always bool
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

// takeSlots takes a preemptor's or mover's placement from the rest of
// the cycle: its free GPUs as used (no later job may have them, not even
// one that may backfill reserved GPUs) and the GPUs still held by the
// gangs it stops as reserved (covered once freed). Later cycles withhold
// them through the job's binding (holdings). Reserved alone, the free
// ones went to a later job that could backfill a reservation: the
// preemptor's placement then broke, it preempted elsewhere, and the
// backfilled job was preempted in turn (a loop of preemptions on a
// two-node pool under a reservation, robustness seed 2, rand-06).
func (p *placer) takeSlots(res placement.Result) {
	for _, g := range res.Groups {
		for _, sl := range g {
			if free := sl.Mask &^ p.c.st.Used(sl.Node); free != 0 {
				p.c.st.Take(placement.Slot{Node: sl.Node, Mask: free})
			}
			if held := sl.Mask & p.c.st.Used(sl.Node); held != 0 {
				p.c.st.Reserve(placement.Slot{Node: sl.Node, Mask: held})
			}
		}
	}
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
// earliest time running work is expected to end (by walltime) or may be
// preempted by it (endOrderFor). It releases running gangs in that order
// in a scratch transaction until the job fits; the GPUs of that placement
// are withheld from later jobs unless they may backfill.
func (p *placer) reserve(q *queued, exp *Explanation) {
	order := p.endOrderFor(q.f.tier)
	req := p.c.request(q, false)
	cp := p.c.st.Checkpoint()
	next := q.gpus
	var found placement.Result
	var until time.Time
	ok, estimated := false, false
	var reclaims []int // holders released as preemptible by q
	for i := 0; ; i++ {
		h, more := order.at(i)
		if !more {
			break
		}
		if p.c.claimed[h] {
			continue
		}
		p.c.st.ReleaseHolder(h)
		e := order.entry(i)
		estimated = estimated || e.est
		if e.reclaim {
			reclaims = append(reclaims, h)
		}
		free := p.c.st.FreeGPUs(q.pool)
		if free < next {
			continue
		}
		if res, fit := p.c.st.Place(req, nil); fit {
			found, ok = res, true
			until = e.endTime()
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
	always := p.reservesAlways(q)
	p.reservations = append(p.reservations, reservation{jobID: q.job.ID, tier: q.f.tier, until: until, estimated: estimated, slots: slotsOf(found), always: always})
	if always {
		p.always++
	}
	if p.c.explain {
		p.c.why.addReservationNote(p.reservationNote())
	}
	exp.Status = StatusReserved
	exp.ReservedUntil, exp.ReservedUntilEstimated = until, estimated
	exp.ReservedPreempts = !until.IsZero() && p.holdsAny(reclaims, found)
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
	if exp.ReservedPreempts {
		exp.Reason += " (counting the running work it may preempt as freed once it may preempt it)"
	}
}

// holdsAny: one of holders hs holds a GPU of placement res (a
// reservation counts on preempting it).
func (p *placer) holdsAny(hs []int, res placement.Result) bool {
	holders := p.c.st.Holders()
	for _, h := range hs {
		for _, own := range holders[h].Slots {
			for _, g := range res.Groups {
				for _, sl := range g {
					if sl.Node == own.Node && sl.Mask&own.Mask != 0 {
						return true
					}
				}
			}
		}
	}
	return false
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
	// reclaim: the end is when the reserving job may preempt the holder
	// (endOrderFor), before its own expected end.
	reclaim bool
	end     int64
	start   int64
}

// endTime is the expected end; zero when unknown.
func (k endKey) endTime() time.Time {
	if !k.known {
		return time.Time{}
	}
	return time.Unix(0, k.end)
}

// endOrder yields the holders by expected end (known ends first, earliest
// first; unknown ends oldest first; then job ID). A reservation releases
// holders in that order only until the job fits, mostly a few of
// thousands, so the order is drawn from a heap as far as it is read
// rather than sorted whole.
type endOrder struct {
	holders []placement.Holder
	heap    []endKey
	sorted  []endKey
}

// endOrderFor is the order of expected ends for a reservation of tier's
// job, built once per cycle and tier. A holder the job may preempt (its
// tier may preempt the holder's, preemption is enabled, and the holder is
// a victim or will be once past its minimum runtime) counts as ending
// when the job may preempt it, if that is sooner: urgent work that needs
// a whole node then drains the node whose unpreemptible work ends
// soonest, not the one whose work of any kind does, and preempts what is
// left there when it is the last of it. Tiers that may preempt no one
// share one order ("").
func (p *placer) endOrderFor(tier string) *endOrder {
	key := tier
	if !p.c.pol.Preemption.Enabled || p.c.tier(tier) == nil || len(p.c.tier(tier).MayPreempt) == 0 {
		key = ""
	}
	if o, ok := p.endOrders[key]; ok {
		return o
	}
	if p.endOrders == nil {
		p.endOrders = map[string]*endOrder{}
	}
	holders := p.c.st.Holders()
	var heap []endKey
	if key == "" {
		heap = buffer.Zeroed(&p.c.e.scratch.ends, len(holders))
	} else {
		sc := &p.c.e.scratch
		if sc.tierEnds == nil {
			sc.tierEnds = map[string][]endKey{}
		}
		buf := sc.tierEnds[key]
		heap = buffer.Zeroed(&buf, len(holders))
		sc.tierEnds[key] = buf
	}
	o := &endOrder{holders: holders, heap: heap}
	for i := range holders {
		end, est := p.expectedEnd(i, &holders[i])
		k := endKey{h: i, known: !end.IsZero(), est: est, end: end.UnixNano(), start: earliestStart(holders[i].Allocs).UnixNano()}
		if at, ok := p.reclaimableAt(key, i); ok && (!k.known || at.Before(end)) {
			k.known, k.est, k.reclaim, k.end = true, false, true, at.UnixNano()
		}
		o.heap[i] = k
	}
	for i := len(o.heap)/2 - 1; i >= 0; i-- {
		o.down(i)
	}
	p.endOrders[key] = o
	return o
}

// reclaimableAt: when tier's job may preempt holder h (now for a victim,
// the end of its minimum runtime for a young one); false when it may
// never (not its tier's to preempt, not preemptible, stopping, claimed,
// or idle: an idle victim is judged by weight, not tier).
func (p *placer) reclaimableAt(tier string, h int) (time.Time, bool) {
	if tier == "" || h >= len(p.c.victims) {
		return time.Time{}, false
	}
	v := &p.c.victims[h]
	if !(v.OK || v.Young) || v.Idle || !p.c.mayPreempt(tier, v.Tier) {
		return time.Time{}, false
	}
	if !v.Young || v.Grown.Before(p.c.now) {
		return p.c.now, true
	}
	return v.Grown, true
}

// at returns the i-th holder by expected end; false past the last.
func (o *endOrder) at(i int) (int, bool) {
	for len(o.sorted) <= i {
		n := len(o.heap)
		if n == 0 {
			return 0, false
		}
		o.sorted = append(o.sorted, o.heap[0])
		o.heap[0] = o.heap[n-1]
		o.heap = o.heap[:n-1]
		o.down(0)
	}
	return o.sorted[i].h, true
}

// entry is the i-th holder's key (at(i) read first).
func (o *endOrder) entry(i int) endKey { return o.sorted[i] }

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
