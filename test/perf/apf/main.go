// Command apf measures what leaseguard's API Priority and Fairness objects
// (config/components/flowcontrol) do for the other clients of an API server
// whose lease traffic misbehaves: a local kube-apiserver and etcd, N
// namespace-mode managers renewing their Leases with client-go's
// LeaderElector, one manager flooding lease writes with no client-side
// rate limit, and a probe client (another service account's ConfigMap reads
// and writes) whose latency is what the other clients see. Three phases,
// interleaved round by round: no flood; the flood under the API server's
// default flow schemas; the flood with leaseguard's. It prints the probe's
// latency quantiles, their ratios to the phase without the flood, the
// flood's throughput and how many managers lost leadership
// (docs/operations.md, "API Priority and Fairness").
//
// Two more phases, run last in each round, measure floors no flow schema
// can go below on this machine:
//   - the flooding client's CPU: no flood, but this process burns the CPU
//     the flooding client itself used in that round's flood under
//     leaseguard's flow schemas (its CPU above the phase without the
//     flood). No server-side configuration takes that CPU back from a
//     machine the client shares with the API server.
//   - one seat: the flood with one request in flight. Flow control is
//     work-conserving: a priority level that admits a flow at all keeps at
//     least one seat busy with it while it has requests waiting, so one
//     seat of lease writes is the least server work any configuration
//     that does not refuse the flooding manager leaves.
//
// The report states each phase's p99 against them too. Each window also
// records the CPU of kube-apiserver, etcd and this process (/proc).
//
//	go run ./apf -managers 100 -rounds 3 -window 30s
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/test/procstat"
)

const (
	managersNS = "cnrm-system"
	probeNS    = "apf-probe"
	managerSA  = "system:serviceaccount:" + managersNS + ":cnrm-controller-manager-"
	flooder    = managerSA + "flood"
	probeUser  = "system:serviceaccount:" + probeNS + ":app"
)

type options struct {
	managers, rounds, floodInFlight int
	window, settle                  time.Duration
	probeEvery                      time.Duration
	component                       string
}

// phase is one way of running a window.
type phase struct {
	name  string
	flood bool
	apf   bool // leaseguard's flow schemas installed
	// burn: this process burns the flooding client's CPU (a floor).
	burn bool
	// inFlight, when set, is the flood's requests in flight instead of
	// -flood-in-flight (one: the one-seat floor).
	inFlight int
}

// The phase indexes the report refers to.
const (
	noFlood = iota
	floodDefault
	floodLeaseguard
	floor
	oneSeat
)

var phases = []phase{
	noFlood:         {name: "no flood", apf: true},
	floodDefault:    {name: "flood, default flow schemas", flood: true},
	floodLeaseguard: {name: "flood, leaseguard's flow schemas", flood: true, apf: true},
	floor:           {name: "floor: no flood, the flooding client's CPU burnt", apf: true, burn: true},
	oneSeat:         {name: "floor: the flood with one request in flight (one seat)", flood: true, apf: true, inFlight: 1},
}

// rotating are the phases run in a rotating order; the floors run after
// them, once the CPU to burn is known.
const rotating = 3

// result is one window of one phase.
type result struct {
	phase     int
	latencies []time.Duration
	errors    int
	flooded   int64 // flood requests answered 2xx
	throttled int64 // flood requests answered 429
	// dispatched counts, by priority level, the requests the API server's
	// flow control dispatched during the window (its own metric).
	dispatched map[string]float64
	// seats is the lease writers' priority level's concurrency limit, as
	// the API server computed it (0 when not installed).
	seats float64
	// cpu is the CPU seconds per second of the window, by process:
	// kube-apiserver, etcd, and this one (managers, probe, flood, burn).
	cpu map[string]float64
	// burnt is the CPU (cores) the floor phase burnt.
	burnt float64
}

