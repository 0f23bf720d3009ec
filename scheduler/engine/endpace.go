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
//
// Ends come in lumps: an allocation frees all its GPUs at once, and a
// gang's allocations end together. Counted GPU by GPU, as if each ended
// alone, a pool where gangs of many GPUs end every few minutes looks as
// if a GPU freed every few seconds, and a critical job would wait a
// grace for an end that comes within a minute about one time in three
// (robustness seed 3, rand-45: 274 GPUs in 26 job ends over the hour,
// taken for a 99% chance). So the pace is a compound Poisson process
// (endModel): events at the rate ends were seen, each freeing the GPUs
// one of them freed, drawn from those seen.

// endWindow is how far back natural ends are counted.
const endWindow = time.Hour

// sameEnd is how soon after the first of them the allocations of one
// job must end to count as one end with it: a gang's members finish
// within moments of each other, not at one instant.
const sameEnd = 5 * time.Second

// naturalEnd is an allocation that ran to its end: when, how many GPUs,
// in which pool, of which job.
type naturalEnd struct {
	at   int64
	gpus int
	pool string
	job  string
}

// endPace is the step that learns natural ends and answers how likely
// they free room for a job in time. ahead counts, per pool, the GPUs of
// jobs decided earlier in the cycle that still wait: they take the GPUs
// that free first.
type endPace struct {
	c      *cycle
	models map[string]*endModel
	ahead  map[string]int
}

// endModel is a pool's natural ends over the last endWindow, as two
// compound Poisson processes: jobs' ends (a job's allocations ending
// within sameEnd of the first of them are one end, freeing their GPUs
// together), for a job that may take GPUs anywhere in the pool, and
// allocations' ends (each frees its GPUs on its node), for a job that
// needs them on one node.
type endModel struct {
	jobs, allocs lumps
}

// lumps is one such process over the window: how many events freed each
// count of GPUs, and how many events in all (their pace is events over
// endWindow).
type lumps struct {
	sizes  []lump
	events int
}

// lump is a count of GPUs freed at once, and how many events freed it.
type lump struct{ gpus, events int }

// add counts an event of gpus GPUs.
func (l *lumps) add(gpus int) {
	l.events++
	for i := range l.sizes {
		if l.sizes[i].gpus == gpus {
			l.sizes[i].events++
			return
		}
	}
	l.sizes = append(l.sizes, lump{gpus: gpus, events: 1})
}

// below is the chance that events over wait seconds free fewer than m
// GPUs.
func (l *lumps) below(wait float64, m int) float64 {
	return compoundBelow(float64(l.events)/endWindow.Seconds()*wait, l.sizes, m)
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
		p.c.mem.ends = append(p.c.mem.ends, naturalEnd{at: r.End.UnixNano(), gpus: r.GPUs, pool: pool, job: r.JobID})
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

// model is pool's ("" any) natural ends over the last endWindow.
func (p *endPace) model(pool string) *endModel {
	if m, ok := p.models[pool]; ok {
		return m
	}
	from := p.c.now.Add(-endWindow).UnixNano()
	m := &endModel{}
	type key struct{ job, pool string }
	type open struct {
		at   int64
		gpus int
	}
	var jobs map[key]*open
	var order []*open
	for _, ends := range [2][]naturalEnd{p.c.e.ends, p.c.mem.ends} {
		for _, e := range ends {
			if e.at < from || (pool != "" && e.pool != pool) {
				continue
			}
			m.allocs.add(e.gpus)
			k := key{e.job, e.pool}
			if o := jobs[k]; o != nil && e.job != "" && e.at-o.at <= int64(sameEnd) {
				o.gpus += e.gpus
				continue
			}
			if jobs == nil {
				jobs = map[key]*open{}
			}
			o := &open{at: e.at, gpus: e.gpus}
			jobs[k] = o
			order = append(order, o)
		}
	}
	for _, o := range order {
		m.jobs.add(o.gpus)
	}
	if p.models == nil {
		p.models = map[string]*endModel{}
	}
	p.models[pool] = m
	return m
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
// take), each node seeing its share of the pool's allocation ends at
// random, a 1-GPU job anywhere in the pool by the jobs' ends (endModel).
// 0 for a gang of several allocations, or without ends seen.
func (p *endPace) firstChance(q *queued, wait time.Duration) float64 {
	allocs := 0
	for gi := range q.job.Groups {
		allocs += q.job.Groups[gi].Count
	}
	if allocs != 1 || wait <= 0 {
		return 0
	}
	m := p.model(q.pool)
	if m.jobs.events == 0 {
		return 0
	}
	ahead := p.aheadOf(q)
	st := p.c.st
	if q.maxAlloc <= 1 {
		return 1 - m.jobs.below(wait.Seconds(), 1+ahead)
	}
	capacity := 0
	for ord := range st.NumNodes() {
		if p.inPool(ord, q.pool) {
			capacity += len(st.Node(ord).GPUs)
		}
	}
	// Nodes of one size short of as many GPUs have the same chance: a
	// pool of thousands has a few such kinds.
	var seen map[[2]int]float64
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
		k := [2]int{n, short}
		below, ok := seen[k]
		if !ok {
			below = m.allocs.below(wait.Seconds()*float64(n)/float64(capacity), short+ahead)
			if seen == nil {
				seen = map[[2]int]float64{}
			}
			seen[k] = below
		}
		none *= below
	}
	return 1 - none
}

func (p *endPace) inPool(ord int, pool string) bool {
	st := p.c.st
	return st.Schedulable(ord) && (pool == "" || st.PoolOf(ord) == pool)
}

// compoundBelow is P(S < m) for S the GPUs freed by a Poisson count of
// mean mu of events, each freeing as many GPUs as an event drawn at
// random from sizes: Panjer's recursion over the sums below m. With
// every event of one GPU it is the Poisson count's P(N < m).
func compoundBelow(mu float64, sizes []lump, m int) float64 {
	if m <= 0 {
		return 0
	}
	n := 0
	for _, s := range sizes {
		n += s.events
	}
	if mu <= 0 || n <= 0 {
		return 1
	}
	mean, second := 0.0, 0.0
	for _, s := range sizes {
		f := float64(s.events) / float64(n)
		mean += f * float64(s.gpus)
		second += f * float64(s.gpus) * float64(s.gpus)
	}
	if float64(m) > mu*mean+12*math.Sqrt(mu*second)+12 {
		return 1
	}
	// In a scale of e^mu (e^-mu underflows for the paces of large
	// pools), rescaled as the terms grow.
	const big = 1e250
	g := make([]float64, m)
	g[0] = 1
	total, logScale := 1.0, 0.0
	for k := 1; k < m; k++ {
		v := 0.0
		for _, s := range sizes {
			if s.gpus <= k {
				v += float64(s.gpus) * float64(s.events) / float64(n) * g[k-s.gpus]
			}
		}
		g[k] = mu / float64(k) * v
		total += g[k]
		if total > big {
			for i := range g[:k+1] {
				g[i] /= big
			}
			total /= big
			logScale += math.Log(big)
		}
	}
	return min(1, math.Exp(math.Log(total)+logScale-mu))
}
