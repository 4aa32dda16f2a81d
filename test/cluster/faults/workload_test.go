package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
)

// The identities of config/e2e-policy/policy.yaml, which the cluster runs.
const (
	e2eNS       = "leaseguard-e2e"
	warnNS      = "leaseguard-e2e-warn"
	designation = "leaseguard.io/designated-manager"
	mclName     = "kcc-leader"
	// client-go's leader-election defaults, which KCC uses too.
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

var teams = []string{"team-a", "team-b", "team-c"}

func manager(team string) string {
	return "system:serviceaccount:leaseguard-e2e:cnrm-controller-manager-" + team
}

func podName(team string, replica int) string {
	return fmt.Sprintf("cnrm-controller-manager-%s-%d", team, replica)
}

// impersonating is a client config acting as user, with the pod-name extra
// a bound service-account token carries when pod is set.
func impersonating(base *rest.Config, user, pod string, groups ...string) *rest.Config {
	cfg := rest.CopyConfig(base)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	if pod != "" {
		cfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/pod-name": {pod}}
	}
	cfg.Timeout = 5 * time.Second
	// Warnings (the warn rule's) are verdicts the probes read themselves.
	cfg.WarningHandler = rest.NoWarnings{}
	return cfg
}

// Kinds of workload events.
const (
	// A guarded write the policy admits: a leader's Lease renewal or
	// acquisition, the designated manager's MultiClusterLease renewal.
	evGuardedWrite = "guarded write"
	// A non-designated manager's renewal of the shared MultiClusterLease:
	// a guarded write too, answered success (acknowledged without being
	// stored), never refused: Config Connector's lock counts leadership
	// only when its own write succeeds (docs/multicluster.md).
	evNonDesignated = "non-designated renewal"
	// A dry-run identity change the policy refuses.
	evIdentityChange = "identity change"
	// A leader that lost its Lease, or a designation that moved.
	evLeadershipLost = "leadership lost"
	// An update of a ConfigMap no admission webhook or policy of
	// leaseguard's sees, by a service account as the managers are: the
	// control group that tells the API server's own outages (a restart,
	// etcd or the node starved) from failures leaseguard causes.
	evControl = "control write"
	// A call of the API server's to a webhook of leaseguard's that failed
	// and was admitted anyway (failurePolicy Ignore), from the API server's
	// own log: when, and why.
	evFailOpen = "webhook call failed open"
)

// controlWriter is the service account of the control writes.
const controlWriter = "system:serviceaccount:leaseguard-e2e:faults-control"

// Outcomes of a write.
const (
	outAdmitted = "admitted"
	// Denied by leaseguard, with its message.
	outDenied = "denied by leaseguard"
	// Refused by the API server because leaseguard could not be called
	// (failurePolicy Fail).
	outWebhookUnreachable = "refused: webhook unreachable"
	// The API server itself could not be reached or was not ready (a
	// restarting API server serves before its RBAC caches are filled; the
	// client's own backoff then runs out of time).
	outAPIServerDown = "API server unavailable"
	outConflict      = "conflict"
	outOther         = "other error"
)

func classify(err error) string {
	if err == nil {
		return outAdmitted
	}
	msg := err.Error()
	var netErr net.Error
	switch {
	case strings.Contains(msg, "failed calling webhook"):
		return outWebhookUnreachable
	case apierrors.IsForbidden(err) && strings.Contains(msg, "leaseguard: "):
		return outDenied
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		return outConflict
	case errors.As(err, &netErr), apierrors.IsServiceUnavailable(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
		strings.Contains(msg, "connection refused"), strings.Contains(msg, "EOF"), strings.Contains(msg, "connection reset"),
		strings.Contains(msg, "the server is currently unable"), strings.Contains(msg, "context deadline exceeded"),
		strings.Contains(msg, "rate limiter Wait returned an error"),
		apierrors.IsForbidden(err) && strings.Contains(msg, "cannot "): // RBAC, not leaseguard
		return outAPIServerDown
	}
	return outOther
}

type event struct {
	// at is when the answer came; sent, when the write was sent (control
	// writes only).
	at, sent time.Time
	kind     string
	who      string
	outcome  string
	detail   string
}

// workload is the continuous lease traffic the faults are judged by: six
// client-go leader electors (two pods of each of three managers, each on
// its manager's bound Lease), three KCC-shaped candidates renewing the one
// shared MultiClusterLease every 2 s, and dry-run identity changes every
// 2 s that the policy must refuse.
type workload struct {
	admin  kubernetes.Interface
	config *rest.Config

	mu     sync.Mutex
	events []event

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (w *workload) record(kind, who string, err error) {
	e := event{at: time.Now(), kind: kind, who: who, outcome: classify(err)}
	if err != nil {
		e.detail = err.Error()
	}
	w.mu.Lock()
	w.events = append(w.events, e)
	w.mu.Unlock()
}

// between returns the events in [from, to].
func (w *workload) between(from, to time.Time) []event {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []event
	for _, e := range w.events {
		if !e.at.Before(from) && !e.at.After(to) {
			out = append(out, e)
		}
	}
	return out
}

func startWorkload(t *testing.T, admin kubernetes.Interface, config *rest.Config) *workload {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &workload{admin: admin, config: config, cancel: cancel}

	// team-a creates the shared MultiClusterLease, so it is designated.
	mcl := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mclv1alpha1.Group + "/" + mclv1alpha1.Version,
		"kind":       mclv1alpha1.Kind,
		"metadata":   map[string]any{"name": mclName, "namespace": e2eNS},
		"spec": map[string]any{"holderIdentity": "cluster-faults", "renewTime": micro(time.Now()),
			"leaseDurationSeconds": int64(leaseDuration.Seconds()), "retryPeriodSeconds": int64(retryPeriod.Seconds())},
	}}
	created, err := w.mcls(manager("team-a"), "").Create(ctx, mcl, metav1.CreateOptions{})
	if err != nil {
		cancel()
		t.Fatalf("team-a creating the shared MultiClusterLease: %v", err)
	}
	if got := created.GetAnnotations()[designation]; got != manager("team-a") {
		cancel()
		t.Fatalf("designation after team-a's create: %q, want %q", got, manager("team-a"))
	}

	for i, team := range teams {
		for replica := range 2 {
			w.wg.Add(1)
			go func() { defer w.wg.Done(); w.runElector(ctx, t, team, replica) }()
		}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.runCandidate(ctx, team, time.Duration(i)*retryPeriod/time.Duration(len(teams)))
		}()
	}
	w.wg.Add(3)
	go func() { defer w.wg.Done(); w.writeControl(ctx) }()
	go func() { defer w.wg.Done(); w.watchDesignation(ctx) }()
	go func() { defer w.wg.Done(); w.probeIdentityChanges(ctx) }()
	return w
}

