package engine

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

const defragOn = `defragment { enabled = true }`

// A normal 8-GPU job beside a node with 7 free GPUs whose 8th holds a
// normal 1-GPU job (which normal may not preempt) moves that job to a GPU
// free elsewhere when the policy's defragment block is on, and waits with
// a reservation when it is off. Each case fails without the mechanism or
// one of its bounds.
func TestDefragmentMovesSmallJobOutOfTheWay(t *testing.T) {
	h := func(d float64) time.Time { return t0.Add(-time.Duration(d * float64(time.Hour))) }
	normal := func(id string, opts ...jobOpt) *cluster.Job {
		return mkJob(id, append([]jobOpt{running(), meta("impact_tier", "normal", "impact_grace", "1m")}, opts...)...)
	}
	high := func(id string, gpus int) *cluster.Job {
		return mkJob(id, running(), group("main", 1, gpus), meta("impact_tier", "high"))
	}
	big := mkJob("big", group("main", 1, 8), meta("impact_tier", "normal"))
	cases := []struct {
		name   string
		pol    string
		jobs   []*cluster.Job
		allocs []*cluster.Alloc
		// wantMoved: the victim moved ("" none); wantTo: the node it moves to.
		wantMoved, wantTo string
		// wantReason: a substring of big's reason.
		wantReason string
	}{
		{
			name:       "moved: restarts on the free GPUs of n2",
			pol:        defragOn,
			jobs:       []*cluster.Job{normal("v"), high("h", 4), big},
			allocs:     []*cluster.Alloc{withCheckpoint(alloc("va", "v", "n1", h(2), 7), h(0.02)), alloc("ha", "h", "n2", h(2), 0, 1, 2, 3)},
			wantMoved:  "v",
			wantTo:     "n2",
			wantReason: "defragmenting: the pool has GPUs enough but not where it could use them, so 1 small job(s) move out of its way and restart at once elsewhere: v to n2",
		},
		{
			name:       "off: the job waits with a reservation",
			pol:        ``,
			jobs:       []*cluster.Job{normal("v"), high("h", 4), big},
			allocs:     []*cluster.Alloc{withCheckpoint(alloc("va", "v", "n1", h(2), 7), h(0.02)), alloc("ha", "h", "n2", h(2), 0, 1, 2, 3)},
			wantReason: "GPUs reserved",
		},
		{
			name:   "not moved: nowhere to restart it (an NVLink pair, and n2's free GPUs sit in two islands)",
			pol:    defragOn,
			jobs:   []*cluster.Job{normal("v", group("main", 1, 2), meta("impact_tier", "normal", "impact_topology", "nvlink")), high("h", 6), big},
			allocs: []*cluster.Alloc{withCheckpoint(alloc("va", "v", "n1", h(2), 6, 7), h(0.02)), alloc("ha", "h", "n2", h(2), 0, 1, 2, 5, 6, 7)},
		},
		{
			name:   "not moved: larger than max_victim_gpus",
			pol:    "defragment {\n  enabled = true\n  max_victim_gpus = 1\n}",
			jobs:   []*cluster.Job{normal("v", group("main", 1, 2)), high("h", 4), big},
			allocs: []*cluster.Alloc{withCheckpoint(alloc("va", "v", "n1", h(2), 6, 7), h(0.02)), alloc("ha", "h", "n2", h(2), 0, 1, 2, 3)},
		},
		{
			name:   "not moved: younger than the minimum runtime",
			pol:    defragOn,
			jobs:   []*cluster.Job{normal("v"), high("h", 4), big},
			allocs: []*cluster.Alloc{alloc("va", "v", "n1", t0.Add(-5*time.Minute), 7), alloc("ha", "h", "n2", h(2), 0, 1, 2, 3)},
		},
		{
			name:   "not moved: non-preemptible",
			pol:    defragOn,
			jobs:   []*cluster.Job{high("v", 1), high("h", 4), big},
			allocs: []*cluster.Alloc{alloc("va", "v", "n1", h(2), 7), alloc("ha", "h", "n2", h(2), 0, 1, 2, 3)},
		},
		{
			// gain 100 x 8 x 1h = 800 < cost 100 x (10h lost + 5m restart)
			name:       "not moved: the work it would lose costs more than the gain",
			pol:        defragOn,
			jobs:       []*cluster.Job{normal("v"), high("h", 4), big},
			allocs:     []*cluster.Alloc{alloc("va", "v", "n1", h(10), 7), alloc("ha", "h", "n2", h(2), 0, 1, 2, 3)},
			wantReason: "moving small jobs out of its way would cost at least 1008.3, more than its gain 800.0",
		},
		{
			// The same move pays over the block's own 2h horizon (1600).
			name:      "moved: the block's gain_horizon values the gain",
			pol:       "defragment {\n  enabled = true\n  gain_horizon = \"2h\"\n}",
			jobs:      []*cluster.Job{normal("v"), high("h", 4), big},
			allocs:    []*cluster.Alloc{alloc("va", "v", "n1", h(10), 7), alloc("ha", "h", "n2", h(2), 0, 1, 2, 3)},
			wantMoved: "v",
			wantTo:    "n2",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol := mustPolicy(t, tc.pol)
			e := mustEngine(t, pol)
			nodes := []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)}
			snap := mustSnap(t, nodes, tc.jobs, tc.allocs)
			plan := e.Decide(snap, t0)
			if err := ValidatePlan(pol, snap, plan); err != nil {
				t.Fatalf("invalid plan: %v", err)
			}
			exp := plan.Explanations["big"]
			if got := join(preemptedIDs(plan)); got != tc.wantMoved {
				t.Fatalf("preempted %q, want %q; big: %+v", got, tc.wantMoved, exp)
			}
			if len(plan.Admissions) != 0 {
				t.Fatalf("admitted %v, want none", admittedIDs(plan))
			}
			if tc.wantReason != "" && !strings.Contains(exp.Reason, tc.wantReason) {
				t.Fatalf("big's reason %q, want it to contain %q", exp.Reason, tc.wantReason)
			}
			if tc.wantMoved == "" {
				if exp.Status == StatusPreempting {
					t.Fatalf("big is preempting with nothing preempted: %+v", exp)
				}
				return
			}
			if exp.Status != StatusPreempting || join(exp.Victims) != tc.wantMoved {
				t.Fatalf("big: status %s victims %v, want preempting %s", exp.Status, exp.Victims, tc.wantMoved)
			}
			p := plan.Preemptions[0]
			if len(p.MovedTo) != 1 || p.MovedTo[0].NodeID != tc.wantTo || p.Preemptor != "big" {
				t.Fatalf("preemption %+v, want the victim moved to %s for big", p, tc.wantTo)
			}
			if !strings.Contains(p.Reason, "moved out of the way of big") || !strings.Contains(p.Reason, "restarts at once on "+tc.wantTo) {
				t.Fatalf("victim's reason %q", p.Reason)
			}
		})
	}
}

