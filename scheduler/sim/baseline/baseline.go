package baseline

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/impact-sched/nomad-impact/scheduler/engine"
	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// Names of the baseline policies.
const (
	NomadNative = "nomad-native"
	FIFOGang    = "fifo-gang"
	Backfill    = "backfill"
)

// New returns the baseline called name.
func New(name string) (sim.Scheduler, error) {
	switch name {
	case NomadNative:
		return &nomadNative{}, nil
	case FIFOGang:
		return &fifoGang{}, nil
	case Backfill:
		return &backfill{Depth: DefaultBackfillDepth}, nil
	}
	return nil, fmt.Errorf("unknown baseline %q", name)
}

type nomadNative struct {
	s    scratch
	pick *nomadPicker
	// feasible and held are pick's arrays, reused from allocation to
	// allocation: the nodes with room, and the nodes of the job's
	// allocations (one entry each: a gang has a few, so counting them
	// costs less than clearing a count per node for every job).
	feasible []int
	held     []int
}

func (*nomadNative) Name() string { return NomadNative }

// Schedule walks evaluations in priority order and places each unplaced
// allocation independently, on the node Nomad's batch scheduler would
// pick (nomadpick.go): what fits is placed, the rest stays blocked.
func (b *nomadNative) Schedule(st *sim.State, _ int64) (*engine.Plan, error) {
	if st.MaxNodeFree == 0 {
		return nil, nil
	}
	if b.pick == nil {
		b.pick = newNomadPicker()
	}
	s := b.s.reset(st)
	maxFree := st.MaxNodeFree
	for _, j := range byPriority(st.Queue(), len(trace.Tiers)) {
		if maxFree == 0 {
			break
		}
		placed := false
		need := j.MemberGPUs()
		b.held = b.held[:0]
		for _, a := range j.Allocs {
			if a.Node >= 0 {
				b.held = append(b.held, a.Node)
			}
		}
		for m := j.Placed; m < j.Count(); m++ {
			if need > maxFree {
				break
			}
			i := b.nomadNode(s, j, need)
			if i < 0 {
				break // the rest of this job's allocations stay blocked
			}
			s.take(j, i, need)
			b.held = append(b.held, i)
			placed = true
		}
		if placed {
			maxFree = s.maxFree()
		}
	}
	return s.plan, nil
}

// nomadNode is the node Nomad picks for j's next allocation of need GPUs
// (-1: none has room), its anti-affinity counting j's allocations on each
// node in held (those placed before this cycle, and since).
func (b *nomadNative) nomadNode(s *scratch, j *sim.Job, need int) int {
	b.feasible = b.feasible[:0]
	for i, f := range s.free {
		if f >= need {
			b.feasible = append(b.feasible, i)
		}
	}
	return b.pick.pick(b.feasible, func(i int) float64 {
		n := s.st.Nodes[i]
		collisions := 0
		for _, h := range b.held {
			if h == i {
				collisions++
			}
		}
		return NomadScore(n.GPUs-s.free[i]+need, n.GPUs, collisions, j.Count())
	})
}

type fifoGang struct{ s scratch }

func (*fifoGang) Name() string { return FIFOGang }

// Schedule starts jobs from the head of the queue, all-or-nothing, and stops
// at the first that does not fit.
func (b *fifoGang) Schedule(st *sim.State, _ int64) (*engine.Plan, error) {
	if st.MaxNodeFree == 0 {
		return nil, nil
	}
	s := b.s.reset(st)
	for _, j := range st.Queue() {
		nodes := s.gangNodes(j, nil)
		if nodes == nil {
			break // the head blocks
		}
		s.placeGang(j, nodes)
	}
	return s.plan, nil
}

// DefaultBackfillDepth bounds how many queued jobs one backfill pass looks
// at, as Slurm's bf_max_job_test does.
const DefaultBackfillDepth = 1000

type backfill struct {
	Depth int
	s     scratch
}

func (*backfill) Name() string { return Backfill }