func (w *workload) stop() {
	w.cancel()
	w.wg.Wait()
}

func (w *workload) mcls(user, pod string, groups ...string) dynamic.ResourceInterface {
	dyn := dynamic.NewForConfigOrDie(impersonating(w.config, user, pod, groups...))
	return dyn.Resource(mclv1alpha1.GroupVersionResource).Namespace(e2eNS)
}

func (w *workload) leasesAs(team string, replica int) kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(impersonating(w.config, manager(team), podName(team, replica)))
}

func micro(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00") }

// countingLock is client-go's LeaseLock, recording each write it sends.
type countingLock struct {
	resourcelock.Interface
	w *workload
}

func (l *countingLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Create(ctx, r)
	l.w.record(evGuardedWrite, l.Identity(), err)
	return err
}

func (l *countingLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Update(ctx, r)
	l.w.record(evGuardedWrite, l.Identity(), err)
	return err
}

// runElector runs a real client-go leader elector as pod replica of team's
// manager on the manager's bound Lease, again after each lost leadership.
func (w *workload) runElector(ctx context.Context, t *testing.T, team string, replica int) {
	identity := podName(team, replica) + "_" + uuid.NewString()[:8]
	cs := w.leasesAs(team, replica)
	lock := &countingLock{w: w, Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e2eNS, Name: "kcc-leader-" + team},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}}
	for ctx.Err() == nil {
		var leading bool
		var mu sync.Mutex
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, Name: identity, ReleaseOnCancel: true,
			LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { mu.Lock(); leading = true; mu.Unlock() },
				OnStoppedLeading: func() {
					mu.Lock()
					defer mu.Unlock()
					if leading && ctx.Err() == nil {
						w.record(evLeadershipLost, identity, errors.New("stopped leading kcc-leader-"+team))
					}
				},
			},
		})
		if err != nil {
			t.Errorf("leader elector %s: %v", identity, err)
			return
		}
		le.Run(ctx)
	}
}

