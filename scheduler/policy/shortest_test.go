package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/impact-sched/nomad-impact/jobspec"
)

// The shortest_first block: off by default; a file sets what it writes
// and keeps the rest.
func TestShortestFirstBlock(t *testing.T) {
	if d := Default().ShortestFirst; d != (ShortestFirst{OverdueShare: DefaultOverdueShare}) {
		t.Fatalf("default shortest_first %+v", d)
	}
	p, err := LoadBytes([]byte("shortest_first {\n  weight = 0.9\n}\n"), "p.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if want := (ShortestFirst{Weight: 0.9, OverdueShare: DefaultOverdueShare}); p.ShortestFirst != want {
		t.Fatalf("shortest_first %+v, want %+v", p.ShortestFirst, want)
	}
	q, err := p.Overlay([]byte("shortest_first {\n  overdue_share = 0.5\n}\n"), "q.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if want := (ShortestFirst{Weight: 0.9, OverdueShare: 0.5}); q.ShortestFirst != want {
		t.Fatalf("overlaid shortest_first %+v, want %+v", q.ShortestFirst, want)
	}
}

func TestShortestFirstErrors(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"shortest_first {\n  weight = -1\n}\n", `p.hcl:2: shortest_first weight: must be >= 0 (0 = off), got -1`},
		{"shortest_first {\n  overdue_share = 1.5\n}\n", `p.hcl:2: shortest_first overdue_share: must be between 0 and 1, got 1.5`},
		{"shortest_first {\n  overdue_share = -0.1\n}\n", `p.hcl:2: shortest_first overdue_share: must be between 0 and 1, got -0.1`},
		{"shortest_first {\n  weight = \"high\"\n}\n", `p.hcl:2`},
		{"shortest_first {\n  share = 0.5\n}\n", `p.hcl:2`},
	} {
		_, err := LoadBytes([]byte(c.src), "p.hcl")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.src, err, c.want)
		}
	}
}

// The shortest-first term: the shorter the walltime the higher, a job
// without one counted as an hour's, the whole weight once overdue; and
// the order it gives a tier's jobs: the overdue ones first, then the
// rest shortest first.
func TestShortestFirstTerm(t *testing.T) {
	p := Default()
	p.Aging = Aging{}
	p.FairShare.Weight = 0
	p.ShortestFirst = ShortestFirst{Weight: 0.9, OverdueShare: 0.75}
	s := p.NewScorer(nil, t0, []string{"default"})
	oldest := t0.Add(-8 * time.Hour)
	score := func(waited, wall time.Duration) Score {
		return s.ScoreAt(Waiting{Submit: t0.Add(-waited), Walltime: wall, Oldest: oldest}, 10, 0)
	}
	for _, c := range []struct {
		name         string
		waited, wall time.Duration
		short        float64
		overdue      bool
	}{
		{"an hour's walltime: half the weight", time.Hour, time.Hour, 0.45, false},
		{"no walltime: counted as an hour's", time.Hour, 0, 0.45, false},
		{"three hours: a quarter", time.Hour, 3 * time.Hour, 0.225, false},
		{"twenty minutes: three quarters", time.Hour, 20 * time.Minute, 0.675, false},
		{"at three quarters of the oldest's wait: not yet overdue", 6 * time.Hour, 3 * time.Hour, 0.225, false},
		{"past it: overdue, the whole weight", 6*time.Hour + time.Second, 3 * time.Hour, 0.9, true},
		{"the oldest itself is overdue", 8 * time.Hour, 100 * time.Hour, 0.9, true},
	} {
		sc := score(c.waited, c.wall)
		if !near(sc.Short, c.short) || sc.Overdue != c.overdue {
			t.Errorf("%s: short %v overdue %v, want %v %v", c.name, sc.Short, sc.Overdue, c.short, c.overdue)
		}
		if !near(sc.Total, sc.Tier+sc.Short) {
			t.Errorf("%s: total %v is not the sum of its terms", c.name, sc.Total)
		}
	}
	// Overdue work outranks every shorter job that is not; shorter
	// outranks longer; nothing crosses a tier weight gap of 1.
	overdue, short, long := score(7*time.Hour, 50*time.Hour), score(time.Minute, time.Minute), score(time.Minute, 50*time.Hour)
	if !(overdue.Total > short.Total && short.Total > long.Total) {
		t.Fatalf("overdue %v, 1m job %v, 50h job %v: want in that order", overdue.Total, short.Total, long.Total)
	}
	if overdue.Total-long.Total >= 1 {
		t.Fatalf("the term spans %v, more than its weight", overdue.Total-long.Total)
	}
	// With overdue_share 1 no job is overdue (the oldest has waited no
	// more than itself): shortest first throughout.
	p.ShortestFirst.OverdueShare = 1
	s = p.NewScorer(nil, t0, []string{"default"})
	if sc := s.ScoreAt(Waiting{Submit: oldest, Walltime: 3 * time.Hour, Oldest: oldest}, 10, 0); sc.Overdue || !near(sc.Short, 0.225) {
		t.Fatalf("overdue_share 1: oldest job's term %+v", sc)
	}
	// Off (weight 0): no term.
	p.ShortestFirst.Weight = 0
	s = p.NewScorer(nil, t0, []string{"default"})
	if sc := s.Score(jobspec.Spec{Walltime: time.Minute}, t0.Add(-time.Hour)); sc.Short != 0 || sc.Overdue {
		t.Fatalf("off: %+v", sc)
	}
}
