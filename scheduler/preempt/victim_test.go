package preempt

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// Running: past its min runtime a gang is a victim at impact x (work lost
// + restart); within it, a young victim at the same cost.
func TestRunningVictim(t *testing.T) {
	spec := &jobspec.Spec{Grace: 30 * time.Second}
	g := Gang{
		Allocs: []*cluster.Alloc{{GPUs: []string{"a", "b"}, Start: t0.Add(-2 * time.Hour)}},
		GPUs:   2, Start: t0.Add(-2 * time.Hour), Tier: "normal", Impact: 3, Spec: spec,
	}
	v := Running(g, t0, time.Hour, 30*time.Minute)
	if !v.OK || v.Young || v.Tier != "normal" || v.Grace != 30*time.Second {
		t.Fatalf("past min runtime: %+v", v)
	}
	// 2 GPUs x 2h lost, 2 GPUs x 0.5h restart, impact 3.
	if math.Abs(v.Lost-4) > 1e-9 || math.Abs(v.Cost-3*(4+1)) > 1e-9 {
		t.Fatalf("lost %v cost %v, want 4 and 15", v.Lost, v.Cost)
	}
	v = Running(g, t0, 3*time.Hour, 30*time.Minute)
	if v.OK || !v.Young || v.Tier != "normal" || v.Cost != 15 || !v.Grown.Equal(t0.Add(time.Hour)) {
		t.Fatalf("young: %+v, want a young victim at cost 15, grown an hour from now", v)
	}
}

// Idle: the work lost counts up to going idle; the victim is OK at any
// runtime and carries its idleness.
func TestIdleVictim(t *testing.T) {
	g := Gang{
		Allocs: []*cluster.Alloc{{GPUs: []string{"a"}, Start: t0.Add(-3 * time.Hour)}},
		GPUs:   1, Tier: "normal", Impact: 2, Spec: &jobspec.Spec{},
	}
	iv := &IdleVictim{Since: t0.Add(-time.Hour), Note: "idle"}
	v := Idle(g, 5, 0, iv)
	if !v.OK || !v.Idle || v.Weight != 5 || v.IdleVictim != iv {
		t.Fatalf("idle victim %+v", v)
	}
	if math.Abs(v.Lost-2) > 1e-9 || math.Abs(v.Cost-4) > 1e-9 {
		t.Fatalf("lost %v cost %v, want 2 (up to going idle) and 4", v.Lost, v.Cost)
	}
}

func TestMayTakeAndMovable(t *testing.T) {
	high := &policy.Tier{Name: "high", Weight: 10, MayPreempt: []string{"low"}}
	low := &policy.Tier{Name: "low", Weight: 1}
	busyLow := &Victim{OK: true, Tier: "low"}
	idleHigh := &Victim{OK: true, Idle: true, Tier: "high", Weight: 10}
	cases := []struct {
		name string
		by   *policy.Tier
		v    *Victim
		want bool
	}{
		{"may_preempt names its tier", high, busyLow, true},
		{"no tier", nil, busyLow, false},
		{"a tier that names none", low, busyLow, false},
		{"idle, by a tier as heavy", high, idleHigh, true},
		{"idle, by a lighter tier", low, idleHigh, false},
	}
	for _, c := range cases {
		if got := MayTake(c.by, c.v); got != c.want {
			t.Errorf("%s: MayTake = %v, want %v", c.name, got, c.want)
		}
	}
	if !busyLow.Movable(1, 2, 2) || busyLow.Movable(2, 2, 2) || busyLow.Movable(1, 3, 2) ||
		idleHigh.Movable(1, 1, 2) || (&Victim{Young: true}).Movable(1, 1, 2) {
		t.Fatal("Movable: one allocation of at most max GPUs, past min runtime, not idle")
	}
}

