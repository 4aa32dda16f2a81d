package integration

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	mcl "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

// The attacks of docs/security.md, tried through the real API server by
// identities whose RBAC lets them write every lease, so that only leaseguard
// decides. Rules hard-leases and hard-mcl of basePolicy guard it-hard.
const (
	hardNS       = "it-hard"
	hardManagerA = "system:serviceaccount:it-hard:manager-a"
	hardManagerB = "system:serviceaccount:it-hard:manager-b"
)

// hardLease creates manager-a's bound Lease leader-a (or the one named),
// held by its pod a-0, renewed now.
func hardLease(t *testing.T, name string) *coordinationv1.Lease {
	t.Helper()
	createNamespace(t, hardNS)
	now := metav1.NewMicroTime(time.Now())
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: hardNS, Name: name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a-0_1"), LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To[int32](0)},
	}
	created, err := admin.CoordinationV1().Leases(hardNS).Create(context.Background(), l, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating %s: %v", name, err)
	}
	t.Cleanup(func() { deleteLease(t, hardNS, name) })
	return created
}

// deleteLease removes a test's Lease as the operator, and fails the test
// when it stays: a lease left behind would fail every later test that
// creates one of that name, far from the cause. Deleting a live lease is a
// release that leaseguard decides, so a busy machine's webhook timeout is
// retried as put's are.
func deleteLease(t *testing.T, ns, name string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		err := admin.CoordinationV1().Leases(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			return
		}
		var status apierrors.APIStatus
		if attempt == 3 || !errors.As(err, &status) || !webhookTimedOut(int(status.Status().Code), err.Error()) {
			t.Errorf("cleanup: deleting lease %s/%s as an operator: %v", ns, name, err)
			return
		}
		t.Logf("cleanup attempt %d: %s", attempt, busyRetry(err.Error()))
	}
}

// put sends a Lease as a raw PUT, without client-go's retries of a 429, and
// returns what the client sees.
func put(t *testing.T, user, pod string, l *coordinationv1.Lease) (code int, message, retryAfter string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		code, message, retryAfter = putOnce(t, user, pod, l)
		if attempt == 3 || !webhookTimedOut(code, message) {
			return code, message, retryAfter
		}
		t.Logf("attempt %d: %s", attempt, busyRetry(message))
	}
}

// webhookTimedOut reports an API server that gave up waiting for the
// fail-closed webhook (the write refused, nothing stored). make test runs
// suites side by side, and on a busy machine a review of many megabytes can
// take longer than the webhook's 2 s; these tests are about verdicts, not
// speed, so such a write is sent again (up to 3 times, each logged).
func webhookTimedOut(code int, message string) bool {
	return code == http.StatusInternalServerError && strings.Contains(message, "failed calling webhook") &&
		strings.Contains(message, "deadline exceeded")
}

// withReviewTimeout has the API server wait up to secs for leaseguard's
// webhooks while the test runs, and restores their timeouts after. A review
// of many megabytes, encoded by the API server and decoded by leaseguard on
// a machine busy with other suites (make test runs tracks side by side),
// can take longer than the shipped 2 s; the tests that send such writes are
// about them being read and decided, not about their speed.
func withReviewTimeout(t *testing.T, secs int32) {
	t.Helper()
	ctx := context.Background()
	api := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	const name = "leaseguard-validating-webhook-configuration"
	set := func(to func(string) int32) (map[string]int32, error) {
		was := map[string]int32{}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			v, err := api.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for i := range v.Webhooks {
				w := &v.Webhooks[i]
				was[w.Name] = ptr.Deref(w.TimeoutSeconds, 10)
				w.TimeoutSeconds = ptr.To(to(w.Name))
			}
			_, err = api.Update(ctx, v, metav1.UpdateOptions{})
			return err
		})
		return was, err
	}
	was, err := set(func(string) int32 { return secs })
	if err != nil {
		t.Fatalf("webhook timeouts to %ds: %v", secs, err)
	}
	t.Cleanup(func() {
		if _, err := set(func(n string) int32 { return was[n] }); err != nil {
			t.Errorf("webhook timeouts back to %v: %v", was, err)
		}
	})
	// The API server reads webhook configurations through an informer:
	// give it a moment to see the change.
	time.Sleep(2 * time.Second)
}

func busyRetry(message string) string {
	return "the API server gave up waiting for leaseguard, as on a busy machine (" + message + "): sending the write again"
}

