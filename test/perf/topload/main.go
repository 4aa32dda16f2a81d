// Command topload measures `leaseguard top` at scale.
//
//	go run ./topload --mode=synthetic   # in-process, 10,000 leases every 2s
//	go run ./topload --mode=apiserver   # the real binary against a real API server
//
// synthetic: the client side of `leaseguard top --once` (client-go
// informer, transform, aggregator, one JSON report) fed by a synthetic
// list-watch that renews each of --leases Leases every --period (5,000
// events/s by default), in a child process per round, rounds alternating
// between the aggregator and a baseline informer that drops every event
// (sink=noop). Reported per round: events delivered, peak RSS, Go heap,
// CPU per event, and each lease's reported writes/s against the truth.
//
// apiserver: a real kube-apiserver and etcd (internal/controlplane), --leases
// Leases written by --writers goroutines every --period, and the real
// `leaseguard top --once -A -o json` binary watching them; its rates are
// compared with the writes the API server acknowledged, and its peak RSS
// read from the kernel (rusage).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/leaseguard/leaseguard/internal/top/leasetraffic"
	"github.com/leaseguard/leaseguard/internal/top/leasewatch"
	"github.com/leaseguard/leaseguard/internal/top/leasewatch/leasewatchtest"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
)

type options struct {
	mode       string
	leases     int
	namespaces int
	period     time.Duration
	window     time.Duration
	duration   time.Duration
	rounds     int
	sink       string
	writers    int
	child      bool
}

func main() {
	var o options
	flag.StringVar(&o.mode, "mode", "synthetic", "synthetic or apiserver")
	flag.IntVar(&o.leases, "leases", 10_000, "number of leases")
	flag.IntVar(&o.namespaces, "namespaces", 1000, "namespaces the leases are spread over")
	flag.DurationVar(&o.period, "period", 2*time.Second, "each lease is renewed every period")
	flag.DurationVar(&o.window, "window", 30*time.Second, "leaseguard top's --window")
	flag.DurationVar(&o.duration, "duration", 60*time.Second, "synthetic: how long each round feeds events before the report")
	flag.IntVar(&o.rounds, "rounds", 3, "synthetic: rounds per sink, interleaved")
	flag.StringVar(&o.sink, "sink", "", "synthetic child: aggregator or noop")
	flag.IntVar(&o.writers, "writers", 50, "apiserver: writer goroutines")
	flag.BoolVar(&o.child, "child", false, "run one synthetic round in this process (used by the parent)")
	flag.Parse()
	var err error
	switch {
	case o.child:
		err = childRound(o)
	case o.mode == "synthetic":
		err = synthetic(o)
	case o.mode == "apiserver":
		err = apiserver(o)
	default:
		err = fmt.Errorf("--mode %q: want synthetic or apiserver", o.mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "topload:", err)
		os.Exit(1)
	}
}

// roundResult is what one child process measured.
type roundResult struct {
	Sink            string  `json:"sink"`
	Events          int64   `json:"events"`
	EventsPerSecond float64 `json:"eventsPerSecond"`
	MaxLagMillis    float64 `json:"maxLagMillis"`
	PeakRSSMiB      float64 `json:"peakRSSMiB"`
	HeapInuseMiB    float64 `json:"heapInuseMiB"`
	CPUPerEventUs   float64 `json:"cpuPerEventMicros"`
	GCs             uint32  `json:"gcs"`
	ReportMillis    float64 `json:"reportMillis"`
	ReportBytes     int     `json:"reportBytes"`
	// Rate errors: each lease's reported writes/s against its renewals in
	// the window.
	Leases        int     `json:"leases"`
	MaxRateError  float64 `json:"maxRateError"`
	MeanRateError float64 `json:"meanRateError"`
	ClusterRate   float64 `json:"clusterRate"`
	TruthRate     float64 `json:"truthRate"`
}