// runCandidate is a KCC manager's candidate: every retry period, the
// write of Config Connector's MultiClusterLease lock, with the cluster's
// candidate identity, which every manager shares: renewTime taken from the
// clock first, then the object read and written back whole with the
// resourceVersion it was read at (an Update, as the lock sends), so that of
// two renewals racing for the object the later gets 409 Conflict and tries
// again a retry period later, never storing an older renewTime over a
// newer one. (Blind merge patches, which this once sent, are retried by
// the API server itself on a conflict, a stale renewTime and all: while
// leaseguard is down such a write moves renewTime back and is refused by
// the fail-closed route, a failure no real lock produces.) Its first
// renewal comes after phase, the candidates spread over the period as
// managers started independently are.
func (w *workload) runCandidate(ctx context.Context, team string, phase time.Duration) {
	// Config Connector's lock bounds a renewal by its renew deadline, not
	// by a shorter per-request timeout: while a replica is partitioned, an
	// Update can wait out two fail-open webhook calls of 2 s each, which
	// the harness's 5 s client timeout reported as an API server error no
	// real manager would see.
	cfg := impersonating(w.config, manager(team), "")
	cfg.Timeout = renewDeadline
	client := dynamic.NewForConfigOrDie(cfg).Resource(mclv1alpha1.GroupVersionResource).Namespace(e2eNS)
	kind := evNonDesignated
	if team == "team-a" {
		kind = evGuardedWrite
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(phase):
	}
	tick := time.NewTicker(retryPeriod)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		obj, err := client.Get(ctx, mclName, metav1.GetOptions{})
		if err == nil {
			spec, _ := obj.Object["spec"].(map[string]any)
			if spec == nil {
				spec = map[string]any{}
				obj.Object["spec"] = spec
			}
			spec["holderIdentity"] = "cluster-faults"
			spec["renewTime"] = micro(now)
			spec["leaseDurationSeconds"] = int64(leaseDuration.Seconds())
			spec["retryPeriodSeconds"] = int64(retryPeriod.Seconds())
			_, err = client.Update(ctx, obj, metav1.UpdateOptions{})
		}
		if ctx.Err() != nil {
			return
		}
		w.record(kind, manager(team), err)
	}
}

// writeControl updates the control ConfigMap every half second, recording
// when each update was sent and answered.
func (w *workload) writeControl(ctx context.Context) {
	configMaps := kubernetes.NewForConfigOrDie(impersonating(w.config, controlWriter, "")).CoreV1().ConfigMaps(e2eNS)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sent := time.Now()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "faults-control"}, Data: map[string]string{"n": fmt.Sprint(n)}}
		_, err := configMaps.Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			_, err = configMaps.Create(ctx, cm, metav1.CreateOptions{})
		}
		if ctx.Err() != nil {
			return
		}
		e := event{at: time.Now(), sent: sent, kind: evControl, who: controlWriter, outcome: classify(err)}
		if err != nil {
			e.detail = err.Error()
		}
		w.mu.Lock()
		w.events = append(w.events, e)
		w.mu.Unlock()
	}
}

