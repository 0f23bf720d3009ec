package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

func withCheckpoint(a *cluster.Alloc, at time.Time) *cluster.Alloc { a.LastCheckpoint = at; return a }

// stopping marks a told to stop.
func stopping(a *cluster.Alloc) *cluster.Alloc { a.Stopping = true; return a }

func withGroup(a *cluster.Alloc, g string) *cluster.Alloc { a.Group = g; return a }

// Preemption picks the cheapest whole gangs, and never a non-preemptible,
// too-young or wrong-tier job.
func TestPreemptionChoosesCheapestWholeGangs(t *testing.T) {
	h := func(d float64) time.Time { return t0.Add(-time.Duration(d * float64(time.Hour))) }
	scav := func(id string, opts ...jobOpt) *cluster.Job {
		return mkJob(id, append([]jobOpt{running(), meta("impact_tier", "scavenger", "impact_grace", "2m", "impact_checkpoint_signal", "SIGUSR1")}, opts...)...)
	}
	crit := func(gpus int, extra ...string) *cluster.Job {
		return mkJob("c", group("main", 1, gpus), meta(append([]string{"impact_tier", "critical"}, extra...)...))
	}
	cases := []struct {
		name       string
		pol        *policy.Policy
		nodes      []*cluster.Node
		jobs       []*cluster.Job
		allocs     []*cluster.Alloc
		want       string // preempted job IDs, sorted, comma-separated
		wantReason string // substring of the preemptor's reason when nothing is preempted
		// substring of each victim's preemption reason (what its work
		// lost is counted from)
		wantVictimReason string
	}{
		{
			name:  "cheapest: the gang that checkpointed recently",
			nodes: []*cluster.Node{mkNode("n1", 8, 2)},
			jobs:  []*cluster.Job{scav("s1"), scav("s2"), crit(4)},
			allocs: []*cluster.Alloc{
				withCheckpoint(alloc("a1", "s1", "n1", h(2), 0, 1, 2, 3), h(0.25)),
				alloc("a2", "s2", "n1", h(2), 4, 5, 6, 7)},
			want:             "s1",
			wantVictimReason: "counted from its last checkpoint",
		},
		{
			name:  "cheapest: the gang whose impact_checkpoint_interval says it saved its work lately",
			nodes: []*cluster.Node{mkNode("n1", 8, 2)},
			jobs:  []*cluster.Job{scav("s1"), scav("s2", meta("impact_checkpoint_interval", "25m")), crit(4)},
			allocs: []*cluster.Alloc{
				alloc("a1", "s1", "n1", h(1), 0, 1, 2, 3),  // nothing known: 1h lost
				alloc("a2", "s2", "n1", h(1), 4, 5, 6, 7)}, // checkpoints at +25m, +50m: 10m lost
			want:             "s2",
			wantVictimReason: "0.67 GPU-hours of its work lost, counted from its last expected checkpoint (impact_checkpoint_interval 25m0s)",
		},
		{
			name:  "never the non-preemptible job, even when cheaper",
			nodes: []*cluster.Node{mkNode("n1", 8, 2)},
			jobs:  []*cluster.Job{scav("s1", meta("impact_preemptible", "false")), scav("s2"), crit(4)},
			allocs: []*cluster.Alloc{
				withCheckpoint(alloc("a1", "s1", "n1", h(2), 0, 1, 2, 3), h(0.1)),
				alloc("a2", "s2", "n1", h(5), 4, 5, 6, 7)},
			want:             "s2",
			wantVictimReason: "counted from its start (no checkpoint known",
		},
		{
			name:  "never a job younger than the policy's min runtime",
			nodes: []*cluster.Node{mkNode("n1", 8, 2)},
			jobs:  []*cluster.Job{scav("s1"), scav("s2"), crit(4)},
			allocs: []*cluster.Alloc{
				alloc("a1", "s1", "n1", t0.Add(-5*time.Minute), 0, 1, 2, 3),
				alloc("a2", "s2", "n1", h(5), 4, 5, 6, 7)},
			want: "s2",
		},
		{
			name:  "never a job younger than its own impact_min_runtime",
			nodes: []*cluster.Node{mkNode("n1", 8, 2)},
			jobs:  []*cluster.Job{scav("s1", meta("impact_min_runtime", "3h")), scav("s2"), crit(4)},
			allocs: []*cluster.Alloc{
				withCheckpoint(alloc("a1", "s1", "n1", h(2), 0, 1, 2, 3), h(0.1)),
				alloc("a2", "s2", "n1", h(5), 4, 5, 6, 7)},
			want: "s2",
		},
		{
			name:  "only protected jobs: nothing is preempted",
			nodes: []*cluster.Node{mkNode("n1", 8, 2)},
			jobs: []*cluster.Job{scav("s1", meta("impact_preemptible", "false")),
				scav("s2", meta("impact_min_runtime", "24h")), crit(4)},
			allocs: []*cluster.Alloc{
				alloc("a1", "s1", "n1", h(2), 0, 1, 2, 3),
				alloc("a2", "s2", "n1", h(5), 4, 5, 6, 7)},
			want: "",
		},
		{
			name:  "a gang is preempted whole, on every node",
			nodes: []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)},
			jobs:  []*cluster.Job{scav("g", group("w", 2, 8)), crit(4)},
			allocs: []*cluster.Alloc{
				withGroup(alloc("g1", "g", "n1", h(1), 0, 1, 2, 3, 4, 5, 6, 7), "w"),
				withGroup(alloc("g2", "g", "n2", h(1), 0, 1, 2, 3, 4, 5, 6, 7), "w")},
			want: "g",
		},
		{
			name:  "one big gang rather than many small ones when cheaper",
			nodes: []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)},
			jobs: []*cluster.Job{scav("big", group("w", 1, 8)), scav("a"), scav("b"), scav("c"), scav("d"),
				scav("e"), scav("f"), scav("g"), scav("h"), crit(8)},
			allocs: []*cluster.Alloc{
				withCheckpoint(alloc("x", "big", "n1", h(3), 0, 1, 2, 3, 4, 5, 6, 7), h(0.1)),
				alloc("a1", "a", "n2", h(3), 0), alloc("b1", "b", "n2", h(3), 1), alloc("c1", "c", "n2", h(3), 2),
				alloc("d1", "d", "n2", h(3), 3), alloc("e1", "e", "n2", h(3), 4), alloc("f1", "f", "n2", h(3), 5),
				alloc("g1", "g", "n2", h(3), 6), alloc("h1", "h", "n2", h(3), 7)},
			want: "big",
		},
		{
			name:  "tier rules: normal may not preempt normal",
			nodes: []*cluster.Node{mkNode("n1", 8, 2)},
			jobs: []*cluster.Job{mkJob("n", running(), meta("impact_tier", "normal", "impact_preemptible", "true")),
				mkJob("c", group("main", 1, 4), meta("impact_tier", "normal"))},
			allocs: []*cluster.Alloc{alloc("a1", "n", "n1", h(5), 0, 1, 2, 3, 4, 5, 6, 7)},
			want:   "",
		},
		{
			name:  "gain must exceed cost",
			nodes: []*cluster.Node{mkNode("n1", 8, 2)},
			jobs: []*cluster.Job{scav("s1"),
				mkJob("c", group("main", 1, 1), meta("impact_tier", "normal"))},
			allocs:     []*cluster.Alloc{alloc("a1", "s1", "n1", h(100), 0, 1, 2, 3, 4, 5, 6, 7)},
			want:       "",
			wantReason: "more than its gain",
		},
		{
			name:       "limit on GPU-hours lost per hour",
			pol:        mustPolicy(t, `preemption { max_gpu_hours_lost_per_hour = 2 }`),
			nodes:      []*cluster.Node{mkNode("n1", 8, 2)},
			jobs:       []*cluster.Job{scav("s1"), crit(8)},
			allocs:     []*cluster.Alloc{alloc("a1", "s1", "n1", h(1), 0, 1, 2, 3, 4, 5, 6, 7)},
			want:       "",
			wantReason: "preemption limit",
		},
		{
			name:   "preemption disabled",
			pol:    mustPolicy(t, `preemption { enabled = false }`),
			nodes:  []*cluster.Node{mkNode("n1", 8, 2)},
			jobs:   []*cluster.Job{scav("s1"), crit(8)},
			allocs: []*cluster.Alloc{alloc("a1", "s1", "n1", h(1), 0, 1, 2, 3, 4, 5, 6, 7)},
			want:   "",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol := tc.pol
			if pol == nil {
				pol = policy.Default()
			}
			snap := mustSnap(t, tc.nodes, tc.jobs, tc.allocs)
			plan := mustEngine(t, pol).Decide(snap, t0)
			if err := ValidatePlan(pol, snap, plan); err != nil {
				t.Fatalf("invalid plan: %v", err)
			}
			if got := join(preemptedIDs(plan)); got != tc.want {
				t.Fatalf("preempted %q, want %q; preemptor: %+v", got, tc.want, plan.Explanations["c"])
			}
			if admission(plan, "c") != nil {
				t.Fatalf("preemptor admitted in the same plan as its victims")
			}
			exp := plan.Explanations["c"]
			if tc.want != "" {
				if exp.Status != StatusPreempting {
					t.Fatalf("preemptor status %s, want preempting", exp.Status)
				}
				for _, p := range plan.Preemptions {
					if p.Preemptor != "c" || p.Grace != 2*time.Minute || p.CheckpointSignal != "SIGUSR1" {
						t.Fatalf("preemption %+v: want preemptor c, grace 2m, SIGUSR1", p)
					}
					if len(p.Allocs) != len(snap.JobAllocs(p.JobID)) {
						t.Fatalf("preemption of %s stops %d of %d allocations", p.JobID, len(p.Allocs), len(snap.JobAllocs(p.JobID)))
					}
					if !strings.Contains(p.Reason, tc.wantVictimReason) {
						t.Fatalf("preemption reason %q, want it to mention %q", p.Reason, tc.wantVictimReason)
					}
				}
			} else if tc.wantReason != "" && !strings.Contains(exp.Reason, tc.wantReason) {
				t.Fatalf("reason %q, want it to mention %q", exp.Reason, tc.wantReason)
			}
		})
	}
}