func putOnce(t *testing.T, user, pod string, l *coordinationv1.Lease) (code int, message, retryAfter string) {
	t.Helper()
	l = l.DeepCopy()
	l.TypeMeta = metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"}
	// Unescaped, as kubectl and client-go send it: a '<' is one byte on the
	// wire (and six in the AdmissionReview the API server sends on).
	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(l); err != nil {
		t.Fatal(err)
	}
	code, header, data := putRaw(context.Background(), t, user, pod, "/apis/coordination.k8s.io/v1/namespaces/"+l.Namespace+"/leases/"+l.Name, []byte(buf.String()))
	var status metav1.Status
	_ = json.Unmarshal(data, &status)
	return code, status.Message, header.Get("Retry-After")
}

// expectRefused checks a write was refused by leaseguard with code and a
// message starting with want, and left the Lease as stored.
func expectRefused(t *testing.T, stored *coordinationv1.Lease, code int, gotCode int, msg, want string) {
	t.Helper()
	// Identity changes go to the fail-closed webhook, the holder's plain
	// renewals to the fail-open one; both are leaseguard.
	rest, ok := strings.CutPrefix(msg, `admission webhook "validate.leases.leaseguard.io" denied the request: `)
	if !ok {
		rest, ok = strings.CutPrefix(msg, `admission webhook "renewals.leases.leaseguard.io" denied the request: `)
	}
	if gotCode != code || !ok || !strings.HasPrefix(rest, want) {
		t.Errorf("got HTTP %d %q\nwant HTTP %d from leaseguard %q...", gotCode, msg, code, want)
	}
	now, err := admin.CoordinationV1().Leases(stored.Namespace).Get(context.Background(), stored.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now.ResourceVersion != stored.ResourceVersion {
		t.Errorf("the refused write changed the Lease: resourceVersion %s, was %s", now.ResourceVersion, stored.ResourceVersion)
	}
}

func badRequests(t *testing.T) float64 {
	t.Helper()
	fams, err := guard.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return controlplane.Counter(fams, "leaseguard_bad_requests_total", nil)
}

// A write padded until its AdmissionReview is as large as the API server
// sends for anything it can store (both objects near etcd's limit, every
// '<' escaped to six bytes) is read and decided like any other: no size
// lets a write past the guard.
func TestLargestStorableWriteIsReadAndDecided(t *testing.T) {
	ctx := context.Background()
	// Before hardLease, so that its cleanup's DELETE (a review of the padded
	// lease, decided like the writes) still has the long timeout.
	withReviewTimeout(t, 15)
	stored := hardLease(t, "leader-a")
	before := badRequests(t)

	// An operator pads the Lease close to what etcd stores (1.5 MiB):
	// leaseguard must read a review of about 9 MB to admit it.
	padded := stored.DeepCopy()
	padded.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: strings.Repeat("<", 1_450_000), UID: "00000000-0000-0000-0000-000000000001"}}
	var err error
	for attempt := 1; ; attempt++ {
		var updated *coordinationv1.Lease
		updated, err = admin.CoordinationV1().Leases(hardNS).Update(ctx, padded, metav1.UpdateOptions{})
		if err == nil {
			stored = updated
			break
		}
		var status apierrors.APIStatus
		if attempt == 3 || !errors.As(err, &status) || !webhookTimedOut(int(status.Status().Code), err.Error()) {
			t.Fatalf("the operator's padded update: %v", err)
		}
		t.Logf("attempt %d: %s", attempt, busyRetry(err.Error()))
	}

	// A sibling pod takes over the live Lease in a write as large again: a
	// review of about 18 MB, which leaseguard reads and refuses.
	stolen := stored.DeepCopy()
	stolen.Spec.HolderIdentity = ptr.To("a-1_1")
	stolen.Spec.LeaseTransitions = ptr.To[int32](1)
	stolen.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(time.Now()))
	reviewBytes := 2 * 6 * 1_450_000
	code, msg, _ := put(t, hardManagerA, "a-1", stolen)
	expectRefused(t, stored, http.StatusForbidden, code, msg,
		"leaseguard: rule hard-leases: "+hardManagerA+" may not change the holder (a-0_1 to a-1_1) of lease it-hard/leader-a (held until ")
	if after := badRequests(t); after != before {
		t.Errorf("leaseguard_bad_requests_total went from %v to %v: the %d-byte review was not read", before, after, reviewBytes)
	}
	fams, err := guard.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var largest float64
	for _, m := range fams["leaseguard_admission_review_bytes"].GetMetric() {
		for _, b := range m.GetHistogram().GetBucket() {
			if b.GetUpperBound() == 16<<20 && float64(m.GetHistogram().GetSampleCount()) > float64(b.GetCumulativeCount()) {
				largest = 16 << 20
			}
		}
	}
	if largest == 0 {
		t.Errorf("no AdmissionReview over 16 MiB was read: the write was not as large as meant")
	}
}

