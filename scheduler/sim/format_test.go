package sim

import "testing"

func TestFormatSeconds(t *testing.T) {
	for s, want := range map[float64]string{5: "5s", 59: "59s", 120: "2m", 5400: "1.5h", 2 * 86400: "2.0d"} {
		if got := FormatSeconds(s); got != want {
			t.Errorf("FormatSeconds(%v) = %q, want %q", s, got, want)
		}
	}
}
