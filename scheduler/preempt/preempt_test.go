package preempt

import (
	"fmt"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
)

var t0 = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

func TestWorkLost(t *testing.T) {
	allocs := []*cluster.Alloc{
		{GPUs: []string{"a", "b"}, Start: t0.Add(-3 * time.Hour)},                                       // 2 GPUs x 3h
		{GPUs: []string{"c"}, Start: t0.Add(-3 * time.Hour), LastCheckpoint: t0.Add(-30 * time.Minute)}, // 1 x 0.5h
		{GPUs: []string{"d"}, Start: t0.Add(time.Hour)},                                                 // not started yet
	}
	if got := WorkLost(allocs, 0, t0); math.Abs(got-6.5) > 1e-9 {
		t.Fatalf("WorkLost = %v, want 6.5", got)
	}
	// A job that checkpoints every 40m: the first allocation's last
	// checkpoint was at 2h40m (20m ago); the second's known checkpoint
	// (30m ago) is older than that, so 20m too.
	if got := WorkLost(allocs, 40*time.Minute, t0); math.Abs(got-3*(20.0/60)) > 1e-9 {
		t.Fatalf("WorkLost with a 40m interval = %v, want %v", got, 3*(20.0/60))
	}
}

func TestLastCheckpoint(t *testing.T) {
	start := t0.Add(-100 * time.Minute)
	cases := []struct {
		name     string
		interval time.Duration
		known    time.Time
		want     time.Time
	}{
		{"nothing known: start", 0, time.Time{}, start},
		{"interval: last multiple", 30 * time.Minute, time.Time{}, start.Add(90 * time.Minute)},
		{"interval longer than the run: start", 3 * time.Hour, time.Time{}, start},
		{"known checkpoint newer than the interval's", 30 * time.Minute, t0.Add(-5 * time.Minute), t0.Add(-5 * time.Minute)},
		{"known checkpoint older than the interval's", 30 * time.Minute, start.Add(10 * time.Minute), start.Add(90 * time.Minute)},
	}
	for _, c := range cases {
		a := &cluster.Alloc{GPUs: []string{"g"}, Start: start, LastCheckpoint: c.known}
		if got := LastCheckpoint(a, c.interval, t0); !got.Equal(c.want) {
			t.Errorf("%s: LastCheckpoint = %v, want %v", c.name, got, c.want)
		}
	}
}

// Select takes the cheapest set of whole gangs on the best node, only among
// the candidates it is given, and leaves the state untouched on failure.
func TestSelect(t *testing.T) {
	store := cluster.NewStore()
	for _, id := range []string{"n1", "n2"} {
		n := &cluster.Node{ID: id, Pool: "gpu", Eligible: true, Ready: true}
		for k := range 4 {
			n.GPUs = append(n.GPUs, cluster.GPU{ID: fmt.Sprintf("%s-%d", id, k), Healthy: true})
		}
		_ = store.UpsertNode(n)
	}
	add := func(id, node string, gpus ...int) {
		a := &cluster.Alloc{ID: id, JobID: id, NodeID: node}
		for _, g := range gpus {
			a.GPUs = append(a.GPUs, fmt.Sprintf("%s-%d", node, g))
		}
		_ = store.UpsertAlloc(a)
	}
	add("a", "n1", 0, 1) // cost 10
	add("b", "n1", 2, 3) // cost 10
	add("c", "n2", 0, 1, 2, 3)
	st := placement.New(store.Snapshot(), nil, nil)
	holder := map[string]int{}
	for h, hd := range st.Holders() {
		holder[hd.JobID] = h
	}
	req := placement.Request{Groups: []placement.Group{{Name: "g", Count: 1, GPUs: 4, Topology: jobspec.TopologyNode}}}

	// n1 costs 20 (two gangs), n2 costs 15 (one gang): n2.
	cands := []Candidate{{holder["a"], 10}, {holder["b"], 10}, {holder["c"], 15}}
	victims, res, ok := Select(st, req, cands)
	if !ok || len(victims) != 1 || st.Holders()[victims[0]].JobID != "c" {
		t.Fatalf("victims %v ok %v, want c", victims, ok)
	}
	if st.Node(res.Groups[0][0].Node).ID != "n2" {
		t.Fatalf("placed on %s, want n2", st.Node(res.Groups[0][0].Node).ID)
	}

	// Without c as a candidate, both gangs of n1 go.
	st = placement.New(store.Snapshot(), nil, nil)
	victims, _, ok = Select(st, req, []Candidate{{holder["a"], 10}, {holder["b"], 10}})
	if !ok || len(victims) != 2 {
		t.Fatalf("victims %v ok %v, want a and b", victims, ok)
	}

	// With only a as a candidate, nothing fits: failure, state unchanged.
	st = placement.New(store.Snapshot(), nil, nil)
	before := st.FreeGPUs("")
	if _, _, ok := Select(st, req, []Candidate{{holder["a"], 10}}); ok {
		t.Fatal("selected with too few candidates")
	}
	if st.FreeGPUs("") != before || st.Used(0) != 0xf {
		t.Fatal("failed Select changed the state")
	}
}

