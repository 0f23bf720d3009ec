// Package plot draws the figures of `impact sim` with gonum/plot, as PNG:
// waiting-time CDFs per tier (one panel per tier, one line per policy, log
// time axis, each policy's p99 in the legend), occupancy over time (one
// panel per policy against its own bound, GPUs idle in partial gangs
// shaded, the window's figures in the title), and GPUs held idle by
// partially placed gangs over time (each policy's total in the legend).
package plot

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/impact-sched/nomad-impact/scheduler/sim"
	"github.com/impact-sched/nomad-impact/scheduler/sim/trace"
)

// Files written by All, relative to the output directory.
const (
	WaitCDFFile     = "wait_cdf.png"
	OccupancyFile   = "occupancy.png"
	PartialIdleFile = "partial_gang_idle.png"
)

// palette gives each policy a stable colour by position.
var palette = []color.Color{
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, // red
	color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}, // grey
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}, // orange
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // blue
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
}

// policyColour keeps a policy's colour the same in every figure and run.
var policyColour = map[string]color.Color{
	"nomad-native": palette[0],
	"fifo-gang":    palette[1],
	"backfill":     palette[2],
	"impact":       palette[3],
}

func colour(policy string, i int) color.Color {
	if c, ok := policyColour[policy]; ok {
		return c
	}
	return palette[(4+i)%len(palette)]
}

