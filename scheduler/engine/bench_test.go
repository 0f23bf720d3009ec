package engine

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// bigCluster builds the benchmark scenario of issue 4: nodes x 8 GPUs (two
// NVLink islands, 16 racks), gangs running gangs filling most GPUs (mixed
// tiers, some preemptible), and waiting queued jobs of mixed shapes.
func bigCluster(tb testing.TB, nodes, gangs, waiting int, seed uint64) *cluster.Snapshot {
	rng := rand.New(rand.NewPCG(seed, 7))
	store := cluster.NewStore()
	must := func(err error) {
		if err != nil {
			tb.Fatal(err)
		}
	}
	type free struct{ node, next int }
	var fr []free
	for i := range nodes {
		n := mkNode(fmt.Sprintf("node-%05d", i), 8, 2, label("rack", fmt.Sprintf("r%02d", i%16)), label("switch", fmt.Sprintf("s%03d", i%128)))
		must(store.UpsertNode(n))
		fr = append(fr, free{node: i})
	}
	tiers := []string{"critical", "high", "normal", "normal", "normal", "scavenger", "scavenger"}
	sizes := []int{1, 1, 2, 2, 4, 8}
	// Running gangs: sizes drawn first, packed largest first so powers of
	// two fill nodes without waste (the cluster ends up ~99% full).
	type gang struct{ size, count int }
	gs := make([]gang, gangs)
	for g := range gs {
		gs[g] = gang{size: sizes[rng.IntN(len(sizes))], count: 1}
		if rng.IntN(100) == 0 {
			gs[g] = gang{size: 8, count: 2}
		}
	}
	sort.SliceStable(gs, func(a, b int) bool { return gs[a].size > gs[b].size })
	ni := 0
	for g := 0; g < gangs && ni < nodes; g++ {
		id := fmt.Sprintf("run-%06d", g)
		tier := tiers[rng.IntN(len(tiers))]
		j := mkJob(id, running(), meta("impact_tier", tier, "impact_project", fmt.Sprintf("p%d", rng.IntN(10))))
		size, count := gs[g].size, gs[g].count
		j.Groups = []cluster.TaskGroup{{Name: "main", Count: count, GPUs: size}}
		must(store.UpsertJob(j))
		start := t0.Add(-time.Duration(1+rng.IntN(48*60)) * time.Minute)
		for c := 0; c < count && ni < nodes; c++ {
			f := &fr[ni]
			if f.next+size > 8 {
				ni++
				if ni >= nodes {
					break
				}
				f = &fr[ni]
			}
			var idx []int
			for k := range size {
				idx = append(idx, f.next+k)
			}
			f.next += size
			must(store.UpsertAlloc(alloc(fmt.Sprintf("%s-%d", id, c), id, fmt.Sprintf("node-%05d", f.node), start, idx...)))
		}
	}
	if placed := store.Snapshot().NumAllocs(); placed < gangs {
		tb.Fatalf("only %d running allocations for %d gangs: the cluster is too small", placed, gangs)
	}
	wsizes := []int{1, 1, 1, 2, 4, 8, 8, 16, 32, 64}
	for w := range waiting {
		tier := tiers[rng.IntN(len(tiers))]
		n := wsizes[rng.IntN(len(wsizes))]
		count, per := 1, n
		if n > 8 {
			count, per = n/8, 8
		}
		j := mkJob(fmt.Sprintf("wait-%06d", w), group("main", count, per),
			meta("impact_tier", tier, "impact_project", fmt.Sprintf("p%d", rng.IntN(10)), "impact_walltime", fmt.Sprintf("%dm", 10+rng.IntN(600))),
			submitted(t0.Add(-time.Duration(rng.IntN(24*60))*time.Minute)))
		must(store.UpsertJob(j))
	}
	return store.Snapshot()
}

