package engine

import (
	"fmt"
	"math"
	"math/bits"
	"sort"
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
}

// hrArrival is a job of a headroom's tiers seen by the engine.
type hrArrival struct {
	id     string
	at     time.Time
	gpus   int
	gpuSec float64 // GPUs x walltime (an hour when unknown)
}

// hrMemory is a learned headroom's recent arrivals, oldest first. It lives
// in the engine (a new leader starts learning again from the jobs it sees).
type hrMemory struct {
	arrivals []hrArrival
	seen     map[string]bool
}

// unknownWalltime stands for the walltime of an urgent job that declares
// none, in a learned headroom's size.
const unknownWalltime = time.Hour

// hrPool is one headroom pool's state in a cycle.
type hrPool struct {
	h        *policy.Headroom
	size     int
	basis    string
	capacity int
	arrivals int
	// GPUs held, by kind (see HeadroomStatus).
	other, preemptible, urgent int
}

// hrCycle is the headroom state of one cycle; nil without headroom blocks.
type hrCycle struct {
	pools map[string]*hrPool
	names []string // pools with a headroom, sorted
	// urgent: tier -> it may use some pool's headroom (learned ones
	// observe its jobs).
	urgent map[string]bool
}

// headroomBegin learns from the queue's jobs of headroom tiers, sizes
// every pool's headroom and counts what holds each pool (before this
// cycle's decisions).
func (c *cycle) headroomBegin(queue []*queued) {
	if len(c.pol.Headrooms) == 0 {
		return
	}
	hc := &hrCycle{pools: map[string]*hrPool{}, urgent: map[string]bool{}}
	for name, h := range c.pol.Headrooms {
		hc.pools[name] = &hrPool{h: h}
		hc.names = append(hc.names, name)
		for _, t := range h.Tiers {
			hc.urgent[t] = true
		}
	}
	sort.Strings(hc.names)
	c.hr = hc
	for _, q := range queue {
		c.headroomObserve(q)
	}
	for ord := 0; ord < c.st.NumNodes(); ord++ {
		n := c.st.Node(ord)
		p := hc.pools[n.Pool]
		if p == nil || !c.st.Schedulable(ord) {
			continue
		}
		for _, g := range n.GPUs {
			if g.Healthy {
				p.capacity++
			}
		}
	}
	for _, hd := range c.st.Holders() {
		if hd.Job == nil {
			continue
		}
		tier := c.pol.TierOf(hd.Job.Spec)
		pre := c.pol.IsPreemptible(hd.Job.Spec)
		for _, sl := range hd.Slots {
			if p := hc.pools[c.st.PoolOf(sl.Node)]; p != nil {
				p.add(tier, pre, bits.OnesCount64(sl.Mask))
			}
		}
	}
	for _, name := range hc.names {
		p := hc.pools[name]
		if size, ok := p.h.Size(p.capacity); ok {
			p.size, p.basis = size, p.h.Describe()
			continue
		}
		p.size, p.arrivals = c.e.learnedHeadroom(name, p.h, p.capacity, c.now)
		p.basis = fmt.Sprintf("%s: %d arrivals", p.h.Describe(), p.arrivals)
	}
}

func (p *hrPool) add(tier *policy.Tier, preemptible bool, gpus int) {
	switch {
	case preemptible:
		p.preemptible += gpus
	case tier != nil && p.h.UsesHeadroom(tier.Name):
		p.urgent += gpus
	default:
		p.other += gpus
	}
}

// learnedHeadroom sizes a learned headroom from the arrivals of its tiers
// over its window: their mean occupancy (GPU-seconds over the window) plus
// the largest one, at most the policy's cap.
func (e *Engine) learnedHeadroom(pool string, h *policy.Headroom, capacity int, now time.Time) (int, int) {
	m := e.hrMem[pool]
	if m == nil {
		return 0, 0
	}
	e.pruneHeadroom(m, h, now)
	sum, largest := 0.0, 0
	for _, a := range m.arrivals {
		sum += a.gpuSec
		largest = max(largest, a.gpus)
	}
	if len(m.arrivals) == 0 {
		return 0, 0
	}
	size := int(math.Ceil(sum/h.Window.Seconds()-1e-9)) + largest
	return min(size, h.LearnedCap(capacity)), len(m.arrivals)
}

