// Package kccmanager re-implements, as far as leader election goes, one
// Config Connector controller manager in namespace mode with
// --leader-election-type=multicluster (docs/multicluster.md cites the
// upstream code this follows):
//
//   - its lock is the cluster's one MultiClusterLease (MCLLock), with one
//     candidate identity shared by every manager of the cluster (the
//     ConfigConnector's clusterCandidateIdentity: no pod name, no UUID);
//   - it runs client-go's LeaderElector with Config Connector's timings
//     (lease 15s, renew deadline 10s, retry 2s; ReleaseOnCancel false) and a
//     lock retry period of 15s (spec.retryPeriodSeconds);
//   - OnStartedLeading reads the MultiClusterLease without a cache and exits
//     (klog.Fatalf upstream) unless status.globalHolderIdentity is its
//     identity; otherwise it starts reconciling (a counter ticking while it
//     leads);
//   - OnStoppedLeading exits (klog.FlushAndExit upstream).
//
// In multicluster mode Config Connector elects only through the
// MultiClusterLease: controller-runtime's own leader election (a
// coordination Lease per manager) must be off (kccmanager.New refuses
// both), so this manager holds no Lease.
//
// An exited manager stays dead, as a process that exited does until its
// StatefulSet restarts it; the test restarts it by starting a new Manager.
// Every request carries the user agent "manager/<version>": Config
// Connector's binary is /configconnector/manager and sets no user agent, so
// client-go's default makes the API server's field manager "manager"
// (inferred, not set in upstream code).
package kccmanager

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
)

// DesignationAnnotation is where leaseguard records the designated manager.
const DesignationAnnotation = "leaseguard.io/designated-manager"

// Config Connector's timings (pkg/controller/kccmanager/kccmanager.go).
const (
	LeaseDuration   = 15 * time.Second
	RenewDeadline   = 10 * time.Second
	RetryPeriod     = 2 * time.Second
	LockRetryPeriod = 15 * time.Second
)

// UserAgent is what client-go's default user agent starts with for a binary
// named "manager".
const UserAgent = "manager/v0.0.0 (linux/amd64) kubernetes/leaseguard-test"

// Config describes one manager.
type Config struct {
	// Identity is the cluster's candidate identity ("cluster-a").
	Identity string
	// Namespace is the namespace the manager reconciles.
	Namespace string
	// SystemNamespace holds the MultiClusterLease (cnrm-system).
	SystemNamespace string
	// LeaseName names the MultiClusterLease.
	LeaseName string
	// Base is an admin config of the cluster; the manager impersonates its
	// ServiceAccount with the pod-name extra of a bound token. With
	// OwnIdentity, Base is already the manager's (in a Pod: the rest.Config
	// of its ServiceAccount's bound token) and is used as it is.
	Base        *rest.Config
	OwnIdentity bool
	Log         logr.Logger
	// Floor, when set, sends renewals as no-ops as FloorRenewals says: the
	// curve's floor mode only.
	Floor *FloorRenewals
}

// Username is the manager's ServiceAccount user.
func (c Config) Username() string {
	return "system:serviceaccount:" + c.SystemNamespace + ":cnrm-controller-manager-" + c.Namespace
}

// Pod is the manager's pod (StatefulSet replica 0).
func (c Config) Pod() string { return "cnrm-controller-manager-" + c.Namespace + "-0" }

// Exit is why a manager stopped.
type Exit struct {
	At     time.Time
	Reason string
	// Killed is true when the test stopped it (a crash it caused), false
	// when the manager exited on its own.
	Killed bool
}

// Stats are what the manager sent and what came of it.
type Stats struct {
	// Writes counts every write request sent (each attempt of client-go's
	// retries) by HTTP status code.
	Writes map[int]int64
	// LockWrites counts lock Updates and Creates that the controller
	// confirmed.
	LockWrites int64
	// Gained and Lost count OnStartedLeading calls and losses of a
	// leadership that had started reconciling.
	Gained, Lost int64
	Reconciles   int64
	// ReadErrors counts typed reads of the MultiClusterLease that failed,
	// by message.
	ReadErrors map[string]int64
	Exit       *Exit
}

// Manager is one incarnation of a manager.
type Manager struct {
	cfg    Config
	cancel context.CancelFunc
	done   chan struct{}
	mcls   dynamic.ResourceInterface

	leading    atomic.Bool
	reconciles atomic.Int64
	gained     atomic.Int64
	lost       atomic.Int64
	confirmed  atomic.Int64

	mu       sync.Mutex
	exit     *Exit
	codes    map[int]int64
	readErrs map[string]int64
	sent     map[string]bool
	// writes are the write requests' start times and round trips (the
	// answer's headers), for the curve's latency.
	writes []timedWrite
}

type timedWrite struct {
	at time.Time
	d  time.Duration
}

// WriteLatencies are the round trips of the write requests sent in
// [from, to): what a renewal waits for the API server's answer.
func (m *Manager) WriteLatencies(from, to time.Time) []time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []time.Duration
	for _, w := range m.writes {
		if !w.at.Before(from) && w.at.Before(to) {
			out = append(out, w.d)
		}
	}
	return out
}

