// Command scale measures what leaseguard's renewal rate limit (I6) buys at
// scale: how many lease writes reach storage without and with
// minRenewInterval, how many renewals are refused, and what deciding costs.
//
//	go run ./test/scale --mode=both --out docs
//
// Two modes:
//
//   - core: no cluster. N managers (10,000 by default), each renewing its own
//     bound Lease every retry period with client-go's semantics (a 429 is
//     answered by sleeping Retry-After, rounded up to whole seconds, and
//     re-sending the same body), replayed on a virtual clock against
//     policy.Decide.
//   - apiserver: a real kube-apiserver and etcd (test/controlplane) with the
//     real `leaseguard serve` binary behind leaseguard's webhook
//     configurations, and N real client-go leader electors, each with its own
//     impersonated clientset, renewing their bound Leases. A phase without
//     minRenewInterval, then the policy file is rewritten (leaseguard reloads
//     it) and a phase with it. Storage writes are counted from a watch,
//     denials from leaseguard's /metrics, CPU and memory from /proc.
//
// Results are printed as Markdown tables; the plots go to --out.
package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/leaseguard/leaseguard/test/perf/internal/procstat"
	"os"
	"path/filepath"
	"time"
)

type options struct {
	mode           string
	out            string
	interval       time.Duration
	retryPeriod    time.Duration
	coreManagers   int
	coreDuration   time.Duration
	coreRTT        time.Duration
	coreWarmup     time.Duration
	apiManagers    int
	apiDuration    time.Duration
	apiSettle      time.Duration
	apiStartSpread time.Duration
	seed           int64
}

func main() {
	var o options
	flag.StringVar(&o.mode, "mode", "both", "core, apiserver or both")
	flag.StringVar(&o.out, "out", "docs", "folder the PNG plots are written to")
	flag.DurationVar(&o.interval, "interval", 5*time.Second, "minRenewInterval of the rate-limited phase")
	flag.DurationVar(&o.retryPeriod, "retry-period", 2*time.Second, "the managers' leader-election retry period (client-go's default: 2s)")
	flag.IntVar(&o.coreManagers, "core-managers", 10000, "core mode: number of simulated managers")
	flag.DurationVar(&o.coreDuration, "core-duration", 120*time.Second, "core mode: virtual time simulated per phase")
	flag.DurationVar(&o.coreRTT, "core-rtt", 10*time.Millisecond, "core mode: simulated client-server round trip")
	flag.DurationVar(&o.coreWarmup, "core-warmup", 30*time.Second, "core mode: virtual time, not counted, over which the managers start")
	flag.IntVar(&o.apiManagers, "managers", 300, "apiserver mode: number of client-go leader electors")
	flag.DurationVar(&o.apiDuration, "duration", 60*time.Second, "apiserver mode: measured wall time per phase, rounded up to whole cycles of interval + retry period")
	flag.DurationVar(&o.apiSettle, "settle", 0, "apiserver mode: wait after the policy change before measuring (default 2*(interval+retry period))")
	flag.DurationVar(&o.apiStartSpread, "start-spread", 0, "apiserver mode: electors start at random times within this window (default: the retry period)")
	flag.Int64Var(&o.seed, "seed", 1, "random seed (start offsets)")
	flag.Parse()

	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.mode != "core" && o.mode != "apiserver" && o.mode != "both" {
		return fmt.Errorf("--mode %q: want core, apiserver or both", o.mode)
	}
	if o.interval <= 0 || o.retryPeriod <= 0 {
		return fmt.Errorf("--interval and --retry-period must be positive")
	}
	if o.coreManagers < 1 || o.apiManagers < 1 {
		return fmt.Errorf("--core-managers and --managers must be at least 1")
	}
	if o.coreDuration < time.Second || o.coreWarmup <= 0 || o.coreRTT < 0 || o.apiDuration < time.Second || o.apiSettle < 0 || o.apiStartSpread < 0 {
		return fmt.Errorf("--core-duration and --duration must be at least 1s, --core-warmup positive, --core-rtt, --settle and --start-spread not negative")
	}
	if o.apiSettle == 0 {
		o.apiSettle = 2 * (o.interval + o.retryPeriod)
	}
	// Measure whole throttled cycles (i+r): with managers renewing in step,
	// the writes of a cycle come in a burst, and a partial cycle would bias
	// the mean.
	if cycle := o.interval + o.retryPeriod; o.apiDuration%cycle != 0 {
		o.apiDuration = (o.apiDuration/cycle + 1) * cycle
	}
	o.apiDuration = o.apiDuration.Round(time.Second)
	if o.apiStartSpread == 0 {
		o.apiStartSpread = o.retryPeriod
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	fmt.Printf("# leaseguard scale run, %s, %d CPUs\n\n", time.Now().UTC().Format(time.RFC3339), procstat.NumCPU())
	fmt.Printf("command: %s\n\n", commandLine())

	if o.mode == "core" || o.mode == "both" {
		res, err := runCore(o)
		if err != nil {
			return fmt.Errorf("core mode: %w", err)
		}
		res.print(o)
		path := filepath.Join(o.out, "scale-core.png")
		if err := plotPhases(path, fmt.Sprintf("policy.Decide, %d simulated managers (virtual clock)", o.coreManagers),
			"virtual seconds", res.free.writesPerSecond(), res.limited.writesPerSecond(), res.predictedFree(o), res.predictedLimited(o), o); err != nil {
			return err
		}
		fmt.Printf("plot: %s\n\n", path)
	}
	if o.mode == "apiserver" || o.mode == "both" {
		// Bound the whole apiserver run in time, whatever happens.
		budget := 4*time.Minute + 2*o.apiDuration + o.apiSettle
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		res, err := runAPIServer(ctx, o)
		if err != nil {
			return fmt.Errorf("apiserver mode: %w", err)
		}
		res.print(o)
		path := filepath.Join(o.out, "scale-apiserver.png")
		if err := plotPhases(path, fmt.Sprintf("kube-apiserver + etcd + leaseguard, %d client-go electors", o.apiManagers),
			"seconds into the phase", res.free.writesSeries, res.limited.writesSeries, res.predictedFree(o), res.predictedLimited(o), o); err != nil {
			return err
		}
		fmt.Printf("plot: %s\n\n", path)
	}
	return nil
}

// predictedFactor is how many times fewer writes reach storage when a
// client renewing every retry period r is held to interval i: the first
// renewal after an admitted one comes r later, is refused with Retry-After
// i-r, and its retry (same body) is admitted at i; the next renewal, r after
// that, is already i past the stored renewTime and admitted at once. Two
// writes per i+r instead of one per r.
func predictedFactor(i, r time.Duration) float64 {
	if i <= r {
		return 1
	}
	return float64(i+r) / float64(2*r)
}

func commandLine() string {
	s := "go run ./test/scale"
	for _, a := range os.Args[1:] {
		s += " " + a
	}
	return s
}