// After ordering a preemption the engine waits for the victims to stop: it
// does not preempt again while they stop, and admits the preemptor on the
// freed GPUs once they are gone.
func TestPreemptionFollowThrough(t *testing.T) {
	store := cluster.NewStore()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(store.UpsertNode(mkNode("n1", 8, 2)))
	for _, id := range []string{"s1", "s2"} {
		must(store.UpsertJob(mkJob(id, running(), meta("impact_tier", "scavenger"))))
	}
	must(store.UpsertAlloc(alloc("a1", "s1", "n1", t0.Add(-2*time.Hour), 0, 1, 2, 3)))
	must(store.UpsertAlloc(alloc("a2", "s2", "n1", t0.Add(-3*time.Hour), 4, 5, 6, 7)))
	must(store.UpsertJob(mkJob("c", group("main", 1, 4), meta("impact_tier", "critical", "impact_topology", "nvlink"))))

	e := mustEngine(t, nil)
	p1 := e.Decide(store.Snapshot(), t0)
	if got := join(preemptedIDs(p1)); got != "s1" {
		t.Fatalf("first cycle preempted %q, want s1", got)
	}
	// The adapter has not acted yet: same state one minute later.
	p2 := e.Decide(store.Snapshot(), t0.Add(time.Minute))
	if len(p2.Preemptions) != 0 || len(p2.Admissions) != 0 {
		t.Fatalf("second cycle: preemptions %v admissions %v, want none while victims stop", preemptedIDs(p2), admittedIDs(p2))
	}
	if st := p2.Explanations["c"].Status; st != StatusPreempting {
		t.Fatalf("preemptor status %s, want preempting", st)
	}
	// Victim gone: the preemptor starts on its GPUs.
	store.DeleteAlloc("a1")
	p3 := e.Decide(store.Snapshot(), t0.Add(2*time.Minute))
	a := admission(p3, "c")
	if a == nil {
		t.Fatalf("preemptor not admitted after victims stopped: %+v", p3.Explanations["c"])
	}
	if got := join(a.Groups[0].Allocs[0].GPUs); got != "n1-g0,n1-g1,n1-g2,n1-g3" {
		t.Fatalf("preemptor on %s, want the freed GPUs", got)
	}
	if len(p3.Preemptions) != 0 {
		t.Fatalf("extra preemptions %v", preemptedIDs(p3))
	}
}

