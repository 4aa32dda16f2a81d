package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/leaseguard/leaseguard/test/perf/internal/procstat"
	"math/rand"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/leaseguard/leaseguard/internal/controlplane"
	"github.com/leaseguard/leaseguard/webhook/policy"
)

// apiPhase is what one measured phase of apiserver mode saw.
type apiPhase struct {
	name   string
	window time.Duration

	// From the watch: every ADDED/MODIFIED event is a write that reached
	// storage.
	writes       int64
	writesSeries []float64 // per second of the phase
	maxGap       time.Duration
	gaps         [17]int64
	// meanGap is the mean time between consecutive writes to one lease;
	// managers/meanGap estimates writes/s free of where the window cuts the
	// bursts of managers renewing in step.
	meanGap time.Duration

	// From leaseguard's /metrics (validating webhook decisions).
	decisions float64
	denials   float64

	// From the electors' transport: every HTTP request they sent.
	requests   int64
	byCode     map[int]int64
	latencies  []time.Duration // of 2xx answers
	lostLeader int64

	// From /proc, per process: CPU seconds used in the window, RSS at its end.
	cpu map[string]float64
	rss map[string]int64
}

type apiResult struct {
	managers int
	acquire  time.Duration
	free     apiPhase
	limited  apiPhase
	reload   time.Duration
	idle     map[string]float64 // cores busy per process before the electors start
}

const idleWindow = 10 * time.Second

var runStart = time.Now()

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "scale: [%5.1fs] %s\n", time.Since(runStart).Seconds(), fmt.Sprintf(format, args...))
}

func (r *apiResult) predictedFree(o options) float64 {
	return float64(o.apiManagers) / o.retryPeriod.Seconds()
}

func (r *apiResult) predictedLimited(o options) float64 {
	return r.predictedFree(o) / predictedFactor(o.interval, o.retryPeriod)
}

// transportStats counts and times the requests of all electors.
type transportStats struct {
	mu        sync.Mutex
	total     atomic.Int64
	limit     int64
	recording bool
	byCode    map[int]int64
	latencies []time.Duration
}

func (s *transportStats) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recording, s.byCode, s.latencies = true, map[int]int64{}, nil
}

func (s *transportStats) stop() (int64, map[int]int64, []time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recording = false
	var n int64
	for _, c := range s.byCode {
		n += c
	}
	return n, s.byCode, s.latencies
}

type countingTransport struct {
	next  http.RoundTripper
	stats *transportStats
}

var errRequestBudget = errors.New("scale: request budget exhausted")

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if n := t.stats.total.Add(1); n > t.stats.limit {
		return nil, errRequestBudget
	}
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	took := time.Since(start)
	t.stats.mu.Lock()
	if t.stats.recording {
		code := 0
		if err == nil {
			code = resp.StatusCode
		}
		t.stats.byCode[code]++
		if code >= 200 && code < 300 {
			t.stats.latencies = append(t.stats.latencies, took)
		}
	}
	t.stats.mu.Unlock()
	return resp, err
}

// writeCounter counts storage writes from a watch, per second of the current
// phase.
type writeCounter struct {
	mu       sync.Mutex
	active   bool
	start    time.Time
	buckets  []float64
	total    int64
	last     map[string]time.Time
	maxGap   time.Duration
	gaps     [17]int64 // gaps between writes to one lease, by whole seconds (16: 16s or more)
	gapSum   time.Duration
	gapCount int64
	restarts int
}

func (c *writeCounter) begin(seconds int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active, c.start, c.buckets, c.total, c.maxGap, c.gaps = true, time.Now(), make([]float64, seconds), 0, 0, [17]int64{}
	c.gapSum, c.gapCount = 0, 0
}

func (c *writeCounter) end() (int64, []float64, time.Duration, time.Duration, [17]int64, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active = false
	var meanGap time.Duration
	if c.gapCount > 0 {
		meanGap = c.gapSum / time.Duration(c.gapCount)
	}
	return c.total, c.buckets, time.Since(c.start), c.maxGap, c.gaps, meanGap
}