// A write stuffed with labels (200,000 JSON items in its review: each label
// a key and a value in the object and a key and an empty object in
// managedFields) is read and decided like any other: leaseguard decodes only
// what it decides on, so items cost it about their bytes (its old reader
// held about 400 bytes an item and had to refuse such reviews unparsed, and
// with them every later write of a lease created that large). A sibling
// pod's stuffed takeover is refused by its verdict; the holder's stuffed
// renewal, and a Lease created with 12,000 labels, are admitted.
func TestWriteStuffedWithItemsIsDecided(t *testing.T) {
	withReviewTimeout(t, 15) // before hardLease: see TestLargestStorableWriteIsReadAndDecided
	stored := hardLease(t, "leader-a")
	before := badRequests(t)
	stuff := func(l *coordinationv1.Lease, n int) {
		l.Labels = map[string]string{}
		for i := range n {
			l.Labels["l"+strconv.Itoa(i)] = ""
		}
	}

	stolen := stored.DeepCopy()
	stuff(stolen, 40_000)
	stolen.Spec.HolderIdentity = ptr.To("a-1_1")
	stolen.Spec.LeaseTransitions = ptr.To[int32](1)
	stolen.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(time.Now()))
	code, msg, _ := put(t, hardManagerA, "a-1", stolen)
	expectRefused(t, stored, http.StatusForbidden, code, msg,
		"leaseguard: rule hard-leases: "+hardManagerA+" may not change the holder (a-0_1 to a-1_1) of lease it-hard/leader-a (held until ")

	renewed := stored.DeepCopy()
	stuff(renewed, 40_000)
	if code, msg, _ := put(t, hardManagerA, "a-0", renewed); code != http.StatusOK {
		t.Errorf("the holder's write of 40,000 labels: HTTP %d %s", code, msg)
	}

	// An operator's Lease of 12,000 labels, then the bound manager's
	// write of it, decided by its rule like any other.
	huge := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: hardNS, Name: "stuffed"}, Spec: *stored.Spec.DeepCopy()}
	stuff(huge, 12_000)
	created, err := admin.CoordinationV1().Leases(hardNS).Create(context.Background(), huge, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("an operator creating a Lease of 12,000 labels: %v", err)
	}
	created.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
	code, msg, _ = put(t, hardManagerA, "a-0", created)
	expectRefused(t, created, http.StatusForbidden, code, msg,
		"leaseguard: rule hard-leases: "+hardManagerA+" may not write lease it-hard/stuffed (bound lease: leader-a)")
	t.Cleanup(func() {
		deleteLease(t, hardNS, "stuffed")
	})
	if after := badRequests(t); after != before {
		t.Errorf("leaseguard_bad_requests_total went from %v to %v: a stuffed review was not read", before, after)
	}
}

// A sibling pod of the same service account may not release the live Lease
// of another pod (and then acquire it); nor may a caller without a pod.
func TestOnlyTheHolderReleasesALiveLease(t *testing.T) {
	stored := hardLease(t, "leader-a")
	released := stored.DeepCopy()
	released.Spec.HolderIdentity = ptr.To("")

	code, msg, _ := put(t, hardManagerA, "a-1", released)
	expectRefused(t, stored, http.StatusForbidden, code, msg,
		"leaseguard: rule hard-leases: "+hardManagerA+" may not release the lease of a-0_1 on lease it-hard/leader-a (only the holder or an operator may; held until ")
	code, msg, _ = put(t, hardManagerA, "", released)
	expectRefused(t, stored, http.StatusForbidden, code, msg,
		"leaseguard: rule hard-leases: "+hardManagerA+" may not release the lease of a-0_1 on lease it-hard/leader-a")

	if code, msg, _ := put(t, hardManagerA, "a-0", released); code != http.StatusOK {
		t.Fatalf("the holder's own release: HTTP %d %s", code, msg)
	}
}

