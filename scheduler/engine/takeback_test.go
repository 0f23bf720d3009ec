package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// A headroom that takes back young work (take_back): a critical job
// stops the preemptible work that started less than take_back ago at
// once, though work elsewhere costs less (it checkpointed a minute ago
// and keeps its minute of grace). Work as old as take_back or older, a
// headroom without take_back, and a preemptor of a tier that does not
// use the headroom leave the choice to cost and the victims their grace.
// Where the headroom also lends its node (loan_grace), the young work on
// it is taken back, not stopped after the loan's grace; lent alone, it
// stops after the loan's. take_back_unsaved takes back "cheap", old but
// with a second of work unsaved, at once, and not where it asks for
// less unsaved than that; with take_back too, the cheaper of the two
// is taken back.
//
// n1 holds a high-tier job (non-preemptible) and "cheap" (two hours old,
// checkpointed a minute ago); n2, the headroom's node, holds "old" (two
// hours, never checkpointed) and "young", which started five minutes ago.
func TestHeadroomTakesBack(t *testing.T) {
	const young = "started 5m1s ago, less than the headroom's take_back, so taken back at once"
	const saved = "1s of its work unsaved since its last expected checkpoint (impact_checkpoint_interval 1m0s), less than the headroom's take_back_unsaved, so taken back at once"
	cases := []struct {
		name, takeBack, unsaved, loan, tier string
		victim                              string
		grace                               time.Duration
		said                                string // the reason's note on taking back
		takenBack, onLoan                   bool
	}{
		{name: "no take_back", tier: "critical", victim: "cheap", grace: time.Minute},
		{name: "take_back 10m", takeBack: "10m", tier: "critical", victim: "young", grace: 0, said: young, takenBack: true},
		{name: "take_back shorter than its run", takeBack: "2m", tier: "critical", victim: "cheap", grace: time.Minute},
		{name: "preemptor's tier keeps out of the headroom", takeBack: "10m", tier: "high", victim: "cheap", grace: time.Minute},
		{name: "take_back and a loan", takeBack: "10m", loan: "20s", tier: "critical", victim: "young", grace: 0, said: young, takenBack: true},
		{name: "a loan alone", loan: "20s", tier: "critical", victim: "young", grace: 20 * time.Second, onLoan: true},
		{name: "take_back_unsaved 2m", unsaved: "2m", tier: "critical", victim: "cheap", grace: 0, said: saved, takenBack: true},
		{name: "take_back_unsaved below its unsaved work", unsaved: "1s", tier: "critical", victim: "cheap", grace: time.Minute},
		{name: "take_back_unsaved for a tier kept out", unsaved: "2m", tier: "high", victim: "cheap", grace: time.Minute},
		{name: "take_back and take_back_unsaved", takeBack: "10m", unsaved: "2m", tier: "critical", victim: "cheap", grace: 0, said: saved, takenBack: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pol := headroomPolicy(t, 8, "take_back", c.takeBack, "take_back_unsaved", c.unsaved, "loan_grace", c.loan)
			store := cluster.NewStore()
			mustDo(t, store.UpsertNode(mkNode("n1", 8, 2)))
			mustDo(t, store.UpsertNode(mkNode("n2", 8, 2)))
			long := t0.Add(-2 * time.Hour)
			scav := func(id, node string, start time.Time, slot0 int, kv ...string) {
				mustDo(t, store.UpsertJob(mkJob(id, group("main", 1, 4), meta(append([]string{"impact_tier", "scavenger", "impact_grace", "1m"}, kv...)...), running())))
				mustDo(t, store.UpsertAlloc(alloc(id+"-a", id, node, start, slot0, slot0+1, slot0+2, slot0+3)))
			}
			mustDo(t, store.UpsertJob(mkJob("h", group("main", 1, 4), meta("impact_tier", "high"), running())))
			mustDo(t, store.UpsertAlloc(alloc("h-a", "h", "n1", long, 0, 1, 2, 3)))
			scav("cheap", "n1", long, 4, "impact_checkpoint_interval", "1m")
			scav("old", "n2", long, 0)
			scav("young", "n2", t0.Add(-5*time.Minute), 4)
			mustDo(t, store.UpsertJob(mkJob("p", group("main", 1, 4), meta("impact_tier", c.tier), submitted(t0))))

			p, _ := decideValid(t, mustEngine(t, pol), pol, store, t0.Add(time.Second))
			if len(p.Preemptions) != 1 {
				t.Fatalf("preemptions %v, want one: %+v", preemptedIDs(p), p.Explanations["p"])
			}
			pr := p.Preemptions[0]
			if pr.JobID != c.victim {
				t.Fatalf("preempted %s, want %s: %s", pr.JobID, c.victim, pr.Reason)
			}
			if pr.Grace != c.grace {
				t.Errorf("%s stops after %s, want %s", pr.JobID, pr.Grace, c.grace)
			}
			said := ""
			for _, note := range []string{young, saved} {
				if strings.Contains(pr.Reason, note) {
					said = note
				}
			}
			if said != c.said || pr.TakenBack != c.takenBack || pr.OnLoan != c.onLoan {
				t.Errorf("reason %q, taken_back %v, on_loan %v: want the note %q, taken back %v, on loan %v", pr.Reason, pr.TakenBack, pr.OnLoan, c.said, c.takenBack, c.onLoan)
			}
		})
	}
}

// A preemptible job admitted in a pool whose headroom takes back young
// work, or work with little unsaved, is told so at admission, with how
// long; a job of the headroom's tiers, a non-preemptible one and any job
// under a headroom that takes nothing back are told nothing of the kind.
func TestHeadroomTakeBackToldAtAdmission(t *testing.T) {
	const note = `for its first 10m0s a job of [critical] may take its GPUs back at once (headroom "gpu" take_back), without its impact_grace of 1m0s`
	const unsaved = `whenever less than 2m0s of its work is unsaved since its last checkpoint, a job of [critical] may take its GPUs back at once (headroom "gpu" take_back_unsaved), without its impact_grace of 1m0s`
	const both = `for its first 10m0s, and whenever less than 2m0s of its work is unsaved since its last checkpoint, a job of [critical] may take its GPUs back at once (headroom "gpu" take_back, take_back_unsaved), without its impact_grace of 1m0s`
	cases := []struct {
		name, takeBack, unsaved, tier string
		want                          string
	}{
		{"scavenger", "10m", "", "scavenger", note},
		{"no take_back", "", "", "scavenger", ""},
		{"non-preemptible", "10m", "", "high", ""},
		{"take_back_unsaved", "", "2m", "scavenger", unsaved},
		{"both", "10m", "2m", "scavenger", both},
		{"both, non-preemptible", "10m", "2m", "high", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pol := headroomPolicy(t, 1, "take_back", c.takeBack, "take_back_unsaved", c.unsaved)
			store := cluster.NewStore()
			mustDo(t, store.UpsertNode(mkNode("n1", 8, 2)))
			mustDo(t, store.UpsertJob(mkJob("s", group("main", 1, 2), meta("impact_tier", c.tier, "impact_grace", "1m"), submitted(t0))))
			p, _ := decideValid(t, mustEngine(t, pol), pol, store, t0.Add(time.Second))
			exp := p.Explanations["s"]
			if exp.Status != StatusAdmitted {
				t.Fatalf("s %s: %s", exp.Status, exp.Reason)
			}
			if exp.Reason != c.want {
				t.Errorf("s admitted with reason %q, want %q", exp.Reason, c.want)
			}
		})
	}
}