func (c *writeCounter) record(name string, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, seen := c.last[name]
	c.last[name] = now
	if !c.active {
		return
	}
	if seen {
		gap := now.Sub(prev)
		if gap > c.maxGap {
			c.maxGap = gap
		}
		c.gaps[min(int(gap/time.Second), len(c.gaps)-1)]++
		c.gapSum += gap
		c.gapCount++
	}
	c.total++
	if s := int(now.Sub(c.start) / time.Second); s >= 0 && s < len(c.buckets) {
		c.buckets[s]++
	}
}

// watchWrites follows the Leases of the namespace until ctx ends,
// re-watching from the last resourceVersion when the API server closes the
// watch.
func watchWrites(ctx context.Context, cs kubernetes.Interface, c *writeCounter) error {
	leases := cs.CoordinationV1().Leases(simNamespace)
	list, err := leases.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	rv := list.ResourceVersion
	go func() {
		for ctx.Err() == nil {
			w, err := leases.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				if ctx.Err() == nil {
					fmt.Fprintln(os.Stderr, "scale: watch:", err)
					time.Sleep(time.Second)
				}
				continue
			}
			for ev := range w.ResultChan() {
				if l, ok := ev.Object.(*coordinationv1.Lease); ok {
					rv = l.ResourceVersion
					if ev.Type == watch.Added || ev.Type == watch.Modified {
						c.record(l.Name, time.Now())
					}
				}
			}
			w.Stop()
			c.mu.Lock()
			c.restarts++
			c.mu.Unlock()
		}
	}()
	return nil
}

