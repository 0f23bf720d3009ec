package engine

import (
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// WithoutExplanations changes what a plan says, never what it decides:
// over random worlds and several cycles (plans applied, so preemptions,
// reservations and backfill come into play), both engines admit and
// preempt exactly the same, and the plan without explanations has none.
func TestPropertyWithoutExplanationsSameDecisions(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		store, pol := genWorld(t)
		full, lean := mustEngine(t, pol), mustEngine(t, pol, WithoutExplanations())
		now := t0
		for cycle := range 4 {
			snap := store.Snapshot()
			a, b := full.Decide(snap, now), lean.Decide(snap, now)
			if !reflect.DeepEqual(a.Admissions, b.Admissions) {
				t.Fatalf("cycle %d: admissions differ:\n%+v\n%+v", cycle, a.Admissions, b.Admissions)
			}
			if !reflect.DeepEqual(a.Preemptions, b.Preemptions) {
				t.Fatalf("cycle %d: preemptions differ:\n%+v\n%+v", cycle, a.Preemptions, b.Preemptions)
			}
			if len(b.Explanations) != 0 || len(b.Queue) != 0 {
				t.Fatalf("cycle %d: %d explanations, %d queued without explanations", cycle, len(b.Explanations), len(b.Queue))
			}
			if err := Apply(store, snap, a, now); err != nil {
				t.Fatal(err)
			}
			now = now.Add(time.Duration(rapid.IntRange(1, 90).Draw(t, "dt")) * time.Minute)
		}
	})
}
