package sim

import (
	"fmt"
	"math"
	"testing"
)

// The model is seeded and deterministic, hangs about its share of jobs,
// and hangs them between 10% and 90% of their work.
func TestIdleModelShareAndPoints(t *testing.T) {
	m := IdleModel{HangShare: 0.3, Seed: 7}
	n, hung := 20000, 0
	for i := range n {
		id := fmt.Sprintf("job-%d", i)
		f, ok := m.hangPoint(id)
		if f2, ok2 := m.hangPoint(id); f2 != f || ok2 != ok {
			t.Fatal("not deterministic")
		}
		if !ok {
			continue
		}
		hung++
		if f < 0.1 || f >= 0.9 {
			t.Fatalf("hang point %v outside [0.1, 0.9)", f)
		}
	}
	if share := float64(hung) / float64(n); math.Abs(share-0.3) > 0.02 {
		t.Fatalf("share %.3f, want about 0.3", share)
	}
	if _, ok := (IdleModel{}).hangPoint("x"); ok {
		t.Fatal("model off, yet a job hangs")
	}
	other := IdleModel{HangShare: 0.3, Seed: 8}
	same := 0
	for i := range 1000 {
		id := fmt.Sprintf("job-%d", i)
		_, a := m.hangPoint(id)
		_, b := other.hangPoint(id)
		if a == b {
			same++
		}
	}
	if same == 1000 {
		t.Fatal("the seed changes nothing")
	}
	for _, bad := range []float64{-0.1, 1.5, math.NaN()} {
		if (IdleModel{HangShare: bad}).Validate() == nil {
			t.Fatalf("share %v accepted", bad)
		}
	}
}
