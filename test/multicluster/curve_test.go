package multicluster

import (
	"context"
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/test/multicluster/kccmanager"
	"github.com/leaseguard/leaseguard/test/procstat"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
)

// The load curve (docs/multicluster.md, "Load as a curve"): N namespace-mode
// managers per cluster on the real protocol, without leaseguard and as
// shipped, in interleaved rounds, for N in CURVE_MANAGERS. It is a
// measurement, not a test of a figure: only what the design promises
// (nobody loses leadership, one cluster active) fails it. It runs only with
// the label filter `curve` (make measure-multicluster-curve).
var _ = Describe("the load curve", Label("curve"), func() {
	It("measures lease traffic against the number of managers, unguarded and as shipped", func(ctx SpecContext) {
		ns := curveManagers()
		rounds := envInt("CURVE_ROUNDS", 2)
		window := envDuration("CURVE_WINDOW", 45*time.Second)
		modes := []admission{admissionNone, admissionShipped, admissionFloor}
		points := map[string][]curvePoint{} // by mode and N
		for round := range rounds {
			for i, n := range ns {
				// Interleaved: each round and each N alternates which mode
				// runs first, so that drift on a shared machine falls on both.
				// (Three modes: rotated, so each runs first in turn.)
				order := slices.Clone(modes)
				k := (round + i) % len(order)
				order = append(order[k:], order[:k]...)
				for _, mode := range order {
					p := measurePoint(ctx, mode, n, window)
					GinkgoWriter.Printf("round %d, %d managers per cluster, %s: %+v\n", round+1, n, mode, p)
					points[curveKey(mode, n)] = append(points[curveKey(mode, n)], p)
				}
			}
		}
		report := curveReport(ns, modes, points, rounds, window)
		GinkgoWriter.Println(report)
		if path := os.Getenv("CURVE_REPORT"); path != "" {
			Expect(os.WriteFile(path, []byte(report), 0o644)).To(Succeed())
		}
		if path := os.Getenv("CURVE_PLOT"); path != "" {
			Expect(plotCurve(path, ns, modes, func(mode admission, n, col int) float64 {
				return median(points[curveKey(mode, n)], curveColumns[col].v)
			})).To(Succeed())
		}
		for key, ps := range points {
			for _, p := range ps {
				Expect(p.lost).To(BeZero(), "%s: leaderships lost", key)
				Expect(p.held).To(BeTrue(), "%s: no cluster had every manager leading", key)
			}
		}
	}, NodeTimeout(4*time.Hour))
})

// curvePoint is one window of one mode at one N: per minute, both clusters
// summed.
type curvePoint struct {
	sent, stored, watchEvents, reconciles, gcsWrites, cpu float64
	// webhookCalls: the API servers' own count of calls to leaseguard's
	// webhooks; reviews and guardCPU: leaseguard's count of reviews it
	// answered and its CPU seconds (both clusters' leaseguards).
	webhookCalls, reviews, guardCPU float64
	// writeP50 is the median round trip of the managers' write requests
	// (both clusters), in milliseconds: what a renewal waits for.
	writeP50 float64
	// held: one cluster had every manager leading when the window began;
	// lost counts leaderships lost and unintended exits in the window.
	held bool
	lost int
}

func curveKey(mode admission, n int) string { return fmt.Sprintf("%s/%d", mode, n) }

