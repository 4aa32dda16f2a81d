// Package kccmanager plays one Config Connector controller manager in
// namespace mode, as far as leases go:
//
//   - it holds its own per-namespace Lease (cnrm-system/kcc-leader-<ns>) with
//     client-go leader election (15s/10s/2s, the defaults of
//     controller-runtime and so of Config Connector), as the pod
//     cnrm-controller-manager-<ns>-0 of the ServiceAccount
//     cnrm-controller-manager-<ns>;
//   - it is a candidate of the cluster's multi-cluster election: every retry
//     period it merge-patches the shared MultiClusterLease's holderIdentity
//     (the cluster's identity, the same for every manager of the cluster),
//     renewTime, leaseDurationSeconds and retryPeriodSeconds, creating the
//     object when it is missing, and it takes a refusal (403, or 429 once
//     client-go's own Retry-After retries are spent) as "not this time";
//   - it reads the MultiClusterLease's status every poll period and
//     "reconciles" (counts) only while it leads its namespace Lease and the
//     status names its cluster as the global holder with a globalRenewTime
//     younger than the renew deadline, so it stands down before another
//     cluster can take the global lock (which needs the lock to be a lease
//     duration old).
//
// Kill stops it the way a crash does: nothing is released.
package kccmanager

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
)

// DesignationAnnotation is where leaseguard records the designated manager.
const DesignationAnnotation = "leaseguard.io/designated-manager"

// Timings of the shared MultiClusterLease, written into its spec.
type Timings struct {
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// Config describes one manager.
type Config struct {
	// Cluster is the cluster's candidate identity.
	Cluster string
	// Namespace is the namespace the manager reconciles.
	Namespace string
	// SystemNamespace holds the leases (cnrm-system).
	SystemNamespace string
	// LeaseName names the shared MultiClusterLease.
	LeaseName string
	// Base is an admin config of the cluster; the manager impersonates its
	// ServiceAccount with the pod-name extra of a bound token.
	Base *rest.Config
	// MCL are the timings of the shared lease; PollPeriod is how often the
	// manager reads its status.
	MCL        Timings
	PollPeriod time.Duration
	Log        logr.Logger
}

// Username is the manager's ServiceAccount user.
func (c Config) Username() string {
	return "system:serviceaccount:" + c.SystemNamespace + ":cnrm-controller-manager-" + c.Namespace
}

// Pod is the manager's pod (StatefulSet replica 0).
func (c Config) Pod() string { return "cnrm-controller-manager-" + c.Namespace + "-0" }

// BoundLease names the manager's own Lease.
func (c Config) BoundLease() string { return "kcc-leader-" + c.Namespace }

// View is the manager's last reading of the shared lease's status.
type View struct {
	GlobalHolder    string
	GlobalRenewTime time.Time
	Designated      string
	ObservedAt      time.Time
}

// Stats are what the manager sent and what came of it.
type Stats struct {
	// MCLWrites and LeaseWrites count every write request sent (each attempt
	// of client-go's retries) by HTTP status code.
	MCLWrites   map[int]int64
	LeaseWrites map[int]int64
	// AdmittedMCLVersions are the resourceVersions the API server returned
	// for the manager's admitted MultiClusterLease writes.
	AdmittedMCLVersions []string
	Reconciles          int64
}

// Manager is a running manager.
type Manager struct {
	cfg      Config
	identity string
	cancel   context.CancelFunc
	done     sync.WaitGroup

	leading    atomic.Bool
	alive      atomic.Bool
	reconciles atomic.Int64

	mu       sync.Mutex
	view     View
	admitted []string
	mclCodes map[int]int64
	lCodes   map[int]int64
}

// Start starts a manager; it runs until Kill.
func Start(cfg Config) (*Manager, error) {
	m := &Manager{cfg: cfg, identity: cfg.Pod() + "_" + uuid.NewString(), mclCodes: map[int]int64{}, lCodes: map[int]int64{}}
	rc := rest.CopyConfig(cfg.Base)
	rc.Impersonate = rest.ImpersonationConfig{
		UserName: cfg.Username(),
		Extra:    map[string][]string{"authentication.kubernetes.io/pod-name": {cfg.Pod()}},
	}
	rc.UserAgent = "kccmanager/" + cfg.Namespace
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{m: m, next: rt} })
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	mcls := dyn.Resource(mclv1alpha1.GroupVersionResource).Namespace(cfg.SystemNamespace)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.SystemNamespace, Name: cfg.BoundLease()},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: m.identity},
		},
		LeaseDuration: 15 * time.Second,
		RenewDeadline: 10 * time.Second,
		RetryPeriod:   2 * time.Second,
		Name:          cfg.BoundLease(),
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { m.leading.Store(true) },
			OnStoppedLeading: func() { m.leading.Store(false) },
		},
	})
	if err != nil {
		return nil, err
	}

	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.alive.Store(true)
	m.done.Add(4)
	go func() {
		defer m.done.Done()
		// A manager that loses its lease stops leading and runs for it again.
		for ctx.Err() == nil {
			elector.Run(ctx)
		}
	}()
	go func() {
		defer m.done.Done()
		wait.UntilWithContext(ctx, func(ctx context.Context) { m.heartbeat(ctx, mcls) }, cfg.MCL.RetryPeriod)
	}()
	go func() {
		defer m.done.Done()
		wait.UntilWithContext(ctx, func(ctx context.Context) { m.observe(ctx, mcls) }, cfg.PollPeriod)
	}()
	go func() {
		defer m.done.Done()
		wait.UntilWithContext(ctx, func(context.Context) {
			if m.Reconciling() {
				m.reconciles.Add(1)
			}
		}, 50*time.Millisecond)
	}()
	return m, nil
}

