package engine

import (
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/placement"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// HeadroomStatus is one pool's headroom (policy headroom block) after a
// cycle: its size, how it was sized, and what holds the GPUs outside the
// non-preemptible work of the tiers kept out of it. The plan carries it
// for explanations and metrics.
type HeadroomStatus struct {
	Pool string `json:"pool"`
	// GPUs is the headroom's size: GPUs of the pool kept free of
	// non-preemptible work of every tier but Tiers.
	GPUs  int      `json:"gpus"`
	Tiers []string `json:"tiers"`
	// Basis says how GPUs was sized (fixed, share, learned from what).
	Basis    string `json:"basis"`
	Capacity int    `json:"capacity_gpus"`
	// OtherNonPreemptibleGPUs are held by non-preemptible work of tiers
	// that may not use the headroom: at most Capacity - GPUs (more only
	// when it was admitted before the headroom grew).
	OtherNonPreemptibleGPUs int `json:"other_non_preemptible_gpus"`
	// The rest of the pool: free, held by preemptible work (an urgent job
	// preempts it), held by non-preemptible work of Tiers.
	FreeGPUs        int `json:"free_gpus"`
	PreemptibleGPUs int `json:"preemptible_gpus"`
	UrgentGPUs      int `json:"urgent_gpus"`
	// Arrivals counts the jobs of Tiers a learned headroom was sized from.
	Arrivals int `json:"arrivals,omitempty"`
	// Nodes are the nodes the headroom is kept on: all of each but the
	// last, KeptOnLastNode GPUs of the last (a headroom smaller than a
	// node keeps only that many; the node's other GPUs take any work).
	Nodes          int `json:"nodes"`
	KeptOnLastNode int `json:"kept_on_last_node_gpus"`
	// IdleBudget is the headroom's idle account (policy idle_budget; nil
	// without one): while it is overspent the headroom yields, GPUs is 0.
	IdleBudget *HeadroomIdleBudget `json:"idle_budget,omitempty"`
	// IdleKeptGPUs is the headroom's occupancy cost after the cycle: the
	// pool's free GPUs (neither held nor reserved), at most the
	// headroom's size, while work it keeps out waits that would fit them.
	// Preemptible work fills the kept part first; what it leaves idle
	// while the kept-out work waits is what urgency costs the pool. Not
	// only the kept part's GPUs: while no node is free enough of the
	// kept-out work to hold the kept part (a pool full of long
	// non-preemptible work), the headroom forms by holding that work back
	// until enough of it has ended (blocks), and the GPUs freed meanwhile
	// idle wherever they are.
	IdleKeptGPUs int `json:"idle_kept_gpus"`
	// IdleReservedGPUs is the other half of urgency's cost after the
	// cycle: GPUs reserved for blocked jobs of a reserve tier (policy
	// backfill reserve_tiers) that uses the headroom, free and not
	// backfilled by any job.
	// Counted only for a headroom with an idle budget, which pays for
	// both: while it is overspent the headroom keeps nothing, and a
	// reserve tier's job gets a reservation only as one of the first
	// blocked jobs the policy's reservations count gives one, like any
	// other job (placer.reservesAlways).
	IdleReservedGPUs int `json:"idle_reserved_gpus,omitempty"`
}

// hrArrival is a job of a headroom's tiers seen by the engine.
type hrArrival struct {
	id     string
	at     time.Time
	gpus   int
	gpuSec float64 // GPUs x walltime (learned estimate without one; an hour when neither)
}

// hrMemory is a learned headroom's recent arrivals, oldest first. It lives
// in the engine (a new leader starts learning again from the jobs it sees).
type hrMemory struct {
	arrivals []hrArrival
	seen     map[string]bool
}

// unknownWalltime stands for the walltime of an urgent job that declares
// none and has no learned estimate (walltime.go), in a learned headroom's
// size.
const unknownWalltime = time.Hour

// hrPool is one headroom pool's state in a cycle.
type hrPool struct {
	h    *policy.Headroom
	size int
	// learned: size was learned from arrivals (else fixed by the policy);
	// basis caches describe.
	learned  bool
	basis    string
	capacity int
	arrivals int
	// GPUs held, by kind (see HeadroomStatus).
	other, preemptible, urgent int
	// protect: nodes of the pool kept free of other tiers'
	// non-preemptible work (ceil(size / largest node)), all of each but
	// the last, lastKeep GPUs of the last (size's remainder, or a node).
	protect, lastKeep int
	nodeGPUs          int
	// waiting: some work the headroom keeps out waits this cycle though
	// the pool's free GPUs, the kept ones counted, would fit it.
	waiting bool
	// The idle account (headroom_budget.go): budgeted when the policy
	// gives one; credit its balance now (GPU-seconds); yielded: overspent,
	// the headroom keeps nothing this cycle.
	budgeted, yielded bool
	credit            float64
}

// hrCycle is the headroom step: the policy's headroom blocks in one
// cycle (newHeadroom sizes them once the queue is ordered; blocks,
// protect, keepsOut, shields, waives, prefer and avoid answer the other steps
// as each job is decided; status is the plan's view). nil without
// headroom blocks: every method answers for none then.
type hrCycle struct {
	c     *cycle
	pools map[string]*hrPool
	names []string // pools with a headroom, sorted
	// urgent: the tiers that may use some pool's headroom (learned ones
	// observe their jobs); a few, so a list (isUrgent).
	urgent []string
	// nodePool: node ordinal -> its pool's headroom (nil: none).
	nodePool []*hrPool
	// nodeOther: node ordinal -> GPUs held by non-preemptible work of
	// tiers that may not use its pool's headroom.
	nodeOther []int
	// protected: node ordinal -> kept (wholly or in part) for the
	// headroom this cycle (see hrCycle.protect); keep: how many of its
	// GPUs, healthy: its healthy GPUs.
	protected []bool
	keep      []int
	healthy   []int
	// keptOut: jobs the headroom kept out this cycle (held back or
	// withheld from its GPUs) and not admitted since -> their pool ("" for
	// every headroom pool).
	keptOut map[string]string
	// withheld: the free GPUs protect withholds from the job being
	// decided, and the headroom of the first of them (nil: none), for
	// its reason should it not start (withheldNote).
	withheld     int
	withheldFrom *policy.Headroom
}

// newHeadroom learns from the queue's jobs of headroom tiers, sizes
// every pool's headroom and counts what holds each pool (before this
// cycle's decisions). facts are the running holders' (managedFacts).
func newHeadroom(c *cycle, queue []*queued, facts []*specFacts) *hrCycle {
	if len(c.pol.Headrooms) == 0 {
		return nil
	}
	hc := &hrCycle{c: c, pools: map[string]*hrPool{}, nodeOther: make([]int, c.st.NumNodes())}
	for name, h := range c.pol.Headrooms {
		hc.pools[name] = &hrPool{h: h}
		hc.names = append(hc.names, name)
		for _, t := range h.Tiers {
			if !slices.Contains(hc.urgent, t) {
				hc.urgent = append(hc.urgent, t)
			}
		}
	}
	sort.Strings(hc.names)
	for _, q := range queue {
		hc.observe(q)
	}
	hc.countCapacity()
	hc.countHolders(facts)
	hc.sizePools()
	hc.protectNodes()
	return hc
}

// countCapacity counts each headroom pool's healthy GPUs on schedulable
// nodes, and its widest node.
func (hc *hrCycle) countCapacity() {
	c := hc.c
	hc.nodePool = make([]*hrPool, c.st.NumNodes())
	hc.healthy = make([]int, c.st.NumNodes())
	for ord := 0; ord < c.st.NumNodes(); ord++ {
		n := c.st.Node(ord)
		p := hc.pools[n.Pool]
		hc.nodePool[ord] = p
		if p == nil || !c.st.Schedulable(ord) {
			continue
		}
		healthy := 0
		for _, g := range n.GPUs {
			if g.Healthy {
				healthy++
			}
		}
		p.capacity += healthy
		p.nodeGPUs = max(p.nodeGPUs, healthy)
		hc.healthy[ord] = healthy
	}
}

// countHolders counts what holds each pool's GPUs, by tier and
// preemptibility, and per node the GPUs of other tiers' non-preemptible
// work (nodeOther). facts are the running holders' (managedFacts).
func (hc *hrCycle) countHolders(facts []*specFacts) {
	c := hc.c
	for h, hd := range c.st.Holders() {
		if hd.Job == nil {
			continue
		}
		var tier string
		var pre bool
		if f := facts[h]; f != nil {
			tier, pre = f.tier, f.preemptible
		} else {
			if t := c.pol.TierOf(hd.Job.Spec); t != nil {
				tier = t.Name
			}
			pre = c.pol.IsPreemptible(hd.Job.Spec)
		}
		for _, sl := range hd.Slots {
			if p := hc.nodePool[sl.Node]; p != nil {
				n := bits.OnesCount64(sl.Mask)
				if p.add(tier, pre, n) {
					hc.nodeOther[sl.Node] += n
				}
			}
		}
	}
}

// sizePools sizes each pool's headroom: as the policy gives it, else learned
// from the urgent tiers' arrivals; and how it is kept on the pool's nodes.
func (hc *hrCycle) sizePools() {
	for _, name := range hc.names {
		p := hc.pools[name]
		if size, ok := p.h.Size(p.capacity); ok {
			p.size = size
		} else {
			p.size, p.arrivals = hc.learned(name, p.h, p.capacity)
			p.learned = true
		}
		if hc.budgetNow(name, p); p.yielded {
			p.size = 0
		}
		p.protect, p.lastKeep = hrNodes(p.size, p.nodeGPUs)
	}
}

// protectNodes chooses the nodes kept: in each pool the first protect-1
// nodes (by ordinal, so the set is stable from cycle to cycle and
// admissions never wander onto it) free of other tiers' non-preemptible
// work, kept whole, then the first other node where lastKeep GPUs are
// free of it, lastKeep of its GPUs kept.
func (hc *hrCycle) protectNodes() {
	c := hc.c
	hc.protected = make([]bool, c.st.NumNodes())
	hc.keep = make([]int, c.st.NumNodes())
	whole := map[string]int{}
	for _, name := range hc.names {
		if p := hc.pools[name]; p.protect > 0 {
			whole[name] = p.protect - 1
		}
	}
	for ord := 0; ord < c.st.NumNodes(); ord++ {
		pool := c.st.PoolOf(ord)
		if whole[pool] > 0 && hc.nodeOther[ord] == 0 && c.st.Schedulable(ord) {
			hc.protected[ord], hc.keep[ord] = true, hc.healthy[ord]
			whole[pool]--
		}
	}
	for _, name := range hc.names {
		p := hc.pools[name]
		if p.protect == 0 {
			continue
		}
		for ord := 0; ord < c.st.NumNodes(); ord++ {
			if hc.protected[ord] || c.st.PoolOf(ord) != name || !c.st.Schedulable(ord) {
				continue
			}
			if k := min(p.lastKeep, hc.healthy[ord]); k > 0 && hc.nodeOther[ord] <= hc.healthy[ord]-k {
				hc.protected[ord], hc.keep[ord] = true, k
				break
			}
		}
	}
}

// hrNodes is how a headroom of size GPUs is kept on nodes of nodeGPUs:
// on protect nodes, all of each but the last, last GPUs of the last. A
// headroom smaller than a node keeps only its size on one node, not the
// whole node: on a small pool a node is a large share of it, and urgent
// work that needs fewer GPUs does not need the rest kept.
func hrNodes(size, nodeGPUs int) (protect, last int) {
	if size <= 0 || nodeGPUs <= 0 {
		return 0, 0
	}
	protect = (size + nodeGPUs - 1) / nodeGPUs
	last = size - (protect-1)*nodeGPUs
	return protect, last
}

// isUrgent reports whether tier may use some pool's headroom.
func (hc *hrCycle) isUrgent(tier string) bool { return slices.Contains(hc.urgent, tier) }

// describe says how the pool's headroom was sized (HeadroomStatus.Basis),
// formatted once a cycle.
func (p *hrPool) describe() string {
	if p.basis == "" {
		p.basis = p.h.Describe()
		if p.learned {
			p.basis = fmt.Sprintf("%s: %d arrivals", p.basis, p.arrivals)
		}
		if p.yielded {
			p.basis = fmt.Sprintf("%s; yielded: it kept GPUs idle %.1f GPU-hours beyond its idle budget", p.basis, -p.credit/3600)
		}
	}
	return p.basis
}

// add counts gpus of a holder; true when they are other tiers'
// non-preemptible work.
func (p *hrPool) add(tier string, preemptible bool, gpus int) bool {
	switch {
	case preemptible:
		p.preemptible += gpus
	case tier != "" && p.h.UsesHeadroom(tier):
		p.urgent += gpus
	default:
		p.other += gpus
		return true
	}
	return false
}

// learned sizes a learned headroom from the arrivals of its tiers
// over its window: their mean occupancy (GPU-seconds over the window) plus
// the largest one, at most the policy's cap.
func (hr *hrCycle) learned(pool string, h *policy.Headroom, capacity int) (int, int) {
	floor := min(h.MinGPUs, h.LearnedCap(capacity))
	m := hr.memory(pool)
	if m == nil {
		return floor, 0
	}
	if k := expiredArrivals(m, h, hr.c.now); k > 0 {
		m = hr.memoryToChange(pool)
		for _, a := range m.arrivals[:k] {
			delete(m.seen, a.id)
		}
		m.arrivals = m.arrivals[k:]
	}
	sum, largest := 0.0, 0
	for _, a := range m.arrivals {
		sum += a.gpuSec
		largest = max(largest, a.gpus)
	}
	if len(m.arrivals) == 0 {
		return floor, 0
	}
	size := int(math.Ceil(sum/h.Window.Seconds()-1e-9)) + largest
	return max(floor, min(size, h.LearnedCap(capacity))), len(m.arrivals)
}

// expiredArrivals is how many of m's oldest arrivals are out of the
// window.
func expiredArrivals(m *hrMemory, h *policy.Headroom, now time.Time) int {
	k := 0
	for k < len(m.arrivals) && now.Sub(m.arrivals[k].at) > h.Window {
		k++
	}
	return k
}

// memory is a pool's learned-headroom memory as this cycle sees it: its
// own copy once it changed one, else the engine's (nil: none yet).
func (hr *hrCycle) memory(pool string) *hrMemory {
	if m, ok := hr.c.mem.hrMem[pool]; ok {
		return m
	}
	return hr.c.e.hrMem[pool]
}

// memoryToChange is the pool's memory to change in this cycle: copied
// from the engine's the first time (the engine's memory is only replaced
// by apply, after the cycle), so cycles that learn nothing copy nothing.
func (hr *hrCycle) memoryToChange(pool string) *hrMemory {
	if m, ok := hr.c.mem.hrMem[pool]; ok {
		return m
	}
	if hr.c.mem.hrMem == nil {
		hr.c.mem.hrMem = map[string]*hrMemory{}
	}
	m := &hrMemory{seen: map[string]bool{}}
	if old := hr.c.e.hrMem[pool]; old != nil {
		m = &hrMemory{arrivals: slices.Clone(old.arrivals), seen: maps.Clone(old.seen)}
	}
	hr.c.mem.hrMem[pool] = m
	return m
}

// observe records a queued job of a tier that may use a learned
// headroom (once per job).
func (hr *hrCycle) observe(q *queued) {
	if !hr.isUrgent(q.f.tier) || q.parked {
		return
	}
	for _, name := range hr.names {
		h := hr.pools[name].h
		if !h.Learn || !h.UsesHeadroom(q.f.tier) || (q.pool != "" && q.pool != name) {
			continue
		}
		if m := hr.memory(name); (m != nil && m.seen[q.job.ID]) || hr.c.now.Sub(q.job.Submit) > h.Window {
			continue
		}
		m := hr.memoryToChange(name)
		wall, _ := hr.c.wall.ofQueued(q)
		if wall <= 0 {
			wall = unknownWalltime
		}
		a := hrArrival{id: q.job.ID, at: q.job.Submit, gpus: q.gpus, gpuSec: float64(q.gpus) * min(wall, h.Window).Seconds()}
		// Keep arrivals in submit order (jobs are seen roughly so).
		i := len(m.arrivals)
		for i > 0 && m.arrivals[i-1].at.After(a.at) {
			i--
		}
		m.arrivals = append(m.arrivals, hrArrival{})
		copy(m.arrivals[i+1:], m.arrivals[i:])
		m.arrivals[i] = a
		m.seen[q.job.ID] = true
	}
}

// blocks says why q may not start now ("" when it may): q is
// non-preemptible work of a tier that may not use the headroom of its pool
// (and not a whole-node job, wholeNode) and would take GPUs the headroom
// keeps. A job without a pool is checked against every headroom pool
// together. Such a job neither preempts nor reserves: it waits for
// non-preemptible work to end.
func (hr *hrCycle) blocks(q *queued) string {
	if hr == nil || q.f.preemptible || hr.wholeNode(q) {
		return ""
	}
	var other, capacity, size int
	var blocking []string
	for _, name := range hr.names {
		if q.pool != "" && q.pool != name {
			continue
		}
		p := hr.pools[name]
		if p.h.UsesHeadroom(q.f.tier) {
			if q.pool != "" {
				return ""
			}
			continue
		}
		other += p.other
		capacity += p.capacity
		size += p.size
		blocking = append(blocking, name)
	}
	// other == 0: a job wider than the pool minus its headroom may start
	// once no other such work runs, or it would never start.
	if len(blocking) == 0 || size == 0 || other == 0 || other+q.gpus <= capacity-size {
		return ""
	}
	hr.noteKeptOut(q)
	if !hr.c.explain {
		return "headroom"
	}
	p := hr.pools[blocking[0]]
	if len(blocking) == 1 {
		return fmt.Sprintf("headroom: pool %q keeps %d GPUs (%s) free of non-preemptible work but that of %v; such work holds %d of its %d GPUs, this job needs %d",
			blocking[0], size, p.describe(), p.h.Tiers, other, capacity, q.gpus)
	}
	return fmt.Sprintf("headroom: pools %v keep %d GPUs free of non-preemptible work of tier %q; such work holds %d of their %d GPUs, this job needs %d",
		blocking, size, q.f.tier, other, capacity, q.gpus)
}

// noteKeptOut notes that the headroom kept q out this cycle, for its
// occupancy cost (HeadroomStatus.IdleKeptGPUs): only when the free GPUs
// of its pools, counting the kept ones, would fit it.
func (hr *hrCycle) noteKeptOut(q *queued) {
	if q.gpus > hr.c.st.FreeGPUs(q.pool) {
		return
	}
	if hr.keptOut == nil {
		hr.keptOut = map[string]string{}
	}
	hr.keptOut[q.id] = q.pool
}

// admit counts an admitted job's GPUs into its pools.
func (hr *hrCycle) admit(q *queued, res placement.Result) {
	if hr == nil {
		return
	}
	delete(hr.keptOut, q.id)
	tier := ""
	if t := hr.c.pol.TierOf(q.job.Spec); t != nil {
		tier = t.Name
	}
	for _, g := range res.Groups {
		for _, sl := range g {
			if p := hr.nodePool[sl.Node]; p != nil {
				n := bits.OnesCount64(sl.Mask)
				if p.add(tier, q.f.preemptible, n) {
					hr.nodeOther[sl.Node] += n
				}
			}
		}
	}
}

// protect withholds from q, non-preemptible work of a tier kept
// out of a headroom, the free GPUs the headroom keeps (on the first
// ceil(size / node size) nodes of the pool free of that kind of work:
// whole nodes, the last one only in part, see hrNodes). A headroom
// counted in GPUs alone could be scattered over every node, a GPU here and
// there, and then no urgent job wider than a GPU finds room; kept
// together, an urgent job up to the headroom's size starts in one place
// by preempting what runs there. It returns the function
// that gives the GPUs back (call it once q is decided), nil when it
// withheld nothing.
func (hr *hrCycle) protect(q *queued) func() {
	if hr == nil || !hr.keepsOut(q) {
		return nil
	}
	hr.noteKeptOut(q)
	give := hr.withholdMask(func(ord int, avail uint64) uint64 {
		p := hr.nodePool[ord]
		// A job too wide for the rest of the pool is not kept off: it
		// would never start.
		if !hr.protected[ord] || (q.pool != "" && hr.c.st.PoolOf(ord) != q.pool) || p.h.UsesHeadroom(q.f.tier) || q.gpus > p.capacity-p.size {
			return 0
		}
		// The node's GPUs beyond the kept ones may take the job, as far
		// as work like it does not hold them already; the kept ones are
		// the highest free ones, so that they stay together.
		allowed := max(0, hr.healthy[ord]-hr.keep[ord]-hr.nodeOther[ord])
		kept := highBits(avail, bits.OnesCount64(avail)-allowed)
		if kept != 0 && hr.withheldFrom == nil {
			hr.withheldFrom = p.h
		}
		// Counted for the reason: the kept GPUs that are free, not those
		// reserved for another job.
		hr.withheld += bits.OnesCount64(kept &^ hr.c.st.Reserved(ord))
		return kept
	})
	if give == nil {
		hr.withheld, hr.withheldFrom = 0, nil
		return nil
	}
	return func() {
		give()
		hr.withheld, hr.withheldFrom = 0, nil
	}
}

// withheldNote is what a job that protect withheld free GPUs from, and
// that then did not start, is told of them: the free GPUs its reason
// counts leave them out, and a placement that failed did so without
// them. "" when nothing was withheld.
func (hr *hrCycle) withheldNote() string {
	if hr == nil || hr.withheld == 0 || hr.withheldFrom == nil {
		return ""
	}
	return fmt.Sprintf("; the headroom keeps %d more free GPUs from it (free of non-preemptible work but that of %v)", hr.withheld, hr.withheldFrom.Tiers)
}

// highBits is the n highest set bits of m (none when n <= 0).
func highBits(m uint64, n int) uint64 {
	var out uint64
	for ; n > 0 && m != 0; n-- {
		b := uint64(1) << (63 - bits.LeadingZeros64(m))
		out |= b
		m &^= b
	}
	return out
}

// withhold takes every free or reserved-but-unused GPU of the nodes keep
// selects, so that the next placement cannot use them, and returns what
// gives them back as they were; nil when it took nothing.
func (hr *hrCycle) withhold(keep func(ord int) bool) func() {
	return hr.withholdMask(func(ord int, avail uint64) uint64 {
		if keep(ord) {
			return avail
		}
		return 0
	})
}

// withholdMask is withhold of the GPUs pick selects among a node's free
// and reserved-but-unused ones (withholdGPUs).
func (hr *hrCycle) withholdMask(pick func(ord int, avail uint64) uint64) func() {
	return withholdGPUs(hr.c.st, pick)
}

// keepsOut reports whether q is work some headroom keeps out:
// non-preemptible, of a tier that may not use it, and not a whole-node
// job (wholeNode).
func (hr *hrCycle) keepsOut(q *queued) bool {
	if hr == nil || q.f.preemptible || hr.wholeNode(q) {
		return false
	}
	for _, name := range hr.names {
		if (q.pool == "" || q.pool == name) && !hr.pools[name].h.UsesHeadroom(q.f.tier) {
			return true
		}
	}
	return false
}

// wholeNode reports whether q has an allocation as wide as the widest
// node of a headroom pool it may run in whose headroom is smaller than a
// node: that headroom does not keep it out. Kept in part of one node, it
// leaves no node that can hold q beside the kept part, so kept out q
// would start only once a whole node outside the headroom freed with the
// pool's count of other non-preemptible work low enough, which the
// narrower work that refills every freed GPU never leaves: the headroom
// would cost q a node though it keeps less than one. In the robustness
// suite's saturated scenario (seed 1) its 8-GPU high-tier jobs waited 3.4
// days at the p99 against nomad-native's 1.1, beside a 7-GPU headroom,
// and their backlog ran on a draining pool at the end (occupancy 1.4
// points below nomad-native's; 0.7 with the rule). Such a job may take
// the headroom's node (its preemptible work too); the headroom forms
// again on the next node free enough of other work, the count in blocks
// holding narrower work back meanwhile. A headroom of whole nodes keeps
// whole-node jobs out like any other (example/sim/README.md, "Fourteenth
// pass"). A job without a pool is a whole-node job only for every
// headroom pool that keeps GPUs this cycle.
func (hr *hrCycle) wholeNode(q *queued) bool {
	found := false
	for _, name := range hr.names {
		if q.pool != "" && q.pool != name {
			continue
		}
		p := hr.pools[name]
		if p.size <= 0 {
			continue // keeps nothing this cycle
		}
		if p.size >= p.nodeGPUs || int(q.maxAlloc) < p.nodeGPUs {
			return false
		}
		found = true
	}
	return found
}

// yields reports whether the idle budget of every headroom q may use
// (its tier's, in a pool q may run in) is spent (headroom_budget.go):
// the reservation a reserve tier's job would make there idles GPUs on
// the same account, so it waits for the allowance as the headroom does.
// False where no such headroom has a budget.
func (hr *hrCycle) yields(q *queued) bool {
	if hr == nil {
		return false
	}
	found := false
	for _, name := range hr.names {
		p := hr.pools[name]
		if (q.pool != "" && q.pool != name) || !p.h.UsesHeadroom(q.f.tier) {
			continue
		}
		if !p.budgeted || !p.yielded {
			return false
		}
		found = true
	}
	return found
}

// pays reports whether the idle budget of pool's headroom pays for the
// idle GPUs of a reservation for tier there: the headroom has a budget
// and tier may use it.
func (hr *hrCycle) pays(pool, tier string) bool {
	if hr == nil {
		return false
	}
	p := hr.pools[pool]
	return p != nil && p.budgeted && p.h.UsesHeadroom(tier)
}

// shields reports whether holder h may not be preempted, moved
// or waited for (a stopping one) for q: it runs on a node kept whole for
// a headroom that keeps q out (q would take the node's GPUs).
func (hr *hrCycle) shields(q *queued, h int) bool {
	if hr == nil || !hr.keepsOut(q) {
		return false
	}
	for _, sl := range hr.c.st.Holders()[h].Slots {
		if hr.protected[sl.Node] && !hr.nodePool[sl.Node].h.UsesHeadroom(q.f.tier) {
			return true
		}
	}
	return false
}

// status is the plan's view of every headroom after the cycle, reserved
// the idle GPUs of reserve tiers' reservations each pool's idle budget
// pays for (placer.idleReserved), spent from it with the headroom's own.
// Preempted gangs still count where they are (they stop after their
// grace).
func (hr *hrCycle) status(reserved map[string]int) []HeadroomStatus {
	if hr == nil {
		return nil
	}
	for _, pool := range hr.keptOut {
		for _, name := range hr.names {
			if pool == "" || pool == name {
				hr.pools[name].waiting = true
			}
		}
	}
	idle, spent := map[string]int{}, map[string]int{}
	for _, name := range hr.names {
		p := hr.pools[name]
		if p.waiting {
			idle[name] = min(p.size, hr.c.st.FreeGPUs(name))
		}
		spent[name] = idle[name] + reserved[name]
	}
	budgets := hr.recordBudgets(spent)
	out := make([]HeadroomStatus, 0, len(hr.names))
	for _, name := range hr.names {
		p := hr.pools[name]
		out = append(out, HeadroomStatus{
			Nodes: p.protect, KeptOnLastNode: p.lastKeep, IdleKeptGPUs: idle[name], IdleReservedGPUs: reserved[name], IdleBudget: budgets[name],
			Pool: name, GPUs: p.size, Tiers: append([]string(nil), p.h.Tiers...), Capacity: p.capacity,
			OtherNonPreemptibleGPUs: p.other, PreemptibleGPUs: p.preemptible, UrgentGPUs: p.urgent,
			FreeGPUs: max(0, p.capacity-p.other-p.preemptible-p.urgent), Arrivals: p.arrivals,
			Basis: p.describe(),
		})
	}
	return out
}

// waives reports whether q may preempt holder h although h is
// within its minimum runtime: q's tier uses the headroom of h's pool. The
// headroom promises its tiers an immediate start by preemption; waiting
// out a young job's minimum runtime would break that promise exactly when
// the pool is full of fresh preemptible work. The preemption budgets
// still apply.
func (hr *hrCycle) waives(q *queued, h int) bool {
	if hr == nil {
		return false
	}
	hd := hr.c.st.Holders()[h]
	if len(hd.Slots) == 0 {
		return false
	}
	p := hr.nodePool[hd.Slots[0].Node]
	return p != nil && p.h.UsesHeadroom(q.f.tier)
}

// lendsTo reports whether some headroom of q's pool lends its nodes
// (policy.Headroom.LoanGrace) or takes back young work or work with
// little unsaved (policy.Headroom.TakeBack, TakeBackUnsaved) and q's
// tier uses it: only then can a victim stop on short notice for q
// (notice), so the search for those looks at no candidate otherwise.
func (hr *hrCycle) lendsTo(q *queued) bool {
	if hr == nil {
		return false
	}
	for _, name := range hr.names {
		h := hr.pools[name].h
		if (q.pool == "" || q.pool == name) && (h.LoanGrace != nil || h.TakesAnyBack()) && h.UsesHeadroom(q.f.tier) {
			return true
		}
	}
	return false
}

// shortNotice is why a victim stops for a job of a headroom's tiers on
// shorter notice than its own grace.
type shortNotice uint8

const (
	// ownNotice: it keeps its own impact_grace.
	ownNotice shortNotice = iota
	// onLoan: it runs on the headroom's nodes, which lend them
	// (policy.Headroom.LoanGrace); it stops after the loan's grace.
	onLoan
	// takenBack: it started less than the headroom's take_back ago
	// (policy.Headroom.TakeBack); it stops at once.
	takenBack
	// takenBackUnsaved: its work since its last checkpoint is less than
	// the headroom's take_back_unsaved (policy.Headroom.TakeBackUnsaved);
	// it stops at once.
	takenBackUnsaved
)

// notice is the grace q's preemption gives holder h, of tier and with
// its own grace, and why, where h is of a tier the headroom of its pool
// keeps out and q's tier uses it: taken back at once when every
// allocation of h started less than the headroom's take_back ago, or
// its work since its last checkpoint is less than its take_back_unsaved
// (anywhere in the pool); else, on loan, the shorter of the loan's grace
// and its own when every allocation runs on a node the headroom keeps
// and the headroom lends them. ownNotice (and own) otherwise.
func (hr *hrCycle) notice(q *queued, h int, tier string, own time.Duration) (time.Duration, shortNotice) {
	if hr == nil {
		return own, ownNotice
	}
	hd := &hr.c.st.Holders()[h]
	if len(hd.Slots) == 0 {
		return own, ownNotice
	}
	pol := func(node int) *policy.Headroom {
		p := hr.nodePool[node]
		if p == nil || !p.h.UsesHeadroom(q.f.tier) || p.h.UsesHeadroom(tier) {
			return nil
		}
		return p.h
	}
	// The TakeBackUnsaved gate spares the walk over hd's allocations
	// (unsaved) where the headroom sets none: this runs per candidate.
	if p := pol(hd.Slots[0].Node); p.TakesBack(earliestStart(hd.Allocs), hr.c.now) {
		return 0, takenBack
	} else if p != nil && p.TakeBackUnsaved > 0 && p.TakesBackUnsaved(unsaved(hd, hr.c.now)) {
		return 0, takenBackUnsaved
	}
	grace := own
	for _, sl := range hd.Slots {
		p := pol(sl.Node)
		if p == nil || !hr.protected[sl.Node] {
			return own, ownNotice
		}
		g, lends := p.LoanOf(own)
		if !lends {
			return own, ownNotice
		}
		grace = min(grace, g)
	}
	return grace, onLoan
}

// unsaved is the work holder hd would lose stopped at now: its run since
// its last checkpoint (the gang's, as a stop counts it: runSaved), or -1
// when it has not started.
func unsaved(hd *placement.Holder, now time.Time) time.Duration {
	if hd.Job == nil {
		return -1
	}
	toCkpt, toNow := runSaved(hd.Allocs, hd.Job.Spec.CheckpointInterval, now)
	if toNow <= 0 {
		return -1
	}
	return toNow - toCkpt
}

// takeBackNote is what a preemptible job admitted where a headroom takes
// back young work or work with little unsaved is told (exp.Reason): for
// its first take_back, and whenever less than take_back_unsaved of its
// work is unsaved, a job of the headroom's tiers may stop it at once. A
// job's allocations are all in its pool, so the node of its first slot
// names the headroom. "" when no headroom of its pool takes it back.
func (hr *hrCycle) takeBackNote(q *queued, res placement.Result) string {
	if hr == nil || !q.f.preemptible {
		return ""
	}
	i := slices.IndexFunc(res.Groups, func(g []placement.Slot) bool { return len(g) > 0 })
	if i < 0 {
		return ""
	}
	p := hr.nodePool[res.Groups[i][0].Node]
	if p == nil || !p.h.TakesAnyBack() || p.h.UsesHeadroom(q.f.tier) {
		return ""
	}
	var when, fields []string
	if p.h.TakeBack > 0 {
		when, fields = append(when, fmt.Sprintf("for its first %s", p.h.TakeBack)), append(fields, "take_back")
	}
	if p.h.TakeBackUnsaved > 0 {
		when = append(when, fmt.Sprintf("whenever less than %s of its work is unsaved since its last checkpoint", p.h.TakeBackUnsaved))
		fields = append(fields, "take_back_unsaved")
	}
	lead := strings.Join(when, ", and ")
	if p.h.TakeBackUnsaved > 0 {
		lead += "," // the clause is long enough to need one
	}
	return fmt.Sprintf("%s a job of %v may take its GPUs back at once (headroom %q %s), without its impact_grace of %s",
		lead, p.h.Tiers, p.h.Pool, strings.Join(fields, ", "), q.job.Spec.Grace)
}

// loanNote is what a job admitted on loan is told (exp.Reason): placed
// wholly on the nodes of a headroom that lends them, preemptible and of
// a tier that does not use it, it may be stopped by the headroom's tiers
// after the loan's grace. The loan is the headroom's nodes' when a
// preemption is decided (loanGrace), so the note says "may": a headroom
// that moves to other nodes takes its loan with it. "" when the job is
// not on loan.
func (hr *hrCycle) loanNote(q *queued, res placement.Result) string {
	if hr == nil || !q.f.preemptible {
		return ""
	}
	var h *policy.Headroom
	for _, g := range res.Groups {
		for _, sl := range g {
			p := hr.nodePool[sl.Node]
			if !hr.protected[sl.Node] || p == nil || p.h.LoanGrace == nil || p.h.UsesHeadroom(q.f.tier) {
				return ""
			}
			h = p.h
		}
	}
	if h == nil {
		return ""
	}
	g, _ := h.LoanOf(q.job.Spec.Grace)
	return fmt.Sprintf("on loan on the GPUs the headroom of pool %q keeps for %v: a job of those tiers may stop it after %s (loan_grace), not its impact_grace of %s",
		h.Pool, h.Tiers, g, q.job.Spec.Grace)
}
