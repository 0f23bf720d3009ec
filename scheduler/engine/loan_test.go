package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
)

// A headroom that lends its nodes (loan_grace): a critical job preempts
// the preemptible work on the headroom's node first, though work
// elsewhere costs less (it checkpointed a minute ago), and stops it after
// the loan's grace, not the job's own minute. Without loan_grace it
// stops the cheapest work and waits that work's whole grace; with a loan
// longer than a victim's own grace, the victim keeps its own (and is
// still chosen first, on loan).
//
// n1 holds a high-tier job (non-preemptible) and "cheap", so the headroom
// (8 GPUs, a whole node) is kept on n2, which its borrowers b1 and b2
// fill; every job has run two hours.
func TestHeadroomLendsItsNodes(t *testing.T) {
	cases := []struct {
		name, loan, grace string
		victim            string // "cheap" or a borrower
		want              time.Duration
	}{
		{name: "no loan", victim: "cheap", grace: "1m", want: time.Minute},
		{name: "loan 0s", loan: "0s", victim: "borrower", grace: "1m", want: 0},
		{name: "loan 20s", loan: "20s", victim: "borrower", grace: "1m", want: 20 * time.Second},
		{name: "loan longer than own grace", loan: "2m", victim: "borrower", grace: "1m", want: time.Minute},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pol := headroomPolicy(t, 8, "loan_grace", c.loan)
			store := cluster.NewStore()
			mustDo(t, store.UpsertNode(mkNode("n1", 8, 2)))
			mustDo(t, store.UpsertNode(mkNode("n2", 8, 2)))
			start := t0.Add(-2 * time.Hour)
			scav := func(id string, kv ...string) {
				mustDo(t, store.UpsertJob(mkJob(id, group("main", 1, 4), meta(append([]string{"impact_tier", "scavenger", "impact_grace", c.grace}, kv...)...), running())))
			}
			mustDo(t, store.UpsertJob(mkJob("h", group("main", 1, 4), meta("impact_tier", "high"), running())))
			mustDo(t, store.UpsertAlloc(alloc("h-a", "h", "n1", start, 0, 1, 2, 3)))
			scav("cheap", "impact_checkpoint_interval", "1m")
			mustDo(t, store.UpsertAlloc(alloc("cheap-a", "cheap", "n1", start, 4, 5, 6, 7)))
			scav("b1")
			mustDo(t, store.UpsertAlloc(alloc("b1-a", "b1", "n2", start, 0, 1, 2, 3)))
			scav("b2")
			mustDo(t, store.UpsertAlloc(alloc("b2-a", "b2", "n2", start, 4, 5, 6, 7)))
			mustDo(t, store.UpsertJob(mkJob("c", group("main", 1, 4), meta("impact_tier", "critical"), submitted(t0))))

			p, _ := decideValid(t, mustEngine(t, pol), pol, store, t0.Add(time.Second))
			if len(p.Preemptions) != 1 {
				t.Fatalf("preemptions %v, want one: %+v", preemptedIDs(p), p.Explanations["c"])
			}
			pr := p.Preemptions[0]
			switch c.victim {
			case "cheap":
				if pr.JobID != "cheap" {
					t.Fatalf("preempted %s, want the cheapest work (cheap)", pr.JobID)
				}
			default:
				if pr.JobID != "b1" && pr.JobID != "b2" {
					t.Fatalf("preempted %s, want a borrower on the headroom's node (b1 or b2): %s", pr.JobID, pr.Reason)
				}
			}
			if pr.Grace != c.want {
				t.Errorf("%s stops after %s, want %s", pr.JobID, pr.Grace, c.want)
			}
			borrower := c.victim == "borrower"
			if said := strings.Contains(pr.Reason, "on loan on the headroom's GPUs"); said != borrower || pr.OnLoan != borrower {
				t.Errorf("reason %q, on_loan %v: want on loan %v", pr.Reason, pr.OnLoan, borrower)
			}
			if got := p.Explanations["c"].Victims; len(got) != 1 || got[0] != pr.JobID {
				t.Errorf("c's explanation names victims %v, want [%s]", got, pr.JobID)
			}
		})
	}
}

// A preemptible job admitted onto the nodes of a headroom that lends
// them is told so at admission, with the grace a job of the headroom's
// tiers may stop it after; under a headroom that lends nothing it is
// told nothing of the kind.
func TestHeadroomLoanToldAtAdmission(t *testing.T) {
	for _, loan := range []string{"0s", ""} {
		pol := headroomPolicy(t, 8, "loan_grace", loan)
		store := cluster.NewStore()
		mustDo(t, store.UpsertNode(mkNode("n1", 8, 2)))
		mustDo(t, store.UpsertNode(mkNode("n2", 8, 2)))
		mustDo(t, store.UpsertJob(mkJob("h", group("main", 1, 8), meta("impact_tier", "high"), running())))
		mustDo(t, store.UpsertAlloc(alloc("h-a", "h", "n1", t0.Add(-time.Hour), 0, 1, 2, 3, 4, 5, 6, 7)))
		mustDo(t, store.UpsertJob(mkJob("s", group("main", 1, 4), meta("impact_tier", "scavenger", "impact_grace", "1m"), submitted(t0))))
		p, _ := decideValid(t, mustEngine(t, pol), pol, store, t0.Add(time.Second))
		exp := p.Explanations["s"]
		if exp.Status != StatusAdmitted {
			t.Fatalf("loan %q: s %s: %s", loan, exp.Status, exp.Reason)
		}
		const note = `on loan on the GPUs the headroom of pool "gpu" keeps for [critical]: a job of those tiers may stop it after 0s (loan_grace), not its impact_grace of 1m0s`
		want := ""
		if loan != "" {
			want = note
		}
		if got := exp.Reason; got != want || exp.OnLoan != (loan != "") {
			t.Errorf("loan %q: s admitted with reason %q, on loan %v; want %q", loan, got, exp.OnLoan, want)
		}
	}
}
