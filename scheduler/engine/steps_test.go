package engine

// Each step of the cycle driven alone, on a cycle holding only what the
// step reads: what it owns behaves as its comment says.

import (
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/cluster"
	"github.com/impact-sched/nomad-impact/scheduler/placement"
	"github.com/impact-sched/nomad-impact/scheduler/policy"
)

// explainer.cat joins a pair once and answers it again from its memo; an
// empty note leaves the sentence as it is.
func TestExplainerCat(t *testing.T) {
	w := &explainer{c: &cycle{}}
	if got := w.cat("waits", ""); got != "waits" {
		t.Fatalf("cat with no note = %q", got)
	}
	for range 3 {
		if got := w.cat("waits", "; note"); got != "waits; note" {
			t.Fatalf("cat = %q", got)
		}
	}
	if got := w.cat("other", "; note"); got != "other; note" {
		t.Fatalf("cat = %q", got)
	}
	if len(w.cats) != 2 {
		t.Fatalf("cat memoized %d pairs, want 2", len(w.cats))
	}
	// A young gang's note is forgotten once a gang is claimed.
	w.youngNotes = map[tierPool]youngChance{{"a", "b"}: {job: "x"}}
	w.lastYoungOK = true
	w.forgetYoung()
	if len(w.youngNotes) != 0 || w.lastYoungOK {
		t.Fatal("forgetYoung kept youngNote's answers")
	}
}

// preempter.spent: no more preemptions once the cycle's count or its
// searches reach the policy's limits, or preemption is off.
func TestPreempterSpent(t *testing.T) {
	pol := &policy.Policy{}
	pol.Preemption.Enabled, pol.Preemption.MaxPerCycle = true, 2
	pe := &preempter{c: &cycle{pol: pol}}
	if pe.spent() {
		t.Fatal("spent before any preemption")
	}
	pe.preemptors = 2
	if !pe.spent() {
		t.Fatal("not spent at MaxPerCycle preemptions")
	}
	pe.preemptors, pe.preemptAttempts = 0, maxPreemptAttemptsPerSuccess*2
	if !pe.spent() {
		t.Fatal("not spent after the cycle's searches")
	}
	pe.preemptAttempts, pol.Preemption.Enabled = 0, false
	if !pe.spent() {
		t.Fatal("not spent with preemption off")
	}
}

// A claimed holder leaves every candidate list once, the defragmenting
// step's included.
func TestCandidateListsExclude(t *testing.T) {
	cl := &candList{member: []bool{true, true, false}, gpus: 6}
	df := &defragger{cands: map[string]*candList{"p": cl}}
	df.exclude(1, 4)
	df.exclude(1, 4)
	df.exclude(2, 1) // not a member
	if cl.member[1] || cl.gpus != 2 {
		t.Fatalf("after excluding holder 1 twice: member %v, gpus %d, want false and 2", cl.member[1], cl.gpus)
	}
}

// holdings.lend gives the GPUs bound to a job back to it alone while it
// is decided, and withholds those still free again after, unless it was
// admitted.
func TestHoldingsLend(t *testing.T) {
	for _, admitted := range []bool{false, true} {
		st := placement.New(mustSnap(t, nodes1x8(), nil, nil), nil, nil)
		sl := placement.Slot{Node: 0, Mask: 0b1111}
		st.Take(sl) // as holdBindings withholds it
		hb := &holdings{c: &cycle{st: st}, bound: map[string][]placement.Slot{"j": {sl}}}
		q := &queued{id: "j"}
		if !hb.lent(q) || hb.lent(&queued{id: "other"}) {
			t.Fatal("lent: only j has GPUs bound")
		}
		exp := &Explanation{}
		back := hb.lend(q, exp)
		if st.FreeGPUs("") != 8 {
			t.Fatalf("lent: %d GPUs free, want 8", st.FreeGPUs(""))
		}
		exp.Status = StatusPreempting // still waiting for its victims
		if admitted {
			exp.Status = StatusAdmitted
			st.Take(sl) // admitted onto them
		}
		back()
		if st.FreeGPUs("") != 4 || hb.lent(q) {
			t.Fatalf("admitted %v: after the loan %d GPUs free (want 4), lent %v (want false)", admitted, st.FreeGPUs(""), hb.lent(q))
		}
	}
	if hb := (&holdings{c: &cycle{}}); hb.lend(&queued{id: "j"}, &Explanation{}) != nil {
		t.Fatal("lend of nothing bound returned a loan")
	}
}

func nodes1x8() []*cluster.Node { return []*cluster.Node{mkNode("n1", 8, 2)} }

// Without headroom blocks the headroom step is nil, and every question
// the other steps ask it answers for none.
func TestHeadroomNilAnswersNone(t *testing.T) {
	var hr *hrCycle
	q := &queued{id: "j", pool: "gpu", gpus: 8, f: &specFacts{tier: "normal"}}
	if hr.blocks(q) != "" || hr.keepsOut(q) || hr.shields(q, 0) || hr.waives(q, 0) || hr.protect(q) != nil || hr.status(nil) != nil {
		t.Fatal("a nil headroom step kept a job out, shielded or waived a gang, or reported a status")
	}
	if _, ok := hr.prefer(q, placement.Request{}); ok {
		t.Fatal("a nil headroom step placed a job")
	}
	hr.admit(q, placement.Result{}) // must not panic
}

// placer.full: every reservation the policy allows this cycle is made.
func TestPlacerFull(t *testing.T) {
	pol := &policy.Policy{}
	pol.Backfill.Reservations = 2
	p := &placer{c: &cycle{pol: pol}}
	for i := range 3 {
		if got, want := p.full(), i >= 2; got != want || p.count() != i {
			t.Fatalf("%d reservations: full %v count %d", i, got, p.count())
		}
		p.reservations = append(p.reservations, reservation{jobID: "j"})
	}
}