// Start starts a manager; it runs until it exits or Kill.
func Start(cfg Config) (*Manager, error) {
	m := &Manager{cfg: cfg, done: make(chan struct{}), codes: map[int]int64{}, readErrs: map[string]int64{}, sent: map[string]bool{}}
	rc := rest.CopyConfig(cfg.Base)
	if !cfg.OwnIdentity {
		rc.Impersonate = rest.ImpersonationConfig{
			UserName: cfg.Username(),
			Extra:    map[string][]string{"authentication.kubernetes.io/pod-name": {cfg.Pod()}},
		}
	}
	rc.UserAgent = UserAgent
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{m: m, next: rt} })
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	m.mcls = dyn.Resource(mclv1alpha1.GroupVersionResource).Namespace(cfg.SystemNamespace)
	lock := NewMCLLock(m.mcls, cfg.SystemNamespace, cfg.LeaseName, cfg.Identity, LockRetryPeriod)
	lock.onReadError = func(err error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.readErrs[err.Error()]++
	}
	lock.onSend = func(renewTime string) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.sent[renewTime] = true
	}
	lock.onConfirmed = func() { m.confirmed.Add(1) }
	lock.floor = cfg.Floor
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   LeaseDuration,
		RenewDeadline:   RenewDeadline,
		RetryPeriod:     RetryPeriod,
		ReleaseOnCancel: false,
		Name:            cfg.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: m.startedLeading,
			OnStoppedLeading: func() { m.exitWith("OnStoppedLeading: leadership lost", false) },
		},
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go func() {
		defer close(m.done)
		elector.Run(ctx)
	}()
	return m, nil
}

// startedLeading is Config Connector's OnStartedLeading: an uncached read
// of the MultiClusterLease, an exit unless its status names this cluster,
// then the controllers run (here: reconcile ticks) until leadership ends.
func (m *Manager) startedLeading(ctx context.Context) {
	m.gained.Add(1)
	u, err := m.mcls.Get(ctx, m.cfg.LeaseName, metav1.GetOptions{})
	if err != nil {
		m.exitWith("OnStartedLeading: reading the MultiClusterLease: "+err.Error(), false)
		return
	}
	mcl, err := Decode(u)
	if err != nil {
		m.exitWith("OnStartedLeading: "+err.Error(), false)
		return
	}
	if h := mcl.Status.GlobalHolderIdentity; h == nil || *h != m.cfg.Identity {
		got := ""
		if h != nil {
			got = *h
		}
		m.exitWith(fmt.Sprintf("inconsistent state: started leading but MultiClusterLease status.globalHolderIdentity is %q (expected %q)", got, m.cfg.Identity), false)
		return
	}
	m.leading.Store(true)
	if !m.Alive() {
		m.leading.Store(false)
		return
	}
	m.cfg.Log.V(1).Info("leading: reconciling", "manager", m.String())
	wait.UntilWithContext(ctx, func(context.Context) {
		if m.leading.Load() {
			m.reconciles.Add(1)
		}
	}, 50*time.Millisecond)
}

// exitWith ends the incarnation: the first reason is kept.
func (m *Manager) exitWith(reason string, killed bool) {
	if m.leading.Swap(false) {
		m.lost.Add(1)
	}
	m.mu.Lock()
	first := m.exit == nil
	if first {
		m.exit = &Exit{At: time.Now(), Reason: reason, Killed: killed}
	}
	m.mu.Unlock()
	if first && !killed {
		m.cfg.Log.Info("manager exited", "manager", m.String(), "reason", reason)
	}
	m.cancel()
}

// Kill stops the manager as a crash does (nothing released) and waits until
// it sends nothing more.
func (m *Manager) Kill() {
	m.exitWith("killed by the test", true)
	<-m.done
}

// Done is closed once the manager has stopped: it exited or was killed.
func (m *Manager) Done() <-chan struct{} { return m.done }

// Config returns the manager's configuration.
func (m *Manager) Config() Config { return m.cfg }

// Alive reports whether the manager has not exited.
func (m *Manager) Alive() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.exit == nil
}

// Exited returns why the manager stopped, or nil.
func (m *Manager) Exited() *Exit {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.exit == nil {
		return nil
	}
	e := *m.exit
	return &e
}

// Leading reports whether the manager leads and reconciles now.
func (m *Manager) Leading() bool { return m.leading.Load() }

// Sent reports whether renewTime (RFC 3339 with microseconds, UTC) is one
// this manager wrote into a request.
func (m *Manager) Sent(renewTime string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sent[renewTime]
}

// Stats returns a copy of the manager's counters.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Stats{Writes: map[int]int64{}, ReadErrors: map[string]int64{}, LockWrites: m.confirmed.Load(),
		Gained: m.gained.Load(), Lost: m.lost.Load(), Reconciles: m.reconciles.Load()}
	for k, v := range m.codes {
		s.Writes[k] = v
	}
	for k, v := range m.readErrs {
		s.ReadErrors[k] = v
	}
	if m.exit != nil {
		e := *m.exit
		s.Exit = &e
	}
	return s
}

// countingTransport counts the manager's write requests by status code.
type countingTransport struct {
	m    *Manager
	next http.RoundTripper
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	if err != nil || req.Method == http.MethodGet {
		return resp, err
	}
	d := time.Since(start)
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	t.m.codes[resp.StatusCode]++
	t.m.writes = append(t.m.writes, timedWrite{at: start, d: d})
	return resp, nil
}

// String names the manager for messages.
func (m *Manager) String() string { return fmt.Sprintf("%s/%s", m.cfg.Identity, m.cfg.Namespace) }
