package main

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var modeColors = []color.Color{
	color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}, // unguarded
	color.RGBA{R: 0xd6, G: 0x5f, B: 0x0e, A: 0xff}, // limit
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // coalesce
}

// panel is one bar chart: a value per mode.
type panel struct {
	title, unit string
	values      []float64
}

// plotPanels draws the panels side by side, a bar per mode in each.
func plotPanels(path, title string, names []string, panels []panel) error {
	const cols = 2
	rows := (len(panels) + cols - 1) / cols
	img := vgimg.New(vg.Length(cols)*6*vg.Inch, vg.Length(rows)*3.6*vg.Inch+0.5*vg.Inch)
	dc := draw.New(img)
	header := plot.New()
	header.Title.Text = title
	header.HideAxes()
	head := dc
	head.Min.Y = head.Max.Y - 0.5*vg.Inch
	header.Draw(head)
	body := dc
	body.Max.Y -= 0.5 * vg.Inch
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Inch / 4, PadY: vg.Inch / 4, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.Y.Label.Text = pn.unit
		p.Y.Min = 0
		p.Add(plotter.NewGrid())
		for j, v := range pn.values {
			bars, err := plotter.NewBarChart(plotter.Values{v}, vg.Points(40))
			if err != nil {
				return err
			}
			bars.Color = modeColors[j%len(modeColors)]
			bars.LineStyle.Width = 0
			bars.Offset = vg.Points(float64(j-len(pn.values)/2) * 45)
			p.Add(bars)
			p.Legend.Add(fmt.Sprintf("%s: %s", names[j], short(v)), bars)
		}
		p.Legend.Top = true
		p.NominalX("")
		p.Draw(tiles.At(body, i/cols, i%cols))
	}
	return writePNG(path, img)
}

func short(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func plotCore(path string, o options, res []*coreStats) error {
	names := make([]string, len(res))
	var writes, mcl, allReq, lost []float64
	for i, s := range res {
		names[i] = s.mode
		writes = append(writes, s.perSecond(s.leaseWrites+s.mclWrites))
		mcl = append(mcl, s.perSecond(sum(s.mclRequests)))
		allReq = append(allReq, s.perSecond(sum(s.leaseRequests)+sum(s.mclRequests)))
		lost = append(lost, float64(s.lost))
	}
	return plotPanels(path, fmt.Sprintf("decision core, %d managers (virtual clock)", o.coreManagers), names, []panel{
		{"storage writes = watch events", "per second", writes},
		{"requests on the shared MultiClusterLease", "per second (all statuses, retries)", mcl},
		{"all lease requests", "per second", allReq},
		{"renew attempts past the renew deadline", "count", lost},
	})
}

func plotAPIServer(path string, o options, res []*apiStats) error {
	names := make([]string, len(res))
	var writes, mcl, cpu, failover []float64
	for i, s := range res {
		names[i] = s.mode
		secs := s.window.Seconds()
		writes = append(writes, float64(s.leaseWrites+s.mclWrites)/secs)
		mcl = append(mcl, float64(sum(s.mclRequests))/secs)
		cpu = append(cpu, s.apiserverCPU/secs*60)
		failover = append(failover, quantile(s.failover, 0.5).Seconds())
	}
	return plotPanels(path, fmt.Sprintf("kube-apiserver + etcd + leaseguard, %d client-go electors, %d candidates", o.apiManagers, o.apiCandidates), names, []panel{
		{"storage writes = watch events", "per second", writes},
		{"requests on the shared MultiClusterLease", "per second (all statuses, retries)", mcl},
		{"kube-apiserver CPU", "CPU seconds per minute", cpu},
		{"failover after a holder is killed (median)", "seconds", failover},
	})
}

// writePNG writes the canvas to path.
func writePNG(path string, img *vgimg.Canvas) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