// A preemption the adapter could not carry out is forgotten: the victim's
// GPUs no longer count as being freed, the budget of work lost is given
// back, and the next cycle may order it again.
func TestForgetUnappliedPreemption(t *testing.T) {
	pol := mustPolicy(t, `preemption { max_gpu_hours_lost_per_hour = 100 }`)
	store := cluster.NewStore()
	_ = store.UpsertNode(mkNode("n1", 8, 2))
	_ = store.UpsertJob(mkJob("s1", running(), meta("impact_tier", "scavenger")))
	_ = store.UpsertAlloc(alloc("a1", "s1", "n1", t0.Add(-2*time.Hour), 0, 1, 2, 3, 4, 5, 6, 7))
	_ = store.UpsertJob(mkJob("c", group("main", 1, 8), meta("impact_tier", "critical")))
	e := mustEngine(t, pol)
	if got := join(preemptedIDs(e.Decide(store.Snapshot(), t0))); got != "s1" {
		t.Fatalf("first cycle preempted %q, want s1", got)
	}
	if e.LostGPUHours(t0) <= 0 {
		t.Fatal("preemption not charged to the budget")
	}
	// Without Forget the engine waits for the victim it believes stopping.
	if p := e.Decide(store.Snapshot(), t0.Add(time.Minute)); len(p.Preemptions) != 0 {
		t.Fatalf("preempted again while the first preemption is believed under way: %v", preemptedIDs(p))
	}
	e.Forget("s1") // the adapter failed to act on it
	if got := e.LostGPUHours(t0.Add(time.Minute)); got != 0 {
		t.Fatalf("budget after Forget: %v GPU-hours lost, want 0", got)
	}
	p := e.Decide(store.Snapshot(), t0.Add(2*time.Minute))
	if got := join(preemptedIDs(p)); got != "s1" {
		t.Fatalf("after Forget preempted %q, want s1 again (explanation %+v)", got, p.Explanations["c"])
	}
	// Forget of another job leaves this preemption alone.
	e.Forget("c")
	if p := e.Decide(store.Snapshot(), t0.Add(3*time.Minute)); len(p.Preemptions) != 0 {
		t.Fatalf("Forget of another job dropped the preemption of s1: %v", preemptedIDs(p))
	}
}