// All writes every figure into dir and returns their paths.
func All(dir string, results []*sim.Result) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create plot directory: %w", err)
	}
	var out []string
	for _, f := range []struct {
		name string
		draw func(string, []*sim.Result) error
	}{
		{WaitCDFFile, WaitCDF},
		{OccupancyFile, Occupancy},
		{PartialIdleFile, PartialIdle},
	} {
		p := filepath.Join(dir, f.name)
		if err := f.draw(p, results); err != nil {
			return out, fmt.Errorf("plot %s: %w", f.name, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// cdfPoints turns waits into at most n (x, y) points of the empirical CDF,
// x in minutes (at least minX, so a log axis can show zero waits).
func cdfPoints(waits []int64, n int, minX float64) plotter.XYs {
	if len(waits) == 0 {
		return nil
	}
	w := append([]int64(nil), waits...)
	sort.Slice(w, func(a, b int) bool { return w[a] < w[b] })
	step := max(1, len(w)/n)
	var pts plotter.XYs
	for i := 0; i < len(w); i += step {
		pts = append(pts, plotter.XY{X: math.Max(minX, float64(w[i])/60), Y: float64(i+1) / float64(len(w))})
	}
	pts = append(pts, plotter.XY{X: math.Max(minX, float64(w[len(w)-1])/60), Y: 1})
	return pts
}

// logTicks labels a minutes axis at readable durations.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []gplot.Tick {
	marks := []struct {
		v float64
		l string
	}{{0.1, "≤6s"}, {1, "1m"}, {10, "10m"}, {60, "1h"}, {600, "10h"}, {1440, "1d"}, {10080, "1w"}}
	var out []gplot.Tick
	for _, m := range marks {
		if m.v >= lo && m.v <= hi {
			out = append(out, gplot.Tick{Value: m.v, Label: m.l})
		}
	}
	return out
}

// WaitCDF draws one panel per tier: the share of jobs that waited at most
// x, per policy (higher and further left is better).
func WaitCDF(path string, results []*sim.Result) error {
	const minX = 0.1 // minutes
	rows, cols := 2, 2
	plots := make([][]*gplot.Plot, rows)
	for r := range plots {
		plots[r] = make([]*gplot.Plot, cols)
	}
	maxX := minX * 10
	for _, res := range results {
		for _, ws := range res.Waits {
			for _, w := range ws {
				maxX = math.Max(maxX, float64(w)/60)
			}
		}
	}
	for i, tier := range trace.Tiers {
		if i >= rows*cols {
			break
		}
		p := gplot.New()
		n := 0
		for _, res := range results {
			n = max(n, len(res.Waits[tier]))
		}
		p.Title.Text = fmt.Sprintf("tier %s (%d jobs): share of jobs that waited at most x from submit to start", tier, n)
		p.Title.Padding = vg.Points(4)
		// Short: gonum places this label's glyph box at the linear midpoint
		// of a log axis, near its right end, and pads the plot by its width.
		p.X.Label.Text = "x (log scale)"
		p.Y.Label.Text = "share of the tier's jobs"
		p.X.Scale = gplot.LogScale{}
		p.X.Tick.Marker = logTicks{}
		p.X.Min, p.X.Max = minX, maxX
		p.Y.Min, p.Y.Max = 0, 1
		p.Add(plotter.NewGrid())
		p.Legend.Top = false
		p.Legend.Left = false
		for k, res := range results {
			pts := cdfPoints(res.Waits[tier], 400, minX)
			if len(pts) == 0 {
				continue
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color = colour(res.Policy, k)
			l.Width = vg.Points(1.5)
			p.Add(l)
			p.Legend.Add(fmt.Sprintf("%s (p99 %s)", res.Policy, sim.FormatSeconds(res.WaitS[tier].P99)), l)
		}
		plots[i/cols][i%cols] = p
	}
	img := vgimg.New(vg.Points(1100), vg.Points(800))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(20), PadY: vg.Points(20), PadTop: vg.Points(10), PadBottom: vg.Points(10), PadLeft: vg.Points(10), PadRight: vg.Points(10)}
	canvases := gplot.Align(plots, tiles, dc)
	for r := range plots {
		for c := range plots[r] {
			if plots[r][c] != nil {
				plots[r][c].Draw(canvases[r][c])
			}
		}
	}
	return writePNG(path, img)
}

func writePNG(path string, img *vgimg.Canvas) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// hourly averages a series' value per hour, in days since start.
func hourly(res *sim.Result, start int64, value func(sim.Sample) float64) plotter.XYs {
	var pts plotter.XYs
	bucket, sum, n := int64(-1), 0.0, 0
	flush := func() {
		if n > 0 {
			pts = append(pts, plotter.XY{X: float64(bucket) / 24, Y: sum / float64(n)})
		}
	}
	for _, s := range res.Series {
		b := (s.T - start) / 3600
		if b != bucket {
			flush()
			bucket, sum, n = b, 0, 0
		}
		sum += value(s)
		n++
	}
	flush()
	return pts
}

func clip(pts plotter.XYs, maxX float64) plotter.XYs {
	out := pts[:0:0]
	for _, pt := range pts {
		if pt.X >= 0 && pt.X <= maxX {
			out = append(out, pt)
		}
	}
	if len(out) == 0 {
		out = append(out, plotter.XY{})
	}
	return out
}

// dayTicks marks every day of a window of days, labelling every day of a
// short window and every other day of a longer one.
type dayTicks struct{ days float64 }

func (d dayTicks) Ticks(lo, hi float64) []gplot.Tick {
	step := 1.0
	switch {
	case d.days > 60:
		step = 7
	case d.days > 25:
		step = 2
	}
	var out []gplot.Tick
	for v := math.Ceil(lo); v <= hi; v++ {
		t := gplot.Tick{Value: v}
		if math.Mod(v, step) == 0 {
			t.Label = fmt.Sprintf("%.0f", v)
		}
		out = append(out, t)
	}
	return out
}

// tint is c mixed with white: a fill that keeps lines on it readable.
func tint(c color.Color, keep float64) color.Color {
	r, g, b, _ := c.RGBA()
	mix := func(v uint32) uint8 { return uint8(float64(v>>8)*keep + 255*(1-keep)) }
	return color.RGBA{R: mix(r), G: mix(g), B: mix(b), A: 0xff}
}

// idleColour marks GPUs held idle by partial gangs: dark, so it stands out
// on every policy's tint (nomad-native's colour is red).
var idleColour = color.RGBA{R: 0x3b, G: 0x0a, B: 0x45, A: 0xff}

// stack draws one panel per result, one above the other with a shared
// time axis, at panelHeight each, and writes the PNG.
func stack(path string, panels []*gplot.Plot, panelHeight vg.Length) error {
	rows := make([][]*gplot.Plot, len(panels))
	for i, p := range panels {
		rows[i] = []*gplot.Plot{p}
	}
	img := vgimg.New(14*vg.Inch, panelHeight*vg.Length(len(panels))+vg.Points(20))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadY: vg.Points(14), PadTop: vg.Points(10), PadBottom: vg.Points(10), PadLeft: vg.Points(10), PadRight: vg.Points(20)}
	canvases := gplot.Align(rows, tiles, dc)
	for i, p := range panels {
		p.Draw(canvases[i][0])
	}
	return writePNG(path, img)
}

func window(results []*sim.Result) (start int64, days float64) {
	start = results[0].WindowStart
	return start, float64(results[0].WindowEnd-start) / 86400
}

// Occupancy draws, one panel per policy, allocated GPUs as a share of
// capacity (hourly means over the submission window) against that
// policy's own bound min(capacity, outstanding demand), with the part held
// idle by partially placed gangs shaded red. Each panel's title gives the
// window's figures from report.json.
func Occupancy(path string, results []*sim.Result) error {
	if len(results) == 0 {
		return nil
	}
	start, days := window(results)
	var panels []*gplot.Plot
	for k, res := range results {
		r := res
		p := gplot.New()
		p.Title.Text = fmt.Sprintf("%s: occupancy %.1f%% of GPU-hours, %.1f%% of the bound (hourly means)", r.Policy, 100*r.Occupancy, 100*r.OccupancyVsBound)
		p.Title.Padding = vg.Points(4)
		p.X.Min, p.X.Max = 0, days
		p.X.Tick.Marker = dayTicks{days}
		p.Y.Min, p.Y.Max = 0, 105
		p.Y.Label.Text = "% of GPUs"
		p.Add(plotter.NewGrid())
		pct := func(v int) float64 { return 100 * float64(v) / float64(r.Capacity) }
		alloc, err := plotter.NewLine(clip(hourly(r, start, func(s sim.Sample) float64 { return pct(s.Allocated) }), days))
		if err != nil {
			return err
		}
		alloc.Color = colour(r.Policy, k)
		alloc.FillColor = tint(alloc.Color, 0.3)
		alloc.Width = vg.Points(1)
		bound, err := plotter.NewLine(clip(hourly(r, start, func(s sim.Sample) float64 { return pct(s.Bound) }), days))
		if err != nil {
			return err
		}
		bound.Color = color.Black
		bound.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		idle, err := plotter.NewLine(clip(hourly(r, start, func(s sim.Sample) float64 { return pct(s.Partial) }), days))
		if err != nil {
			return err
		}
		idle.Color = idleColour
		idle.FillColor = idleColour
		p.Add(alloc)
		if r.PartialGangIdleGPUHours > 0 {
			p.Add(idle)
		}
		p.Add(bound)
		if k == 0 {
			p.Legend.Add("allocated", alloc)
			p.Legend.Add("held idle by partially placed gangs", idle)
			p.Legend.Add("bound: min(capacity, GPUs asked by submitted jobs)", bound)
			p.Legend.Top, p.Legend.Left = false, false
			p.Legend.XOffs, p.Legend.YOffs = -vg.Points(10), vg.Points(8)
		}
		if k == len(results)-1 {
			p.X.Label.Text = "days since the start of the submission window"
		}
		panels = append(panels, p)
	}
	return stack(path, panels, 2.3*vg.Inch)
}

// PartialIdle draws GPUs held idle by partially placed gangs per policy
// (hourly means), with each policy's total in the legend.
func PartialIdle(path string, results []*sim.Result) error {
	if len(results) == 0 {
		return nil
	}
	start, days := window(results)
	p := gplot.New()
	p.Title.Text = "GPUs held idle by partially placed gangs (hourly means; total over the run in the legend)"
	p.Title.Padding = vg.Points(4)
	p.X.Label.Text = "days since the start of the submission window"
	p.Y.Label.Text = "idle GPUs"
	p.X.Min, p.X.Max = 0, days
	p.X.Tick.Marker = dayTicks{days}
	p.Add(plotter.NewGrid())
	top := 0.0
	for k, res := range results {
		r := res
		pts := clip(hourly(r, start, func(s sim.Sample) float64 { return float64(s.Partial) }), days)
		for _, pt := range pts {
			top = math.Max(top, pt.Y)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = colour(r.Policy, k)
		l.Width = vg.Points(1.2)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s: %.0f GPU-h", r.Policy, r.PartialGangIdleGPUHours), l)
	}
	p.Legend.Top, p.Legend.Left = true, false
	p.Legend.XOffs = -vg.Points(10)
	p.Y.Min = 0
	// Headroom for the legend; a run with no partial gang keeps an axis.
	p.Y.Max = math.Max(1, top*1.3)
	return stack(path, []*gplot.Plot{p}, 5*vg.Inch)
}