// NewIndex lists, node by node, each candidate's GPUs there (one entry a
// holder, its allocations on the node merged), with the first cost given
// for a holder named twice, only on schedulable nodes of the pool; the
// bounds and the visiting order follow. The model is the obvious build,
// a list grown per node.
func TestNewIndexListsCandidatesByNode(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		store := cluster.NewStore()
		nodes := rapid.IntRange(1, 6).Draw(t, "nodes")
		for i := range nodes {
			n := &cluster.Node{ID: fmt.Sprintf("n%d", i), Pool: rapid.SampledFrom([]string{"a", "b"}).Draw(t, "pool"),
				Eligible: rapid.IntRange(0, 5).Draw(t, "eligible") > 0, Ready: true}
			for k := range 8 {
				n.GPUs = append(n.GPUs, cluster.GPU{ID: fmt.Sprintf("n%d-%d", i, k), Healthy: true})
			}
			_ = store.UpsertNode(n)
		}
		next := make([]int, nodes) // next free GPU per node
		for j := range rapid.IntRange(1, 8).Draw(t, "jobs") {
			for a := range rapid.IntRange(1, 3).Draw(t, "allocs") {
				node := rapid.IntRange(0, nodes-1).Draw(t, "node")
				g := rapid.IntRange(1, 3).Draw(t, "gpus")
				if next[node]+g > 8 {
					continue
				}
				al := &cluster.Alloc{ID: fmt.Sprintf("j%d-%d", j, a), JobID: fmt.Sprintf("j%d", j), NodeID: fmt.Sprintf("n%d", node)}
				for range g {
					al.GPUs = append(al.GPUs, fmt.Sprintf("n%d-%d", node, next[node]))
					next[node]++
				}
				_ = store.UpsertAlloc(al)
			}
		}
		st := placement.New(store.Snapshot(), nil, nil)
		if len(st.Holders()) == 0 {
			return
		}
		var cands []Candidate
		for range rapid.IntRange(0, 10).Draw(t, "cands") {
			cands = append(cands, Candidate{Holder: rapid.IntRange(0, len(st.Holders())-1).Draw(t, "holder"),
				Cost: float64(rapid.IntRange(1, 5).Draw(t, "cost"))})
		}
		pool := rapid.SampledFrom([]string{"", "a", "b"}).Draw(t, "in pool")
		got := NewIndex(st, pool, cands)

		// The model.
		holders := st.Holders()
		cost := make([]float64, len(holders))
		byNode := make([][]onNode, st.NumNodes())
		seen := map[int]bool{}
		for _, c := range cands {
			if seen[c.Holder] {
				continue
			}
			seen[c.Holder] = true
			cost[c.Holder] = c.Cost
			for _, sl := range holders[c.Holder].Slots {
				if !st.Schedulable(sl.Node) || (pool != "" && st.PoolOf(sl.Node) != pool) {
					continue
				}
				l := byNode[sl.Node]
				if len(l) > 0 && l[len(l)-1].h == c.Holder {
					l[len(l)-1].mask |= sl.Mask
					continue
				}
				byNode[sl.Node] = append(l, onNode{h: c.Holder, mask: sl.Mask})
			}
		}
		if fmt.Sprint(got.cost) != fmt.Sprint(cost) {
			t.Fatalf("costs %v, want %v", got.cost, cost)
		}
		var want []int
		for ord := range byNode {
			if fmt.Sprint(got.byNode[ord]) != fmt.Sprint(byNode[ord]) {
				t.Fatalf("node %d: %v, want %v", ord, got.byNode[ord], byNode[ord])
			}
			if len(byNode[ord]) > 0 {
				want = append(want, ord)
				minCost, union := cost[byNode[ord][0].h], uint64(0)
				for _, c := range byNode[ord] {
					minCost, union = math.Min(minCost, cost[c.h]), union|c.mask
				}
				if got.minCost[ord] != minCost || got.union[ord] != union {
					t.Fatalf("node %d: bounds %v %b, want %v %b", ord, got.minCost[ord], got.union[ord], minCost, union)
				}
			}
		}
		if fmt.Sprint(got.nodes) != fmt.Sprint(want) {
			t.Fatalf("nodes %v, want %v", got.nodes, want)
		}
		for i := 1; i < len(got.byCost); i++ {
			a, b := got.byCost[i-1], got.byCost[i]
			if got.minCost[a] > got.minCost[b] || (got.minCost[a] == got.minCost[b] && a > b) {
				t.Fatalf("byCost %v out of order", got.byCost)
			}
		}
		if len(got.byCost) != len(want) {
			t.Fatalf("byCost %v, nodes %v", got.byCost, want)
		}
	})
}
