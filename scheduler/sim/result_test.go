package sim

import "testing"

// TestPercentileNearestRank: the p-th percentile is the smallest value
// with at least p% of the values at or below it.
func TestPercentileNearestRank(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1)
	}
	cases := []struct {
		vals []float64
		p    float64
		want float64
	}{
		{nil, 99, 0},
		{[]float64{7}, 50, 7},
		{[]float64{7}, 99, 7},
		{[]float64{1, 2}, 50, 1},
		{[]float64{1, 2}, 51, 2},
		{[]float64{1, 2, 3, 4}, 95, 4},
		{hundred, 50, 50},
		{hundred, 95, 95},
		{hundred, 99, 99},
		{hundred, 100, 100},
	}
	for _, c := range cases {
		if got := Percentile(c.vals, c.p); got != c.want {
			t.Errorf("p%v of %d values = %v, want %v", c.p, len(c.vals), got, c.want)
		}
	}
}
