package engine

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// A critical job as wide as a node, in a pool where every node holds
// high-tier work it may not preempt, can neither start nor preempt its
// way in. With backfill reserve_tiers naming its tier it gets a
// reservation even with reservations = 0, on the node whose
// unpreemptible work ends soonest: n1, where the scavenger work beside
// the high job counts as freed now (critical may preempt it), not n2,
// whose work of any kind ends first. The reserved GPU then goes only to
// work the critical job may take back (the scavenger) or that ends in
// time; without the tier named, every free GPU goes to the long high
// jobs behind it and the job waits for a node to free by chance.
func TestReserveTiersDrainTheNodeWhoseUnpreemptibleWorkEndsFirst(t *testing.T) {
	jobs := []*cluster.Job{
		// n1: 5 high GPUs ending at t0+30m, 2 scavenger GPUs of unknown
		// end, 1 free.
		mkJob("h1", running(), meta("impact_tier", "high", "impact_walltime", "1h30m"), group("main", 1, 5)),
		mkJob("s1", running(), meta("impact_tier", "scavenger"), group("main", 1, 2)),
		// n2: 7 high GPUs ending at t0+1h, 1 free.
		mkJob("h2", running(), meta("impact_tier", "high", "impact_walltime", "2h"), group("main", 1, 7)),
		mkJob("crit", meta("impact_tier", "critical"), group("main", 1, 8), submitted(t0.Add(-time.Minute))),
		mkJob("long1", meta("impact_tier", "high", "impact_walltime", "5h"), submitted(t0)),
		mkJob("long2", meta("impact_tier", "high", "impact_walltime", "5h"), submitted(t0)),
		mkJob("scav", meta("impact_tier", "scavenger"), submitted(t0)),
	}
	nodes := []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)}
	allocs := []*cluster.Alloc{
		alloc("a-h1", "h1", "n1", t0.Add(-time.Hour), 0, 1, 2, 3, 4),
		alloc("a-s1", "s1", "n1", t0.Add(-2*time.Hour), 5, 6),
		alloc("a-h2", "h2", "n2", t0.Add(-time.Hour), 0, 1, 2, 3, 4, 5, 6),
	}
	cases := []struct {
		name, policy string
		// reserved: crit's reservation (until, and the node its GPUs are
		// on); "" none.
		reservedOn string
		until      time.Duration
		wantAdmit  string
	}{
		{"no reservations", `backfill {
  reservations = 0
}`, "", 0, "long1,long2"},
		{"reserve tiers", `backfill {
  reservations  = 0
  reserve_tiers = ["critical"]
}`, "n1", 30 * time.Minute, "long1,scav"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol := mustPolicy(t, tc.policy)
			snap := mustSnap(t, nodes, jobs, allocs)
			plan := mustEngine(t, pol).Decide(snap, t0)
			if err := ValidatePlan(pol, snap, plan); err != nil {
				t.Fatal(err)
			}
			if got := join(admittedIDs(plan)); got != tc.wantAdmit {
				t.Fatalf("admitted %q, want %q; crit: %+v", got, tc.wantAdmit, plan.Explanations["crit"])
			}
			if got := join(preemptedIDs(plan)); got != "" {
				t.Fatalf("preempted %q, want none (preempting s1 frees 2 GPUs beside 1, not 8)", got)
			}
			crit := plan.Explanations["crit"]
			if tc.reservedOn == "" {
				if crit.Status != StatusWaiting {
					t.Fatalf("crit: %+v, want waiting with no reservation", crit)
				}
				return
			}
			if crit.Status != StatusReserved || !crit.ReservedUntil.Equal(t0.Add(tc.until)) {
				t.Fatalf("crit: %+v, want reserved until t0+%s", crit, tc.until)
			}
			if !strings.Contains(crit.Reason, "counting the running work it may preempt as freed once it may preempt it") {
				t.Fatalf("crit's reason %q does not say the scavenger work counts as freed", crit.Reason)
			}
			if a := admission(plan, "long1"); a == nil || join(nodesOf(a)) != "n2" {
				t.Fatalf("long1: %+v, want it on n2 (n1's free GPU is crit's)", a)
			}
			if a := admission(plan, "scav"); a == nil || join(nodesOf(a)) != tc.reservedOn || !a.Backfilled {
				t.Fatalf("scav: %+v, want it backfilled on %s (crit may preempt it)", a, tc.reservedOn)
			}
			if r := plan.Explanations["long2"].Reason; !strings.Contains(r, "reserved for crit") {
				t.Fatalf("long2's reason %q does not name crit's reservation", r)
			}
		})
	}
}

