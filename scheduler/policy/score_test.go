package policy

import (
	"math"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
)

var t0 = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9*math.Max(1, math.Abs(b)) }

func TestUsageDecay(t *testing.T) {
	u := NewUsage(time.Hour)
	u.Add("a", 8, t0)
	if got := u.Get("a", t0.Add(time.Hour)); !near(got, 4) {
		t.Fatalf("after one half-life: %v, want 4", got)
	}
	if got := u.Get("a", t0.Add(2*time.Hour)); !near(got, 2) {
		t.Fatalf("after two half-lives: %v, want 2", got)
	}
	u.Add("b", 1, t0.Add(time.Hour))
	if got := u.Get("a", t0.Add(time.Hour)); !near(got, 4) {
		t.Fatalf("rebase changed a: %v", got)
	}
}

// AddInterval does not depend on how the interval is cut.
func TestUsageIntervalIsExact(t *testing.T) {
	one := NewUsage(2 * time.Hour)
	one.AddInterval("p", 4, t0, t0.Add(3*time.Hour))
	many := NewUsage(2 * time.Hour)
	for i := 0; i < 180; i++ {
		many.AddInterval("p", 4, t0.Add(time.Duration(i)*time.Minute), t0.Add(time.Duration(i+1)*time.Minute))
	}
	end := t0.Add(3 * time.Hour)
	if a, b := one.Get("p", end), many.Get("p", end); math.Abs(a-b) > 1e-6 {
		t.Fatalf("one interval %v, 180 slices %v", a, b)
	}
	// Without decay, 4 GPUs x 3 h = 12; with decay it is less.
	if v := one.Get("p", end); v >= 12 || v < 6 {
		t.Fatalf("decayed usage %v out of range", v)
	}
}

func TestScoreTerms(t *testing.T) {
	p := Default()
	u := NewUsage(p.FairShare.HalfLife)
	u.Add("heavy", 100, t0)
	s := p.NewScorer(u, t0, []string{"heavy", "light"})
	light := s.Score(jobspec.Spec{Tier: "high", Project: "light", Deadline: t0.Add(12 * time.Hour)}, t0.Add(-10*time.Hour))
	if !near(light.Tier, p.Tiers["high"].Weight) {
		t.Fatalf("tier term %v", light.Tier)
	}
	if !near(light.FairShare, 0.5*p.FairShare.Weight) {
		t.Fatalf("fair-share term %v, want +%v (entitled 1/2, used 0)", light.FairShare, 0.5*p.FairShare.Weight)
	}
	if !near(light.Deadline, 0.5*p.Deadline.Weight) {
		t.Fatalf("deadline term %v, want half the weight at half the horizon", light.Deadline)
	}
	if !near(light.Age, 10*p.Aging.WeightPerHour) {
		t.Fatalf("age term %v", light.Age)
	}
	if !near(light.Total, light.Tier+light.FairShare+light.Deadline+light.Age) {
		t.Fatalf("total %v is not the sum of its terms", light.Total)
	}
	heavy := s.Score(jobspec.Spec{Tier: "high", Project: "heavy"}, t0)
	if !near(heavy.FairShare, -0.5*p.FairShare.Weight) {
		t.Fatalf("heavy fair-share term %v", heavy.FairShare)
	}
	old := s.Score(jobspec.Spec{}, t0.Add(-1000*time.Hour))
	if !near(old.Age, p.Aging.Max) {
		t.Fatalf("aging not capped: %v", old.Age)
	}
	late := s.Score(jobspec.Spec{Deadline: t0.Add(-time.Hour)}, t0)
	if !near(late.Deadline, p.Deadline.Weight) {
		t.Fatalf("past deadline urgency %v", late.Deadline)
	}
}