func synthetic(o options) error {
	fmt.Printf("# leaseguard top, synthetic source: %d leases every %s (%.0f events/s), window %s, %s per round, %d CPUs, %s\n\n",
		o.leases, o.period, float64(o.leases)/o.period.Seconds(), o.window, o.duration, runtime.NumCPU(), time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("command: %s\n\n", strings.Join(os.Args, " "))
	fmt.Println("| round | sink | events/s | max lag | peak RSS | Go heap in use | CPU/event | report | max / mean rate error |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for r := 1; r <= o.rounds; r++ {
		for _, sink := range []string{"noop", "aggregator"} {
			args := []string{"-child", "-sink", sink, "-leases", strconv.Itoa(o.leases), "-namespaces", strconv.Itoa(o.namespaces),
				"-period", o.period.String(), "-window", o.window.String(), "-duration", o.duration.String()}
			out, err := exec.Command(self, args...).Output()
			if err != nil {
				return fmt.Errorf("round %d %s: %w", r, sink, err)
			}
			var res roundResult
			if err := json.Unmarshal(out, &res); err != nil {
				return fmt.Errorf("round %d %s: %w: %s", r, sink, err, out)
			}
			report, errors := "-", "-"
			if sink == "aggregator" {
				report = fmt.Sprintf("%.0f ms, %.1f MiB", res.ReportMillis, float64(res.ReportBytes)/(1<<20))
				errors = fmt.Sprintf("%.1f%% / %.2f%% (%d leases; cluster %.0f/s, truth %.0f/s)", 100*res.MaxRateError, 100*res.MeanRateError, res.Leases, res.ClusterRate, res.TruthRate)
			}
			fmt.Printf("| %d | %s | %.0f | %.0f ms | %.1f MiB | %.1f MiB | %.1f µs | %s | %s |\n",
				r, sink, res.EventsPerSecond, res.MaxLagMillis, res.PeakRSSMiB, res.HeapInuseMiB, res.CPUPerEventUs, report, errors)
		}
	}
	return nil
}

// noopSink drops every event: the baseline of an informer alone.
type noopSink struct{ delivered *atomic.Int64 }

func (s noopSink) Seed(*leasetraffic.Observation) {}
func (s noopSink) Observe(*leasetraffic.Observation, time.Time) {
	s.delivered.Add(1)
}
func (s noopSink) Delete(leaseobject.Resource, string, string) {}
func (s noopSink) Start(time.Time)                             {}

type countingAggregator struct {
	*leasetraffic.Aggregator
	delivered *atomic.Int64
}

func (c countingAggregator) Observe(o *leasetraffic.Observation, at time.Time) {
	c.Aggregator.Observe(o, at)
	c.delivered.Add(1)
}

func childRound(o options) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := &leasewatchtest.Leases{N: o.leases, Namespaces: o.namespaces}
	delivered := &atomic.Int64{}
	var sink leasewatch.Sink = noopSink{delivered}
	var agg *leasetraffic.Aggregator
	if o.sink == "aggregator" {
		agg = leasetraffic.New(leasetraffic.Options{Window: o.window})
		sink = countingAggregator{agg, delivered}
	}
	if _, err := leasewatch.StartSources(ctx, []leasewatch.Source{{Resource: leaseobject.Leases, ListerWatcher: src, Example: &coordinationv1.Lease{}}}, sink, nil); err != nil {
		return err
	}
	cpuStart := cpuTime()
	start := time.Now()
	// Renew lease i at start + k*period + i*period/N: an even stream.
	step := o.period / time.Duration(o.leases)
	var sent int64
	var maxLag time.Duration
	emitted := make([][]time.Time, o.leases) // emission times within the last window, for the truth
	for {
		due := start.Add(time.Duration(sent) * step)
		if due.Sub(start) >= o.duration {
			break
		}
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		} else if -wait > maxLag {
			maxLag = -wait
		}
		i := int(sent % int64(o.leases))
		now := time.Now()
		src.Renew(i, now)
		if now.Sub(start) >= o.duration-o.window-time.Second {
			emitted[i] = append(emitted[i], now)
		}
		sent++
	}
	for delivered.Load() < sent {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	res := roundResult{Sink: o.sink, Events: sent, EventsPerSecond: float64(sent) / elapsed.Seconds(), MaxLagMillis: float64(maxLag.Milliseconds())}
	if agg != nil {
		reportAt := time.Now()
		t := time.Now()
		r := agg.Report(reportAt, leasetraffic.ReportOptions{})
		data, err := json.Marshal(r)
		if err != nil {
			return err
		}
		res.ReportMillis = float64(time.Since(t).Microseconds()) / 1000
		res.ReportBytes = len(data)
		res.Leases, res.ClusterRate = len(r.Leases), r.Cluster.WritesPerSecond
		var sum float64
		for _, l := range r.Leases {
			idx, _ := strconv.Atoi(strings.TrimPrefix(l.Name, "leader-"))
			n := 0
			for _, at := range emitted[idx] {
				if at.After(reportAt.Add(-o.window)) {
					n++
				}
			}
			truth := float64(n) / o.window.Seconds()
			res.TruthRate += truth
			e := math.Abs(l.WritesPerSecond-truth) / truth
			sum += e
			res.MaxRateError = math.Max(res.MaxRateError, e)
		}
		res.MeanRateError = sum / float64(len(r.Leases))
	}
	res.CPUPerEventUs = float64((cpuTime() - cpuStart).Microseconds()) / float64(sent)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.HeapInuseMiB = float64(ms.HeapInuse) / (1 << 20)
	res.GCs = ms.NumGC
	res.PeakRSSMiB = peakRSSMiB()
	return json.NewEncoder(os.Stdout).Encode(res)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSSMiB reads VmHWM, the peak resident set size, from /proc.
func peakRSSMiB() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return -1
}