// A reserve tier's reservation does not count against the policy's
// reservations: with one allowed, the blocked critical job and the
// blocked high job behind it both get one.
func TestReserveTiersDoNotCountAgainstReservations(t *testing.T) {
	jobs := []*cluster.Job{
		mkJob("h1", running(), meta("impact_tier", "high", "impact_walltime", "1h30m"), group("main", 1, 7)),
		mkJob("h2", running(), meta("impact_tier", "high", "impact_walltime", "3h"), group("main", 1, 7)),
		mkJob("crit", meta("impact_tier", "critical"), group("main", 1, 8), submitted(t0.Add(-time.Minute))),
		mkJob("wide", meta("impact_tier", "high"), group("main", 1, 8), submitted(t0.Add(-time.Minute))),
	}
	nodes := []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)}
	allocs := []*cluster.Alloc{
		alloc("a-h1", "h1", "n1", t0.Add(-time.Hour), 0, 1, 2, 3, 4, 5, 6),
		alloc("a-h2", "h2", "n2", t0.Add(-time.Hour), 0, 1, 2, 3, 4, 5, 6),
	}
	for _, tc := range []struct {
		name, policy string
		wide         Status
	}{
		{"reservations counted", "backfill {\n  reservations = 1\n}\n", StatusWaiting},
		{"reserve tier besides", "backfill {\n  reservations = 1\n  reserve_tiers = [\"critical\"]\n}\n", StatusReserved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := mustPolicy(t, tc.policy)
			plan := mustEngine(t, pol).Decide(mustSnap(t, nodes, jobs, allocs), t0)
			crit, wide := plan.Explanations["crit"], plan.Explanations["wide"]
			if crit.Status != StatusReserved || !crit.ReservedUntil.Equal(t0.Add(30*time.Minute)) {
				t.Fatalf("crit: %+v, want reserved until h1 ends (t0+30m)", crit)
			}
			if wide.Status != tc.wide {
				t.Fatalf("wide: %s (%s), want %s", wide.Status, wide.Reason, tc.wide)
			}
			if tc.wide == StatusReserved && !wide.ReservedUntil.Equal(t0.Add(2*time.Hour)) {
				t.Fatalf("wide: reserved until %s, want h2's end (t0+2h)", wide.ReservedUntil)
			}
		})
	}
}

// A reserve tier's reservation idles GPUs for urgent work as the
// headroom does, so the headroom's idle budget pays for it: the
// reserved GPU no job backfills is spent from the account
// (IdleReservedGPUs), and once the account is overspent the critical job
// gets no reservation, is told why, and the high job behind it takes the
// GPU. Without a budget the reservation holds however long it idles;
// with one reservation for the head of the queue it holds as that one,
// as any job's would, and is not charged.
func TestReserveTiersSpendTheHeadroomsIdleBudget(t *testing.T) {
	store := cluster.NewStore()
	for _, n := range []*cluster.Node{mkNode("n1", 8, 2), mkNode("n2", 8, 2)} {
		_ = store.UpsertNode(n)
	}
	for _, j := range []*cluster.Job{
		// n1: 7 high GPUs ending at t0+30m, 1 free; n2: 8 high GPUs
		// ending at t0+2h.
		mkJob("h1", running(), meta("impact_tier", "high", "impact_walltime", "1h30m"), group("main", 1, 7)),
		mkJob("h2", running(), meta("impact_tier", "high", "impact_walltime", "3h"), group("main", 1, 8)),
		mkJob("crit", meta("impact_tier", "critical"), group("main", 1, 8), submitted(t0.Add(-time.Minute))),
		mkJob("long", meta("impact_tier", "high", "impact_walltime", "5h"), submitted(t0)),
	} {
		_ = store.UpsertJob(j)
	}
	_ = store.UpsertAlloc(alloc("a-h1", "h1", "n1", t0.Add(-time.Hour), 0, 1, 2, 3, 4, 5, 6))
	_ = store.UpsertAlloc(alloc("a-h2", "h2", "n2", t0.Add(-time.Hour), 0, 1, 2, 3, 4, 5, 6, 7))
	type step struct {
		at       time.Duration
		reserved bool // crit holds n1's free GPU, idle; else long takes it
		charged  int  // the idle reserved GPUs spent from the account
	}
	cases := []struct {
		name, budget string
		reservations int
		steps        []step
	}{
		// 16 GPUs at 1/32: half a GPU-second a second against one GPU
		// idle. The account opens at zero, so a second later it is
		// overspent.
		{"budget", "idle_budget = 0.03125", 0, []step{{0, true, 1}, {time.Second, false, 0}}},
		{"no budget", "", 0, []step{{0, true, 0}, {time.Second, true, 0}}},
		// Overspent, crit still holds the reservation the policy gives
		// the first blocked job, as any job would, not charged.
		{"budget, one reservation", "idle_budget = 0.03125", 1, []step{{0, true, 1}, {time.Second, true, 0}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pol := mustPolicy(t, `
backfill {
  reservations  = `+strconv.Itoa(tc.reservations)+`
  reserve_tiers = ["critical"]
}
headroom "gpu" {
  tiers = ["critical"]
  gpus  = 8
  `+tc.budget+`
}
`)
			e := mustEngine(t, pol)
			for i, s := range tc.steps {
				snap := store.Snapshot()
				p := e.Decide(snap, t0.Add(s.at))
				if err := ValidatePlan(pol, snap, p); err != nil {
					t.Fatal(err)
				}
				crit, h := p.Explanations["crit"], p.Headroom[0]
				if s.reserved {
					if crit.Status != StatusReserved || admission(p, "long") != nil {
						t.Fatalf("step %d: crit %s (%s), long admitted %v; want crit reserved on n1, long waiting", i, crit.Status, crit.Reason, admission(p, "long") != nil)
					}
					if h.IdleReservedGPUs != s.charged {
						t.Fatalf("step %d: %d idle reserved GPUs, want %d", i, h.IdleReservedGPUs, s.charged)
					}
					continue
				}
				if crit.Status != StatusWaiting || h.IdleReservedGPUs != 0 || h.IdleBudget == nil || !h.IdleBudget.Yielded {
					t.Fatalf("step %d: crit %s (%s), headroom %+v; want crit waiting without a reservation, the budget yielded", i, crit.Status, crit.Reason, h)
				}
				if a := admission(p, "long"); a == nil || join(nodesOf(a)) != "n1" {
					t.Fatalf("step %d: long %+v, want it on n1's free GPU", i, a)
				}
				if !strings.Contains(crit.Reason, "no reservation for its tier: the headroom's idle budget is spent") {
					t.Fatalf("step %d: crit's reason %q does not say why it holds no reservation", i, crit.Reason)
				}
			}
		})
	}
}