// A new engine started from another's memory keeps its fair-share usage and
// its preemption budget.
func TestMemoryRoundTrip(t *testing.T) {
	pol := mustPolicy(t, `preemption { max_gpu_hours_lost_per_hour = 10 }`)
	store := cluster.NewStore()
	_ = store.UpsertNode(mkNode("n1", 8, 2))
	_ = store.UpsertJob(mkJob("s1", running(), meta("impact_tier", "scavenger", "impact_project", "x")))
	_ = store.UpsertAlloc(alloc("a1", "s1", "n1", t0.Add(-time.Hour), 0, 1, 2, 3, 4, 5, 6, 7))
	e := mustEngine(t, pol)
	e.Decide(store.Snapshot(), t0.Add(-30*time.Minute)) // starts charging
	_ = store.UpsertJob(mkJob("c", group("main", 1, 8), meta("impact_tier", "critical")))
	p := e.Decide(store.Snapshot(), t0)
	if len(p.Preemptions) != 1 {
		t.Fatalf("want one preemption, got %v", preemptedIDs(p))
	}
	mem := e.Memory(t0)
	if mem.Usage["x"] <= 0 || len(mem.Losses) != 1 {
		t.Fatalf("memory %+v", mem)
	}
	f := mustEngine(t, pol, WithMemory(mem))
	if got, want := f.Usage().Get("x", t0), e.Usage().Get("x", t0); got != want {
		t.Fatalf("usage after restore %v, want %v", got, want)
	}
	if got, want := f.LostGPUHours(t0), e.LostGPUHours(t0); got != want || got <= 0 {
		t.Fatalf("lost GPU-hours after restore %v, want %v", got, want)
	}
}