// Kill stops the manager without releasing anything, as a crash would, and
// waits until it sends nothing more.
func (m *Manager) Kill() {
	m.alive.Store(false)
	m.cancel()
	m.done.Wait()
	m.leading.Store(false)
}

// Config returns the manager's configuration.
func (m *Manager) Config() Config { return m.cfg }

// Alive reports whether the manager runs.
func (m *Manager) Alive() bool { return m.alive.Load() }

// Leading reports whether the manager holds its namespace Lease.
func (m *Manager) Leading() bool { return m.leading.Load() }

// View returns the manager's last reading of the shared lease.
func (m *Manager) View() View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.view
}

// Reconciling reports whether the manager reconciles now: alive, leading its
// namespace, and its cluster the global holder by a global renewal younger
// than the renew deadline.
func (m *Manager) Reconciling() bool {
	if !m.alive.Load() || !m.leading.Load() {
		return false
	}
	v := m.View()
	return v.GlobalHolder == m.cfg.Cluster && time.Since(v.GlobalRenewTime) < m.cfg.MCL.RenewDeadline
}

// Reconciles is the number of reconcile ticks so far (one per 50ms of
// reconciling).
func (m *Manager) Reconciles() int64 { return m.reconciles.Load() }

// Stats returns a copy of the manager's counters.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Stats{MCLWrites: map[int]int64{}, LeaseWrites: map[int]int64{}, Reconciles: m.reconciles.Load()}
	for k, v := range m.mclCodes {
		s.MCLWrites[k] = v
	}
	for k, v := range m.lCodes {
		s.LeaseWrites[k] = v
	}
	s.AdmittedMCLVersions = append([]string(nil), m.admitted...)
	return s
}

func micro(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00") }

// heartbeat is the candidate's acquire/renew: a merge PATCH of the four spec
// fields, or a CREATE when the object does not exist yet.
func (m *Manager) heartbeat(ctx context.Context, mcls dynamic.ResourceInterface) {
	spec := map[string]any{
		"holderIdentity":       m.cfg.Cluster,
		"renewTime":            micro(time.Now()),
		"leaseDurationSeconds": int64(m.cfg.MCL.LeaseDuration / time.Second),
		"retryPeriodSeconds":   int64(m.cfg.MCL.RetryPeriod / time.Second),
	}
	patch, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		panic(err) // a map of strings and integers always marshals
	}
	obj, err := mcls.Patch(ctx, m.cfg.LeaseName, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": mclv1alpha1.Group + "/" + mclv1alpha1.Version,
			"kind":       mclv1alpha1.Kind,
			"metadata":   map[string]any{"name": m.cfg.LeaseName, "namespace": m.cfg.SystemNamespace},
			"spec":       spec,
		}}
		obj, err = mcls.Create(ctx, u, metav1.CreateOptions{})
	}
	switch {
	case err == nil:
		m.mu.Lock()
		m.admitted = append(m.admitted, obj.GetResourceVersion())
		m.mu.Unlock()
		m.record(obj)
	case apierrors.IsForbidden(err), apierrors.IsTooManyRequests(err), apierrors.IsAlreadyExists(err), ctx.Err() != nil:
		// Another manager is designated, the renewal came too early, or
		// another manager created the object first: next period.
	default:
		m.cfg.Log.Info("MultiClusterLease write failed", "manager", m.cfg.Username(), "error", err.Error())
	}
}

// observe reads the shared lease's status, as a candidate confirming the
// global holder does.
func (m *Manager) observe(ctx context.Context, mcls dynamic.ResourceInterface) {
	obj, err := mcls.Get(ctx, m.cfg.LeaseName, metav1.GetOptions{})
	if err != nil {
		return
	}
	m.record(obj)
}

func (m *Manager) record(obj *unstructured.Unstructured) {
	holder, _, _ := unstructured.NestedString(obj.Object, "status", "globalHolderIdentity")
	renewed := time.Time{}
	if s, ok, _ := unstructured.NestedString(obj.Object, "status", "globalRenewTime"); ok {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			renewed = t
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.view = View{GlobalHolder: holder, GlobalRenewTime: renewed, Designated: obj.GetAnnotations()[DesignationAnnotation], ObservedAt: time.Now()}
}

// countingTransport counts the manager's write requests by status code.
type countingTransport struct {
	m    *Manager
	next http.RoundTripper
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || req.Method == http.MethodGet {
		return resp, err
	}
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	switch {
	case strings.Contains(req.URL.Path, "/"+mclv1alpha1.Resource):
		t.m.mclCodes[resp.StatusCode]++
	case strings.Contains(req.URL.Path, "/leases"):
		t.m.lCodes[resp.StatusCode]++
	}
	return resp, nil
}

// String names the manager for messages.
func (m *Manager) String() string { return fmt.Sprintf("%s/%s", m.cfg.Cluster, m.cfg.Namespace) }