func runAPIServer(ctx context.Context, o options) (*apiResult, error) {
	// client-go's leader election logs through klog; thousands of electors
	// would drown the report.
	klog.SetLogger(logr.Discard())

	tmp, err := os.MkdirTemp("", "leaseguard-scale-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	progress("building leaseguard, starting kube-apiserver and etcd ...")
	binary, err := controlplane.BuildLeaseguard(tmp)
	if err != nil {
		return nil, err
	}
	cp, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		return nil, err
	}
	defer func() { _ = cp.Stop() }()
	if u, err := url.Parse(cp.Config.Host); err != nil || u.Hostname() != "127.0.0.1" {
		return nil, fmt.Errorf("control plane at %q, want 127.0.0.1: refusing to send load elsewhere", cp.Config.Host)
	}

	policyPath := filepath.Join(tmp, "policy.yaml")
	if err := os.WriteFile(policyPath, []byte(policyYAML(0)), 0o600); err != nil {
		return nil, err
	}
	guard, err := cp.StartLeaseguard(binary, policyPath)
	if err != nil {
		return nil, err
	}
	defer guard.Stop()
	// Deferred last, so run first: the watch and the electors end before
	// leaseguard and the control plane stop.
	ctx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()

	procs, err := procstat.FindChildren(map[string]bool{"kube-apiserver": true, "etcd": true, "leaseguard": true})
	if err != nil {
		return nil, err
	}
	procs["scale (electors, watch)"] = os.Getpid()

	admin, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return nil, err
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: simNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	// What the processes use with no lease traffic, for reference.
	progress("measuring the idle control plane for %s ...", idleWindow)
	idle0 := procstat.ReadCPU(procs)
	sleep(ctx, idleWindow)
	idle1 := procstat.ReadCPU(procs)
	idle := map[string]float64{}
	for name := range idle1 {
		idle[name] = (idle1[name] - idle0[name]) / idleWindow.Seconds()
	}

	counter := &writeCounter{last: map[string]time.Time{}}
	if err := watchWrites(ctx, admin, counter); err != nil {
		return nil, err
	}

	// Every elector request goes through one counting transport, and is
	// bounded in number: at most two requests per elector per second of the
	// whole run (a renewing elector sends one per retry period, plus one
	// retry per 429).
	budget, _ := ctx.Deadline()
	stats := &transportStats{limit: int64(o.apiManagers) * 2 * int64(time.Until(budget)/time.Second), byCode: map[int]int64{}}

	electorCtx, stopElectors := context.WithCancel(ctx)
	defer stopElectors()
	var lost atomic.Int64
	var acquired sync.WaitGroup
	rng := rand.New(rand.NewSource(o.seed))
	progress("starting %d client-go leader electors ...", o.apiManagers)
	t0 := time.Now()
	for i := 0; i < o.apiManagers; i++ {
		delay := time.Duration(rng.Int63n(int64(o.apiStartSpread)))
		acquired.Add(1)
		if err := startElector(electorCtx, cp.Config, stats, i, o.retryPeriod, delay, &acquired, &lost); err != nil {
			return nil, err
		}
	}
	done := make(chan struct{})
	go func() { acquired.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		return nil, fmt.Errorf("not all %d electors acquired their lease within 2m", o.apiManagers)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res := &apiResult{managers: o.apiManagers, acquire: time.Since(t0), idle: idle}
	progress("all electors lead after %s", res.acquire.Round(time.Millisecond))
	sleep(ctx, 2*o.retryPeriod)

	measure := func(name string) (apiPhase, error) {
		progress("measuring %s for %s ...", name, o.apiDuration)
		ph := apiPhase{name: name}
		m0, err := guard.Metrics(ctx)
		if err != nil {
			return ph, err
		}
		cpu0 := procstat.ReadCPU(procs)
		lost0 := lost.Load()
		stats.start()
		counter.begin(int(o.apiDuration / time.Second))
		sleep(ctx, o.apiDuration)
		ph.writes, ph.writesSeries, ph.window, ph.maxGap, ph.gaps, ph.meanGap = counter.end()
		ph.requests, ph.byCode, ph.latencies = stats.stop()
		cpu1 := procstat.ReadCPU(procs)
		ph.lostLeader = lost.Load() - lost0
		m1, err := guard.Metrics(ctx)
		if err != nil {
			return ph, err
		}
		ph.decisions = controlplane.Counter(m1, "leaseguard_decisions_total", nil) - controlplane.Counter(m0, "leaseguard_decisions_total", nil)
		ph.denials = controlplane.Counter(m1, "leaseguard_decisions_total", map[string]string{"verdict": "deny"}) -
			controlplane.Counter(m0, "leaseguard_decisions_total", map[string]string{"verdict": "deny"})
		ph.cpu = map[string]float64{}
		for name := range cpu1 {
			ph.cpu[name] = cpu1[name] - cpu0[name]
		}
		ph.rss = procstat.ReadRSS(procs)
		if stats.total.Load() > stats.limit {
			return ph, fmt.Errorf("%s: the electors sent more than %d requests, the run's bound", name, stats.limit)
		}
		return ph, ctx.Err()
	}

	if res.free, err = measure("without minRenewInterval"); err != nil {
		return nil, err
	}

	// Switch the rule on: rewrite the file (rename, so leaseguard never reads
	// half a file) and wait for leaseguard to report the reload.
	m, err := guard.Metrics(ctx)
	if err != nil {
		return nil, err
	}
	reloads := controlplane.Counter(m, "leaseguard_policy_reloads_total", map[string]string{"result": "success"})
	next := policyPath + ".new"
	if err := os.WriteFile(next, []byte(policyYAML(o.interval)), 0o600); err != nil {
		return nil, err
	}
	switched := time.Now()
	if err := os.Rename(next, policyPath); err != nil {
		return nil, err
	}
	for {
		m, err := guard.Metrics(ctx)
		if err != nil {
			return nil, err
		}
		if controlplane.Counter(m, "leaseguard_policy_reloads_total", map[string]string{"result": "success"}) > reloads {
			break
		}
		if time.Since(switched) > 30*time.Second {
			return nil, fmt.Errorf("leaseguard did not reload the policy within 30s:\n%s", tail(guard.Log(), 2000))
		}
		sleep(ctx, 50*time.Millisecond)
	}
	res.reload = time.Since(switched)
	progress("minRenewInterval %s in force after %s; settling %s", o.interval, res.reload.Round(time.Millisecond), o.apiSettle)
	sleep(ctx, o.apiSettle)

	if res.limited, err = measure("with minRenewInterval " + o.interval.String()); err != nil {
		return nil, err
	}
	stopElectors()
	progress("stopping")
	return res, nil
}

// startElector runs client-go's leader election, with controller-runtime's
// defaults, for the bound Lease of manager i, as its pod would: own
// service account, pod-bound token (the pod-name extra), holder
// <pod>_<uuid>.
func startElector(ctx context.Context, admin *rest.Config, stats *transportStats, i int, retryPeriod, delay time.Duration, acquired *sync.WaitGroup, lost *atomic.Int64) error {
	id := managerID(i)
	pod := podName(id)
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: managerPrefix + id,
		Extra:    map[string][]string{policy.PodNameExtra: {pod}},
	}
	// The same TLS settings for every elector: client-go hands them all the
	// same cached http.Transport (one HTTP/2 connection); the wrapper only
	// counts.
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{next: rt, stats: stats} })
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: simNamespace, Name: leasePrefix + id},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: fmt.Sprintf("%s_%08x", pod, rand.Uint32())},
	}
	var once sync.Once
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: leaseDuration,
		RenewDeadline: renewDeadline,
		RetryPeriod:   retryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { once.Do(acquired.Done) },
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					lost.Add(1)
				}
			},
		},
		Name: lock.LeaseMeta.Name,
	})
	if err != nil {
		return err
	}
	go func() {
		sleep(ctx, delay)
		// A real manager that loses its lease exits and is restarted; here it
		// runs again so that the load stays the same.
		for ctx.Err() == nil {
			le.Run(ctx)
		}
	}()
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	return s[int(q*float64(len(s)-1))]
}

