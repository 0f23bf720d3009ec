package engine

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

var (
	tierGen = rapid.SampledFrom([]string{"critical", "high", "normal", "scavenger"})
	// Running work leans to the lower tiers so that preemption happens.
	runTierGen = rapid.SampledFrom([]string{"high", "normal", "scavenger", "scavenger"})
	topoGen    = rapid.SampledFrom([]string{"", "nvlink", "node", "any"})
	preGen     = rapid.SampledFrom([]string{"", "true", "false"})
)

// genWorld draws a random, consistent cluster: nodes with islands, some
// unhealthy GPUs and ineligible nodes, running gangs on distinct GPUs
// (mixed tiers and preemptibility, various ages), and queued jobs of
// random shapes, some with bad metadata.
func genWorld(t *rapid.T) (*cluster.Store, *policy.Policy) {
	store := cluster.NewStore()
	pol := policy.Default()
	pol.Preemption.MaxGPUHoursLostPerHour = rapid.SampledFrom([]float64{0, 4, 64}).Draw(t, "lostcap")
	pol.Backfill.Reservations = rapid.IntRange(0, 2).Draw(t, "reservations")
	pol.Backfill.Gather = rapid.Bool().Draw(t, "gather")
	pol.Preemption.MinRuntime = time.Duration(rapid.IntRange(0, 60).Draw(t, "minrt")) * time.Minute
	if rapid.Bool().Draw(t, "shortest") {
		pol.ShortestFirst = policy.ShortestFirst{Weight: 0.9, OverdueShare: rapid.SampledFrom([]float64{0, 0.5, 0.75, 1}).Draw(t, "overdue")}
	}

	type freeGPU struct {
		node string
		idx  int
	}
	var free []freeGPU
	nodes := rapid.IntRange(1, 6).Draw(t, "nodes")
	for i := range nodes {
		id := fmt.Sprintf("n%d", i)
		gpus := rapid.SampledFrom([]int{1, 2, 4, 8}).Draw(t, "gpus")
		islands := 1
		if gpus >= 2 {
			islands = rapid.IntRange(1, 2).Draw(t, "islands")
		}
		var opts []nodeOpt
		if rapid.IntRange(0, 9).Draw(t, "inelig") == 0 {
			opts = append(opts, ineligible())
		}
		if rapid.IntRange(0, 4).Draw(t, "rack") > 0 {
			opts = append(opts, label("rack", fmt.Sprintf("r%d", i%2)))
		}
		if rapid.IntRange(0, 5).Draw(t, "pool") == 0 {
			opts = append(opts, inPool("other"))
		}
		opts = append(opts, withClass(rapid.SampledFrom([]string{"a", "b"}).Draw(t, "class")))
		n := mkNode(id, gpus, islands, opts...)
		for g := range n.GPUs {
			if rapid.IntRange(0, 15).Draw(t, "unhealthy") == 0 {
				n.GPUs[g].Healthy = false
			}
			free = append(free, freeGPU{id, g})
		}
		if err := store.UpsertNode(n); err != nil {
			t.Fatal(err)
		}
	}
	// Running gangs on distinct GPUs.
	nrun := rapid.IntRange(0, 12).Draw(t, "running")
	for r := range nrun {
		id := fmt.Sprintf("run%d", r)
		kv := []string{"impact_tier", runTierGen.Draw(t, "rtier")}
		if p := preGen.Draw(t, "rpre"); p != "" {
			kv = append(kv, "impact_preemptible", p)
		}
		if rapid.Bool().Draw(t, "rmin") {
			kv = append(kv, "impact_min_runtime", fmt.Sprintf("%dm", rapid.IntRange(1, 300).Draw(t, "rminv")))
		}
		if rapid.Bool().Draw(t, "rwall") {
			kv = append(kv, "impact_walltime", fmt.Sprintf("%dm", rapid.IntRange(1, 600).Draw(t, "rwallv")))
		}
		count := rapid.IntRange(1, 2).Draw(t, "rcount")
		per := rapid.IntRange(1, 4).Draw(t, "rper")
		j := mkJob(id, running(), meta(kv...), group("main", count, per))
		start := t0.Add(-time.Duration(rapid.IntRange(0, 600).Draw(t, "rstart")) * time.Minute)
		var allocs []*cluster.Alloc
		for c := range count {
			// Take per GPUs of one node from the free list.
			var pick []int
			var node string
			for k := 0; k < len(free) && len(pick) < per; k++ {
				if node == "" {
					node = free[k].node
				}
				if free[k].node == node {
					pick = append(pick, k)
				}
			}
			if len(pick) < per {
				break
			}
			a := &cluster.Alloc{ID: fmt.Sprintf("%s-%d", id, c), JobID: id, Group: "main", NodeID: node, Start: start}
			if rapid.Bool().Draw(t, "ckpt") {
				a.LastCheckpoint = start.Add(time.Duration(rapid.IntRange(0, 60).Draw(t, "ckptv")) * time.Minute)
			}
			for i := len(pick) - 1; i >= 0; i-- {
				a.GPUs = append(a.GPUs, fmt.Sprintf("%s-g%d", node, free[pick[i]].idx))
				free = append(free[:pick[i]], free[pick[i]+1:]...)
			}
			allocs = append(allocs, a)
		}
		if len(allocs) != count {
			continue
		}
		if err := store.UpsertJob(j); err != nil {
			t.Fatal(err)
		}
		for _, a := range allocs {
			if err := store.UpsertAlloc(a); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Queued jobs.
	queued := rapid.IntRange(0, 10).Draw(t, "queued")
	for q := range queued {
		kv := []string{"impact_tier", tierGen.Draw(t, "qtier")}
		if tp := topoGen.Draw(t, "qtopo"); tp != "" {
			kv = append(kv, "impact_topology", tp)
		}
		if p := preGen.Draw(t, "qpre"); p != "" {
			kv = append(kv, "impact_preemptible", p)
		}
		if rapid.Bool().Draw(t, "qwall") {
			kv = append(kv, "impact_walltime", fmt.Sprintf("%dm", rapid.IntRange(1, 600).Draw(t, "qwallv")))
		}
		if rapid.IntRange(0, 5).Draw(t, "qpool") == 0 {
			kv = append(kv, "impact_pool", "gpu")
		}
		if rapid.IntRange(0, 15).Draw(t, "qbad") == 0 {
			kv = append(kv, "impact_grace", "soon")
		}
		opts := []jobOpt{meta(kv...), submitted(t0.Add(-time.Duration(rapid.IntRange(0, 600).Draw(t, "qsub")) * time.Minute))}
		for g := range rapid.IntRange(1, 2).Draw(t, "qgroups") {
			opts = append(opts, group(fmt.Sprintf("g%d", g), rapid.IntRange(1, 3).Draw(t, "qcount"), rapid.IntRange(0, 8).Draw(t, "qper")))
		}
		j := mkJob(fmt.Sprintf("q%d", q), opts...)
		// A job's own constraints: distinct_hosts at either level, a node
		// class.
		j.DistinctHosts = rapid.IntRange(0, 4).Draw(t, "qdistinct") == 0
		for gi := range j.Groups {
			j.Groups[gi].DistinctHosts = rapid.IntRange(0, 3).Draw(t, "gdistinct") == 0
			if rapid.IntRange(0, 4).Draw(t, "gclass") == 0 {
				j.Groups[gi].Constraints = []cluster.Constraint{{Target: "${node.class}", Operand: rapid.SampledFrom([]string{"=", "!="}).Draw(t, "gop"), Value: "a"}}
			}
		}
		if err := store.UpsertJob(j); err != nil {
			t.Fatal(err)
		}
	}
	return store, pol
}

// checkState asserts a model state is physically possible: no GPU held by
// two allocations, every allocation on an existing GPU, every running job's
// gang complete.
func checkState(t *rapid.T, snap *cluster.Snapshot) {
	held := map[string]string{}
	for _, a := range snap.Allocs() {
		n, ok := snap.Node(a.NodeID)
		if !ok {
			t.Fatalf("alloc %s on unknown node %s", a.ID, a.NodeID)
		}
		for _, g := range a.GPUs {
			if findGPU(n, g) == nil {
				t.Fatalf("alloc %s holds unknown GPU %s", a.ID, g)
			}
			if other, dup := held[g]; dup {
				t.Fatalf("GPU %s held by %s and %s", g, other, a.ID)
			}
			held[g] = a.ID
		}
	}
	for _, j := range snap.Jobs() {
		if j.State != cluster.JobRunning {
			if n := len(snap.JobAllocs(j.ID)); n != 0 {
				t.Fatalf("queued job %s holds %d allocations: partly placed", j.ID, n)
			}
			continue
		}
		want := 0
		for _, g := range j.Groups {
			if g.GPUs > 0 {
				want += g.Count
			}
		}
		if got := len(snap.JobAllocs(j.ID)); got != want {
			t.Fatalf("running job %s has %d of %d allocations: partly placed", j.ID, got, want)
		}
	}
}

// Over random clusters and queues: no GPU is ever given twice, no gang is
// ever partly placed, nothing non-preemptible (or too young, or of a tier
// the preemptor may not preempt) is ever preempted, and a plan applied to
// its snapshot yields a valid state, cycle after cycle.
func TestPropertyPlansAreSafe(t *testing.T) {
	var admitted, preempted, reserved int
	defer func() {
		// The generator must exercise what the properties are about.
		if admitted == 0 || preempted == 0 || reserved == 0 {
			t.Errorf("weak generator: %d admissions, %d preemptions, %d reservations", admitted, preempted, reserved)
		}
		t.Logf("%d admissions, %d preemptions, %d reservations checked", admitted, preempted, reserved)
	}()
	prop := func(t *rapid.T) {
		store, pol := genWorld(t)
		e := mustEngine(t, pol)
		now := t0
		checkState(t, store.Snapshot())
		for cycle := range 4 {
			snap := store.Snapshot()
			plan := e.Decide(snap, now)
			if err := ValidatePlan(pol, snap, plan); err != nil {
				t.Fatalf("cycle %d: %v", cycle, err)
			}
			admitted += len(plan.Admissions)
			preempted += len(plan.Preemptions)
			for _, x := range plan.Explanations {
				if x.Status == StatusReserved {
					reserved++
				}
			}
			for _, p := range plan.Preemptions {
				j, _ := snap.Job(p.JobID)
				if !pol.IsPreemptible(j.Spec) {
					t.Fatalf("non-preemptible %s preempted", j.ID)
				}
				for _, a := range snap.JobAllocs(j.ID) {
					if now.Sub(a.Start) < pol.MinRuntime(j.Spec) {
						t.Fatalf("%s preempted after %s, min runtime %s", j.ID, now.Sub(a.Start), pol.MinRuntime(j.Spec))
					}
				}
			}
			for _, id := range plan.Queue {
				if plan.Explanations[id] == nil || (plan.Explanations[id].Status != StatusAdmitted && plan.Explanations[id].Reason == "") {
					t.Fatalf("job %s waits without a reason: %+v", id, plan.Explanations[id])
				}
			}
			if err := Apply(store, snap, plan, now); err != nil {
				t.Fatal(err)
			}
			checkState(t, store.Snapshot())
			now = now.Add(time.Duration(rapid.IntRange(1, 120).Draw(t, "dt")) * time.Minute)
		}
	}
	// A batch (rapid's 100 worlds) preempts 6.5 times on average, but
	// now and then not at all (1 to 16 in each of 100 batches measured): the
	// coverage check above asks for each kind of decision within at most
	// 4 batches, so chance alone does not fail it while a generator or an
	// engine that never preempts (admits, reserves) still does.
	for batch := 0; batch < 4 && (batch == 0 || admitted == 0 || preempted == 0 || reserved == 0); batch++ {
		rapid.Check(t, prop)
	}
}

// Equal input gives equal plans.
func TestPropertyDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		store, pol := genWorld(t)
		snap := store.Snapshot()
		a := mustEngine(t, pol).Decide(snap, t0)
		// A second store filled in another order must not matter either.
		other := cluster.NewStore()
		jobs, allocs, nodes := snap.Jobs(), snap.Allocs(), snap.Nodes()
		for i := len(nodes) - 1; i >= 0; i-- {
			_ = other.UpsertNode(nodes[i])
		}
		for i := len(jobs) - 1; i >= 0; i-- {
			_ = other.UpsertJob(jobs[i])
		}
		for i := len(allocs) - 1; i >= 0; i-- {
			_ = other.UpsertAlloc(allocs[i])
		}
		b := mustEngine(t, pol).Decide(other.Snapshot(), t0)
		b.SnapshotVersion = a.SnapshotVersion
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("plans differ for equal input:\n%+v\n%+v", a, b)
		}
	})
}