// Search makes the victims minimal: a 2x4 preemptor on two 4-GPU nodes
// whose cheapest first pick is a useless 1-GPU gang keeps only the gangs
// it needs, and leaves the state as it was.
func TestSearchMinimal(t *testing.T) {
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
	add("small", "n1", 0)
	add("big", "n1", 1, 2, 3)
	add("whole", "n2", 0, 1, 2, 3)
	st := placement.New(store.Snapshot(), nil, nil)
	holder := map[string]int{}
	for h, hd := range st.Holders() {
		holder[hd.JobID] = h
	}
	victims := make([]Victim, len(st.Holders()))
	victims[holder["small"]] = Victim{OK: true, Cost: 1}
	victims[holder["big"]] = Victim{OK: true, Cost: 3}
	victims[holder["whole"]] = Victim{OK: true, Cost: 4}
	var cands []Candidate
	for h, v := range victims {
		cands = append(cands, Candidate{Holder: h, Cost: v.Cost})
	}
	req := placement.Request{Groups: []placement.Group{{Name: "g", Count: 1, GPUs: 4, Topology: jobspec.TopologyNode}}}
	free := st.FreeGPUs("")
	hs, res, ok := Search(st, NewIndex(st, "", cands), req, victims)
	if !ok || len(hs) == 0 {
		t.Fatalf("no victims found")
	}
	if st.FreeGPUs("") != free {
		t.Fatal("Search changed the state")
	}
	// n1 (small + big, cost 4) ties n2 (whole, cost 4) on cost; either
	// way no victim may be spared: each one's GPUs are used.
	if used := Uses(st, res, hs); len(used) != len(hs) {
		t.Fatalf("victims %v, of which the placement uses only %v", hs, used)
	}
	if !PlacesOnReleased(st, req, hs) {
		t.Fatal("the preemptor does not place on what its victims free")
	}
	for _, h := range hs {
		rest := []int{}
		for _, o := range hs {
			if o != h {
				rest = append(rest, o)
			}
		}
		if PlacesOnReleased(st, req, rest) {
			t.Fatalf("victim %s could be spared: not minimal", st.Holders()[h].JobID)
		}
	}
}

// Minimal spares a victim whose GPUs the preemptor no longer needs once
// a costlier one is released.
func TestMinimalSpares(t *testing.T) {
	store := cluster.NewStore()
	n := &cluster.Node{ID: "n1", Pool: "gpu", Eligible: true, Ready: true}
	for k := range 8 {
		n.GPUs = append(n.GPUs, cluster.GPU{ID: fmt.Sprintf("n1-%d", k), Healthy: true})
	}
	_ = store.UpsertNode(n)
	_ = store.UpsertAlloc(&cluster.Alloc{ID: "cheap", JobID: "cheap", NodeID: "n1", GPUs: []string{"n1-0"}})
	_ = store.UpsertAlloc(&cluster.Alloc{ID: "dear", JobID: "dear", NodeID: "n1", GPUs: []string{"n1-1", "n1-2", "n1-3", "n1-4"}})
	st := placement.New(store.Snapshot(), nil, nil)
	holder := map[string]int{}
	for h, hd := range st.Holders() {
		holder[hd.JobID] = h
	}
	victims := make([]Victim, len(st.Holders()))
	victims[holder["cheap"]] = Victim{OK: true, Cost: 1}
	victims[holder["dear"]] = Victim{OK: true, Cost: 5}
	req := placement.Request{Groups: []placement.Group{{Name: "g", Count: 1, GPUs: 7, Topology: jobspec.TopologyNode}}}
	// The search took both (cheapest first); 3 free + 4 of dear's is 7.
	both := []int{holder["cheap"], holder["dear"]}
	kept, res := Minimal(st, req, both, placement.Result{}, victims)
	if len(kept) != 1 || kept[0] != holder["dear"] {
		t.Fatalf("kept %v, want only dear", kept)
	}
	if len(res.Groups) != 1 {
		t.Fatalf("no placement of the preemptor: %+v", res)
	}
	if st.FreeGPUs("") != 3 {
		t.Fatalf("Minimal changed the state: %d free", st.FreeGPUs(""))
	}
}
