package main

import (
	"fmt"
	"image/color"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// plotPhases draws storage writes per second over the phase, without and
// with minRenewInterval, with the predicted rates as dashed lines.
func plotPhases(path, title, xLabel string, free, limited []float64, predictedFree, predictedLimited float64, o options) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = "storage writes/s (lease writes admitted)"
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = false

	blue := color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	orange := color.RGBA{R: 0xd6, G: 0x5f, B: 0x0e, A: 0xff}
	series := []struct {
		label     string
		ys        []float64
		predicted float64
		c         color.Color
	}{
		{"without leaseguard's rate limit", free, predictedFree, blue},
		{fmt.Sprintf("with minRenewInterval %s", o.interval), limited, predictedLimited, orange},
	}
	// Per second (thin) and, thick, the mean over a throttled cycle
	// (interval + retry period), the rate storage sustains.
	window := int((o.interval + o.retryPeriod + time.Second/2) / time.Second)
	maxY := 0.0
	for _, s := range series {
		xys := make(plotter.XYs, len(s.ys))
		for i, y := range s.ys {
			xys[i].X, xys[i].Y = float64(i)+0.5, y
			if y > maxY {
				maxY = y
			}
		}
		thin, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		thin.Color = lighter(s.c)
		thin.Width = vg.Points(0.75)
		p.Add(thin)
		p.Legend.Add(s.label+", per second", thin)

		if avg := movingMean(s.ys, window); len(avg) > 0 {
			thick, err := plotter.NewLine(avg)
			if err != nil {
				return err
			}
			thick.Color = s.c
			thick.Width = vg.Points(2.5)
			p.Add(thick)
			p.Legend.Add(fmt.Sprintf("%s, %d s mean", s.label, window), thick)
		}

		n := float64(len(s.ys))
		ref, err := plotter.NewLine(plotter.XYs{{X: 0, Y: s.predicted}, {X: n, Y: s.predicted}})
		if err != nil {
			return err
		}
		ref.Color = s.c
		ref.Width = vg.Points(1)
		ref.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(ref)
		p.Legend.Add(fmt.Sprintf("predicted %.0f/s", s.predicted), ref)
	}
	p.Y.Max = maxY * 1.6
	return p.Save(9*vg.Inch, 5*vg.Inch, path)
}

// movingMean is the mean of each full window of w seconds, placed at the
// window's centre.
func movingMean(ys []float64, w int) plotter.XYs {
	if w < 1 || len(ys) < w {
		return nil
	}
	var out plotter.XYs
	sum := 0.0
	for i, y := range ys {
		sum += y
		if i >= w {
			sum -= ys[i-w]
		}
		if i >= w-1 {
			out = append(out, plotter.XY{X: float64(i+1) - float64(w)/2, Y: sum / float64(w)})
		}
	}
	return out
}

// lighter mixes c with white.
func lighter(c color.Color) color.Color {
	r, g, b, _ := c.RGBA()
	mix := func(v uint32) uint8 { return uint8((v>>8 + 2*0xff) / 3) }
	return color.RGBA{R: mix(r), G: mix(g), B: mix(b), A: 0xff}
}