// The holder may not extend its hold beyond the rule's bounds, nor rewrite
// the fields others judge expiry by.
func TestTheHolderCannotRewriteExpiry(t *testing.T) {
	hardLease(t, "leader-a")
	time.Sleep(5100 * time.Millisecond) // past minRenewInterval: only the bounds refuse
	stored, err := admin.CoordinationV1().Leases(hardNS).Get(context.Background(), "leader-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		change func(*coordinationv1.Lease)
		want   string
	}{
		{"lease duration of 68 years", func(l *coordinationv1.Lease) { l.Spec.LeaseDurationSeconds = ptr.To[int32](2147483647) },
			"sets leaseDurationSeconds 2147483647 on lease it-hard/leader-a (at most 60 (maxLeaseDuration))"},
		{"acquireTime in 2099", func(l *coordinationv1.Lease) {
			l.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)))
		}, "sets an acquireTime in the future on lease it-hard/leader-a (acquireTime "},
		{"renewTime cleared", func(l *coordinationv1.Lease) { l.Spec.RenewTime = nil },
			"clears renewTime of held lease it-hard/leader-a (a held lease keeps its renewTime)"},
		{"renewTime moved back to 2001", func(l *coordinationv1.Lease) {
			l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)))
		}, "moves renewTime backwards on lease it-hard/leader-a (stored renewTime: "},
		{"leaseTransitions raised to the maximum", func(l *coordinationv1.Lease) { l.Spec.LeaseTransitions = ptr.To[int32](2147483647) },
			"changes leaseTransitions (0 to 2147483647) without a new holder on lease it-hard/leader-a (leaseTransitions changes only on acquisition)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := stored.DeepCopy()
			c.change(w)
			code, msg, _ := put(t, hardManagerA, "a-0", w)
			expectRefused(t, stored, http.StatusForbidden, code, msg, "leaseguard: rule hard-leases: "+hardManagerA+" "+c.want)
		})
	}
}

// How often a Lease is written is judged by the time the API server stored
// the last renewal (managedFields), not by a renewTime the client writes:
// neither an old renewTime, nor a release and re-acquisition, nor a change
// of another field gets past the 5s interval.
func TestWriteRateIsJudgedByTheServersTime(t *testing.T) {
	stored := hardLease(t, "leader-a")
	time.Sleep(6 * time.Second)
	renew := func(l *coordinationv1.Lease, renewTime time.Time) *coordinationv1.Lease {
		w := l.DeepCopy()
		w.Spec.RenewTime = ptr.To(metav1.NewMicroTime(renewTime))
		return w
	}
	// 6s after creation: admitted, and stored now.
	first := renew(stored, stored.Spec.RenewTime.Add(time.Millisecond))
	if code, msg, _ := put(t, hardManagerA, "a-0", first); code != http.StatusOK {
		t.Fatalf("renewal after the interval: HTTP %d %s", code, msg)
	}
	stored, err := admin.CoordinationV1().Leases(hardNS).Get(context.Background(), "leader-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	// A second later, with a renewTime 6s old: the stored write is a second
	// old by the server's clock.
	code, msg, retry := put(t, hardManagerA, "a-0", renew(stored, time.Now().Add(-6*time.Second)))
	expectRefused(t, stored, http.StatusTooManyRequests, code, msg,
		"leaseguard: rule hard-leases: "+hardManagerA+" renews too often lease it-hard/leader-a (renewed ")
	if n, err := strconv.Atoi(retry); err != nil || n < 1 || n > 5 {
		t.Errorf("Retry-After %q, want the 1-5s left of the interval", retry)
	}
	// Another field, a second after the stored write: limited as a write.
	other := stored.DeepCopy()
	other.Spec.LeaseDurationSeconds = ptr.To[int32](16)
	code, msg, _ = put(t, hardManagerA, "a-0", other)
	expectRefused(t, stored, http.StatusTooManyRequests, code, msg,
		"leaseguard: rule hard-leases: "+hardManagerA+" writes too often lease it-hard/leader-a (written ")
	// Release (never limited), then re-acquire at once: limited.
	released := stored.DeepCopy()
	released.Spec.HolderIdentity = ptr.To("")
	if code, msg, _ := put(t, hardManagerA, "a-0", released); code != http.StatusOK {
		t.Fatalf("release: HTTP %d %s", code, msg)
	}
	stored, err = admin.CoordinationV1().Leases(hardNS).Get(context.Background(), "leader-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	again := stored.DeepCopy()
	again.Spec.HolderIdentity = ptr.To("a-0_2")
	again.Spec.LeaseTransitions = ptr.To(ptr.Deref(stored.Spec.LeaseTransitions, 0) + 1)
	again.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(time.Now()))
	again.Spec.RenewTime = again.Spec.AcquireTime
	code, msg, _ = put(t, hardManagerA, "a-0", again)
	expectRefused(t, stored, http.StatusTooManyRequests, code, msg,
		"leaseguard: rule hard-leases: "+hardManagerA+" writes too often lease it-hard/leader-a (written ")
}

func hardMCLs(t *testing.T, user string, groups ...string) dynamic.ResourceInterface {
	t.Helper()
	cfg := impersonating(user, "")
	cfg.Impersonate.Groups = groups
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dyn.Resource(mcl.GroupVersionResource).Namespace(hardNS)
}

func newHardMCL(name, renewTime string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mcl.Group + "/" + mcl.Version, "kind": mcl.Kind,
		"metadata": map[string]any{"name": name, "namespace": hardNS},
		"spec":     map[string]any{"holderIdentity": "cluster-a", "renewTime": renewTime, "leaseDurationSeconds": int64(15)},
	}}
}