// Follow-through: while the moved job stops, neither its new GPUs nor the
// mover's are given to anyone; once it stopped and is queued again, the
// mover starts on the node it cleared and the moved job restarts on the
// GPUs bound to it, ahead of a heavier job that would have taken them.
func TestDefragmentFollowThrough(t *testing.T) {
	for _, newLeader := range []bool{false, true} {
		t.Run(map[bool]string{false: "same engine", true: "new leader"}[newLeader], func(t *testing.T) {
			defragmentFollowThrough(t, newLeader)
		})
	}
}

// handOver is a new leader's engine after the first plan: it knows only
// what the executor's intents say of the preemptions under way
// (Engine.Preempting), nothing of the old engine's memory.
func handOver(t *testing.T, pol *policy.Policy, p *Plan, at time.Time) *Engine {
	t.Helper()
	e := mustEngine(t, pol)
	for _, pr := range p.Preemptions {
		e.Preempting(pr, at)
	}
	return e
}

// defragmentFollowThrough: big moves v off n1; while v stops a heavier
// rival gets neither big's nor v's GPUs; once v is queued again it
// restarts on the GPUs it was moved to and big starts on n1. With
// newLeader the cycles after the first are a new leader's.
func defragmentFollowThrough(t *testing.T, newLeader bool) {
	store := moveWorld(t, 4)

	pol := mustPolicy(t, defragOn)
	e := mustEngine(t, pol)
	decide := func(at time.Time) *Plan {
		t.Helper()
		p, _ := decideValid(t, e, pol, store, at)
		return p
	}
	p1 := decide(t0)
	if got := join(preemptedIDs(p1)); got != "v" {
		t.Fatalf("first cycle preempted %q, want v", got)
	}
	to := p1.Preemptions[0].MovedTo[0]
	if newLeader {
		e = handOver(t, pol, p1, t0.Add(10*time.Second))
	}

	// v is still stopping; a heavier 4-GPU job arrives: n2's four free
	// GPUs would fit it, but one of them is v's and n1's are big's.
	mustDo(t, store.UpsertJob(mkJob("rival", group("main", 1, 4), meta("impact_tier", "high"))))
	p2 := decide(t0.Add(30 * time.Second))
	if len(p2.Admissions) != 0 || len(p2.Preemptions) != 0 {
		t.Fatalf("while v stops: admitted %v preempted %v, want nothing", admittedIDs(p2), preemptedIDs(p2))
	}

	// v stopped and is queued again.
	store.DeleteAlloc("va")
	mustDo(t, store.UpsertJob(mkJob("v", meta("impact_tier", "normal", "impact_grace", "1m"))))
	p3 := decide(t0.Add(2 * time.Minute))
	a := admission(p3, "big")
	if a == nil || join(nodesOf(a)) != "n1" {
		t.Fatalf("big not admitted on n1: %+v; %+v", a, p3.Explanations["big"])
	}
	av := admission(p3, "v")
	if av == nil || av.Groups[0].Allocs[0].NodeID != to.NodeID || join(av.Groups[0].Allocs[0].GPUs) != join(to.GPUs) {
		t.Fatalf("v admitted as %+v, want on its bound GPUs %+v; %+v", av, to, p3.Explanations["v"])
	}
	if admission(p3, "rival") != nil {
		t.Fatalf("rival admitted onto GPUs bound to big or v")
	}
}

