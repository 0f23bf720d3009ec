package engine

import (
	"fmt"
	"testing"
	"time"
)

// A preemption is withdrawn while its victims' grace lasts once its
// preemptor no longer waits: it started on GPUs that work ending on its
// own freed meanwhile, or it left the queue. Not while the preemptor
// still waits, not once the grace is over, and not while another waiting
// job is bound to the victim's GPUs (it claimed the stopping gang). The
// withdrawn victim is running work again: the next cycle neither
// withdraws it twice nor counts it as stopping. With the policy's
// preemption withdraw = false, nothing is withdrawn.
func TestPreemptionWithdrawnOnceItsPreemptorNoLongerWaits(t *testing.T) {
	cases := []struct {
		name string
		// end: a scavenger job on the other node ends at t0+10s (its
		// GPU frees); gone: the preemptor leaves the queue instead;
		// high: a high-tier job arrives at t0+10s; at: when the
		// cycle that may withdraw runs, after t0.
		end, gone, high bool
		at              time.Duration
		// off: the policy's preemption withdraw = false.
		off       bool
		withdrawn bool
	}{
		{"its preemptor started on GPUs freed meanwhile", true, false, false, 12 * time.Second, false, true},
		{"its preemptor left the queue", false, true, false, 12 * time.Second, false, true},
		{"its preemptor still waits", false, false, false, 12 * time.Second, false, false},
		{"the grace is over", true, false, false, 61 * time.Second, false, false},
		{"another waiting job claimed the stopping gang", true, false, true, 12 * time.Second, false, false},
		{"withdraw off", true, false, false, 12 * time.Second, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := paceStore(t, "critical", 1, 1, 0)
			pol := pacePolicy(t, false, 4, "")
			pol.Preemption.Withdraw = !tc.off
			e := mustEngine(t, pol)
			decide := func(at time.Time) *Plan {
				t.Helper()
				p, snap := decideValid(t, e, pol, store, at)
				// Admissions take effect at once; stops only after their
				// grace, which no case reaches with the victim still there.
				mustDo(t, Apply(store, snap, &Plan{Admissions: p.Admissions}, at))
				return p
			}
			p := decide(t0)
			if len(p.Preemptions) != 1 || p.Preemptions[0].Preemptor != "w-0" {
				t.Fatalf("first cycle preempts %v, want one victim for w-0", preemptedIDs(p))
			}
			victim := p.Preemptions[0].JobID
			if tc.end || tc.high {
				// Another node's job ends on its own: the preemptor starts there.
				other := "s-n1-0"
				if a, _ := store.Snapshot().Alloc(victim + "-a"); a != nil && a.NodeID == "n1" {
					other = "s-n2-0"
				}
				store.CompleteAlloc(other+"-a", t0.Add(10*time.Second))
				store.DeleteJob(other)
			}
			if tc.high {
				mustDo(t, store.UpsertJob(mkJob("h-0", group("main", 1, 1), meta("impact_tier", "high"), submitted(t0.Add(10*time.Second)))))
			}
			if tc.gone {
				store.DeleteJob("w-0")
			}
			p = decide(t0.Add(11 * time.Second))
			if tc.end && admission(p, "w-0") == nil {
				t.Fatalf("w-0 not admitted on the freed GPU: %+v", p.Explanations["w-0"])
			}
			if e := p.Explanations["h-0"]; tc.high && (e == nil || e.Status != StatusPreempting || len(e.Victims) != 1 || e.Victims[0] != victim) {
				t.Fatalf("h-0 %+v, want it waiting for %s's stop", e, victim)
			}
			// The preemptor that left the queue is seen at once; the one
			// admitted, by the next cycle.
			ws := p.Withdrawals
			p = decide(t0.Add(tc.at))
			ws = append(ws, p.Withdrawals...)
			var got []string
			for _, w := range ws {
				if w.Preemptor != "w-0" || len(w.Allocs) != 1 || w.Allocs[0] != victim+"-a" {
					t.Errorf("withdrawal %+v, want %s's allocation for w-0", w, victim)
				}
				got = append(got, w.JobID)
			}
			if want := map[bool]string{true: fmt.Sprint([]string{victim}), false: "[]"}[tc.withdrawn]; fmt.Sprint(got) != want {
				t.Fatalf("withdrawn %v, want %s", got, want)
			}
			if !tc.withdrawn {
				return
			}
			// Withdrawn once: a critical job arriving now preempts it anew
			// (the cheapest victim, running as long as the others).
			mustDo(t, store.UpsertJob(mkJob("w-1", group("main", 1, 1), meta("impact_tier", "critical"), submitted(t0.Add(tc.at)))))
			p = decide(t0.Add(tc.at + time.Second))
			if len(p.Withdrawals) != 0 {
				t.Errorf("withdrawn again: %+v", p.Withdrawals)
			}
			if e := p.Explanations["w-1"]; e == nil || e.Status != StatusPreempting || len(p.Preemptions) != 1 {
				t.Errorf("w-1 %+v, preemptions %v: want it to preempt, not wait for a withdrawn stop", e, preemptedIDs(p))
			}
		})
	}
}
