package baseline

import (
	"math"
	"strings"
	"testing"
)

func TestNomadScore(t *testing.T) {
	for _, c := range []struct {
		name                           string
		used, total, collisions, count int
		want                           float64
	}{
		{"full after it: the best fit", 8, 8, 0, 1, 1},
		{"empty: no fit", 0, 8, 0, 1, 0},
		{"half used", 4, 8, 0, 1, (20 - 2*math.Sqrt(10)) / 18},
		{"a member already there, count 2: below the skip score", 8, 8, 1, 2, (1 - 1.0) / 2},
		{"a member already there, count 4", 8, 8, 1, 4, (1 - 0.5) / 2},
		{"two members there, count 4", 8, 8, 2, 4, (1 - 0.75) / 2},
	} {
		if got := NomadScore(c.used, c.total, c.collisions, c.count); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%s: score %v, want %v", c.name, got, c.want)
		}
	}
}

// inOrder ranks nodes 0..n-1 in that order.
func inOrder(n int) func() (int, bool) {
	pos := 0
	return func() (int, bool) {
		if pos >= n {
			return -1, false
		}
		pos++
		return pos - 1, true
	}
}

// TestLimitPick walks the limit iterator through orders fixed by hand.
func TestLimitPick(t *testing.T) {
	for _, c := range []struct {
		name   string
		scores []float64 // node i's score; feasible is 0..n-1 in order
		want   int
	}{
		{"one node", []float64{0.3}, 0},
		{"the better of the first two", []float64{0.3, 0.5, 0.9}, 1},
		{"a tie goes to the first", []float64{0.5, 0.5}, 0},
		{"a third, better node is never looked at", []float64{0.2, 0.1, 0.9}, 0},
		{"a node scoring 0 or less is skipped for the next two", []float64{-0.1, 0.2, 0.3, 0.9}, 2},
		{"at most three are skipped", []float64{-0.1, -0.2, -0.3, -0.4, 0.1}, 4},
		{"skipped nodes are taken when too few others follow", []float64{-0.1, 0.2}, 1},
		{"only skipped nodes: the better of the first two skipped", []float64{-0.3, -0.1, -0.2}, 1},
	} {
		var buf []int
		if got := limitPick(inOrder(len(c.scores)), func(i int) float64 { return c.scores[i] }, &buf); got != c.want {
			t.Errorf("%s: picked %d, want %d", c.name, got, c.want)
		}
	}
	var buf []int
	if got := limitPick(inOrder(0), func(int) float64 { return 1 }, &buf); got != -1 {
		t.Errorf("no feasible node: picked %d, want -1", got)
	}
}

// TestPickerDrawsPairsUniformly: over four feasible nodes, the fuller
// wins each of the six pairs equally often: the fullest is picked in the
// three pairs it is in (1/2), the next in two (1/3), the third in one
// (1/6), the emptiest never.
func TestPickerDrawsPairsUniformly(t *testing.T) {
	p := newNomadPicker()
	used := []int{7, 5, 3, 0}
	counts := make([]int, len(used))
	const n = 60000
	feasible := make([]int, len(used))
	for range n {
		for i := range feasible {
			feasible[i] = i
		}
		counts[p.pick(feasible, func(i int) float64 { return NomadScore(used[i]+1, 8, 0, 1) })]++
	}
	for i, want := range []float64{1.0 / 2, 1.0 / 3, 1.0 / 6, 0} {
		if got := float64(counts[i]) / n; math.Abs(got-want) > 0.01 {
			t.Errorf("node %d (%d used): picked %.3f of the time, want %.3f", i, used[i], got, want)
		}
	}
}

// TestNomadChances: the exact chances agree with the pairs counted by
// hand (TestPickerDrawsPairsUniformly), a node already holding a member of
// a count-2 group is picked only when no other fits, and too many nodes
// are refused.
func TestNomadChances(t *testing.T) {
	for _, c := range []struct {
		name   string
		scores []float64
		want   []float64
	}{
		{"the fuller of a random pair", []float64{0.9, 0.7, 0.4, 0.1}, []float64{1.0 / 2, 1.0 / 3, 1.0 / 6, 0}},
		{"equal scores: each as likely", []float64{0.5, 0.5, 0.5}, []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}},
		{"a member's node is skipped: a random pair of the others", []float64{0, 0.3, 0.2, 0.1}, []float64{0, 2.0 / 3, 1.0 / 3, 0}},
		{"a member's node alone", []float64{0}, []float64{1}},
		{"no node", nil, []float64{}},
	} {
		got, err := NomadChances(c.scores)
		if err != nil {
			t.Fatal(err)
		}
		for i := range c.want {
			if math.Abs(got[i]-c.want[i]) > 1e-12 {
				t.Errorf("%s: chances %v, want %v", c.name, got, c.want)
				break
			}
		}
	}
	if _, err := NomadChances(make([]float64, 9)); err == nil || !strings.Contains(err.Error(), "9 nodes are too many") {
		t.Errorf("9 nodes: err %v", err)
	}
}
