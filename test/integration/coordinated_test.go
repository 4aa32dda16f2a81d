package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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

	"github.com/leaseguard/leaseguard/test/controlplane"
)

// coordinatedPolicy guards the Lease of a component that elects through
// Kubernetes' coordinated leader election (KEP-4355): every replica runs
// as the component's service account and holds the lease as its pod; the
// API server's election controller writes as system:apiserver, a member of
// system:masters, which the rule lists among its operators, as the sample
// policy's rules do.
const coordinatedPolicy = `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
clockSkew: 2s
rules:
- name: coordinated
  resources: [leases]
  namespaces: [coord]
  managers: ["system:serviceaccount:coord:component"]
  operators: ["system:masters"]
  holderBinding: pod
  enforcement: deny
`

const (
	coordNS        = "coord"
	coordLease     = "component-leader"
	coordComponent = "system:serviceaccount:coord:component"
	// The API server's election controller's lease duration
	// (defaultLeaseDurationSeconds), which the components use too.
	coordLeaseDuration = 15 * time.Second
)

// Issue 39 item 4. With CoordinatedLeaderElection on, the API server's
// election controller picks the holder of a Lease from its LeaseCandidates
// and hands it over the KEP-4355 way: it marks the better candidate as
// spec.preferredHolder, the holder ends its term by no longer renewing,
// and once the lease has expired the controller writes the new holder. A
// guarded Lease is handed over exactly so, every write of the components'
// client-go electors and candidates admitted, the holder changing only
// after expiry (I4); and nobody but the holder and the operators can set
// preferredHolder, so no other replica can end the holder's term early.
func TestCoordinatedLeaderElectionHandsAGuardedLeaseOver(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(coordinatedPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	own, err := controlplane.Start(controlplane.Options{Policy: policyFile, APIServerFlags: map[string]string{
		"feature-gates":  "CoordinatedLeaderElection=true",
		"runtime-config": "coordination.k8s.io/v1beta1=true",
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = own.Stop() }()
	lg, err := own.StartLeaseguard(binary, policyFile)
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Stop()
	defer func() {
		if t.Failed() {
			t.Logf("leaseguard serve output:\n%s", lg.Log())
		}
	}()
	admin := kubernetes.NewForConfigOrDie(own.Config)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: coordNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// What kube-controller-manager's and kube-scheduler's roles grant them
	// of LeaseCandidates (leases are granted by the harness).
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "coord-candidates"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leasecandidates"}, Verbs: []string{"*"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "coord-candidates"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "coord-candidates"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: coordComponent}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	as := func(pod string) kubernetes.Interface {
		cfg := rest.CopyConfig(own.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: coordComponent, Groups: []string{"system:serviceaccounts", "system:authenticated"},
			Extra: map[string][]string{"authentication.kubernetes.io/pod-name": {pod}}}
		return kubernetes.NewForConfigOrDie(cfg)
	}
	leases := admin.CoordinationV1().Leases(coordNS)

	// Watch the lease as it is stored: when each holder and preferredHolder
	// first appeared, and the last renewal before each holder change.
	var mu sync.Mutex
	seenHolder := map[string]time.Time{}
	seenPreferred := map[string]time.Time{}
	lastRenewBy := map[string]time.Time{}
	var order []string
	go func() {
		for ctx.Err() == nil {
			l, err := leases.Get(ctx, coordLease, metav1.GetOptions{})
			if err == nil {
				now := time.Now()
				mu.Lock()
				holder, preferred := deref(l.Spec.HolderIdentity), deref(l.Spec.PreferredHolder)
				if _, ok := seenHolder[holder]; !ok && holder != "" {
					seenHolder[holder] = now
					order = append(order, holder)
				}
				if _, ok := seenPreferred[preferred]; !ok && preferred != "" {
					seenPreferred[preferred] = now
				}
				if l.Spec.RenewTime != nil && holder != "" {
					lastRenewBy[holder] = l.Spec.RenewTime.Time
				}
				mu.Unlock()
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()

	components := map[string]*coordinatedComponent{}
	start := func(pod, emulation string) {
		c := startCoordinated(ctx, t, as(pod), pod, emulation)
		components[pod] = c
	}
	waitFor := func(what string, timeout time.Duration, done func() bool) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for !done() {
			if time.Now().After(deadline) {
				l, _ := leases.Get(ctx, coordLease, metav1.GetOptions{})
				raw, _ := admin.CoreV1().RESTClient().Get().AbsPath("/apis/coordination.k8s.io/v1/namespaces", coordNS, "leases", coordLease).DoRaw(ctx)
				t.Logf("the lease as stored: %s", raw)
				t.Fatalf("%s: not within %s; the lease: %+v; the components: %s", what, timeout, leaseSpec(l), describeComponents(components))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// One candidate: the API server elects it and it renews.
	start("component-b", "1.37.0")
	waitFor("component-b elected and leading", time.Minute, func() bool { return components["component-b"].leading() })
	renewalsBefore := components["component-b"].admitted()
	waitFor("component-b renewing", 30*time.Second, func() bool { return components["component-b"].admitted() >= renewalsBefore+2 })

	// A better candidate (the oldest emulation version wins): the API
	// server marks it preferred, component-b ends its term, and the lease
	// goes to component-a once expired.
	start("component-a", "1.36.0")
	waitFor("component-a preferred", time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		_, ok := seenPreferred["component-a"]
		return ok
	})
	waitFor("component-b stepping down and component-a leading", 2*time.Minute, func() bool {
		return components["component-b"].stopped() && components["component-a"].leading()
	})
	// component-a's elector may learn it leads before the poll above has
	// read the lease again (CI saw the check below run in that window, the
	// poll having seen only component-b); the hand-over is judged on what
	// the poll saw, so wait for it to see the new holder.
	waitFor("the poll seeing component-a hold the lease", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		_, ok := seenHolder["component-a"]
		return ok
	})
	mu.Lock()
	handedAt, lastByB := seenHolder["component-a"], lastRenewBy["component-b"]
	holders := append([]string(nil), order...)
	mu.Unlock()
	if strings.Join(holders, ",") != "component-b,component-a" {
		t.Errorf("holders in turn %v, want component-b then component-a", holders)
	}
	// I4: the holder changes only once the lease has expired. The poll
	// sees the new holder up to 200 ms late, and both clocks are this host's.
	if gap := handedAt.Sub(lastByB); gap < coordLeaseDuration {
		t.Errorf("component-a seen holding %s after component-b's last renewal, before the %s lease expired", gap.Round(10*time.Millisecond), coordLeaseDuration)
	}
	waitFor("component-a renewing", 30*time.Second, func() bool { return components["component-a"].admitted() >= 2 })
	for pod, c := range components {
		if denied := c.refused(); len(denied) > 0 {
			t.Errorf("%s: writes of its elector refused: %v", pod, denied)
		}
	}

	// Fencing: another replica of the component, a manager of the lease,
	// can neither mark itself preferred nor take the fresh lease; the lease
	// is left as it was. The holder may mark a successor (it could release
	// the lease anyway).
	before, err := leases.Get(ctx, coordLease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := as("component-c").CoordinationV1().Leases(coordNS)
	_, err = c.Patch(ctx, coordLease, types.MergePatchType, []byte(`{"spec":{"preferredHolder":"component-c"}}`), metav1.PatchOptions{})
	refusedByLeaseguard(t, "another replica marking itself preferred", err, "")
	_, err = c.Patch(ctx, coordLease, types.MergePatchType, []byte(`{"spec":{"holderIdentity":"component-c","leaseTransitions":`+
		fmt.Sprint(deref32(before.Spec.LeaseTransitions)+1)+`,"acquireTime":"`+time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")+`"}}`), metav1.PatchOptions{})
	refusedByLeaseguard(t, "another replica taking the fresh lease", err, "may not change the holder")
	_, err = c.Patch(ctx, coordLease, types.MergePatchType, []byte(`{"spec":{"holderIdentity":"component-a","preferredHolder":"component-c"}}`), metav1.PatchOptions{})
	refusedByLeaseguard(t, "another replica marking itself preferred in the holder's name", err, "")
	after, err := leases.Get(ctx, coordLease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if deref(after.Spec.PreferredHolder) != "" || deref(after.Spec.HolderIdentity) != "component-a" {
		t.Errorf("after the refused writes the lease is %+v, want held by component-a with no preferred holder", leaseSpec(after))
	}
	_, err = as("component-a").CoordinationV1().Leases(coordNS).Patch(ctx, coordLease, types.MergePatchType,
		[]byte(`{"spec":{"preferredHolder":"component-c"}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Errorf("the holder marking a successor (dry run): %v", err)
	}
}

// coordinatedComponent is one replica of a component under coordinated
// leader election, as kube-controller-manager runs it: a LeaseCandidate
// (client-go's) and a coordinated client-go LeaderElector on the Lease,
// its identity the pod's name. It does not run again after losing the
// lease: the real component exits.
type coordinatedComponent struct {
	mu                        sync.Mutex
	isLeading, hasStopped     bool
	admittedWrites            int
	refusedWrites             []string
	startedLeading, stoppedAt time.Time
}

func startCoordinated(ctx context.Context, t *testing.T, cs kubernetes.Interface, pod, emulation string) *coordinatedComponent {
	t.Helper()
	c := &coordinatedComponent{}
	candidate, _, err := leaderelection.NewCandidate(cs, coordNS, pod, coordLease, "1.37.2", emulation, coordinationv1.OldestEmulationVersion)
	if err != nil {
		t.Fatal(err)
	}
	go candidate.Run(ctx)
	lock := &recordingLock{c: c, Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: coordNS, Name: coordLease},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: pod},
	}}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, Name: pod, Coordinated: true,
		LeaseDuration: coordLeaseDuration, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				c.mu.Lock()
				c.isLeading, c.startedLeading = true, time.Now()
				c.mu.Unlock()
			},
			OnStoppedLeading: func() {
				c.mu.Lock()
				c.isLeading, c.hasStopped, c.stoppedAt = false, true, time.Now()
				c.mu.Unlock()
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	go le.Run(ctx)
	return c
}

func (c *coordinatedComponent) leading() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.isLeading }
func (c *coordinatedComponent) stopped() bool { c.mu.Lock(); defer c.mu.Unlock(); return c.hasStopped }
func (c *coordinatedComponent) admitted() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.admittedWrites
}
func (c *coordinatedComponent) refused() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.refusedWrites...)
}

