package engine

import (
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/placement"
)

// Cuts. A preemptor that found no victims of its own shape it could pay
// for (searchShaped) takes narrower ones: a two-GPU job takes a free GPU
// and a one-GPU job's, or two one-GPU jobs'. It leaves a block as wide as
// itself where the pool held single GPUs, and when it ends that block
// frees whole and goes whole to the first waiting job it fits, mostly
// one as wide, which passes it on the same way: the cut outlives the
// preemption, and on a saturated pool it moves GPUs for good from the
// narrow work of the lower tiers to the wider work ahead of it in the
// queue (example/sim/README.md, "Eighth pass"). So the engine remembers
// each cut, and in the cycle its preemptor's GPUs free in it keeps them
// from every job wider than the victims' allocations were while a job no
// wider waits after it in the queue: the cut is undone in shape. Not
// for the victims themselves: they queue again behind their tier, as
// Nomad queues a re-registered job. What no such job took is anyone's
// from the next cycle on (Plan.CutGPUsKept says a cycle kept some).
//
// Cuts are the engine's memory of one process: a new leader starts
// without them (Memory does not carry them), and only cuts of preemptors
// still running are lost that way.

// cut is one node's part of a preemption that cut the pool: the GPUs its
// preemptor took there and the widest allocation its victims held there.
type cut struct {
	node  string
	gpus  []string
	width int
	// at: when the preemption was ordered; running: the preemptor has
	// been admitted since (admitted).
	at      time.Time
	running bool
}

// cutStartLimit is how long a cut waits for its preemptor to be admitted
// (a preemptor's binding lasts its victims' grace plus the admission TTL,
// minutes): one that never was leaves nothing to undo.
const cutStartLimit = time.Hour

// cutter is the cuts step: at the start of a cycle it finds the cuts
// whose preemptor has ended (begin), whose free GPUs it keeps from wider
// jobs while each job is decided (protect); it records the cuts the
// cycle's preemptions make (record) and the preemptors it admits
// (admitted).
//
// The whole new set of cuts, by preemptor job ID, is the cycle's change
// to the engine's memory (changes.cuts; nil: unchanged).
type cutter struct {
	c *cycle
	// kept: this cycle's GPUs of ended preemptors, by node ordinal.
	kept []keptCut
}

// keptCut is the GPUs of an ended preemptor on one node, kept this cycle
// for jobs no wider than width.
type keptCut struct {
	ord       int
	mask      uint64
	width     int
	preemptor string
	// pool is the node's; narrowest[i] the narrowest allocation of the
	// jobs from queue index i on that may use it (prepare).
	pool      string
	narrowest []int32
}

// begin works out which cuts' preemptors have ended: admitted since the
// cut (running) and now neither holding its GPUs nor with an admission
// under way. Their GPUs are kept this cycle, and the cuts forgotten;
// cuts whose preemptor was not admitted within cutStartLimit are
// forgotten too. Whether a preemptor was admitted is noted when it is
// (admitted), not read from the holders of some later cycle: the
// simulator skips cycles in which nothing changed, and a cut must end
// the same either way.
func (ct *cutter) begin() {
	cuts := ct.c.e.cuts
	if len(cuts) == 0 {
		return
	}
	st := ct.c.st
	next := make(map[string][]cut, len(cuts))
	for _, id := range slices.Sorted(maps.Keys(cuts)) {
		_, admitting := ct.c.mem.pendingOf(id)
		var held []placement.Slot // the preemptor's GPUs, while it runs
		if h, ok := ct.c.holderOf(id); ok {
			held = st.Holders()[h].Slots
		}
		var keep []cut
		for _, cu := range cuts[id] {
			ord, mask, ok := st.Mask(cu.node, cu.gpus)
			switch {
			case !ok:
				// The node left the snapshot: nothing to give back.
			case holds(held, ord, mask) || admitting:
				keep = append(keep, cu)
			case cu.running:
				ct.kept = append(ct.kept, keptCut{ord: ord, mask: mask, width: cu.width, preemptor: id, pool: st.PoolOf(ord)})
			case ct.c.now.Sub(cu.at) < cutStartLimit:
				keep = append(keep, cu)
			}
		}
		if len(keep) > 0 {
			next[id] = keep
		}
	}
	slices.SortFunc(ct.kept, func(a, b keptCut) int { return a.ord - b.ord })
	ct.c.mem.cuts = next
}

// holds: one of slots holds some of mask's GPUs on node ord.
func holds(slots []placement.Slot, ord int, mask uint64) bool {
	for _, sl := range slots {
		if sl.Node == ord && sl.Mask&mask != 0 {
			return true
		}
	}
	return false
}

// admitted notes that q, admitted now, starts on the GPUs of its cuts
// made within cutStartLimit.
func (ct *cutter) admitted(q *queued) {
	cs := ct.current()[q.job.ID]
	if len(cs) == 0 {
		return
	}
	next := ct.toChange()
	started := make([]cut, len(cs))
	for i, cu := range cs {
		cu.running = cu.running || ct.c.now.Sub(cu.at) < cutStartLimit
		started[i] = cu
	}
	next[q.job.ID] = started
}