func measurePoint(ctx context.Context, mode admission, n int, window time.Duration) curvePoint {
	for _, c := range env.clusters {
		Expect(c.setAdmission(ctx, mode)).To(Succeed())
	}
	teams := make([]string, n)
	for i := range teams {
		teams[i] = fmt.Sprintf("team-%03d", i+1)
	}
	recorders := make([]*recorder, len(env.clusters))
	for i, c := range env.clusters {
		recorders[i] = startRecorder(c)
	}
	var floor func(string) *kccmanager.FloorRenewals
	if mode == admissionFloor {
		every := coalesceInterval()
		floor = func(team string) *kccmanager.FloorRenewals {
			return &kccmanager.FloorRenewals{Designated: team == teams[0], StoreEvery: every}
		}
	}
	f := startFleetWith(teams, floor)
	defer func() {
		for _, r := range recorders {
			r.stop()
		}
		f.stop(ctx)
	}()
	var p curvePoint
	// The election, then a lock period of steady state before counting.
	deadline := time.Now().Add(60*time.Second + time.Duration(n)*300*time.Millisecond)
	for time.Now().Before(deadline) && activeCluster(f) == nil {
		time.Sleep(500 * time.Millisecond)
	}
	p.held = activeCluster(f) != nil
	time.Sleep(15 * time.Second)

	type counters struct {
		sent, events, stored, reconciles, gcs int64
		lost                                  int64
		cpu, webhookCalls, reviews, guardCPU  float64
		at                                    time.Time
	}
	read := func() counters {
		var k counters
		for i, c := range env.clusters {
			sent, _ := writeRequests(f.all(c))
			k.sent += sent
			st := c.controller.Stats()
			k.reconciles += st.Reconciles
			k.gcs += st.LockWrites
			recorders[i].mu.Lock()
			k.events += int64(len(recorders[i].writes))
			for _, w := range recorders[i].writes {
				if w.spec {
					k.stored++
				}
			}
			recorders[i].mu.Unlock()
			for _, m := range f.all(c) {
				k.lost += m.Stats().Lost
			}
			calls, err := c.webhookCalls(ctx)
			Expect(err).NotTo(HaveOccurred())
			k.webhookCalls += calls
			families, err := c.guard.Metrics(ctx)
			Expect(err).NotTo(HaveOccurred())
			k.reviews += controlplane.Counter(families, "leaseguard_webhook_requests_total", nil)
			k.guardCPU += controlplane.Counter(families, "process_cpu_seconds_total", nil)
		}
		cpu, err := procstat.ChildrenCPU("kube-apiserver")
		Expect(err).NotTo(HaveOccurred())
		k.cpu, k.at = cpu, time.Now()
		return k
	}
	before := read()
	var profiled []<-chan struct{}
	for _, c := range env.clusters {
		profiled = append(profiled, profileAPIServer(ctx, c, mode, n, window))
	}
	time.Sleep(window)
	after := read()
	for _, done := range profiled {
		<-done
	}
	minutes := after.at.Sub(before.at).Minutes()
	perMinute := func(a, b int64) float64 { return float64(b-a) / minutes }
	p.sent = perMinute(before.sent, after.sent)
	p.stored = perMinute(before.stored, after.stored)
	p.watchEvents = perMinute(before.events, after.events)
	p.reconciles = perMinute(before.reconciles, after.reconciles)
	p.gcsWrites = perMinute(before.gcs, after.gcs)
	p.cpu = (after.cpu - before.cpu) / minutes
	p.webhookCalls = (after.webhookCalls - before.webhookCalls) / minutes
	p.reviews = (after.reviews - before.reviews) / minutes
	p.guardCPU = (after.guardCPU - before.guardCPU) / minutes
	var lat []float64
	for _, c := range env.clusters {
		for _, m := range f.all(c) {
			for _, d := range m.WriteLatencies(before.at, after.at) {
				lat = append(lat, float64(d)/float64(time.Millisecond))
			}
		}
	}
	sort.Float64s(lat)
	if len(lat) > 0 {
		p.writeP50 = lat[len(lat)/2]
	}
	p.lost = int(after.lost-before.lost) + len(unintendedExits(f))
	return p
}

func curveManagers() []int {
	v := os.Getenv("CURVE_MANAGERS")
	if v == "" {
		return []int{3, 10, 30, 100}
	}
	var out []int
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		Expect(err).NotTo(HaveOccurred(), "CURVE_MANAGERS=%q: want numbers separated by commas", v)
		Expect(n).To(BeNumerically(">", 0), "CURVE_MANAGERS=%q: want positive numbers", v)
		out = append(out, n)
	}
	return out
}

