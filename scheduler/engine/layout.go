package engine

// queueLayout is the cycle's queue laid out in order: copies of the queue
// cache's entries, which lie by shard. Deciding then reads them one after
// the other (the processor fetches ahead) instead of waiting on a memory
// miss for each job, and the copy's loop, which does nothing else, has
// the reads of many entries in flight at once. Measured on
// BenchmarkDecideSteadyLongQueue, alternating with the code before it:
// 12-16% less time per cycle; a new engine's cycle (BenchmarkDecide)
// gains about nothing, the copy costing there what deciding saves.
//
// The copy costs about half of what deciding the same entries does, so
// it is split to stay off the cycle's longest path: the goroutine that
// orders the queue copies the first part (layOut), while the gangs are
// still being judged on the other; the rest is copied beside the
// decisions (fillRest), which wait for it only if they get there first
// (at). A queue cache whose entries all lie in one array (a new
// engine's, see refreshQueue) is read in place instead: its 120-byte
// entries are close together already, and the copy would be another
// megabyte for the collector on BenchmarkDecide's queue.
type queueLayout struct {
	from []*queued
	// q: the copies (nil in place).
	q       []queued
	inPlace bool
	split   int
	// rest is closed once entries split and after are copied; restSeen:
	// at has waited for it.
	rest     chan struct{}
	restSeen bool
}

// layOut starts laying queue out in the engine's scratch memory (valid
// until the next cycle overwrites it; the job objects its entries point
// to are the queue cache's too), copying the first part of it. In
// place, nothing is copied: the entries are read where they lie, which
// a queue cache laid out in one array (a new engine's: refreshQueue)
// allows at about the copy's cost, without its megabyte of memory.
func (o *orderer) layOut(queue []*queued, inPlace bool) *queueLayout {
	if inPlace {
		return &queueLayout{from: queue, inPlace: true, split: len(queue)}
	}
	buf := &o.c.e.scratch.ordered
	if cap(*buf) < len(queue) {
		*buf = make([]queued, len(queue))
	}
	l := &queueLayout{from: queue, q: (*buf)[:len(queue)], split: len(queue) / 2, rest: make(chan struct{})}
	l.copy(0, l.split)
	return l
}

func (l *queueLayout) copy(from, to int) {
	for i := from; i < to; i++ {
		l.q[i] = *l.from[i]
	}
}

// fillRest copies the rest of the queue.
func (l *queueLayout) fillRest() {
	if l.inPlace {
		return
	}
	l.copy(l.split, len(l.q))
	close(l.rest)
}

// len is the number of entries.
func (l *queueLayout) len() int { return len(l.from) }

// at is entry i, once it is laid out.
func (l *queueLayout) at(i int) *queued {
	if l.inPlace {
		return l.from[i]
	}
	if i >= l.split && !l.restSeen {
		<-l.rest
		l.restSeen = true
	}
	return &l.q[i]
}

// filled is entry i, for the goroutine that laid out the rest
// (fillRest): it has nothing to wait for.
func (l *queueLayout) filled(i int) *queued {
	if l.inPlace {
		return l.from[i]
	}
	return &l.q[i]
}