// current is the set of cuts as the cycle sees it: the memory's, with
// the cycle's changes over it.
func (ct *cutter) current() map[string][]cut {
	if ct.c.mem.cuts != nil {
		return ct.c.mem.cuts
	}
	return ct.c.e.cuts
}

// toChange is the cycle's own copy of the set of cuts, to change.
func (ct *cutter) toChange() map[string][]cut {
	if ct.c.mem.cuts == nil {
		ct.c.mem.cuts = maps.Clone(ct.c.e.cuts)
		if ct.c.mem.cuts == nil {
			ct.c.mem.cuts = map[string][]cut{}
		}
	}
	return ct.c.mem.cuts
}

// record notes the cut a preemption makes: on each node of the
// preemptor's placement where its victims held allocations narrower than
// its own, the GPUs it takes and the widest of those allocations.
func (ct *cutter) record(q *queued, victims []int, res placement.Result) {
	holders := ct.c.st.Holders()
	var add []cut
	for _, g := range res.Groups {
		for _, sl := range g {
			width := 0
			for _, h := range victims {
				for _, vs := range holders[h].Slots {
					if vs.Node == sl.Node {
						width = max(width, bits.OnesCount64(vs.Mask))
					}
				}
			}
			if width == 0 || width >= bits.OnesCount64(sl.Mask) {
				continue // no victim there, or none narrower: no cut
			}
			add = append(add, cut{node: ct.c.st.Node(sl.Node).ID, gpus: ct.c.st.GPUIDs(sl), width: width, at: ct.c.now})
		}
	}
	if len(add) == 0 {
		return
	}
	next := ct.toChange()
	next[q.job.ID] = append(slices.Clip(next[q.job.ID]), add...)
}

// prepare notes, for each place in the queue and each pool with kept
// GPUs, the narrowest allocation of the jobs after it that may use the
// pool: GPUs are kept from a job only for a narrower one still to be
// decided that could take them, never idle for nobody.
func (ct *cutter) prepare(lay *queueLayout) {
	byPool := map[string][]int32{}
	for i := range ct.kept {
		k := &ct.kept[i]
		if nw, ok := byPool[k.pool]; ok {
			k.narrowest = nw
			continue
		}
		n := lay.len()
		nw := make([]int32, n+1)
		nw[n] = math.MaxInt32
		for j := n - 1; j >= 0; j-- {
			w := int32(math.MaxInt32)
			if q := lay.at(j); !q.parked && q.maxAlloc > 0 && (q.pool == "" || q.pool == k.pool) {
				w = q.maxAlloc
			}
			nw[j] = min(w, nw[j+1])
		}
		byPool[k.pool], k.narrowest = nw, nw
	}
}

// keeps: the kept GPUs k are kept from q, decided at queue position pos
// (1-based): q may use k's pool and is wider than k's victims were, and a
// job as narrow as they were that may use the pool comes after it.
func (ct *cutter) keeps(k *keptCut, q *queued, pos int) bool {
	return int(q.maxAlloc) > k.width && (q.pool == "" || q.pool == k.pool) &&
		pos < len(k.narrowest) && int(k.narrowest[pos]) <= k.width
}

// keptGPUs is how many GPUs of ended preemptors this cycle kept for
// narrower jobs (Plan.CutGPUsKept).
func (ct *cutter) keptGPUs() int {
	n := 0
	for _, k := range ct.kept {
		n += bits.OnesCount64(k.mask)
	}
	return n
}

// withholds: protect would keep GPUs from q at queue position pos.
func (ct *cutter) withholds(q *queued, pos int) bool {
	st := ct.c.st
	for i := range ct.kept {
		k := &ct.kept[i]
		if ct.keeps(k, q, pos) && k.mask&withholdable(st, k.ord) != 0 {
			return true
		}
	}
	return false
}

// protect keeps the free (or reserved but unused) GPUs of ended
// preemptors from q, decided at queue position pos, while q is wider than
// their victims were and a job as narrow comes after it (keeps); the
// function it returns gives them back and, when q was left without a
// place, says why in its explanation. nil when it keeps nothing.
func (ct *cutter) protect(q *queued, pos int, exp *Explanation) func() {
	var keep []*keptCut
	for i := range ct.kept {
		if k := &ct.kept[i]; ct.keeps(k, q, pos) {
			keep = append(keep, k)
		}
	}
	if len(keep) == 0 {
		return nil
	}
	kept := make([]int, len(keep)) // GPUs taken of each
	give := withholdGPUs(ct.c.st, func(ord int, avail uint64) uint64 {
		var m uint64
		for i, k := range keep {
			if k.ord == ord {
				kept[i] = bits.OnesCount64(k.mask & avail)
				m |= k.mask
			}
		}
		return m
	})
	if give == nil {
		return nil
	}
	return func() {
		give()
		if !ct.c.explain || exp.Status == StatusAdmitted {
			return
		}
		// The free count earlier in the reason leaves these out.
		for i, k := range keep {
			if kept[i] > 0 {
				exp.Reason += fmt.Sprintf("; %d GPUs %s held on %s, freed now and not counted free for it, go first to jobs no wider than the %d-GPU allocations it preempted there",
					kept[i], k.preemptor, ct.c.st.Node(k.ord).Name, k.width)
			}
		}
	}
}