// A mover whose tier may preempt no one (scavenger) waits for the job it
// moved to stop, as a preemptor waits for its victims: the next cycle
// does not move a second job for it (here v3, off n3, which would also
// clear a node for it).
func TestDefragmentMoverWaitsForItsVictim(t *testing.T) {
	for _, newLeader := range []bool{false, true} {
		t.Run(map[bool]string{false: "same engine", true: "new leader"}[newLeader], func(t *testing.T) {
			defragmentMoverWaits(t, newLeader)
		})
	}
}

// defragmentMoverWaits is TestDefragmentMoverWaitsForItsVictim, the
// cycles after the first a new leader's with newLeader.
func defragmentMoverWaits(t *testing.T, newLeader bool) {
	store := cluster.NewStore()
	for _, n := range []string{"n1", "n2", "n3"} {
		mustDo(t, store.UpsertNode(mkNode(n, 8, 2)))
	}
	for _, id := range []string{"v1", "v3"} {
		mustDo(t, store.UpsertJob(mkJob(id, running(), meta("impact_tier", "scavenger", "impact_grace", "1m"))))
	}
	mustDo(t, store.UpsertJob(mkJob("h", running(), group("main", 1, 4), meta("impact_tier", "high"))))
	mustDo(t, store.UpsertAlloc(withCheckpoint(alloc("v1a", "v1", "n1", t0.Add(-2*time.Hour), 7), t0.Add(-time.Minute))))
	mustDo(t, store.UpsertAlloc(withCheckpoint(alloc("v3a", "v3", "n3", t0.Add(-2*time.Hour), 7), t0.Add(-2*time.Minute))))
	mustDo(t, store.UpsertAlloc(alloc("ha", "h", "n2", t0.Add(-2*time.Hour), 0, 1, 2, 3)))
	mustDo(t, store.UpsertJob(mkJob("big", group("main", 1, 8), meta("impact_tier", "scavenger"))))

	pol := mustPolicy(t, defragOn)
	e := mustEngine(t, pol)
	p1 := e.Decide(store.Snapshot(), t0)
	if got := join(preemptedIDs(p1)); got != "v1" {
		t.Fatalf("first cycle moved %q, want v1 (the cheaper)", got)
	}
	if newLeader {
		e = handOver(t, pol, p1, t0.Add(10*time.Second))
	}
	// v1 is stopping (the adapter marked its allocation).
	a, _ := store.Snapshot().Alloc("v1a")
	cp := *a
	cp.Stopping = true
	mustDo(t, store.UpsertAlloc(&cp))
	snap := store.Snapshot()
	p2 := e.Decide(snap, t0.Add(30*time.Second))
	if err := ValidatePlan(pol, snap, p2); err != nil {
		t.Fatal(err)
	}
	if len(p2.Preemptions) != 0 || len(p2.Admissions) != 0 {
		t.Fatalf("while v1 stops: moved %v, admitted %v; want big to wait for v1 (%+v)", preemptedIDs(p2), admittedIDs(p2), p2.Explanations["big"])
	}
	// Explained as the move still under way (the deciding cycle's
	// explanation would otherwise last one cycle of its grace).
	const want = "defragmenting: waiting for the 1 small job(s) moved out of its way to stop; they restart at once elsewhere: v1 to n2 (n2-g4)"
	if exp := p2.Explanations["big"]; exp.Status != StatusPreempting || exp.Reason != want || !slices.Equal(exp.Victims, []string{"v1"}) {
		t.Fatalf("big: %+v, want preempting, %q, victims [v1]", exp, want)
	}
}