// A gang preempted for one job may be claimed by a job scoring higher
// that arrives during its grace (as a higher-priority pod may take a
// nominated node's room): q (high) takes v, stopping for p (normal),
// and p preempts w. A defragmenting move's room is not claimed so
// (TestDefragmentRoomNotClaimed); a top-tier job preempts its own way in
// instead (TestTopTierPreemptsRatherThanWaitForOthersStops).
// twoVictimsStore is two 8-GPU nodes, each held by a scavenger gang (v
// with a 5m grace, checkpointed a minute ago: the cheaper victim; w with
// wGrace), and p of pTier waiting for a whole node.
func twoVictimsStore(t *testing.T, wGrace, pTier string) *cluster.Store {
	t.Helper()
	store := cluster.NewStore()
	mustDo(t, store.UpsertNode(mkNode("n1", 8, 2)))
	mustDo(t, store.UpsertNode(mkNode("n2", 8, 2)))
	mustDo(t, store.UpsertJob(mkJob("v", running(), group("main", 1, 8), meta("impact_tier", "scavenger", "impact_grace", "5m"))))
	mustDo(t, store.UpsertJob(mkJob("w", running(), group("main", 1, 8), meta("impact_tier", "scavenger", "impact_grace", wGrace))))
	mustDo(t, store.UpsertAlloc(withCheckpoint(alloc("va", "v", "n1", t0.Add(-2*time.Hour), 0, 1, 2, 3, 4, 5, 6, 7), t0.Add(-time.Minute))))
	mustDo(t, store.UpsertAlloc(alloc("wa", "w", "n2", t0.Add(-2*time.Hour), 0, 1, 2, 3, 4, 5, 6, 7)))
	mustDo(t, store.UpsertJob(mkJob("p", group("main", 1, 8), meta("impact_tier", pTier))))
	return store
}

// afterPreemptingV is an engine (with explanations or without) that has
// decided twoVictimsStore's first cycle: p preempts v, the cheaper victim.
func afterPreemptingV(t *testing.T, store *cluster.Store, explain bool) *Engine {
	t.Helper()
	var opts []Option
	if !explain {
		opts = append(opts, WithoutExplanations())
	}
	e := mustEngine(t, nil, opts...)
	if got := join(preemptedIDs(e.Decide(store.Snapshot(), t0))); got != "v" {
		t.Fatalf("first cycle preempted %q, want v", got)
	}
	return e
}

func TestHigherScoreMayClaimAPreemptionsVictim(t *testing.T) {
	store := twoVictimsStore(t, "5m", "normal")
	for _, explain := range []bool{true, false} {
		e := afterPreemptingV(t, store, explain)
		mustDo(t, store.UpsertJob(mkJob("q", group("main", 1, 8), meta("impact_tier", "high"))))
		p2 := e.Decide(store.Snapshot(), t0.Add(time.Minute))
		store.DeleteJob("q")
		if len(p2.Preemptions) != 1 || p2.Preemptions[0].JobID != "w" || p2.Preemptions[0].Preemptor != "p" {
			t.Fatalf("explain %v: second cycle preempts %+v, want w for p (q claims v)", explain, p2.Preemptions)
		}
		if explain {
			if exp := p2.Explanations["q"]; exp.Status != StatusPreempting || join(exp.Victims) != "v" {
				t.Errorf("q: %+v, want waiting for v", exp)
			}
		}
	}
}