func main() {
	var o options
	flag.IntVar(&o.managers, "managers", 100, "namespace-mode managers, each renewing its own Lease every 2 s (client-go's LeaderElector)")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; each runs every phase once, in a rotating order")
	flag.IntVar(&o.floodInFlight, "flood-in-flight", 32, "concurrent lease writes the flooding manager keeps in flight")
	flag.DurationVar(&o.window, "window", 30*time.Second, "measured time per phase")
	flag.DurationVar(&o.settle, "settle", 5*time.Second, "time between a phase's setup and its measurement")
	flag.DurationVar(&o.probeEvery, "probe-every", 50*time.Millisecond, "the probe client's request interval")
	flag.StringVar(&o.component, "component", "../../config/components/flowcontrol", "leaseguard's flow-control component (kubectl kustomize)")
	flag.Parse()
	klog.SetLogger(logr.Discard())
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "apf:", err)
		os.Exit(1)
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05")+" "+format+"\n", args...)
}

func run(o options) error {
	progress("starting kube-apiserver and etcd ...")
	cp, err := controlplane.Start(controlplane.Options{SkipAdmission: true})
	if err != nil {
		return err
	}
	defer func() { _ = cp.Stop() }()
	if u, err := url.Parse(cp.Config.Host); err != nil || u.Hostname() != "127.0.0.1" {
		return fmt.Errorf("control plane at %q, want 127.0.0.1: refusing to send load elsewhere", cp.Config.Host)
	}
	assets, err := controlplane.AssetsDir()
	if err != nil {
		return err
	}
	kubectl := filepath.Join(assets, "kubectl")
	kubeconfig := filepath.Join(os.TempDir(), fmt.Sprintf("apf-kubeconfig-%d", os.Getpid()))
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	defer os.Remove(kubeconfig)
	objects, err := exec.Command(kubectl, "kustomize", o.component).Output()
	if err != nil {
		return fmt.Errorf("kubectl kustomize %s: %w", o.component, err)
	}
	apply := func(install bool) error {
		verb := []string{"apply", "-f", "-"}
		if !install {
			verb = []string{"delete", "--ignore-not-found", "-f", "-"}
		}
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig}, verb...)...)
		cmd.Stdin = bytes.NewReader(objects)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("kubectl %s: %v: %s", verb[0], err, out)
		}
		return nil
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := rest.CopyConfig(cp.Config)
	admin.QPS, admin.Burst = -1, 0
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return err
	}
	for _, ns := range []string{managersNS, probeNS} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	if err := controlplane.GrantLeaseAccess(ctx, cp.Config); err != nil {
		return err
	}
	if err := grantProbe(ctx, cs); err != nil {
		return err
	}

	progress("starting %d managers ...", o.managers)
	var lost atomic.Int64
	leading := make(chan struct{}, o.managers)
	for i := range o.managers {
		if err := startManager(ctx, cp.Config, fmt.Sprintf("m%03d", i), &lost, leading); err != nil {
			return err
		}
	}
	for range o.managers {
		select {
		case <-leading:
		case <-time.After(2 * time.Minute):
			return fmt.Errorf("not every manager leads after 2 minutes")
		}
	}
	progress("every manager leads")

	results, err := runRounds(ctx, o, cp.Config, cs, apply)
	if err != nil {
		return err
	}
	cancel()
	report(o, results, lost.Load())
	return nil
}

// flowControl reads the API server's flow-control metrics: the requests
// dispatched so far by priority level, and the lease writers' level's
// current concurrency limit.
func flowControl(ctx context.Context, cs kubernetes.Interface) (map[string]float64, float64, error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, 0, err
	}
	dispatched := map[string]float64{}
	var seats float64
	for _, line := range strings.Split(string(raw), "\n") {
		name, labels, value, ok := sample(line)
		if !ok {
			continue
		}
		switch name {
		case "apiserver_flowcontrol_dispatched_requests_total":
			dispatched[labels["priority_level"]] += value
		case "apiserver_flowcontrol_current_limit_seats":
			if labels["priority_level"] == "leaseguard-lease-writers" {
				seats = value
			}
		}
	}
	return dispatched, seats, nil
}

