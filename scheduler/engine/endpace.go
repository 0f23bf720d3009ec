package engine

import (
	"math"
	"math/bits"
	"time"
)

// The pace of natural ends: how fast running work frees GPUs on its own.
// A preemption frees its GPUs only once the victims' grace is over, and a
// job that preempted takes whatever frees first: on a pool where work
// ends every few seconds, it starts on GPUs freed by work that ended
// meanwhile, and its victims lose their work for nothing (robustness
// seed 1, rand-27: 104 of 105 critical preemptions). So a top-tier
// preemption's gain is weighed by the chance that ends on their own do
// not free room for the job before the victims stop (firstChance; policy
// preemption weigh_ends, preempter.endsFirst). The pace is learned from
// the allocations that ran to their end (the finished log's Completed
// records, not those this engine stopped) in the last endWindow, per
// pool. It is not part of Memory: a new leader learns it again, and
// preempts as if no end came until it has seen some.

// endWindow is how far back natural ends are counted.
const endWindow = time.Hour

// naturalEnd is an allocation that ran to its end: when, how many GPUs,
// in which pool.
type naturalEnd struct {
	at   int64
	gpus int
	pool string
}

// endPace is the step that learns natural ends and answers how likely
// they free room for a job in time. ahead counts, per pool, the GPUs of
// jobs decided earlier in the cycle that still wait: they take the GPUs
// that free first.
type endPace struct {
	c     *cycle
	rates map[string]float64
	ahead map[string]int
}

// learn records the natural ends since the last cycle: the cycle counts
// them (they ended before it began), and apply keeps them.
func (p *endPace) learn() {
	recs, _ := p.c.snap.FinishedSince(p.c.e.finishedSeq)
	for i := range recs {
		r := &recs[i]
		if !r.Completed || r.GPUs <= 0 {
			continue
		}
		if _, stopped := p.c.e.inflight[r.AllocID]; stopped {
			continue
		}
		pool := ""
		if ord, ok := p.c.st.Ordinal(r.NodeID); ok {
			pool = p.c.st.PoolOf(ord)
		}
		p.c.mem.ends = append(p.c.mem.ends, naturalEnd{at: r.End.UnixNano(), gpus: r.GPUs, pool: pool})
	}
}

// rememberEnds keeps the natural ends of the last endWindow.
func (e *Engine) rememberEnds(seen []naturalEnd, now time.Time) {
	from := now.Add(-endWindow).UnixNano()
	k := 0
	for k < len(e.ends) && e.ends[k].at < from {
		k++
	}
	e.ends = append(e.ends[k:], seen...)
}

// rate is the GPUs a second freed by natural ends in pool ("" any) over
// the last endWindow.
func (p *endPace) rate(pool string) float64 {
	if r, ok := p.rates[pool]; ok {
		return r
	}
	from := p.c.now.Add(-endWindow).UnixNano()
	n := 0
	for _, ends := range [2][]naturalEnd{p.c.e.ends, p.c.mem.ends} {
		for _, e := range ends {
			if e.at >= from && (pool == "" || e.pool == pool) {
				n += e.gpus
			}
		}
	}
	r := float64(n) / endWindow.Seconds()
	if p.rates == nil {
		p.rates = map[string]float64{}
	}
	p.rates[pool] = r
	return r
}

// waits notes that q, decided, still waits for GPUs. Only top-tier
// preemptions under the policy's weigh_ends read it, so without it
// nothing is counted (a long queue's every job would hash its pool).
func (p *endPace) waits(q *queued) {
	if !p.c.pol.Preemption.WeighEnds {
		return
	}
	if p.ahead == nil {
		p.ahead = map[string]int{}
	}
	p.ahead[q.pool] += int(q.gpus)
}

// aheadOf is the GPUs of jobs decided before q that wait in its pool.
func (p *endPace) aheadOf(q *queued) int {
	if q.pool == "" {
		n := 0
		for _, g := range p.ahead {
			n += g
		}
		return n
	}
	return p.ahead[q.pool] + p.ahead[""]
}

// firstChance is the chance that natural ends free room for q within
// wait: for a job of one allocation, that some node of its pool gains
// the GPUs it lacks there (beyond those the jobs waiting ahead of it
// take), each node freeing its share of the pool's pace at random
// (Poisson). 0 for a gang of several allocations, or without ends seen.
func (p *endPace) firstChance(q *queued, wait time.Duration) float64 {
	allocs := 0
	for gi := range q.job.Groups {
		allocs += q.job.Groups[gi].Count
	}
	if allocs != 1 || wait <= 0 {
		return 0
	}
	lambda := p.rate(q.pool)
	if lambda <= 0 {
		return 0
	}
	ahead := p.aheadOf(q)
	st := p.c.st
	if q.maxAlloc <= 1 {
		return 1 - poissonBelow(lambda*wait.Seconds(), 1+ahead)
	}
	capacity := 0
	for ord := range st.NumNodes() {
		if p.inPool(ord, q.pool) {
			capacity += len(st.Node(ord).GPUs)
		}
	}
	none := 1.0
	for ord := range st.NumNodes() {
		if !p.inPool(ord, q.pool) {
			continue
		}
		n := len(st.Node(ord).GPUs)
		if n < int(q.maxAlloc) {
			continue
		}
		short := int(q.maxAlloc) - bits.OnesCount64(st.Free(ord))
		if short <= 0 {
			continue // it fits the count there and was refused for another reason
		}
		mu := lambda * wait.Seconds() * float64(n) / float64(capacity)
		none *= poissonBelow(mu, short+ahead)
	}
	return 1 - none
}

func (p *endPace) inPool(ord int, pool string) bool {
	st := p.c.st
	return st.Schedulable(ord) && (pool == "" || st.PoolOf(ord) == pool)
}

// poissonBelow is P(N < m) for N Poisson of mean mu.
func poissonBelow(mu float64, m int) float64 {
	if m <= 0 {
		return 0
	}
	if float64(m) > mu+12*math.Sqrt(mu)+12 {
		return 1
	}
	// In logs: e^-mu underflows for the paces of large pools.
	logMu, logTerm := math.Log(mu), -mu
	top, sum := logTerm, 1.0 // sum of e^(logTerm - top)
	for k := 1; k < m; k++ {
		logTerm += logMu - math.Log(float64(k))
		if logTerm > top {
			sum = sum*math.Exp(top-logTerm) + 1
			top = logTerm
		} else {
			sum += math.Exp(logTerm - top)
		}
	}
	return min(1, math.Exp(top+math.Log(sum)))
}