// watchDesignation records a move of the shared lease's designation away
// from team-a: the designated manager lost its lease.
func (w *workload) watchDesignation(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	dyn := dynamic.NewForConfigOrDie(w.config).Resource(mclv1alpha1.GroupVersionResource).Namespace(e2eNS)
	last := manager("team-a")
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		got, err := dyn.Get(ctx, mclName, metav1.GetOptions{})
		if err != nil {
			continue
		}
		if d := got.GetAnnotations()[designation]; d != last {
			w.record(evLeadershipLost, "designation", fmt.Errorf("multiclusterlease designation moved from %s to %s", last, d))
			last = d
		}
	}
}

var errSkipped = errors.New("probe not applicable now")

const (
	// probeLead is how much of its lease a lease must have left for a
	// probe to be sent against it.
	probeLead = 3 * time.Second
	// probeMargin is how much a probe's answer must come before the lease
	// it read expires to be judged: leaseguard's clock and this one are the
	// host's, but the answer reaches this process after the decision.
	probeMargin = time.Second
)

// probeIdentityChanges sends, every 2 s, each write that would change who
// holds or writes a lease, as dry runs (they never change anything even if
// wrongly admitted): the policy must refuse every one.
func (w *workload) probeIdentityChanges(ctx context.Context) {
	dry := []string{metav1.DryRunAll}
	teamB := w.leasesAs("team-b", 0).CoordinationV1().Leases(e2eNS)
	mclA := w.mcls(manager("team-a"), "")
	mclAs := map[string]dynamic.ResourceInterface{}
	for _, team := range teams {
		mclAs[manager(team)] = w.mcls(manager(team), "")
	}
	// A probe is judged only against the object it read, while that
	// object's lease is fresh: the write carries the resourceVersion it
	// read (a conflict means the lease moved on, and is not judged), and an
	// answer that came when the lease may have expired is not judged
	// either. After an outage longer than the lease, taking it over is the
	// protocol; and a write that client-go retried across the outage
	// reaches the policy long after the read.
	judgeWhileFresh := func(renewed time.Time, duration time.Duration, err error) error {
		if apierrors.IsConflict(err) || time.Now().After(renewed.Add(duration-probeMargin)) {
			return errSkipped
		}
		return err
	}
	type sharedLease struct {
		rv         string
		designated string
		renewed    time.Time
		duration   time.Duration
	}
	readShared := func() (sharedLease, error) {
		got, err := w.admin.CoreV1().RESTClient().Get().AbsPath("/apis", mclv1alpha1.Group, mclv1alpha1.Version,
			"namespaces", e2eNS, "multiclusterleases", mclName).DoRaw(ctx)
		if err != nil {
			return sharedLease{}, err
		}
		var mcl struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
			Spec     struct {
				RenewTime            metav1.MicroTime `json:"renewTime"`
				LeaseDurationSeconds int64            `json:"leaseDurationSeconds"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(got, &mcl); err != nil {
			return sharedLease{}, err
		}
		return sharedLease{rv: mcl.Metadata.ResourceVersion, designated: mcl.Metadata.Annotations[designation],
			renewed: mcl.Spec.RenewTime.Time, duration: time.Duration(mcl.Spec.LeaseDurationSeconds) * time.Second}, nil
	}
	// asNotDesignated sends write as a manager the shared lease does not
	// designate, while the designation is fresh: once it is stale (an
	// outage longer than the lease), any manager may take it over.
	asNotDesignated := func(write func(sender string, mcl dynamic.ResourceInterface, rv string) error) error {
		shared, err := readShared()
		if err != nil {
			return err
		}
		if time.Now().After(shared.renewed.Add(shared.duration - probeLead)) {
			return errSkipped
		}
		for _, team := range teams {
			if sender := manager(team); sender != shared.designated {
				return judgeWhileFresh(shared.renewed, shared.duration, write(sender, mclAs[sender], shared.rv))
			}
		}
		return errSkipped
	}
	probes := []struct {
		name string
		send func() error
	}{
		{"another manager takes a bound lease", func() error {
			_, err := teamB.Patch(ctx, "kcc-leader-team-a", types.MergePatchType,
				[]byte(`{"spec":{"holderIdentity":"`+podName("team-b", 0)+`_probe"}}`), metav1.PatchOptions{DryRun: dry})
			return err
		}},
		{"another pod takes a fresh lease", func() error {
			lease, err := w.admin.CoordinationV1().Leases(e2eNS).Get(ctx, "kcc-leader-team-a", metav1.GetOptions{})
			if err != nil {
				return err
			}
			// Only a fresh lease must be refused: once expired (the API
			// server away longer than the lease), taking it is the protocol.
			if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
				return errSkipped
			}
			renewed, duration := lease.Spec.RenewTime.Time, time.Duration(*lease.Spec.LeaseDurationSeconds)*time.Second
			if time.Now().After(renewed.Add(duration - probeLead)) {
				return errSkipped
			}
			replica := 1
			if lease.Spec.HolderIdentity != nil && strings.HasPrefix(*lease.Spec.HolderIdentity, podName("team-a", 1)+"_") {
				replica = 0
			}
			transitions := int32(0)
			if lease.Spec.LeaseTransitions != nil {
				transitions = *lease.Spec.LeaseTransitions
			}
			patch := fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"spec":{"holderIdentity":%q,"acquireTime":%q,"renewTime":%q,"leaseTransitions":%d}}`,
				lease.ResourceVersion, podName("team-a", replica)+"_probe", micro(time.Now()), micro(time.Now()), transitions+1)
			_, err = w.leasesAs("team-a", replica).CoordinationV1().Leases(e2eNS).Patch(ctx, "kcc-leader-team-a", types.MergePatchType, []byte(patch), metav1.PatchOptions{DryRun: dry})
			return judgeWhileFresh(renewed, duration, err)
		}},
		{"a manager creates a lease not bound to it", func() error {
			lease := []byte(`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"kcc-leader-team-z","namespace":"` + e2eNS +
				`"},"spec":{"holderIdentity":"` + podName("team-b", 0) + `_probe","leaseDurationSeconds":15}}`)
			_, err := teamB.Patch(ctx, "kcc-leader-team-z", types.ApplyPatchType, lease, metav1.PatchOptions{DryRun: dry, FieldManager: "probe"})
			return err
		}},
		{"a non-designated manager takes the designation", func() error {
			return asNotDesignated(func(sender string, mcl dynamic.ResourceInterface, rv string) error {
				_, err := mcl.Patch(ctx, mclName, types.MergePatchType,
					[]byte(`{"metadata":{"resourceVersion":"`+rv+`","annotations":{"`+designation+`":"`+sender+`"}}}`), metav1.PatchOptions{DryRun: dry})
				return err
			})
		}},
		{"a non-designated manager deletes the shared lease", func() error {
			return asNotDesignated(func(_ string, mcl dynamic.ResourceInterface, rv string) error {
				return mcl.Delete(ctx, mclName, metav1.DeleteOptions{DryRun: dry, Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
			})
		}},
		{"a manager writes the shared lease's status", func() error {
			_, err := mclA.Patch(ctx, mclName, types.MergePatchType, []byte(`{"status":{"globalHolderIdentity":"cluster-evil"}}`),
				metav1.PatchOptions{DryRun: dry}, "status")
			return err
		}},
	}
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, p := range probes {
			err := p.send()
			if ctx.Err() != nil {
				return
			}
			if !errors.Is(err, errSkipped) {
				w.record(evIdentityChange, p.name, err)
			}
		}
	}
}