// BenchmarkDecide is issue 4's cycle: 10,000 waiting jobs, 2,000 nodes x 8
// GPUs, 5,000 running gangs, with a new engine each time (nothing cached
// from an earlier cycle). Issue 4 asked <= 100 ms median; issue 12 asks
// <= 20 ms on the 2-core machine.
func BenchmarkDecide(b *testing.B) {
	snap := bigCluster(b, 2000, 5000, 10000, 1)
	snap.Nodes()
	snap.Jobs()
	snap.Allocs()
	ct := startCycleTimes(b)
	for i := 0; i < b.N; i++ {
		e := mustEngine(b, nil)
		var p *Plan
		ct.time(func() { p = e.Decide(snap, t0) })
		if len(p.Explanations) != 10000 {
			b.Fatalf("explanations: %d", len(p.Explanations))
		}
	}
	ct.report()
}

// cycleTimes times a benchmark's cycles one by one. Issue 12's targets
// are medians: on a shared 2-core VM a collection or a neighbour's burst
// doubles a few cycles, and ns/op (the mean) moves with them. Beside
// ns/op it reports the median cycle (median-ms), the CPU the process used
// per cycle (cpu-ms/op: every thread, the collector's too) and the
// collections per cycle (gc/op).
type cycleTimes struct {
	b    *testing.B
	durs []time.Duration
	cpu  time.Duration
	gcs  uint32
}

// startCycleTimes reports allocations and resets the benchmark's timer:
// call it once the benchmark's world is built.
func startCycleTimes(b *testing.B) *cycleTimes {
	b.ReportAllocs()
	ct := &cycleTimes{b: b, gcs: numGC()} // numGC stops the world: read outside the timed cycles
	b.ResetTimer()
	return ct
}

// time runs one cycle and records its wall and CPU time.
func (ct *cycleTimes) time(cycle func()) {
	start, cpu0 := time.Now(), processCPU(ct.b)
	cycle()
	ct.durs = append(ct.durs, time.Since(start))
	ct.cpu += processCPU(ct.b) - cpu0
}

// report stops the timer and reports the metrics of the cycles timed.
func (ct *cycleTimes) report() {
	ct.b.StopTimer()
	n := len(ct.durs)
	if n == 0 {
		ct.b.Fatal("cycleTimes: no cycle timed")
	}
	gcs := numGC() - ct.gcs
	sort.Slice(ct.durs, func(i, j int) bool { return ct.durs[i] < ct.durs[j] })
	ct.b.ReportMetric(float64(ct.durs[n/2].Microseconds())/1000, "median-ms")
	ct.b.ReportMetric(float64(ct.cpu.Microseconds())/1000/float64(n), "cpu-ms/op")
	ct.b.ReportMetric(float64(gcs)/float64(n), "gc/op")
}

// numGC is the number of garbage collections the process has completed.
// A new engine's cycle allocates megabytes, so a collection runs during
// most cycles; its mark worker then competes with the cycle's two
// goroutines for the two cores. gc/op shows that cost next to the times.
func numGC() uint32 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.NumGC
}

// processCPU is the CPU time the process has used (every thread: the
// cycle's, its helper goroutine's and the garbage collector's). On a
// loaded machine wall time says little; CPU per cycle still compares two
// builds.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDecideFreshSnapshot includes the snapshot's first-use sorting
// (what a cycle after a burst of updates pays).
func BenchmarkDecideFreshSnapshot(b *testing.B) {
	snap := bigCluster(b, 2000, 5000, 10000, 1)
	store := cluster.NewStore()
	for _, n := range snap.Nodes() {
		_ = store.UpsertNode(n)
	}
	for _, j := range snap.Jobs() {
		_ = store.UpsertJob(j)
	}
	for _, a := range snap.Allocs() {
		_ = store.UpsertAlloc(a)
	}
	ct := startCycleTimes(b)
	for i := 0; i < b.N; i++ {
		ct.time(func() {
			_ = store.UpsertJob(snap.Jobs()[i%len(snap.Jobs())])
			e := mustEngine(b, nil)
			e.Decide(store.Snapshot(), t0)
		})
	}
	ct.report()
}

