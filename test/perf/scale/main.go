// scale: what 10,000 namespace-mode managers cost the API server, unguarded
// and under each of leaseguard's renewal modes, side by side.
//
//	cd test/perf && go run ./scale --mode=both --out ../../docs
//
// Two ways of measuring (docs/scale.md):
//
//   - core: the decision core (policy.Decide, policy.Coalesce,
//     policy.Designate) against 10,000 simulated managers on a virtual clock,
//     each a client-go elector on its bound Lease and a Config Connector
//     candidate on the shared MultiClusterLease, with client-go's retry of a
//     429. No API server: it shows what the modes do at that scale.
//   - apiserver: a real kube-apiserver, etcd and `leaseguard serve`, with
//     real client-go electors (and standbys, for failover), and
//     KCC-shaped candidates; storage writes from a watch, requests by status
//     from the clients' transport, CPU from /proc, leaderships lost from the
//     electors, failover after killing holders.
//
// Modes: unguarded (no admission), limit (minRenewInterval 5s: a 429 and a
// retry per early renewal, losers 403) and coalesce (early renewals
// acknowledged without being stored, losers backed off until staleness).
// Results are printed as Markdown; the plots go to --out.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/test/procstat"
)

type options struct {
	mode          string
	out           string
	retryPeriod   time.Duration
	coreManagers  int
	coreDuration  time.Duration
	coreRTT       time.Duration
	coreWarmup    time.Duration
	apiManagers   int
	apiStandbys   int
	apiWatchers   int
	apiRounds     int
	apiCandidates int
	apiDuration   time.Duration
	apiSettle     time.Duration
	seed          int64
	modes         string
}

var runStart = time.Now()

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "scale: [%5.1fs] %s\n", time.Since(runStart).Seconds(), fmt.Sprintf(format, args...))
}

func main() {
	var o options
	flag.StringVar(&o.mode, "mode", "both", "core, apiserver or both")
	flag.StringVar(&o.out, "out", "docs", "folder the PNG plots are written to")
	flag.DurationVar(&o.retryPeriod, "retry-period", 2*time.Second, "the clients' retry period (client-go's default: 2s)")
	flag.IntVar(&o.coreManagers, "core-managers", 10000, "core: simulated managers")
	flag.DurationVar(&o.coreDuration, "core-duration", 120*time.Second, "core: virtual time per mode")
	flag.DurationVar(&o.coreRTT, "core-rtt", 10*time.Millisecond, "core: simulated round trip")
	flag.DurationVar(&o.coreWarmup, "core-warmup", 30*time.Second, "core: virtual time, not counted, over which the clients start")
	flag.IntVar(&o.apiManagers, "managers", 300, "apiserver: client-go electors, one per bound Lease")
	flag.IntVar(&o.apiStandbys, "standbys", 10, "apiserver: electors standing by on the first Leases, for failover")
	flag.IntVar(&o.apiCandidates, "candidates", 20, "apiserver: candidates on the shared MultiClusterLease")
	flag.IntVar(&o.apiWatchers, "watchers", 0, "apiserver: informers watching the namespace's Leases and MultiClusterLeases besides the counting one, each on its own connection (a cluster's controllers: the garbage collector, quota, leaseguard top, ...)")
	flag.DurationVar(&o.apiDuration, "duration", 60*time.Second, "apiserver: measured time per mode")
	flag.IntVar(&o.apiRounds, "rounds", 1, "apiserver: rounds of all the modes, interleaved; with more than one, the medians and the per-round ratios are printed too")
	flag.DurationVar(&o.apiSettle, "settle", 20*time.Second, "apiserver: time after switching modes before measuring")
	flag.Int64Var(&o.seed, "seed", 1, "random seed (start offsets)")
	flag.StringVar(&o.modes, "modes", defaultModes, "modes to measure, in this order, the first "+allModes[0].name+" (of: "+modeNames()+")")
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
	switch {
	case o.retryPeriod <= 0, o.coreManagers < 1, o.apiManagers < 1, o.apiCandidates < 2, o.apiStandbys < 0, o.apiStandbys > o.apiManagers, o.apiWatchers < 0, o.apiRounds < 1:
		return fmt.Errorf("--retry-period positive, --core-managers and --managers at least 1, --candidates at least 2, --standbys at most --managers, --watchers not negative, --rounds at least 1")
	case o.coreDuration < time.Second, o.coreWarmup <= 0, o.coreRTT < 0, o.apiDuration < time.Second, o.apiSettle < 0:
		return fmt.Errorf("--core-duration and --duration at least 1s, --core-warmup positive, --core-rtt and --settle not negative")
	}
	if err := selectModes(o.modes); err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	fmt.Printf("# leaseguard scale run, %s, %d CPUs\n\n", time.Now().UTC().Format(time.RFC3339), procstat.NumCPU())
	fmt.Printf("command: `cd test/perf && go run ./scale %s`\n\n", args())
	for _, m := range modes {
		fmt.Printf("- **%s**: %s\n", m.name, m.what)
	}
	fmt.Println()
	if o.mode == "core" || o.mode == "both" {
		res, err := runCore(o)
		if err != nil {
			return fmt.Errorf("core: %w", err)
		}
		printCore(o, res)
		path := filepath.Join(o.out, "scale-core.png")
		if err := plotCore(path, o, res); err != nil {
			return err
		}
		fmt.Printf("plot: %s\n\n", filepath.Base(path))
	}
	if o.mode == "apiserver" || o.mode == "both" {
		// Bound the whole run in time, whatever happens.
		budget := 4*time.Minute + time.Duration(len(modes)*o.apiRounds)*(o.apiDuration+o.apiSettle+4*leaseDuration)
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		res, err := runAPIServer(ctx, o)
		if err != nil {
			return fmt.Errorf("apiserver: %w", err)
		}
		printAPIServer(o, res)
		path := filepath.Join(o.out, "scale-apiserver.png")
		if err := plotAPIServer(path, o, res[:len(modes)]); err != nil {
			return err
		}
		fmt.Printf("plot: %s\n\n", filepath.Base(path))
	}
	return nil
}