func (e *Engine) pruneHeadroom(m *hrMemory, h *policy.Headroom, now time.Time) {
	k := 0
	for k < len(m.arrivals) && now.Sub(m.arrivals[k].at) > h.Window {
		delete(m.seen, m.arrivals[k].id)
		k++
	}
	m.arrivals = m.arrivals[k:]
}

// headroomObserve records a queued job of a tier that may use a learned
// headroom (once per job).
func (c *cycle) headroomObserve(q *queued) {
	if !c.hr.urgent[q.tier] || q.parked != "" {
		return
	}
	for _, name := range c.hr.names {
		h := c.hr.pools[name].h
		if !h.Learn || !h.UsesHeadroom(q.tier) || (q.pool != "" && q.pool != name) {
			continue
		}
		if c.e.hrMem == nil {
			c.e.hrMem = map[string]*hrMemory{}
		}
		m := c.e.hrMem[name]
		if m == nil {
			m = &hrMemory{seen: map[string]bool{}}
			c.e.hrMem[name] = m
		}
		if m.seen[q.job.ID] || c.now.Sub(q.job.Submit) > h.Window {
			continue
		}
		wall := q.job.Spec.Walltime
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

// headroomBlocks says why q may not start now ("" when it may): q is
// non-preemptible work of a tier that may not use the headroom of its pool
// and would take GPUs the headroom keeps. A job without a pool is checked
// against every headroom pool together. Such a job neither preempts nor
// reserves: it waits for non-preemptible work to end.
func (c *cycle) headroomBlocks(q *queued) string {
	if c.hr == nil || q.preemptible {
		return ""
	}
	var other, capacity, size int
	var blocking []string
	for _, name := range c.hr.names {
		if q.pool != "" && q.pool != name {
			continue
		}
		p := c.hr.pools[name]
		if p.h.UsesHeadroom(q.tier) {
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
	if len(blocking) == 0 || size == 0 || other+q.gpus <= capacity-size {
		return ""
	}
	if !c.explain {
		return "headroom"
	}
	p := c.hr.pools[blocking[0]]
	if len(blocking) == 1 {
		return fmt.Sprintf("headroom: pool %q keeps %d GPUs (%s) free of non-preemptible work but that of %v; such work holds %d of its %d GPUs, this job needs %d",
			blocking[0], size, p.basis, p.h.Tiers, other, capacity, q.gpus)
	}
	return fmt.Sprintf("headroom: pools %v keep %d GPUs free of non-preemptible work of tier %q; such work holds %d of their %d GPUs, this job needs %d",
		blocking, size, q.tier, other, capacity, q.gpus)
}

// headroomAdmit counts an admitted job's GPUs into its pools.
func (c *cycle) headroomAdmit(q *queued, res placement.Result) {
	if c.hr == nil {
		return
	}
	tier := c.pol.TierOf(q.job.Spec)
	for _, g := range res.Groups {
		for _, sl := range g {
			if p := c.hr.pools[c.st.PoolOf(sl.Node)]; p != nil {
				p.add(tier, q.preemptible, bits.OnesCount64(sl.Mask))
			}
		}
	}
}

// headroomStatus is the plan's view of every headroom after the cycle.
// Preempted gangs still count where they are (they stop after their
// grace).
func (c *cycle) headroomStatus() []HeadroomStatus {
	if c.hr == nil {
		return nil
	}
	out := make([]HeadroomStatus, 0, len(c.hr.names))
	for _, name := range c.hr.names {
		p := c.hr.pools[name]
		out = append(out, HeadroomStatus{
			Pool: name, GPUs: p.size, Tiers: append([]string(nil), p.h.Tiers...), Basis: p.basis, Capacity: p.capacity,
			OtherNonPreemptibleGPUs: p.other, PreemptibleGPUs: p.preemptible, UrgentGPUs: p.urgent,
			FreeGPUs: max(0, p.capacity-p.other-p.preemptible-p.urgent), Arrivals: p.arrivals,
		})
	}
	return out
}