// BenchmarkDecideSmallQueueBusyCluster is the simulator's common case: a
// few waiting jobs, a full cluster.
func BenchmarkDecideSmallQueueBusyCluster(b *testing.B) {
	snap := bigCluster(b, 64, 150, 20, 3)
	snap.Nodes()
	snap.Jobs()
	snap.Allocs()
	e := mustEngine(b, nil)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e.Decide(snap, t0.Add(time.Duration(i)*time.Second))
	}
}

// BenchmarkDecideSteadyLongQueue is a long replay's common cycle: the same
// engine, 10,000 jobs waiting on a busy cluster, a few updates between
// cycles (here: 8 waiting jobs re-submitted), time moving on. What a cycle
// derives from unchanged parts of the snapshot is kept from the last one.
func BenchmarkDecideSteadyLongQueue(b *testing.B) { steadyLongQueue(b, nil) }

// BenchmarkDecideSteadyLongQueueShortestFirst is that cycle under a
// policy ordering each tier shortest first: the oldest job of every pool
// and tier is found, and each job's overdue line read, every cycle.
func BenchmarkDecideSteadyLongQueueShortestFirst(b *testing.B) {
	steadyLongQueue(b, mustPolicy(b, "shortest_first {\n  weight = 0.9\n}\n"))
}

func steadyLongQueue(b *testing.B, pol *policy.Policy) {
	snap := bigCluster(b, 2000, 5000, 10000, 1)
	store := cluster.NewStore()
	for _, n := range snap.Nodes() {
		_ = store.UpsertNode(n)
	}
	var queued []*cluster.Job
	for _, j := range snap.Jobs() {
		_ = store.UpsertJob(j)
		if j.State == cluster.JobQueued {
			queued = append(queued, j)
		}
	}
	for _, a := range snap.Allocs() {
		_ = store.UpsertAlloc(a)
	}
	e := mustEngine(b, pol)
	e.Decide(store.Snapshot(), t0)
	ct := startCycleTimes(b)
	for i := 0; i < b.N; i++ {
		ct.time(func() {
			for k := range 8 {
				cp := *queued[(i*8+k)%len(queued)]
				_ = store.UpsertJob(&cp)
			}
			e.Decide(store.Snapshot(), t0.Add(time.Duration(i+1)*time.Minute))
		})
	}
	ct.report()
}

// BenchmarkDecideLearnedWalltimes is BenchmarkDecide with learned
// walltimes on and learned for every class: every running gang (none
// declares a walltime) is timed by an estimate when a reservation is
// made, and waiting jobs without one are asked theirs.
func BenchmarkDecideLearnedWalltimes(b *testing.B) {
	snap := bigCluster(b, 2000, 5000, 10000, 1)
	snap.Nodes()
	snap.Jobs()
	snap.Allocs()
	pol := mustPolicy(b, "walltime {\n  learn   = true\n  running = true\n}\n")
	var runs []learnedRun
	for p := range 10 {
		for _, tier := range []string{"critical", "high", "normal", "scavenger"} {
			for _, gpus := range []int32{1, 2, 4, 8} {
				for i := range maxWallRuns {
					runs = append(runs, learnedRun{project: fmt.Sprintf("p%d", p), tier: tier, gpus: gpus,
						wallRun: wallRun{end: t0.Add(-time.Duration(i) * time.Minute).UnixNano(), run: time.Duration(1+i%48) * time.Hour}})
				}
			}
		}
	}
	ct := startCycleTimes(b)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e := mustEngine(b, pol)
		e.learnWalltimes(runs, t0)
		b.StartTimer()
		var p *Plan
		ct.time(func() { p = e.Decide(snap, t0) })
		if len(p.Explanations) != 10000 {
			b.Fatalf("explanations: %d", len(p.Explanations))
		}
	}
	ct.report()
}