// Finalizers and owner references decide whether and when the shared object
// disappears: only the designated manager, an operator or the
// MultiClusterLease controller (its finalizer) change them. Labels stay
// free for managers.
func TestMetadataThatDecidesDeletionIsGuarded(t *testing.T) {
	ctx := context.Background()
	createNamespace(t, hardNS)
	a, b := hardMCLs(t, hardManagerA), hardMCLs(t, hardManagerB)
	created, err := a.Create(ctx, newHardMCL("owned", micro(time.Now())), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		operator := hardMCLs(t, "admin", "system:masters")
		_, _ = operator.Patch(ctx, "owned", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		_ = operator.Delete(ctx, "owned", metav1.DeleteOptions{})
	})
	want := `admission webhook "validate.leases.leaseguard.io" denied the request: leaseguard: rule hard-mcl: ` + hardManagerB +
		" may not change finalizers or ownerReferences of multiclusterlease it-hard/owned (designated: ...manager-a, stale in "
	for name, patch := range map[string]string{
		"finalizer":       `{"metadata":{"finalizers":["example.com/block-deletion"]}}`,
		"owner reference": `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"00000000-0000-0000-0000-000000000009"}]}}`,
	} {
		_, err := b.Patch(ctx, "owned", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		if !apierrors.IsForbidden(err) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s by a non-designated manager: %v\nwant %s...", name, err, want)
		}
	}
	if _, err := b.Patch(ctx, "owned", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"b"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("a label by another manager: %v", err)
	}
	if _, err := a.Patch(ctx, "owned", types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/mine"]}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("a finalizer by the designated manager: %v", err)
	}
	// The MultiClusterLease controller adds and removes its own finalizer
	// (and nothing else: TestTheStatusWriterChangesOnlyItsOwnFinalizer).
	ctrl := hardMCLs(t, mclCtrl)
	for _, finalizers := range []string{`["example.com/mine","` + mcl.Finalizer + `"]`, `["example.com/mine"]`} {
		if _, err := ctrl.Patch(ctx, "owned", types.MergePatchType, []byte(`{"metadata":{"finalizers":`+finalizers+`}}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("the MultiClusterLease controller's finalizers to %s: %v", finalizers, err)
		}
	}
	after, err := a.Get(ctx, "owned", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after.GetOwnerReferences()) != 0 || after.GetResourceVersion() == created.GetResourceVersion() {
		t.Errorf("owner references %v after the refused writes", after.GetOwnerReferences())
	}
}

// A MultiClusterLease stored by an identity leaseguard never sees, with
// times the API server accepts in any form (lower-case t and z, a +99:00
// offset), is decided like any other: the status writer, finalizer removal
// and deletion by an operator or a cluster admin all go through.
func TestOddlyWrittenTimesNeverBrickAnObject(t *testing.T) {
	ctx := context.Background()
	createNamespace(t, hardNS)
	// kube-system service accounts are never sent to leaseguard.
	outsider := hardMCLs(t, "system:serviceaccount:kube-system:writer")
	for i, renewTime := range []string{"2026-11-30t14:00:00z", "2026-11-30T14:00:00.5+99:00"} {
		name := "odd-" + strconv.Itoa(i)
		obj := newHardMCL(name, renewTime)
		obj.SetFinalizers([]string{"multiclusterlease.core.cnrm.cloud.google.com/finalizer"})
		if _, err := outsider.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("storing renewTime %q: %v", renewTime, err)
		}
		current, err := hardMCLs(t, mclCtrl).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedField(current.Object, "cluster-a", "status", "globalHolderIdentity"); err != nil {
			t.Fatal(err)
		}
		if _, err := hardMCLs(t, mclCtrl).UpdateStatus(ctx, current, metav1.UpdateOptions{}); err != nil {
			t.Errorf("%s: the status writer: %v", renewTime, err)
		}
		if _, err := hardMCLs(t, mclCtrl).Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("%s: finalizer removal by the MultiClusterLease controller: %v", renewTime, err)
		}
		deleter := hardMCLs(t, "someone", "it:operators")
		if i == 1 {
			deleter = hardMCLs(t, "admin", "system:masters")
		}
		if err := deleter.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("%s: deletion: %v", renewTime, err)
		}
	}
}

// A MultiClusterLease created with generateName reaches the mutating webhook
// before the API server names it; its first manager is still designated.
func TestGenerateNameCreateIsDesignated(t *testing.T) {
	ctx := context.Background()
	createNamespace(t, hardNS)
	obj := newHardMCL("", micro(time.Now()))
	obj.SetName("")
	obj.SetGenerateName("generated-")
	created, err := hardMCLs(t, hardManagerA).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = hardMCLs(t, "admin", "system:masters").Delete(ctx, created.GetName(), metav1.DeleteOptions{})
	})
	if got := created.GetAnnotations()[designation]; got != hardManagerA {
		t.Fatalf("designation of %s = %q, want %q", created.GetName(), got, hardManagerA)
	}
}

// A username with a right-to-left override reads the same in the denial and
// in leaseguard's log as it is: escaped, never reordering the line.
func TestBidiOverridesInUsernamesAreEscaped(t *testing.T) {
	ctx := context.Background()
	createNamespace(t, hardNS)
	evil := "system:serviceaccount:" + hardNS + ":evil\u202eredloh"
	_, err := hardMCLs(t, evil).Create(ctx, newHardMCL("bidi", micro(time.Now())), metav1.CreateOptions{})
	want := `leaseguard: rule hard-mcl: system:serviceaccount:it-hard:evil\u202eredloh is not a manager of multiclusterlease it-hard/bidi`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want it to contain %s", err, want)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(guard.Log(), `evil\\u202eredloh`) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(guard.Log(), `evil\\u202eredloh`) || strings.Contains(guard.Log(), "\u202e") {
		t.Errorf("leaseguard's log does not carry the username escaped")
	}
}

// HTTP/2 is off on the webhook port unless asked for (--enable-http2).
func TestWebhookServesHTTP1Only(t *testing.T) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp",
		net.JoinHostPort(cp.WebhookHost, strconv.Itoa(cp.WebhookPort)),
		&tls.Config{NextProtos: []string{"h2", "http/1.1"}, InsecureSkipVerify: true, //nolint:gosec // only the negotiated protocol is looked at
			Certificates: []tls.Certificate{cp.AdmissionClient.Certificate()}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if p := conn.ConnectionState().NegotiatedProtocol; p == "h2" {
		t.Fatalf("the webhook port negotiated %q", p)
	}
}

// The status of a MultiClusterLease says which cluster holds the global
// lease; only the MultiClusterLease controller writes it. A stranger who
// reuses the controller's field-manager name changes nothing in
// managedFields but their time, so a "changes nothing" match condition
// that forgot status would skip leaseguard and store the forgery: with the
// fail-closed/fail-open split and with --fail-open alike, it is refused and
// the stored status stays.
func TestStatusForgedUnderTheStatusWritersFieldManagerIsRefused(t *testing.T) {
	ctx := context.Background()
	createNamespace(t, hardNS)
	for _, failOpen := range []bool{false, true} {
		t.Run(map[bool]string{false: "split", true: "fail-open"}[failOpen], func(t *testing.T) {
			if err := cp.InstallAdmission(ctx, policyPath, manifests.Options{FailOpen: failOpen}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := cp.InstallAdmission(ctx, policyPath, manifests.Options{}); err != nil {
					t.Error(err)
				}
			})
			name := "forged-status-" + strconv.FormatBool(failOpen)
			if _, err := hardMCLs(t, hardManagerA).Create(ctx, newHardMCL(name, micro(time.Now())), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = hardMCLs(t, "admin", "system:masters").Delete(ctx, name, metav1.DeleteOptions{})
			})
			const manager = "multiclusterlease-controller"
			status := func(user, holder string) error {
				current, err := hardMCLs(t, mclCtrl).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				_ = unstructured.SetNestedField(current.Object, holder, "status", "globalHolderIdentity")
				_, err = hardMCLs(t, user).UpdateStatus(ctx, current, metav1.UpdateOptions{FieldManager: manager})
				return err
			}
			if err := status(mclCtrl, "cluster-a"); err != nil {
				t.Fatalf("the MultiClusterLease controller writing status: %v", err)
			}
			// Within the same second, so that managedFields differ in nothing.
			err := status(hardManagerB, "cluster-evil")
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "leaseguard: rule hard-mcl: "+hardManagerB) {
				t.Errorf("forged status by %s: %v, want 403 from leaseguard", hardManagerB, err)
			}
			after, err := hardMCLs(t, mclCtrl).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got, _, _ := unstructured.NestedString(after.Object, "status", "globalHolderIdentity"); got != "cluster-a" {
				t.Errorf("stored globalHolderIdentity %q after the forgery, want cluster-a", got)
			}
		})
	}
}

// The fail-open webhook skips writes that change nothing but managedFields
// times, which it finds by comparing managedFields entry by entry. A Lease
// stored with thousands of entries must not make that comparison cost more
// than the API server allows a match condition: an error there skips the
// fail-open webhook, and a write leaseguard refuses is stored. Here a
// stranger rewrites one entry of 2,000 (changing nothing else).
func TestManyManagedFieldsEntriesDoNotSkipTheRenewalsWebhook(t *testing.T) {
	ctx := context.Background()
	stored := hardLease(t, "leader-a")
	padded := stored.DeepCopy()
	padded.Labels = map[string]string{}
	const entries = 2000
	for i := range entries {
		key := "l" + strconv.Itoa(i)
		padded.Labels[key] = "v"
		// Apply entries: the API server keeps at most ten Update managers.
		padded.ManagedFields = append(padded.ManagedFields, metav1.ManagedFieldsEntry{
			Manager: "m" + strconv.Itoa(i), Operation: metav1.ManagedFieldsOperationApply, APIVersion: "coordination.k8s.io/v1",
			Time: ptr.To(metav1.Now()), FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{"f:` + key + `":{}}}}`),
		})
	}
	// The labels first, then the entries that own them: entries sent with
	// a write lose the fields that write changes.
	labelled := stored.DeepCopy()
	labelled.Labels = padded.Labels
	labelled, err := admin.CoordinationV1().Leases(hardNS).Update(ctx, labelled, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	padded.ResourceVersion = labelled.ResourceVersion
	stored, err = admin.CoordinationV1().Leases(hardNS).Update(ctx, padded, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("the operator's update with %d managedFields entries: %v", entries, err)
	}
	if n := len(stored.ManagedFields); n < entries {
		t.Fatalf("%d managedFields entries stored, want at least %d", n, entries)
	}
	forged := stored.DeepCopy()
	last := &forged.ManagedFields[len(forged.ManagedFields)-1]
	last.Manager += "-forged"
	code, msg, _ := put(t, hardManagerB, "b-0", forged)
	expectRefused(t, stored, http.StatusForbidden, code, msg, "leaseguard: rule hard-leases: "+hardManagerB+" ")
}