func describeComponents(components map[string]*coordinatedComponent) string {
	var parts []string
	for pod, c := range components {
		c.mu.Lock()
		parts = append(parts, fmt.Sprintf("%s: leading %v, stopped %v, %d writes admitted, refused %v", pod, c.isLeading, c.hasStopped, c.admittedWrites, c.refusedWrites))
		c.mu.Unlock()
	}
	return strings.Join(parts, "; ")
}

// recordingLock is client-go's LeaseLock, recording whether leaseguard
// admitted each write the elector sends.
type recordingLock struct {
	resourcelock.Interface
	c *coordinatedComponent
}

func (l *recordingLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Update(ctx, r)
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	var status apierrors.APIStatus
	switch {
	case err == nil:
		l.c.admittedWrites++
	case errors.As(err, &status) && strings.Contains(err.Error(), "leaseguard"):
		l.c.refusedWrites = append(l.c.refusedWrites, err.Error())
	}
	return err
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func deref32(i *int32) int32 {
	if i == nil {
		return 0
	}
	return *i
}

func leaseSpec(l *coordinationv1.Lease) string {
	if l == nil {
		return "none"
	}
	renew := "none"
	if l.Spec.RenewTime != nil {
		renew = l.Spec.RenewTime.Format("15:04:05.000")
	}
	strategy := ""
	if l.Spec.Strategy != nil {
		strategy = string(*l.Spec.Strategy)
	}
	return fmt.Sprintf("holder %q preferred %q strategy %q renewed %s transitions %d", deref(l.Spec.HolderIdentity), deref(l.Spec.PreferredHolder),
		strategy, renew, deref32(l.Spec.LeaseTransitions))
}
