// Package plot draws the figures of `impact sim` with gonum/plot, as PNG:
// waiting-time CDFs per tier (one panel per tier, one line per policy),
// occupancy over time per policy against the bound, and GPUs held idle by
// partially placed gangs over time.
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
		p.Title.Text = fmt.Sprintf("waiting time, tier %s", tier)
		p.X.Label.Text = "waited at most"
		p.Y.Label.Text = "share of jobs"
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
			p.Legend.Add(res.Policy, l)
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

func timePlot(path, title, ylabel string, results []*sim.Result, value func(*sim.Result, sim.Sample) float64, bound bool) error {
	if len(results) == 0 {
		return nil
	}
	start := results[0].WindowStart
	end := results[0].WindowEnd
	p := gplot.New()
	p.Title.Text = title
	p.X.Label.Text = "days since the start of the window"
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	p.X.Min, p.X.Max = 0, float64(end-start)/86400
	p.Y.Min = 0
	p.Legend.Top = false
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(10)
	p.Legend.YOffs = vg.Points(10)
	if bound {
		res := results[0]
		pts := hourly(res, start, func(s sim.Sample) float64 { return 100 * float64(s.Bound) / float64(res.Capacity) })
		l, err := plotter.NewLine(clip(pts, p.X.Max))
		if err != nil {
			return err
		}
		l.Color = color.Black
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
		p.Legend.Add("bound min(capacity, demand) ("+res.Policy+")", l)
	}
	for k, res := range results {
		r := res
		pts := hourly(r, start, func(s sim.Sample) float64 { return value(r, s) })
		l, err := plotter.NewLine(clip(pts, p.X.Max))
		if err != nil {
			return err
		}
		l.Color = colour(r.Policy, k)
		l.Width = vg.Points(1.2)
		p.Add(l)
		p.Legend.Add(r.Policy, l)
	}
	p.Y.Min = 0
	if bound {
		p.Y.Max = 105
	} else if p.Y.Max <= 0 {
		p.Y.Max = 1 // nothing to show: keep the zero line at the bottom
	}
	return p.Save(14*vg.Inch, 5*vg.Inch, path)
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

// Occupancy draws allocated GPUs as a share of capacity per policy, hourly
// means over the submission window, with the bound.
func Occupancy(path string, results []*sim.Result) error {
	return timePlot(path, "occupancy: allocated GPUs / healthy GPUs (hourly mean)", "% of GPUs", results,
		func(r *sim.Result, s sim.Sample) float64 { return 100 * float64(s.Allocated) / float64(r.Capacity) }, true)
}

// PartialIdle draws GPUs held idle by partially placed gangs per policy.
func PartialIdle(path string, results []*sim.Result) error {
	return timePlot(path, "GPUs held idle by partially placed gangs (hourly mean)", "GPUs", results,
		func(_ *sim.Result, s sim.Sample) float64 { return float64(s.Partial) }, false)
}
