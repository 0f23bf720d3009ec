package preempt

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
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
	req := placement.Request{Groups: []placement.Group{{Name: "g", Count: 1, GPUs: 4, Topology: policy.TopologyNode}}}

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