func envInt(name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	Expect(err).NotTo(HaveOccurred(), "%s=%q: want a number", name, v)
	Expect(n).To(BeNumerically(">", 0), "%s=%q: want a positive number", name, v)
	return n
}

func envDuration(name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	Expect(err).NotTo(HaveOccurred(), "%s=%q: want a duration such as 45s", name, v)
	Expect(d).To(BeNumerically(">", 0), "%s=%q: want a positive duration", name, v)
	return d
}

// median of the rounds' values.
func median(ps []curvePoint, v func(curvePoint) float64) float64 {
	xs := make([]float64, len(ps))
	for i, p := range ps {
		xs[i] = v(p)
	}
	sort.Float64s(xs)
	if len(xs) == 0 {
		return 0
	}
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

var curveColumns = []struct {
	name string
	v    func(curvePoint) float64
}{
	{"MCL write requests sent", func(p curvePoint) float64 { return p.sent }},
	{"MCL spec writes stored (generation bumps)", func(p curvePoint) float64 { return p.stored }},
	{"watch events", func(p curvePoint) float64 { return p.watchEvents }},
	{"controller reconciles", func(p curvePoint) float64 { return p.reconciles }},
	{"GCS writes", func(p curvePoint) float64 { return p.gcsWrites }},
	{"kube-apiserver CPU s", func(p curvePoint) float64 { return p.cpu }},
	{"webhook calls (API server's count)", func(p curvePoint) float64 { return p.webhookCalls }},
	{"webhook calls per write request", func(p curvePoint) float64 {
		if p.sent == 0 {
			return 0
		}
		return p.webhookCalls / p.sent
	}},
	{"leaseguard reviews", func(p curvePoint) float64 { return p.reviews }},
	{"leaseguard CPU s", func(p curvePoint) float64 { return p.guardCPU }},
	{"write request p50 ms", func(p curvePoint) float64 { return p.writeP50 }},
}

// againstFloor are the columns whose as-shipped figure is also given as a
// ratio to the floor's.
var againstFloor = map[string]bool{"kube-apiserver CPU s": true, "write request p50 ms": true}

func curveReport(ns []int, modes []admission, points map[string][]curvePoint, rounds int, window time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d interleaved rounds of %s per point; per minute, both clusters summed; medians (ratio to unguarded; kube-apiserver CPU and write p50 as shipped also to the floor).\n\n", rounds, window)
	b.WriteString("| managers per cluster | mode |")
	for _, c := range curveColumns {
		b.WriteString(" " + c.name + " |")
	}
	b.WriteString(" leaderships lost |\n|---|---|")
	for range curveColumns {
		b.WriteString("---|")
	}
	b.WriteString("---|\n")
	for _, n := range ns {
		base := points[curveKey(admissionNone, n)]
		for _, mode := range modes {
			ps := points[curveKey(mode, n)]
			fmt.Fprintf(&b, "| %d | %s |", n, modeShort(mode))
			lost := 0
			for _, p := range ps {
				lost += p.lost
			}
			for _, c := range curveColumns {
				m := median(ps, c.v)
				prec := 1
				if m != 0 && m < 0.1 {
					prec = 3
				}
				switch bm, fm := median(base, c.v), median(points[curveKey(admissionFloor, n)], c.v); {
				case mode == admissionNone || bm <= 0:
					fmt.Fprintf(&b, " %.*f |", prec, m)
				case mode == admissionShipped && againstFloor[c.name] && fm > 0:
					fmt.Fprintf(&b, " %.*f (%.2f×; %.2f× floor) |", prec, m, m/bm, m/fm)
				default:
					fmt.Fprintf(&b, " %.*f (%.2f×) |", prec, m, m/bm)
				}
			}
			fmt.Fprintf(&b, " %d |\n", lost)
		}
	}
	return b.String()
}

func modeShort(a admission) string {
	switch a {
	case admissionNone:
		return "unguarded"
	case admissionFloor:
		return "floor"
	}
	return "as shipped"
}

// coalesceInterval is the suite policy's coalescing interval (auto: what
// the declared client timings allow): how often the floor's designated
// client stores a renewal.
func coalesceInterval() time.Duration {
	src, err := os.ReadFile(env.policyPath)
	Expect(err).NotTo(HaveOccurred())
	p, err := policyfile.Parse(src, policy.CompileOptions{OwnNamespace: "leaseguard-system"})
	Expect(err).NotTo(HaveOccurred())
	Expect(p.Rules).NotTo(BeEmpty())
	d := p.Rules[0].View().CoalesceInterval
	Expect(d).To(BeNumerically(">", 0), "the suite's policy coalesces no renewal")
	return d
}

// plotCurve draws one panel per column: the median against N, a line per
// mode, on logarithmic axes.
func plotCurve(path string, ns []int, modes []admission, value func(mode admission, n, col int) float64) error {
	colors := []color.Color{color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}, color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}}
	const cols = 3
	rows := (len(curveColumns) + cols - 1) / cols
	img := vgimg.New(vg.Length(cols)*4.5*vg.Inch, vg.Length(rows)*3.5*vg.Inch)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Inch / 4, PadY: vg.Inch / 4, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	dc := draw.New(img)
	for i, col := range curveColumns {
		p := plot.New()
		p.Title.Text = col.name + " per minute"
		p.X.Label.Text = "managers per cluster"
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
		p.Add(plotter.NewGrid())
		for j, mode := range modes {
			xys := make(plotter.XYs, 0, len(ns))
			for _, n := range ns {
				if v := value(mode, n, i); v > 0 {
					xys = append(xys, plotter.XY{X: float64(n), Y: v})
				}
			}
			if len(xys) == 0 {
				continue
			}
			line, dots, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			line.Color, dots.Color = colors[j%len(colors)], colors[j%len(colors)]
			p.Add(line, dots)
			p.Legend.Add(modeShort(mode), line, dots)
		}
		// Whole decades: gonum fits a log axis to the data, so a flat
		// series (13.2 then 12.5 calls a minute) was drawn as a fall across
		// the panel, with no tick labelled.
		if p.Y.Min > 0 && p.Y.Max > 0 {
			p.Y.Min = math.Pow(10, math.Floor(math.Log10(p.Y.Min)))
			p.Y.Max = math.Pow(10, math.Ceil(math.Log10(p.Y.Max)))
			if p.Y.Max <= p.Y.Min {
				p.Y.Max = p.Y.Min * 10
			}
		}
		p.Legend.Top, p.Legend.Left = true, true
		p.Draw(tiles.At(dc, i%cols, i/cols)) // At takes the column, then the row
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	png := vgimg.PngCanvas{Canvas: img}
	if _, err := png.WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// profileAPIServer writes a CPU profile of a cluster's API server over the
// window to CURVE_PROFILE/<mode>-<N>-<cluster>-<time>.pprof when that
// directory is set (go tool pprof -top -diff_base with the floor's profiles
// shows where admission's cost goes; the active cluster, whose managers
// renew, changes from window to window, so compare both clusters' sums);
// the channel closes when it is written. It runs in every mode alike.
func profileAPIServer(ctx context.Context, c *cluster, mode admission, n int, window time.Duration) <-chan struct{} {
	done := make(chan struct{})
	dir := os.Getenv("CURVE_PROFILE")
	if dir == "" {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		defer GinkgoRecover()
		raw, err := c.admin.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", strconv.Itoa(int(window.Seconds()))).Timeout(window + time.Minute).DoRaw(ctx)
		Expect(err).NotTo(HaveOccurred(), "CURVE_PROFILE: the API server's CPU profile")
		Expect(os.MkdirAll(dir, 0o755)).To(Succeed())
		path := fmt.Sprintf("%s/%s-%d-%s-%s.pprof", dir, strings.Fields(string(mode))[0], n, c.name, time.Now().Format("150405"))
		Expect(os.WriteFile(path, raw, 0o644)).To(Succeed())
	}()
	return done
}