// The API server keeps the managedFields times a client sends: a metadata
// write by a sibling pod that re-dated the renewer's entry ten years ahead
// made every later renewal look like the server's record moving backwards,
// and after expiry every takeover too, until an operator repaired it (third
// attack round, docs/security.md). Such a write is refused, the Lease left
// as it was; and a lease an operator left so (operators are not checked)
// is still renewed by its holder.
func TestManagedFieldsDatedAheadAreRefusedAndNeverBrickALease(t *testing.T) {
	ctx := context.Background()
	stored := hardLease(t, "leader-a")
	forge := func(l *coordinationv1.Lease) *coordinationv1.Lease {
		f := l.DeepCopy()
		f.Labels = map[string]string{"seen-by": "a-1"}
		ahead := metav1.NewTime(time.Now().Add(10 * 365 * 24 * time.Hour))
		for i := range f.ManagedFields {
			f.ManagedFields[i].Time = &ahead
		}
		return f
	}
	code, msg, _ := put(t, hardManagerA, "a-1", forge(stored))
	expectRefused(t, stored, http.StatusForbidden, code, msg,
		"leaseguard: rule hard-leases: "+hardManagerA+" dates a managedFields entry ahead of the server clock on lease it-hard/leader-a (only the API server dates entries)")

	// An operator may (leaseguard does not judge operators); the holder's
	// renewal after the interval is then still admitted.
	// (Under a field manager of its own: the API server re-dates the
	// entry of the manager that writes.)
	bricked, err := admin.CoordinationV1().Leases(hardNS).Update(ctx, forge(stored), metav1.UpdateOptions{FieldManager: "operator-tool"})
	if err != nil {
		t.Fatalf("the operator's write: %v", err)
	}
	kept := false
	for _, m := range bricked.ManagedFields {
		kept = kept || (m.Manager != "operator-tool" && m.Time != nil && m.Time.After(time.Now().Add(time.Hour)))
	}
	if !kept {
		t.Fatalf("the API server did not keep the forged time (%+v): the test no longer reproduces the attack", bricked.ManagedFields)
	}
	time.Sleep(6 * time.Second) // hard-leases: minRenewInterval 5s
	renewal := bricked.DeepCopy()
	renewal.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
	if code, msg, _ := put(t, hardManagerA, "a-0", renewal); code != http.StatusOK {
		t.Fatalf("the holder's renewal of a lease with a forged managedFields time: HTTP %d %s", code, msg)
	}
}

