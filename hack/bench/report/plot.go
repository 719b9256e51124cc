package main

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Line is one plotted series: medians at xs with their min–max spread.
type Line struct {
	Label    string
	Xs       []float64
	Stats    []Stat
	FitSlope float64 // y per x of the fitted line drawn beside it (0: none)
	FitIcpt  float64
}

var palette = []color.RGBA{{0x1f, 0x77, 0xb4, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x94, 0x67, 0xbd, 0xff}}

// medianErrors are plotter.XYs with y error bars from min to max.
type medianErrors struct {
	plotter.XYs
	plotter.YErrors
}

// PlotLines writes a PNG of lines (medians with min–max error bars, dashed fitted lines) on
// linear axes, width × height in cm.
func PlotLines(path, title, xLabel, yLabel string, lines []Line) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	for i, l := range lines {
		col := palette[i%len(palette)]
		d := medianErrors{XYs: make(plotter.XYs, len(l.Xs)), YErrors: make(plotter.YErrors, len(l.Xs))}
		for j, x := range l.Xs {
			s := l.Stats[j]
			d.XYs[j] = plotter.XY{X: x, Y: s.Median}
			d.YErrors[j] = struct{ Low, High float64 }{s.Median - s.Min, s.Max - s.Median}
		}
		ln, pts, err := plotter.NewLinePoints(d.XYs)
		if err != nil {
			return fmt.Errorf("%s: %w", l.Label, err)
		}
		ln.Color, pts.Color = col, col
		eb, err := plotter.NewYErrorBars(d)
		if err != nil {
			return fmt.Errorf("%s: %w", l.Label, err)
		}
		eb.Color = col
		p.Add(ln, pts, eb)
		p.Legend.Add(l.Label, ln, pts)
		if l.FitSlope != 0 && len(l.Xs) > 1 {
			f := plotter.NewFunction(func(x float64) float64 { return l.FitIcpt + l.FitSlope*x })
			f.Color = col
			f.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			f.XMin, f.XMax = l.Xs[0], l.Xs[len(l.Xs)-1]
			p.Add(f)
		}
	}
	p.Y.Min = 0
	return p.Save(16*vg.Centimeter, 10*vg.Centimeter, path)
}

// PlotBars writes a PNG of grouped bars: one group per label, one bar per series.
func PlotBars(path, title, yLabel string, groups []string, series map[string][]float64, order []string) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = yLabel
	p.Add(plotter.NewGrid())
	w := vg.Points(14)
	for i, name := range order {
		bars, err := plotter.NewBarChart(plotter.Values(series[name]), w)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		bars.Color = palette[i%len(palette)]
		bars.LineStyle.Width = 0
		bars.Offset = vg.Length(float64(i)-float64(len(order)-1)/2) * w
		p.Add(bars)
		p.Legend.Add(name, bars)
	}
	p.Legend.Top = true
	p.NominalX(groups...)
	return p.Save(16*vg.Centimeter, 9*vg.Centimeter, path)
}