// Schedule is priority order with EASY backfill (one reservation, for the
// first job that does not fit).
func (b *backfill) Schedule(st *sim.State, now int64) (*engine.Plan, error) {
	if st.MaxNodeFree == 0 {
		return nil, nil
	}
	s := b.s.reset(st)
	order := byPriority(st.Queue(), len(trace.Tiers))
	k := 0
	for ; k < len(order); k++ {
		j := order[k]
		nodes := s.gangNodes(j, nil)
		if nodes == nil {
			break
		}
		s.placeGang(j, nodes)
	}
	if k >= len(order) {
		return s.plan, nil
	}
	head := order[k]
	shadow, extra := b.reservation(st, s, head, now)
	tested := 0
	maxFree := s.maxFree()
	for _, j := range order[k+1:] {
		if maxFree == 0 || tested >= b.Depth {
			break
		}
		tested++
		if j.MemberGPUs() > maxFree {
			continue
		}
		if now+j.Walltime-j.Saved <= shadow {
			// Ends before the reservation is needed: anything free will do.
			if nodes := s.gangNodes(j, nil); nodes != nil {
				s.placeGang(j, nodes)
				maxFree = s.maxFree()
			}
			continue
		}
		// Runs past the reservation: only on GPUs the head will not need.
		if nodes := s.gangNodes(j, extra); nodes != nil {
			for _, i := range nodes {
				extra[i] -= j.MemberGPUs()
			}
			s.placeGang(j, nodes)
			maxFree = s.maxFree()
		}
	}
	return s.plan, nil
}

// gpuEnd is when a running allocation gives its GPUs back (its walltime,
// or the end of its grace when stopping).
type gpuEnd struct {
	t    int64
	node int
	gpus int
}

// gpuEnds lists every running allocation's end, earliest first.
func gpuEnds(st *sim.State, now int64) []gpuEnd {
	var ends []gpuEnd
	for _, j := range st.Active() {
		t := j.WalltimeEnd(st.Model)
		if j.State == sim.Stopping {
			t = j.StopAt
		}
		t = max(t, now)
		for _, a := range j.Allocs {
			if a.Node >= 0 {
				ends = append(ends, gpuEnd{t, a.Node, len(a.GPUs)})
			}
		}
	}
	// slices.SortFunc, not sort.Slice: this sort is most of backfill's
	// time, and sort.Slice swaps through reflection. Ends equal in both
	// keys may come out in any order: reservation's sums do not depend on it.
	slices.SortFunc(ends, func(a, b gpuEnd) int {
		if c := cmp.Compare(a.t, b.t); c != 0 {
			return c
		}
		return cmp.Compare(a.node, b.node)
	})
	return ends
}

// reservation finds when head can start if running jobs end at their
// walltimes, and the GPUs per node left over once head takes its share then
// (extra). A head that can never fit reserves nothing.
func (b *backfill) reservation(st *sim.State, s *scratch, head *sim.Job, now int64) (int64, []int) {
	pf := append([]int(nil), s.free...)
	need, count := head.MemberGPUs(), head.Count()
	ok := 0
	for _, f := range pf {
		if f >= need {
			ok++
		}
	}
	shadow := int64(-1)
	if ok >= count {
		shadow = now // fits on free GPUs, but not as placed this cycle
	}
	for _, e := range gpuEnds(st, now) {
		if shadow >= 0 && e.t > shadow {
			break
		}
		before := pf[e.node] >= need
		pf[e.node] += e.gpus
		if !before && pf[e.node] >= need {
			ok++
		}
		if ok >= count && shadow < 0 {
			shadow = e.t // keep adding the releases at this same time
		}
	}
	extra := make([]int, len(pf))
	if shadow < 0 {
		// Never fits (not even on an empty cluster): no reservation.
		copy(extra, s.free)
		return 1<<62 - 1, extra
	}
	// The head takes the fullest-fitting nodes at the shadow time.
	var cand []int
	for i, f := range pf {
		if f >= need {
			cand = append(cand, i)
		}
	}
	slices.SortStableFunc(cand, func(a, b int) int { return cmp.Compare(pf[a], pf[b]) })
	for i := range pf {
		extra[i] = pf[i]
	}
	for _, i := range cand[:count] {
		extra[i] -= need
	}
	for i := range extra {
		extra[i] = min(extra[i], s.free[i])
	}
	return shadow, extra
}
