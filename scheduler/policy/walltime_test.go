package policy

import (
	"strings"
	"testing"
	"time"
)

// The walltime block: off by default with its documented defaults; a file
// sets what it writes and keeps the rest.
func TestWalltimeBlock(t *testing.T) {
	d := Default().Walltime
	if d.Learn || d.Quantile != DefaultWalltimeQuantile || d.MinSamples != DefaultWalltimeMinSamples || d.Window != DefaultWalltimeWindow {
		t.Fatalf("default walltime %+v", d)
	}
	p, err := LoadBytes([]byte("walltime {\n  learn = true\n  running = true\n  quantile = 0.75\n  window = \"24h\"\n}\n"), "p.hcl")
	if err != nil {
		t.Fatal(err)
	}
	want := Walltime{Learn: true, Running: true, Quantile: 0.75, MinSamples: DefaultWalltimeMinSamples, Window: 24 * time.Hour}
	if p.Walltime != want {
		t.Fatalf("walltime %+v, want %+v", p.Walltime, want)
	}
	q, err := p.Overlay([]byte("walltime {\n  min_samples = 5\n}\n"), "q.hcl")
	if err != nil {
		t.Fatal(err)
	}
	want.MinSamples = 5
	if q.Walltime != want {
		t.Fatalf("overlaid walltime %+v, want %+v", q.Walltime, want)
	}
}

func TestWalltimeErrors(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"walltime {\n  quantile = 0\n}\n", `p.hcl:2: walltime quantile: must be a number in (0, 1], such as 0.9, got 0`},
		{"walltime {\n  learn = true\n  quantile = 1.5\n}\n", `p.hcl:3: walltime quantile: must be a number in (0, 1], such as 0.9, got 1.5`},
		{"walltime {\n  min_samples = 0\n}\n", `p.hcl:2: walltime min_samples: must be >= 1, got 0`},
		{"walltime {\n  window = \"0s\"\n}\n", `p.hcl:2: walltime window: must be > 0, got 0s`},
		{"walltime {\n  window = \"three days\"\n}\n", `p.hcl:2: walltime window: must be a duration such as "90s", "10m" or "24h", got "three days"`},
		{"walltime {\n  learn = \"yes\"\n}\n", `p.hcl:2`},
		{"walltime {\n  running = true\n}\n", `p.hcl:2: walltime running: needs learn = true`},
		{"walltime {\n  quantiles = 0.9\n}\n", `p.hcl:2`},
	} {
		_, err := LoadBytes([]byte(c.src), "p.hcl")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.src, err, c.want)
		}
	}
}