// sample parses one line of the text exposition format.
func sample(line string) (string, map[string]string, float64, bool) {
	if line == "" || line[0] == '#' {
		return "", nil, 0, false
	}
	name, rest, _ := strings.Cut(line, "{")
	labels := map[string]string{}
	valueText := ""
	if rest == "" {
		f := strings.Fields(line)
		if len(f) < 2 {
			return "", nil, 0, false
		}
		name, valueText = f[0], f[1]
	} else {
		body, tail, ok := strings.Cut(rest, "} ")
		if !ok {
			return "", nil, 0, false
		}
		for _, kv := range strings.Split(body, ",") {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = strings.Trim(v, `"`)
		}
		valueText = strings.Fields(tail)[0]
	}
	var v float64
	if _, err := fmt.Sscan(valueText, &v); err != nil {
		return "", nil, 0, false
	}
	return name, labels, v, true
}

// runRounds runs every phase once per round, in an order that rotates
// round by round, and returns each window's result.
func runRounds(ctx context.Context, o options, cfg *rest.Config, cs kubernetes.Interface, apply func(bool) error) ([]*result, error) {
	var results []*result
	procs, err := procstat.FindChildren(map[string]bool{"kube-apiserver": true, "etcd": true})
	if err != nil {
		return nil, err
	}
	for round := range o.rounds {
		byPhase := map[int]*result{}
		for k := range len(phases) {
			i := (k + round) % rotating
			if k >= rotating {
				i = k
			}
			p := phases[i]
			if err := apply(p.apf); err != nil {
				return nil, err
			}
			progress("round %d: %s", round+1, p.name)
			r := &result{phase: i}
			fctx, stopFlood := context.WithCancel(ctx)
			var fw sync.WaitGroup
			if p.flood {
				inFlight := o.floodInFlight
				if p.inFlight > 0 {
					inFlight = p.inFlight
				}
				if err := flood(fctx, &fw, cfg, inFlight, r); err != nil {
					stopFlood()
					return nil, err
				}
			}
			if p.burn {
				// The flooding client's own CPU in this round's flood
				// under leaseguard's flow schemas.
				r.burnt = max(0, byPhase[floodLeaseguard].cpu[self]-byPhase[noFlood].cpu[self])
				burn(fctx, &fw, r.burnt)
			}
			sleep(ctx, o.settle)
			atomic.StoreInt64(&r.flooded, 0)
			atomic.StoreInt64(&r.throttled, 0)
			before, _, errBefore := flowControl(ctx, cs)
			cpuBefore, start := readCPU(procs), time.Now()
			r.latencies, r.errors = probe(ctx, cfg, o.window, o.probeEvery)
			cpuAfter, elapsed := readCPU(procs), time.Since(start).Seconds()
			after, seats, errAfter := flowControl(ctx, cs)
			stopFlood()
			fw.Wait()
			r.cpu = map[string]float64{}
			for name, v := range cpuAfter {
				r.cpu[name] = (v - cpuBefore[name]) / elapsed
			}
			byPhase[i] = r
			if errBefore != nil || errAfter != nil {
				return nil, fmt.Errorf("reading the API server's metrics: %v %v", errBefore, errAfter)
			}
			r.dispatched, r.seats = map[string]float64{}, seats
			for pl, n := range after {
				r.dispatched[pl] = n - before[pl]
			}
			results = append(results, r)
		}
	}
	return results, nil
}

// self names this process in a result's cpu.
const self = "this process (managers, probe, flood)"

// readCPU returns the CPU seconds so far of kube-apiserver, etcd and this
// process.
func readCPU(procs map[string]int) map[string]float64 {
	cpu := procstat.ReadCPU(procs)
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		cpu[self] = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	return cpu
}

// burn keeps cores of CPU busy until ctx ends: goroutines each spinning for
// their share of every 10 ms and sleeping the rest, as the flooding
// client's goroutines are busy in bursts.
func burn(ctx context.Context, wg *sync.WaitGroup, cores float64) {
	const slot = 10 * time.Millisecond
	n := int(math.Ceil(cores))
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			busy := time.Duration(cores / float64(n) * float64(slot))
			x := 0
			for ctx.Err() == nil {
				start := time.Now()
				for time.Since(start) < busy {
					x++
				}
				time.Sleep(slot - busy)
			}
			_ = x
		}()
	}
}