// A defragmenting move's room is its mover's: big moves v off n1 (to the
// one free GPU of n2); rival, a high-tier job of one GPU arriving while v
// stops, would fit on v's GPU once v is gone, but v is moved for big, so
// rival neither claims it nor keeps big from starting on n1 whole.
func TestDefragmentRoomNotClaimed(t *testing.T) {
	store := moveWorld(t, 7)
	pol := mustPolicy(t, defragOn)
	e := mustEngine(t, pol)
	p1 := e.Decide(store.Snapshot(), t0)
	if got := join(preemptedIDs(p1)); got != "v" || p1.Preemptions[0].MovedTo[0].NodeID != "n2" {
		t.Fatalf("first cycle: %+v, want v moved to n2", p1.Preemptions)
	}
	mustDo(t, store.UpsertJob(mkJob("rival", group("main", 1, 1), meta("impact_tier", "high"))))
	p2 := e.Decide(store.Snapshot(), t0.Add(30*time.Second))
	if exp := p2.Explanations["rival"]; exp.Status == StatusPreempting || slices.Contains(exp.Victims, "v") {
		t.Fatalf("rival claims the move's room: %+v", exp)
	}
	store.DeleteAlloc("va")
	mustDo(t, store.UpsertJob(mkJob("v", meta("impact_tier", "normal", "impact_grace", "1m"))))
	p3 := e.Decide(store.Snapshot(), t0.Add(2*time.Minute))
	if a := admission(p3, "big"); a == nil || join(nodesOf(a)) != "n1" {
		t.Fatalf("big not admitted on n1: %+v; %+v", a, p3.Explanations["big"])
	}
	if admission(p3, "rival") != nil {
		t.Errorf("rival admitted: %+v", p3.Admissions)
	}
}

// moveWorld: on n1 a normal 1-GPU job v (GPU 7, checkpointed a minute
// ago) beside 7 free GPUs, on n2 a high job h on its first hGPUs GPUs,
// and big, a normal 8-GPU job, waiting: it fits no node and may not
// preempt v, so a defragment block moves v to n2.
func moveWorld(t *testing.T, hGPUs int) *cluster.Store {
	t.Helper()
	store := cluster.NewStore()
	mustDo(t, store.UpsertNode(mkNode("n1", 8, 2)))
	mustDo(t, store.UpsertNode(mkNode("n2", 8, 2)))
	mustDo(t, store.UpsertJob(mkJob("v", running(), meta("impact_tier", "normal", "impact_grace", "1m"))))
	mustDo(t, store.UpsertJob(mkJob("h", running(), group("main", 1, hGPUs), meta("impact_tier", "high"))))
	mustDo(t, store.UpsertAlloc(withCheckpoint(alloc("va", "v", "n1", t0.Add(-2*time.Hour), 7), t0.Add(-time.Minute))))
	idx := make([]int, hGPUs)
	for i := range idx {
		idx[i] = i
	}
	mustDo(t, store.UpsertAlloc(alloc("ha", "h", "n2", t0.Add(-2*time.Hour), idx...)))
	mustDo(t, store.UpsertJob(mkJob("big", group("main", 1, 8), meta("impact_tier", "normal"))))
	return store
}

// Moves come last: the free GPUs a move would restart its victim on go
// first to a job behind the mover that fits on them, and the mover then
// moves nothing; without that job the same move is made.
func TestDefragmentMovesOnlyWhatNoJobBehindUses(t *testing.T) {
	h := func(d float64) time.Time { return t0.Add(-time.Duration(d * float64(time.Hour))) }
	v := mkJob("v", running(), meta("impact_tier", "normal", "impact_grace", "1m"))
	hj := mkJob("h", running(), group("main", 1, 4), meta("impact_tier", "high"))
	big := mkJob("big", group("main", 1, 8), meta("impact_tier", "normal"), submitted(h(3)))
	behind := mkJob("behind", group("main", 1, 4), meta("impact_tier", "normal"), submitted(h(1)))
	allocs := []*cluster.Alloc{withCheckpoint(alloc("va", "v", "n1", h(2), 7), h(0.02)), alloc("ha", "h", "n2", h(2), 0, 1, 2, 3)}
	nodes := []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)}
	pol := mustPolicy(t, defragOn)
	for _, tc := range []struct {
		name                 string
		jobs                 []*cluster.Job
		wantMoved, wantAdmit string
	}{
		{"a job behind fits the free GPUs", []*cluster.Job{v, hj, big, behind}, "", "behind"},
		{"nothing behind", []*cluster.Job{v, hj, big}, "v", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := mustSnap(t, nodes, tc.jobs, allocs)
			plan := mustEngine(t, pol).Decide(snap, t0)
			if err := ValidatePlan(pol, snap, plan); err != nil {
				t.Fatal(err)
			}
			if got := join(preemptedIDs(plan)); got != tc.wantMoved {
				t.Fatalf("moved %q, want %q; big: %+v", got, tc.wantMoved, plan.Explanations["big"])
			}
			if got := join(admittedIDs(plan)); got != tc.wantAdmit {
				t.Fatalf("admitted %q, want %q", got, tc.wantAdmit)
			}
		})
	}
}
