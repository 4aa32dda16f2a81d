package main

import (
	"context"
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/tsdb"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// rateInterval stands for Grafana's $__rate_interval: four scrapes and a
// half, as Grafana computes it for a 2 s scrape at this resolution.
const rateInterval = "20s"

type line struct {
	name string
	xys  plotter.XYs
}

type panelResult struct {
	title, kind, unit string
	lines             []line
	value             float64
	hasValue          bool
}

type grafanaPanel struct {
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Panels      []grafanaPanel `json:"panels"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
}

var legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// evaluate runs every panel's queries over [start, end] (time series) or at
// end (stat), with Prometheus's engine against db.
func evaluate(db *tsdb.DB, dashboard []byte, start, end time.Time) ([]panelResult, error) {
	var d struct {
		Panels []grafanaPanel `json:"panels"`
	}
	if err := json.Unmarshal(dashboard, &d); err != nil {
		return nil, err
	}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	var flat []grafanaPanel
	for _, p := range d.Panels {
		if p.Type == "row" {
			flat = append(flat, p.Panels...)
			continue
		}
		flat = append(flat, p)
	}
	ctx := context.Background()
	var out []panelResult
	for _, p := range flat {
		r := panelResult{title: p.Title, kind: p.Type, unit: p.FieldConfig.Defaults.Unit}
		for _, tg := range p.Targets {
			expr := strings.NewReplacer("$__rate_interval", rateInterval, "$__interval", rateInterval).Replace(tg.Expr)
			if p.Type == "stat" {
				q, err := engine.NewInstantQuery(ctx, db, nil, expr, end)
				if err != nil {
					return nil, fmt.Errorf("panel %q: %w", p.Title, err)
				}
				res := q.Exec(ctx)
				if res.Err != nil {
					return nil, fmt.Errorf("panel %q: %w", p.Title, res.Err)
				}
				if v, err := res.Vector(); err == nil && len(v) > 0 {
					r.value, r.hasValue = v[0].F, true
				}
				q.Close()
				continue
			}
			q, err := engine.NewRangeQuery(ctx, db, nil, expr, start.Add(30*time.Second), end, scrape)
			if err != nil {
				return nil, fmt.Errorf("panel %q: %w", p.Title, err)
			}
			res := q.Exec(ctx)
			if res.Err != nil {
				return nil, fmt.Errorf("panel %q: %w", p.Title, res.Err)
			}
			m, err := res.Matrix()
			if err != nil {
				return nil, fmt.Errorf("panel %q: %w", p.Title, err)
			}
			for _, s := range m {
				name := legendLabel.ReplaceAllStringFunc(tg.LegendFormat, func(x string) string {
					return s.Metric.Get(legendLabel.FindStringSubmatch(x)[1])
				})
				l := line{name: name}
				for _, pt := range s.Floats {
					if math.IsNaN(pt.F) || math.IsInf(pt.F, 0) {
						continue
					}
					l.xys = append(l.xys, plotter.XY{X: float64(pt.T-start.UnixMilli()) / 1000, Y: pt.F})
				}
				if len(l.xys) > 0 {
					r.lines = append(r.lines, l)
				}
			}
			q.Close()
		}
		sort.Slice(r.lines, func(i, j int) bool { return r.lines[i].name < r.lines[j].name })
		out = append(out, r)
	}
	return out, nil
}

// drawPanels lays the panels out as the dashboard does: the stat panels in a row
// of their own, then the time series two to a row.
func drawPanels(panels []panelResult, path, title string) error {
	var stats, series []panelResult
	for _, p := range panels {
		if p.kind == "stat" {
			stats = append(stats, p)
		} else {
			series = append(series, p)
		}
	}
	const cols = 2
	rows := (len(series) + cols - 1) / cols
	width, statH, rowH, titleH := 16*vg.Inch, 1.2*vg.Inch, 3.6*vg.Inch, 0.5*vg.Inch
	height := titleH + statH + vg.Length(rows)*rowH
	img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(110))
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())

	heading := draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 16), XAlign: draw.XCenter, YAlign: draw.YCenter, Handler: plot.DefaultTextHandler}
	dc.FillText(heading, vg.Point{X: width / 2, Y: height - titleH/2}, title)

	// The stat panels: title and value.
	tileW := width / vg.Length(len(stats))
	for i, s := range stats {
		x0 := vg.Length(i) * tileW
		y0 := height - titleH - statH
		rect := vg.Rectangle{Min: vg.Point{X: x0 + 6, Y: y0 + 6}, Max: vg.Point{X: x0 + tileW - 6, Y: y0 + statH - 6}}
		dc.SetColor(color.RGBA{R: 0xf4, G: 0xf5, B: 0xf5, A: 0xff})
		dc.Fill(rect.Path())
		small := heading
		small.Font = font.From(plot.DefaultFont, 11)
		dc.FillText(small, vg.Point{X: x0 + tileW/2, Y: y0 + statH - 20}, s.title)
		value := "no data"
		if s.hasValue {
			value = fmt.Sprintf("%g", math.Round(s.value*100)/100)
		}
		big := heading
		big.Font = font.From(plot.DefaultFont, 26)
		dc.FillText(big, vg.Point{X: x0 + tileW/2, Y: y0 + statH/2 - 8}, value)
	}

	// The time series.
	area := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{Min: vg.Point{}, Max: vg.Point{X: width, Y: height - titleH - statH}}}
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: 12, PadY: 12, PadTop: 6, PadBottom: 6, PadLeft: 6, PadRight: 6}
	for i, s := range series {
		p := plot.New()
		p.Title.Text = s.title
		p.X.Label.Text = "seconds into the run"
		p.Y.Label.Text = unitLabel(s.unit)
		p.Y.Min = 0
		p.Legend.Top = true
		p.Legend.TextStyle.Font.Size = 8
		p.Add(plotter.NewGrid())
		if len(s.lines) == 0 {
			p.Title.Text += " (no data in this run)"
		}
		for j, l := range s.lines {
			ln, err := plotter.NewLine(l.xys)
			if err != nil {
				return err
			}
			ln.Color = plotutil.Color(j)
			ln.Width = vg.Points(1.5)
			p.Add(ln)
			p.Legend.Add(l.name, ln)
		}
		p.Draw(tiles.At(area, i%cols, i/cols))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	png := vgimg.PngCanvas{Canvas: img}
	if _, err := png.WriteTo(f); err != nil {
		return err
	}
	return f.Close()
}

func unitLabel(u string) string {
	switch u {
	case "reqps":
		return "per second"
	case "s":
		return "seconds"
	case "bytes":
		return "bytes"
	case "short":
		return "count"
	}
	return u
}

// printInstant prints expr's instant vector at t, one series a line.
func printInstant(db *tsdb.DB, expr string, t time.Time) error {
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	q, err := engine.NewInstantQuery(context.Background(), db, nil, strings.ReplaceAll(expr, "$__rate_interval", rateInterval), t)
	if err != nil {
		return err
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		return res.Err
	}
	fmt.Println(res.Value.String())
	return nil
}