// grantProbe lets the probe's service account read and write ConfigMaps in
// its namespace, and creates the one it uses.
func grantProbe(ctx context.Context, cs kubernetes.Interface) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: probeNS}, Data: map[string]string{"n": "0"}}
	if _, err := cs.CoreV1().ConfigMaps(probeNS).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return applyRBAC(ctx, cs)
}

// startManager runs one namespace-mode manager's leader election, as
// controller-runtime runs it: lease 15 s, renew deadline 10 s, retry 2 s.
func startManager(ctx context.Context, base *rest.Config, id string, lost *atomic.Int64, leading chan<- struct{}) error {
	cfg := rest.CopyConfig(base)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: managerSA + id}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: managersNS, Name: "kcc-leader-" + id},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: fmt.Sprintf("cnrm-controller-manager-%s-0_%08x", id, rand.Uint32())},
	}
	var once sync.Once
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { once.Do(func() { leading <- struct{}{} }) },
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					lost.Add(1)
				}
			},
		},
		Name: id,
	})
	if err != nil {
		return err
	}
	go func() {
		sleep(ctx, time.Duration(rand.Int64N(int64(2*time.Second))))
		// A real manager that loses its lease exits and is restarted.
		for ctx.Err() == nil {
			le.Run(ctx)
		}
	}()
	return nil
}

// flood is a misbehaving manager: inFlight goroutines merge-patching its
// own Lease's renewTime back to back, with no client-side rate limit. It
// honours a 429's Retry-After, as client-go does.
func flood(ctx context.Context, wg *sync.WaitGroup, base *rest.Config, inFlight int, r *result) error {
	cfg := rest.CopyConfig(base)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: flooder}
	cfg.QPS, cfg.Burst = -1, 0
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	leases := cs.CoordinationV1().Leases(managersNS)
	now := metav1.NewMicroTime(time.Now())
	_, _ = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kcc-leader-flood"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptrTo("flood-0_1"), RenewTime: &now}}, metav1.CreateOptions{})
	for range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				patch := fmt.Sprintf(`{"spec":{"renewTime":%q}}`, time.Now().UTC().Format(metav1.RFC3339Micro))
				_, err := leases.Patch(ctx, "kcc-leader-flood", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
				switch {
				case err == nil:
					atomic.AddInt64(&r.flooded, 1)
				case apierrors.IsTooManyRequests(err):
					atomic.AddInt64(&r.throttled, 1)
				}
			}
		}()
	}
	return nil
}

// probe is another client of the API server: a service account reading and
// updating a ConfigMap of its namespace every interval, each request timed.
func probe(ctx context.Context, base *rest.Config, window, every time.Duration) ([]time.Duration, int) {
	cfg := rest.CopyConfig(base)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: probeUser}
	cfg.QPS, cfg.Burst = -1, 0
	cs := kubernetes.NewForConfigOrDie(cfg) // a copy of a config that already made a client
	cms := cs.CoreV1().ConfigMaps(probeNS)
	var lat []time.Duration
	errs := 0
	tick := time.NewTicker(every)
	defer tick.Stop()
	end := time.Now().Add(window)
	for n := 0; time.Now().Before(end); n++ {
		<-tick.C
		start := time.Now()
		var err error
		if n%2 == 0 {
			_, err = cms.Get(ctx, "probe", metav1.GetOptions{})
		} else {
			_, err = cms.Patch(ctx, "probe", types.MergePatchType, []byte(fmt.Sprintf(`{"data":{"n":"%d"}}`, n)), metav1.PatchOptions{})
		}
		if err != nil {
			errs++
			continue
		}
		lat = append(lat, time.Since(start))
	}
	return lat, errs
}