// The GPUs of a gang claimed from its preemptor go to the claimer once the
// gang stops, not back to the preemptor, whichever job ID sorts first. p
// (normal) preempts v; q (high) claims v from it, while p finds nothing
// else to preempt (w is not preemptible) and keeps its binding on n1,
// now stale. Served in job ID order, that binding took n1 when v stopped:
// p started there and q, the job the GPUs were last decided for,
// preempted again or waited. In the simulator a critical job preempted
// twice that way (rand-22, seed 1).
func TestNewestBindingTakesTheGPUs(t *testing.T) {
	for _, explain := range []bool{true, false} {
		store := cluster.NewStore()
		mustDo(t, store.UpsertNode(mkNode("n1", 8, 2)))
		mustDo(t, store.UpsertNode(mkNode("n2", 8, 2)))
		mustDo(t, store.UpsertJob(mkJob("v", running(), group("main", 1, 8), meta("impact_tier", "scavenger", "impact_grace", "30s"))))
		mustDo(t, store.UpsertJob(mkJob("w", running(), group("main", 1, 8), meta("impact_tier", "scavenger", "impact_preemptible", "false"))))
		mustDo(t, store.UpsertAlloc(alloc("va", "v", "n1", t0.Add(-2*time.Hour), 0, 1, 2, 3, 4, 5, 6, 7)))
		mustDo(t, store.UpsertAlloc(alloc("wa", "w", "n2", t0.Add(-2*time.Hour), 0, 1, 2, 3, 4, 5, 6, 7)))
		mustDo(t, store.UpsertJob(mkJob("p", group("main", 1, 8), meta("impact_tier", "normal"))))
		var opts []Option
		if !explain {
			opts = append(opts, WithoutExplanations())
		}
		e := mustEngine(t, nil, opts...)
		if got := join(preemptedIDs(e.Decide(store.Snapshot(), t0))); got != "v" {
			t.Fatalf("explain %v: first cycle preempted %q, want v", explain, got)
		}
		mustDo(t, store.UpsertAlloc(stopping(alloc("va", "v", "n1", t0.Add(-2*time.Hour), 0, 1, 2, 3, 4, 5, 6, 7))))
		mustDo(t, store.UpsertJob(mkJob("q", group("main", 1, 8), meta("impact_tier", "high"))))
		p2 := e.Decide(store.Snapshot(), t0.Add(10*time.Second))
		if len(p2.Preemptions) != 0 || len(p2.Admissions) != 0 {
			t.Fatalf("explain %v: second cycle preempts %v, admits %v, want nothing (q claims v)", explain, preemptedIDs(p2), admittedIDs(p2))
		}
		if explain {
			if exp := p2.Explanations["q"]; exp.Status != StatusPreempting || join(exp.Victims) != "v" {
				t.Fatalf("q: %+v, want waiting for v", exp)
			}
		}
		store.DeleteAlloc("va")
		p3 := e.Decide(store.Snapshot(), t0.Add(40*time.Second))
		if got := join(admittedIDs(p3)); got != "q" {
			t.Fatalf("explain %v: once v stopped admitted %q, want q (the GPUs were last bound to it)", explain, got)
		}
		if len(p3.Preemptions) != 0 {
			t.Fatalf("explain %v: once v stopped preempts %v, want nothing", explain, preemptedIDs(p3))
		}
	}
}

