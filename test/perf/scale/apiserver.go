package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
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
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/test/procstat"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

// apiStats is what one mode's phase saw through the real API server.
type apiStats struct {
	mode                       string
	round                      int
	window                     time.Duration
	leaseWrites, mclWrites     int64 // watch events: one per storage write
	leaseRequests, mclRequests map[int]int64
	lost                       int64 // leaderships lost by the electors
	apiserverCPU               float64
	cpu                        map[string]float64
	writesPerSec               []float64
	failover                   []time.Duration // killed holder to new holder, bound Leases
	takeover                   time.Duration   // killed designated candidate to a new designation, shared lease
}

// counter counts requests by status, per group of clients.
type counter struct {
	mu     sync.Mutex
	on     bool
	byCode map[int]int64
	total  atomic.Int64
	limit  int64
}

func (c *counter) start() { c.mu.Lock(); c.on, c.byCode = true, map[int]int64{}; c.mu.Unlock() }
func (c *counter) stop() map[int]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = false
	return c.byCode
}

type countingTransport struct {
	next http.RoundTripper
	c    *counter
}

var errBudget = errors.New("scale: request budget exhausted")

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.c.total.Add(1) > t.c.limit {
		return nil, errBudget
	}
	resp, err := t.next.RoundTrip(req)
	code := 0
	if err == nil {
		code = resp.StatusCode
	}
	t.c.mu.Lock()
	if t.c.on {
		t.c.byCode[code]++
	}
	t.c.mu.Unlock()
	return resp, err
}

// writeWatch counts storage writes of Leases and MultiClusterLeases from a
// watch (one ADDED or MODIFIED event per write).
type writeWatch struct {
	mu          sync.Mutex
	on          bool
	start       time.Time
	lease, mcl  int64
	perSec      []float64
	designation chan string
}

func (w *writeWatch) begin(seconds int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.on, w.start, w.lease, w.mcl, w.perSec = true, time.Now(), 0, 0, make([]float64, seconds)
}

func (w *writeWatch) end() (int64, int64, []float64, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.on = false
	return w.lease, w.mcl, w.perSec, time.Since(w.start)
}

func (w *writeWatch) record(shared bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.on {
		return
	}
	if shared {
		w.mcl++
	} else {
		w.lease++
	}
	if s := int(time.Since(w.start) / time.Second); s < len(w.perSec) {
		w.perSec[s]++
	}
}

// follow keeps a watch open until ctx ends, re-watching from the last
// resourceVersion, and reports every storage write.
func follow(ctx context.Context, list func(context.Context) (string, error), watchFrom func(context.Context, string) (watch.Interface, error), report func(watch.Event)) error {
	rv, err := list(ctx)
	if err != nil {
		return err
	}
	go func() {
		for ctx.Err() == nil {
			w, err := watchFrom(ctx, rv)
			if err != nil {
				sleep(ctx, time.Second)
				continue
			}
			for ev := range w.ResultChan() {
				if o, ok := ev.Object.(metav1.Object); ok {
					rv = o.GetResourceVersion()
				}
				if ev.Type == watch.Added || ev.Type == watch.Modified {
					report(ev)
				}
			}
			w.Stop()
		}
	}()
	return nil
}

// fleet is the simulated managers: electors on bound Leases, standbys on a
// few of them (for failover), and candidates on the shared lease.
type fleet struct {
	cfg        *rest.Config
	leases     *counter
	mcls       *counter
	electors   map[string]*elector // by lease name: the current holder's
	standbys   map[string]*elector
	candidates []*candidate
	lost       atomic.Int64
}

type elector struct {
	lease, pod string
	cancel     context.CancelFunc
	leading    chan struct{}
}

func (f *fleet) startElector(ctx context.Context, i int, pod string, retryPeriod, delay time.Duration) (*elector, error) {
	id := managerID(i)
	cfg := rest.CopyConfig(f.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: managerPrefix + id, Extra: map[string][]string{leaseobject.PodNameExtra: {pod}}}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{next: rt, c: f.leases} })
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	e := &elector{lease: leasePrefix + id, pod: pod, leading: make(chan struct{})}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: simNamespace, Name: e.lease},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: fmt.Sprintf("%s_%08x", pod, rand.Uint32())},
	}
	ectx, cancel := context.WithCancel(ctx)
	e.cancel = cancel
	var once sync.Once
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { once.Do(func() { close(e.leading) }) },
			OnStoppedLeading: func() {
				if ectx.Err() == nil {
					f.lost.Add(1)
				}
			},
		},
		Name: e.lease,
	})
	if err != nil {
		cancel()
		return nil, err
	}
	go func() {
		sleep(ectx, delay)
		// A real manager that loses its lease exits and is restarted.
		for ectx.Err() == nil {
			le.Run(ectx)
		}
	}()
	return e, nil
}

