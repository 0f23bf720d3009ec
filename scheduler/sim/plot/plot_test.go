package plot

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/impact-sched/nomad-impact/scheduler/sim"
)

func fakeResult(name string, partial int) *sim.Result {
	r := &sim.Result{Policy: name, Capacity: 16, WindowStart: 0, WindowEnd: 3 * 86400,
		Waits:                   map[string][]int64{"critical": {0, 5, 60, 3600}, "normal": {0, 86400}},
		WaitS:                   map[string]sim.Percentiles{"critical": {P99: 3600}, "normal": {P99: 86400}},
		PartialGangIdleGPUHours: float64(partial) * 72,
	}
	for t := int64(0); t <= 3*86400; t += 600 {
		r.Series = append(r.Series, sim.Sample{T: t, Allocated: 12, Partial: partial, Bound: 16})
	}
	return r
}

// TestAllWritesReadablePNGs: every figure is a PNG of the size it is
// drawn at, for results with and without partial gangs and with a tier
// nobody ran in.
func TestAllWritesReadablePNGs(t *testing.T) {
	dir := t.TempDir()
	files, err := All(dir, []*sim.Result{fakeResult("nomad-native", 4), fakeResult("impact", 0)})
	if err != nil {
		t.Fatal(err)
	}
	// Sizes in points (1/72 inch); vgimg renders at 96 dots per inch.
	px := func(pt float64) int { return int(pt * 96 / 72) }
	want := map[string][2]int{
		WaitCDFFile:     {px(1100), px(800)},
		OccupancyFile:   {px(14 * 72), px(2*2.3*72 + 20)},
		PartialIdleFile: {px(14 * 72), px(5*72 + 20)},
	}
	if len(files) != len(want) {
		t.Fatalf("files %v", files)
	}
	for name, size := range want {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := png.DecodeConfig(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// Allow rounding.
		if d := cfg.Width - size[0]; d < -2 || d > 2 {
			t.Errorf("%s: width %d, want about %d", name, cfg.Width, size[0])
		}
		if d := cfg.Height - size[1]; d < -2 || d > 2 {
			t.Errorf("%s: height %d, want about %d", name, cfg.Height, size[1])
		}
	}
}

func TestDayTicksLabelReadably(t *testing.T) {
	for _, c := range []struct {
		days        float64
		ticks, labs int
	}{{21, 22, 22}, {30, 31, 16}, {109, 110, 16}} {
		ts := dayTicks{c.days}.Ticks(0, c.days)
		labs := 0
		for _, tk := range ts {
			if tk.Label != "" {
				labs++
			}
		}
		if len(ts) != c.ticks || labs != c.labs {
			t.Errorf("%v days: %d ticks, %d labelled; want %d, %d", c.days, len(ts), labs, c.ticks, c.labs)
		}
	}
}