func report(o options, results []*result, lost int64) {
	fmt.Printf("`make measure-apf` (`go run ./apf -managers %d -rounds %d -window %s -flood-in-flight %d`), %s, %d cores, %s:\n\n",
		o.managers, o.rounds, o.window, o.floodInFlight, time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), runtime.Version())
	fmt.Println("| phase | probe requests | p50 | p99 | p99 / no flood | p99 / client-CPU floor | p99 / one-seat floor | probe errors | flood writes/s | flood 429/s |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	p99s := make([]time.Duration, len(phases))
	for i := range phases {
		var lat []time.Duration
		for _, r := range results {
			if r.phase == i {
				lat = append(lat, r.latencies...)
			}
		}
		slices.Sort(lat)
		p99s[i] = quantile(lat, 0.99)
	}
	var baseP99 time.Duration
	for i, p := range phases {
		var lat []time.Duration
		var errs int
		var flooded, throttled int64
		n := 0
		for _, r := range results {
			if r.phase == i {
				lat = append(lat, r.latencies...)
				errs += r.errors
				flooded += r.flooded
				throttled += r.throttled
				n++
			}
		}
		slices.Sort(lat)
		p50, p99 := quantile(lat, 0.5), quantile(lat, 0.99)
		if i == 0 {
			baseP99 = p99
		}
		secs := float64(n) * o.window.Seconds()
		fmt.Printf("| %s | %d | %s | %s | %.2f× | %.2f× | %.2f× | %d | %.0f | %.0f |\n", p.name, len(lat), ms(p50), ms(p99),
			float64(p99)/float64(baseP99), float64(p99)/float64(p99s[floor]), float64(p99)/float64(p99s[oneSeat]), errs, float64(flooded)/secs, float64(throttled)/secs)
	}
	fmt.Println("\nCPU per phase, cores (CPU seconds per second of the windows, /proc): the floor burns what the flooding client used, the flood under leaseguard's flow schemas less the phase without the flood, round by round.")
	fmt.Println()
	fmt.Println("| phase | kube-apiserver | etcd | this process | of which burnt | machine |")
	fmt.Println("|---|---|---|---|---|---|")
	for i, p := range phases {
		sum, n := map[string]float64{}, 0
		var burnt float64
		for _, r := range results {
			if r.phase == i {
				for k, v := range r.cpu {
					sum[k] += v
				}
				burnt += r.burnt
				n++
			}
		}
		if n == 0 {
			continue
		}
		fn := float64(n)
		fmt.Printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n", p.name, sum["kube-apiserver"]/fn, sum["etcd"]/fn, sum[self]/fn, burnt/fn, sum[procstat.Machine]/fn)
	}
	fmt.Printf("\nLeaderships lost over the whole run: %d of %d managers' elections.\n", lost, o.managers)
	fmt.Println("\nRequests the API server's flow control dispatched per second, by priority level (apiserver_flowcontrol_dispatched_requests_total):")
	fmt.Println()
	fmt.Println("| phase | leaseguard-lease-writers (seats) | workload-low | global-default | exempt |")
	fmt.Println("|---|---|---|---|---|")
	for i, p := range phases {
		sum, n := map[string]float64{}, 0
		var seats float64
		for _, r := range results {
			if r.phase == i {
				for pl, v := range r.dispatched {
					sum[pl] += v
				}
				seats = max(seats, r.seats)
				n++
			}
		}
		secs := float64(n) * o.window.Seconds()
		fmt.Printf("| %s | %.0f (%.0f) | %.0f | %.0f | %.0f |\n", p.name, sum["leaseguard-lease-writers"]/secs, seats,
			sum["workload-low"]/secs, sum["global-default"]/secs, sum["exempt"]/secs)
	}
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func ptrTo[T any](v T) *T { return &v }

// applyRBAC lets the probe read and patch ConfigMaps in its namespace.
func applyRBAC(ctx context.Context, cs kubernetes.Interface) error {
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: probeNS},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "patch"}}}}
	if _, err := cs.RbacV1().Roles(probeNS).Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: probeNS},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "probe"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "app", Namespace: probeNS}}}
	if _, err := cs.RbacV1().RoleBindings(probeNS).Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}