// candidate is a Config Connector manager: it merge-patches the shared
// MultiClusterLease's four spec fields every retry period, as its
// multi-cluster lock does.
type candidate struct {
	user   string
	cancel context.CancelFunc
}

func (f *fleet) startCandidate(ctx context.Context, i int, retryPeriod time.Duration) (*candidate, error) {
	c := &candidate{user: managerPrefix + managerID(i)}
	cfg := rest.CopyConfig(f.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: c.user}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{next: rt, c: f.mcls} })
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mcls := dyn.Resource(mclv1alpha1.GroupVersionResource).Namespace(simNamespace)
	cctx, cancel := context.WithCancel(ctx)
	c.cancel = cancel
	go func() {
		sleep(cctx, time.Duration(rand.Int63n(int64(retryPeriod))))
		for cctx.Err() == nil {
			patch := fmt.Sprintf(`{"spec":{"holderIdentity":%q,"renewTime":%q,"leaseDurationSeconds":15,"retryPeriodSeconds":15}}`,
				clusterID, time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"))
			_, err := mcls.Patch(cctx, sharedMCL, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			if apierrors.IsNotFound(err) {
				obj := &unstructured.Unstructured{Object: map[string]any{
					"apiVersion": mclv1alpha1.Group + "/" + mclv1alpha1.Version, "kind": mclv1alpha1.Kind,
					"metadata": map[string]any{"name": sharedMCL, "namespace": simNamespace},
					"spec":     map[string]any{"holderIdentity": clusterID, "renewTime": time.Now().UTC().Format(metav1.RFC3339Micro), "leaseDurationSeconds": int64(15)},
				}}
				_, _ = mcls.Create(cctx, obj, metav1.CreateOptions{})
			}
			sleep(cctx, retryPeriod)
		}
	}()
	return c, nil
}

func runAPIServer(ctx context.Context, o options) ([]*apiStats, error) {
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
	policyPath := filepath.Join(tmp, "policy.yaml")
	if err := os.WriteFile(policyPath, []byte(allModes[1].policy), 0o600); err != nil {
		return nil, err
	}
	cp, err := controlplane.Start(controlplane.Options{Policy: policyPath, SkipAdmission: true})
	if err != nil {
		return nil, err
	}
	defer func() { _ = cp.Stop() }()
	if u, err := url.Parse(cp.Config.Host); err != nil || u.Hostname() != "127.0.0.1" {
		return nil, fmt.Errorf("control plane at %q, want 127.0.0.1: refusing to send load elsewhere", cp.Config.Host)
	}
	guard, err := cp.StartLeaseguard(binary, policyPath)
	if err != nil {
		return nil, err
	}
	defer guard.Stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	procs, err := procstat.FindChildren(map[string]bool{"kube-apiserver": true, "etcd": true, "leaseguard": true})
	if err != nil {
		return nil, err
	}
	admin, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return nil, err
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: simNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cp.Config)
	if err != nil {
		return nil, err
	}
	writes := &writeWatch{designation: make(chan string, 16)}
	if err := followWrites(ctx, admin, dyn, writes); err != nil {
		return nil, err
	}
	if err := startWatchers(ctx, cp.Config, o.apiWatchers); err != nil {
		return nil, err
	}

	// Every client request is counted and bounded: at most three per
	// client per second of the whole run.
	deadline, _ := ctx.Deadline()
	limit := int64(o.apiManagers+o.apiCandidates+o.apiStandbys) * 3 * int64(time.Until(deadline)/time.Second)
	f := &fleet{cfg: cp.Config, leases: &counter{limit: limit}, mcls: &counter{limit: limit},
		electors: map[string]*elector{}, standbys: map[string]*elector{}}
	progress("starting %d electors, %d standbys and %d candidates ...", o.apiManagers, o.apiStandbys, o.apiCandidates)
	for i := 0; i < o.apiManagers; i++ {
		e, err := f.startElector(ctx, i, podName(managerID(i)), o.retryPeriod, time.Duration(rand.Int63n(int64(o.retryPeriod))))
		if err != nil {
			return nil, err
		}
		f.electors[e.lease] = e
	}
	for _, e := range f.electors {
		select {
		case <-e.leading:
		case <-time.After(2 * time.Minute):
			return nil, fmt.Errorf("elector of %s did not lead within 2m", e.lease)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	for i := 0; i < o.apiStandbys; i++ {
		id := managerID(i)
		e, err := f.startElector(ctx, i, "cnrm-controller-manager-"+id+"-1", o.retryPeriod, 0)
		if err != nil {
			return nil, err
		}
		f.standbys[e.lease] = e
	}
	for i := 0; i < o.apiCandidates; i++ {
		c, err := f.startCandidate(ctx, i, o.retryPeriod)
		if err != nil {
			return nil, err
		}
		f.candidates = append(f.candidates, c)
	}

	// Rounds interleave the modes (A B A B ...), so that a slow minute of
	// this shared machine falls on one sample, not on one mode.
	var out []*apiStats
	for round := 1; round <= o.apiRounds; round++ {
		for _, m := range modes {
			st, err := runMode(ctx, o, cp, guard, policyPath, procs, f, writes, m)
			if err != nil {
				return nil, fmt.Errorf("mode %s: %w", m.name, err)
			}
			st.round = round
			out = append(out, st)
		}
	}
	return out, nil
}

// startWatchers opens n watches of the namespace's Leases and
// MultiClusterLeases, as a cluster's informers do (the garbage collector
// and quota controllers of kube-controller-manager watch every resource),
// each on its own connection, as each runs in its own process. The API
// server sends every storage write to each: what coalescing saves grows
// with them.
func startWatchers(ctx context.Context, cfg *rest.Config, n int) error {
	for i := range n {
		c := rest.CopyConfig(cfg)
		// A Dial of its own keeps client-go from sharing one transport
		// (and one HTTP/2 connection) between the watchers.
		dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
		c.Dial = dialer.DialContext
		c.UserAgent = fmt.Sprintf("scale-watcher-%d", i)
		admin, err := kubernetes.NewForConfig(c)
		if err != nil {
			return err
		}
		dyn, err := dynamic.NewForConfig(c)
		if err != nil {
			return err
		}
		if err := followWrites(ctx, admin, dyn, &writeWatch{designation: make(chan string, 1)}); err != nil {
			return err
		}
	}
	return nil
}

// followWrites counts the storage writes of the namespace's Leases and
// MultiClusterLeases, and reports the shared lease's designation changes.
func followWrites(ctx context.Context, admin kubernetes.Interface, dyn dynamic.Interface, w *writeWatch) error {
	leases := admin.CoordinationV1().Leases(simNamespace)
	if err := follow(ctx, func(ctx context.Context) (string, error) {
		l, err := leases.List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		return l.ResourceVersion, nil
	}, func(ctx context.Context, rv string) (watch.Interface, error) {
		return leases.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
	}, func(watch.Event) { w.record(false) }); err != nil {
		return err
	}
	mcls := dyn.Resource(mclv1alpha1.GroupVersionResource).Namespace(simNamespace)
	last := ""
	return follow(ctx, func(ctx context.Context) (string, error) {
		l, err := mcls.List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		return l.GetResourceVersion(), nil
	}, func(ctx context.Context, rv string) (watch.Interface, error) {
		return mcls.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
	}, func(ev watch.Event) {
		w.record(true)
		if u, ok := ev.Object.(*unstructured.Unstructured); ok {
			if d := u.GetAnnotations()[leaseobject.DesignationAnnotation]; d != last {
				last = d
				select {
				case w.designation <- d:
				default:
				}
			}
		}
	})
}

func runMode(ctx context.Context, o options, cp *controlplane.ControlPlane, guard *controlplane.Leaseguard, policyPath string,
	procs map[string]int, f *fleet, writes *writeWatch, m mode) (*apiStats, error) {
	progress("mode %s: %s", m.name, m.what)
	if m.policy == "" {
		if err := cp.RemoveAdmission(ctx, "leaseguard"); err != nil {
			return nil, err
		}
	} else {
		if err := reloadPolicy(ctx, guard, policyPath, m.policy); err != nil {
			return nil, err
		}
		if err := cp.InstallAdmission(ctx, policyPath, manifests.Options{Coalescing: m.coalescing}); err != nil {
			return nil, err
		}
	}
	sleep(ctx, o.apiSettle)

	st := &apiStats{mode: m.name}
	if dir := os.Getenv("SCALE_PPROF"); dir != "" {
		go profileAPIServer(cp, filepath.Join(dir, m.name+".pprof"), o.apiDuration-time.Second)
	}
	cpu0 := procstat.ReadCPU(procs)
	lost0 := f.lost.Load()
	f.leases.start()
	f.mcls.start()
	writes.begin(int(o.apiDuration / time.Second))
	sleep(ctx, o.apiDuration)
	st.leaseWrites, st.mclWrites, st.writesPerSec, st.window = writes.end()
	st.leaseRequests, st.mclRequests = f.leases.stop(), f.mcls.stop()
	cpu1 := procstat.ReadCPU(procs)
	st.lost = f.lost.Load() - lost0
	st.cpu = map[string]float64{}
	for name := range cpu1 {
		st.cpu[name] = cpu1[name] - cpu0[name]
	}
	st.apiserverCPU = st.cpu["kube-apiserver"]
	if f.leases.total.Load() > f.leases.limit || f.mcls.total.Load() > f.mcls.limit {
		return nil, fmt.Errorf("the clients sent more requests than the run's bound")
	}
	if err := failover(ctx, o, f, writes, st, m); err != nil {
		return nil, err
	}
	return st, ctx.Err()
}

// failover kills the holders of the Leases that have a standby, as a crash
// would (no release), and times how long until the standby holds each; on
// guarded modes it also kills the shared lease's designated candidate and
// times until another is designated. The killed come back: the holders as
// standbys of the new ones, the candidate as a candidate.
func failover(ctx context.Context, o options, f *fleet, writes *writeWatch, st *apiStats, m mode) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	for name, standby := range f.standbys {
		holder := f.electors[name]
		killed := time.Now()
		holder.cancel()
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-standby.leading:
				mu.Lock()
				st.failover = append(st.failover, time.Since(killed))
				mu.Unlock()
			case <-time.After(3 * leaseDuration):
			case <-ctx.Done():
			}
		}()
	}
	victim := -1
	if m.policy != "" {
		for len(writes.designation) > 0 {
			<-writes.designation
		}
		designated := currentDesignation(ctx, f)
		for i, c := range f.candidates {
			if c.user == designated {
				victim = i
			}
		}
		if victim >= 0 {
			killed := time.Now()
			f.candidates[victim].cancel()
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case d := <-writes.designation:
						if d != "" && d != designated {
							st.takeover = time.Since(killed)
							return
						}
					case <-time.After(3 * leaseDuration):
						return
					case <-ctx.Done():
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	for name, standby := range f.standbys {
		old := f.electors[name]
		f.electors[name] = standby
		e, err := f.startElector(ctx, indexOf(name), old.pod, o.retryPeriod, 0)
		if err != nil {
			return err
		}
		f.standbys[name] = e
	}
	if victim >= 0 {
		c, err := f.startCandidate(ctx, victim, o.retryPeriod)
		if err != nil {
			return err
		}
		f.candidates[victim] = c
	}
	sort.Slice(st.failover, func(a, b int) bool { return st.failover[a] < st.failover[b] })
	return nil
}

func currentDesignation(ctx context.Context, f *fleet) string {
	dyn, err := dynamic.NewForConfig(f.cfg)
	if err != nil {
		return ""
	}
	u, err := dyn.Resource(mclv1alpha1.GroupVersionResource).Namespace(simNamespace).Get(ctx, sharedMCL, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return u.GetAnnotations()[leaseobject.DesignationAnnotation]
}

func indexOf(lease string) int {
	var i int
	_, _ = fmt.Sscanf(lease, leasePrefix+"team-%05d", &i)
	return i
}

// reloadPolicy rewrites leaseguard's policy file (rename, so that it never
// reads half a file) and waits until leaseguard reports the reload.
func reloadPolicy(ctx context.Context, guard *controlplane.Leaseguard, path, content string) error {
	current, _ := os.ReadFile(path)
	if string(current) == content {
		return nil
	}
	count := func() float64 {
		m, err := guard.Metrics(ctx)
		if err != nil {
			return -1
		}
		return controlplane.Counter(m, "leaseguard_policy_reloads_total", map[string]string{"result": "success"})
	}
	before := count()
	if err := os.WriteFile(path+".new", []byte(content), 0o600); err != nil {
		return err
	}
	if err := os.Rename(path+".new", path); err != nil {
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); sleep(ctx, 50*time.Millisecond) {
		if count() > before {
			return nil
		}
	}
	return fmt.Errorf("leaseguard did not reload the policy within 30s:\n%s", guard.Log())
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// profileAPIServer saves a CPU profile of kube-apiserver (SCALE_PPROF=dir):
// where its time goes in each mode.
func profileAPIServer(cp *controlplane.ControlPlane, path string, d time.Duration) {
	hc, err := rest.HTTPClientFor(cp.Config)
	if err != nil {
		return
	}
	resp, err := hc.Get(strings.TrimSuffix(cp.Config.Host, "/") + "/debug/pprof/profile?seconds=" + fmt.Sprint(int(d.Seconds())))
	if err != nil {
		return
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	_ = os.WriteFile(path, data, 0o644)
}