func (r *apiResult) print(o options) {
	fmt.Printf("## apiserver mode: kube-apiserver %s + etcd + `leaseguard serve`, %d client-go electors, %s per phase\n\n",
		controlplane.KubernetesVersion, r.managers, o.apiDuration)
	fmt.Printf("All electors led after %s; the rate-limited policy was in force %s after the file was rewritten; measured after a further %s.\n\n",
		r.acquire.Round(time.Millisecond), r.reload.Round(time.Millisecond), o.apiSettle)
	fmt.Println("| phase | storage writes/s | N / mean gap | peak second | predicted (latency 0 / measured) | elector requests/s | 429 answers/s | leaseguard denials/s | request latency mean / p99 (2xx) | longest gap between writes to one lease | leaderships lost |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for i, p := range []*apiPhase{&r.free, &r.limited} {
		secs := p.window.Seconds()
		l := mean(p.latencies)
		predicted, atLatency := r.predictedFree(o), float64(r.managers)/(o.retryPeriod+l).Seconds()
		if i == 1 {
			predicted, atLatency = r.predictedLimited(o), 2*float64(r.managers)/(o.interval+o.retryPeriod+3*l).Seconds()
		}
		fmt.Printf("| %s | %.1f | %.1f | %.0f | %.1f / %.1f | %.1f | %.1f | %.1f | %s / %s | %s | %d |\n",
			p.name, float64(p.writes)/secs, float64(r.managers)/p.meanGap.Seconds(), peak(p.writesSeries), predicted, atLatency, float64(p.requests)/secs,
			float64(p.byCode[http.StatusTooManyRequests])/secs, p.denials/secs,
			l.Round(100*time.Microsecond), quantile(p.latencies, 0.99).Round(time.Millisecond),
			p.maxGap.Round(time.Millisecond), p.lostLeader)
	}
	lFree, lLimited := mean(r.free.latencies), mean(r.limited.latencies)
	measured := float64(r.free.writes) / r.free.window.Seconds() / (float64(r.limited.writes) / r.limited.window.Seconds())
	fmt.Printf("\nStorage writes fell %.2fx (by mean gap: %.2fx); predicted (i+r)/(2r) = %.2fx; at the measured latencies l, (i+r+3l)/(2(r+l)) = %.2fx.\n\n",
		measured, r.limited.meanGap.Seconds()/r.free.meanGap.Seconds(), predictedFactor(o.interval, o.retryPeriod),
		(o.interval+o.retryPeriod+3*lLimited).Seconds()/(2*(o.retryPeriod+lFree).Seconds()))

	fmt.Println("| phase | leaseguard decisions/s | leaseguard CPU (cores) | CPU per 1,000 decisions | net of idle | leaseguard RSS |")
	fmt.Println("|---|---|---|---|---|---|")
	fmt.Printf("| idle (no electors) | 0 | %.3f | | | |\n", r.idle["leaseguard"])
	for _, p := range []*apiPhase{&r.free, &r.limited} {
		secs := p.window.Seconds()
		cpu := p.cpu["leaseguard"]
		net := cpu - r.idle["leaseguard"]*secs
		fmt.Printf("| %s | %.1f | %.3f | %s | %s | %.1f MiB |\n", p.name, p.decisions/secs, cpu/secs,
			perThousand(seconds(cpu), int64(p.decisions)), perThousand(seconds(net), int64(p.decisions)), float64(p.rss["leaseguard"])/1024)
	}
	fmt.Println()

	names := make([]string, 0, len(r.free.cpu))
	for n := range r.free.cpu {
		if n != procstat.Machine {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	fmt.Printf("CPU (cores busy on average, of %d) and RSS per process:\n\n", procstat.NumCPU())
	fmt.Println("| process | cores, idle | cores, without | cores, with | RSS without | RSS with |")
	fmt.Println("|---|---|---|---|---|---|")
	var sumIdle, sumFree, sumLimited float64
	for _, n := range names {
		cf, cl := r.free.cpu[n]/r.free.window.Seconds(), r.limited.cpu[n]/r.limited.window.Seconds()
		sumIdle += r.idle[n]
		sumFree += cf
		sumLimited += cl
		fmt.Printf("| %s | %.2f | %.2f | %.2f | %.0f MiB | %.0f MiB |\n", n, r.idle[n], cf, cl, float64(r.free.rss[n])/1024, float64(r.limited.rss[n])/1024)
	}
	mf, ml := r.free.cpu[procstat.Machine]/r.free.window.Seconds(), r.limited.cpu[procstat.Machine]/r.limited.window.Seconds()
	fmt.Printf("| this run, all | %.2f | %.2f | %.2f | | |\n", sumIdle, sumFree, sumLimited)
	fmt.Printf("| other processes on the machine | %.2f | %.2f | %.2f | | |\n", r.idle[procstat.Machine]-sumIdle, mf-sumFree, ml-sumLimited)
	fmt.Printf("| machine | %.2f | %.2f | %.2f | | |\n\n", r.idle[procstat.Machine], mf, ml)
	codes := func(p *apiPhase) string {
		var parts []string
		keys := make([]int, 0, len(p.byCode))
		for c := range p.byCode {
			keys = append(keys, c)
		}
		sort.Ints(keys)
		for _, c := range keys {
			parts = append(parts, fmt.Sprintf("%d: %d", c, p.byCode[c]))
		}
		return strings.Join(parts, ", ")
	}
	fmt.Printf("Elector responses by HTTP code: without: %s; with: %s.\n\n", codes(&r.free), codes(&r.limited))
	gaps := func(p *apiPhase) string {
		var parts []string
		for i, n := range p.gaps {
			if n > 0 {
				parts = append(parts, fmt.Sprintf("%d-%ds: %d", i, i+1, n))
			}
		}
		return strings.Join(parts, ", ")
	}
	fmt.Printf("Gaps between consecutive writes to one lease: without: %s; with: %s.\n\n", gaps(&r.free), gaps(&r.limited))
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}