func args() string {
	s := ""
	for i, a := range os.Args[1:] {
		if i > 0 {
			s += " "
		}
		s += a
	}
	return s
}

func printAPIServer(o options, res []*apiStats) {
	fmt.Printf("## through the API server: kube-apiserver %s + etcd + `leaseguard serve`, %d client-go electors (%d with a standby), %d candidates on the shared MultiClusterLease, %d watchers besides the counting one, %s per mode\n\n",
		controlplane.KubernetesVersion, o.apiManagers, o.apiStandbys, o.apiCandidates, o.apiWatchers, o.apiDuration)
	base := res[0]
	label := func(s *apiStats) string {
		if o.apiRounds == 1 {
			return s.mode
		}
		return fmt.Sprintf("%s (round %d)", s.mode, s.round)
	}
	fmt.Println("| mode | storage writes/s = watch events/s (Leases + shared) | × fewer | requests/s, Leases (by status) | requests/s, shared lease (by status) | × fewer on the shared lease | all lease requests/s | kube-apiserver CPU s per minute | leaderships lost | failover after a holder is killed: median / worst | shared lease: takeover after the designated candidate is killed |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range res {
		secs := s.window.Seconds()
		perMin := s.apiserverCPU / secs * 60
		takeover := "n/a (every candidate writes)"
		if s.takeover > 0 {
			takeover = s.takeover.Round(100 * time.Millisecond).String()
		} else if s.mode != "unguarded" {
			takeover = "not seen"
		}
		if s.mode == allModes[0].name {
			base = s // ratios against the same round's baseline
		}
		fmt.Printf("| %s | %.1f + %.2f | %.2f | %.1f (%s) | %.1f (%s) | %.2f | %.1f | %.1f | %d | %s / %s | %s |\n", label(s),
			float64(s.leaseWrites)/secs, float64(s.mclWrites)/secs, ratio(base.leaseWrites+base.mclWrites, s.leaseWrites+s.mclWrites),
			float64(sum(s.leaseRequests))/secs, byCode(s.leaseRequests, s.window), float64(sum(s.mclRequests))/secs, byCode(s.mclRequests, s.window),
			ratio(sum(base.mclRequests), sum(s.mclRequests)), float64(sum(s.leaseRequests)+sum(s.mclRequests))/secs, perMin, s.lost,
			quantile(s.failover, 0.5).Round(100*time.Millisecond), quantile(s.failover, 1).Round(100*time.Millisecond), takeover)
	}
	fmt.Println()
	fmt.Println("| mode | kube-apiserver | etcd | leaseguard | machine (all processes) |")
	fmt.Println("|---|---|---|---|---|")
	for _, s := range res {
		secs := s.window.Seconds()
		fmt.Printf("| %s | %.2f | %.2f | %.2f | %.2f |\n", label(s), s.cpu["kube-apiserver"]/secs, s.cpu["etcd"]/secs, s.cpu["leaseguard"]/secs, s.cpu[procstat.Machine]/secs)
	}
	fmt.Println("\n(cores busy on average during the measured window)")
	fmt.Println()
	if o.apiRounds > 1 {
		printRounds(res)
	}
}

// printRounds summarises interleaved rounds: per mode, the median of each
// figure and of its ratio to the same round's baseline.
func printRounds(res []*apiStats) {
	type acc struct{ cpu, cpuRatio, writes, writeRatio []float64 }
	byMode := map[string]*acc{}
	var order []string
	var base *apiStats
	for _, s := range res {
		if s.mode == allModes[0].name {
			base = s
		}
		a := byMode[s.mode]
		if a == nil {
			a = &acc{}
			byMode[s.mode] = a
			order = append(order, s.mode)
		}
		cpu := s.apiserverCPU / s.window.Seconds() * 60
		baseCPU := base.apiserverCPU / base.window.Seconds() * 60
		writes := float64(s.leaseWrites+s.mclWrites) / s.window.Seconds()
		a.cpu = append(a.cpu, cpu)
		a.cpuRatio = append(a.cpuRatio, cpu/baseCPU)
		a.writes = append(a.writes, writes)
		a.writeRatio = append(a.writeRatio, ratio(base.leaseWrites+base.mclWrites, s.leaseWrites+s.mclWrites))
	}
	fmt.Printf("Medians of %d interleaved rounds (each ratio against the same round's %s):\n\n", len(byMode[order[0]].cpu), order[0])
	fmt.Println("| mode | kube-apiserver CPU s per minute (each round) | median | CPU ÷ baseline, median (range) | storage writes/s, median | × fewer, median |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, name := range order {
		a := byMode[name]
		each := ""
		for i, c := range a.cpu {
			if i > 0 {
				each += ", "
			}
			each += fmt.Sprintf("%.1f", c)
		}
		fmt.Printf("| %s | %s | %.1f | %.2f (%.2f–%.2f) | %.1f | %.2f |\n", name, each, median(a.cpu), median(a.cpuRatio),
			slices.Min(a.cpuRatio), slices.Max(a.cpuRatio), median(a.writes), median(a.writeRatio))
	}
	fmt.Println()
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[int(q*float64(len(ds)-1))]
}