// The seventh attack round: a sibling pod of the holder (its service
// account, so a manager of the bound Lease) server-side applied the stored
// renewTime unchanged with a label, once a second. Its Apply entry then
// co-owned renewTime and the API server stamped it; taken as the record of
// the last renewal, it made the holder's every renewal "too early" (I6,
// 429) until its lease expired. The record is the earliest owner now: a
// write that changes renewTime gives it to one entry alone, so a later
// co-owner applied the stored value and recorded no renewal.
func TestACoOwnerOfRenewTimeDoesNotMoveTheRecordOfTheLastRenewal(t *testing.T) {
	ctx := context.Background()
	stored := hardLease(t, "leader-a")
	renewed := stored.Spec.RenewTime.Time
	time.Sleep(time.Until(renewed.Add(4 * time.Second)))
	apply, err := json.Marshal(map[string]any{"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
		"metadata": map[string]any{"name": stored.Name, "namespace": hardNS, "labels": map[string]any{"tick": "1"}},
		"spec":     map[string]any{"renewTime": stored.Spec.RenewTime.Format(metav1.RFC3339Micro)}})
	if err != nil {
		t.Fatal(err)
	}
	coOwned, err := as(t, hardManagerA, "a-1").CoordinationV1().Leases(hardNS).Patch(ctx, stored.Name, types.ApplyPatchType, apply,
		metav1.PatchOptions{FieldManager: "sibling", Force: ptr.To(true)})
	if err != nil {
		t.Fatalf("the sibling's apply of the stored renewTime with a label: %v", err)
	}
	owners := 0
	for _, m := range coOwned.ManagedFields {
		if m.Subresource == "" && m.FieldsV1 != nil && strings.Contains(m.FieldsV1.GetRawString(), `"f:renewTime"`) {
			owners++
		}
	}
	if owners < 2 {
		t.Fatalf("renewTime has %d owners after the apply (%+v): the test no longer reproduces the attack", owners, coOwned.ManagedFields)
	}
	// 6 s after the stored renewal (hard-leases: minRenewInterval 5s), 2 s
	// after the sibling's stamp: the holder's renewal is due.
	time.Sleep(time.Until(renewed.Add(6 * time.Second)))
	renewal := coOwned.DeepCopy()
	renewal.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
	if code, msg, retryAfter := put(t, hardManagerA, "a-0", renewal); code != http.StatusOK {
		t.Fatalf("the holder's renewal 6s after its stored one, 2s after the sibling's apply: HTTP %d %s (Retry-After %q)", code, msg, retryAfter)
	}
}