// A job of the top tier does not wait for a gang stopping for another job
// when it can preempt its own way in: the other job's grace may run long
// (v's is 5m), and that job would preempt again anyway. q (critical)
// preempts w at once, and p (high) keeps waiting for v. Once q's own
// victim stops, q waits for it rather than preempting twice, and starts
// on its GPUs.
func TestTopTierPreemptsRatherThanWaitForOthersStops(t *testing.T) {
	store := twoVictimsStore(t, "30s", "high")
	for _, explain := range []bool{true, false} {
		e := afterPreemptingV(t, store, explain)
		mustDo(t, store.UpsertJob(mkJob("q", group("main", 1, 8), meta("impact_tier", "critical"))))
		p2 := e.Decide(store.Snapshot(), t0.Add(time.Minute))
		if len(p2.Preemptions) != 1 || p2.Preemptions[0].JobID != "w" || p2.Preemptions[0].Preemptor != "q" {
			t.Fatalf("explain %v: second cycle preempts %+v, want w for q (not q waiting for v, stopping for p)", explain, p2.Preemptions)
		}
		if explain {
			if exp := p2.Explanations["p"]; exp.Status != StatusPreempting || join(exp.Victims) != "v" {
				t.Errorf("p: %+v, want still waiting for v", exp)
			}
		}
		// The adapter marks w stopping: q waits for its own victim and
		// orders nothing more.
		mustDo(t, store.UpsertAlloc(stopping(alloc("wa", "w", "n2", t0.Add(-2*time.Hour), 0, 1, 2, 3, 4, 5, 6, 7))))
		p3 := e.Decide(store.Snapshot(), t0.Add(time.Minute+10*time.Second))
		if len(p3.Preemptions) != 0 {
			t.Fatalf("explain %v: third cycle preempts %+v while q's own victim stops", explain, p3.Preemptions)
		}
		if explain {
			if exp := p3.Explanations["q"]; exp.Status != StatusPreempting || join(exp.Victims) != "w" {
				t.Errorf("q: %+v, want waiting for w", exp)
			}
		}
		// w gone: q starts on n2.
		store.DeleteAlloc("wa")
		p4 := e.Decide(store.Snapshot(), t0.Add(2*time.Minute))
		a := admission(p4, "q")
		if a == nil {
			t.Fatalf("explain %v: q not admitted once w stopped: %+v", explain, p4.Explanations["q"])
		}
		if n := a.Groups[0].Allocs[0].NodeID; n != "n2" {
			t.Fatalf("explain %v: q on %s, want n2 (w's GPUs)", explain, n)
		}
		store.DeleteJob("q")
		mustDo(t, store.UpsertAlloc(alloc("wa", "w", "n2", t0.Add(-2*time.Hour), 0, 1, 2, 3, 4, 5, 6, 7)))
	}
}

// A job that may preempt but finds too little preemptible work to make
// room says so, rather than only how many GPUs are free: here the one
// running job is not preemptible.
func TestReasonSaysPreemptionCannotMakeRoom(t *testing.T) {
	store := cluster.NewStore()
	mustDo(t, store.UpsertNode(mkNode("n1", 8, 2)))
	mustDo(t, store.UpsertJob(mkJob("w", running(), group("main", 1, 8), meta("impact_tier", "scavenger", "impact_preemptible", "false"))))
	mustDo(t, store.UpsertAlloc(alloc("wa", "w", "n1", t0.Add(-2*time.Hour), 0, 1, 2, 3, 4, 5, 6, 7)))
	mustDo(t, store.UpsertJob(mkJob("c", group("main", 1, 1), meta("impact_tier", "critical"))))
	p := mustEngine(t, nil).Decide(store.Snapshot(), t0)
	exp := p.Explanations["c"]
	if want := "needs 1 GPUs, 0 free; the running work it may preempt holds too few GPUs to make room;"; !strings.HasPrefix(exp.Reason, want) {
		t.Fatalf("c: %s %q, want it to start with %q", exp.Status, exp.Reason, want)
	}
}
