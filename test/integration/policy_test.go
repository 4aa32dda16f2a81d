package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/test/controlplane"
)

const (
	autoNS       = "it-auto"
	autoManagerA = "system:serviceaccount:it-auto:manager-a"
	autoManagerB = "system:serviceaccount:it-auto:manager-b"
	mclCtrl      = "system:serviceaccount:multiclusterlease-system:default"
	designation  = "leaseguard.io/designated-manager"
)

func mcls(t *testing.T, user string) dynamic.ResourceInterface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(impersonating(user, ""))
	if err != nil {
		t.Fatal(err)
	}
	return dyn.Resource(mclv1alpha1.GroupVersionResource).Namespace(autoNS)
}

func micro(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00") }

// renewPatch is what a KCC candidate sends on every acquire and renew.
func renewPatch(holder string, leaseSeconds int) []byte {
	return []byte(fmt.Sprintf(`{"spec":{"holderIdentity":%q,"renewTime":%q,"leaseDurationSeconds":%d,"retryPeriodSeconds":%d}}`,
		holder, micro(time.Now()), leaseSeconds, leaseSeconds))
}

func newMCL(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mclv1alpha1.Group + "/" + mclv1alpha1.Version,
		"kind":       mclv1alpha1.Kind,
		"metadata":   map[string]any{"name": name, "namespace": autoNS},
		"spec": map[string]any{
			"holderIdentity":       "cluster-a",
			"renewTime":            micro(time.Now()),
			"leaseDurationSeconds": int64(1),
		},
	}}
}

func TestAutoDesignationStampsDeniesAndHandsOverWhenStale(t *testing.T) {
	ctx := context.Background()
	createNamespace(t, autoNS)
	a, b := mcls(t, autoManagerA), mcls(t, autoManagerB)

	// The first manager to write is stamped as the designated one.
	created, err := a.Create(ctx, newMCL("auto"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("first manager's create: %v", err)
	}
	if got := created.GetAnnotations()[designation]; got != autoManagerA {
		t.Fatalf("designation after the first write = %q, want %q", got, autoManagerA)
	}
	// It keeps renewing.
	renewed, err := a.Patch(ctx, "auto", types.MergePatchType, renewPatch("cluster-a", 1), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("designated manager's renewal: %v", err)
	}

	// A second manager's renewal of the shared lease is acknowledged
	// without being stored while the lease is fresh: success, the object
	// and its generation as they were (designation decides who writes,
	// never who leads).
	acked, err := b.Patch(ctx, "auto", types.MergePatchType, renewPatch("cluster-a", 1), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("second manager's renewal: %v", err)
	}
	if acked.GetResourceVersion() != renewed.GetResourceVersion() || acked.GetGeneration() != renewed.GetGeneration() {
		t.Fatalf("an acknowledged renewal was stored: resourceVersion %s -> %s, generation %d -> %d",
			renewed.GetResourceVersion(), acked.GetResourceVersion(), renewed.GetGeneration(), acked.GetGeneration())
	}
	// Any other lease write by it is denied.
	_, err = b.Patch(ctx, "auto", types.MergePatchType, renewPatch("cluster-a", 2), metav1.PatchOptions{})
	assertDeniedStaleIn(t, err, http.StatusForbidden, `admission webhook "validate.leases.leaseguard.io" denied the request: leaseguard: rule auto-mcl: `+
		autoManagerB+` is not the designated manager of multiclusterlease it-auto/auto (designated: ...manager-a, stale in 2s)`)
	// ... nor may it designate itself.
	_, err = b.Patch(ctx, "auto", types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+designation+`":"`+autoManagerB+`"}}}`), metav1.PatchOptions{})
	assertDeniedStaleIn(t, err, http.StatusForbidden, `admission webhook "validate.leases.leaseguard.io" denied the request: leaseguard: rule auto-mcl: `+
		autoManagerB+` may not take over the designation of multiclusterlease it-auto/auto (designated: ...manager-a, stale in 2s)`)
	stored, err := a.Get(ctx, "auto", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if stored.GetResourceVersion() != renewed.GetResourceVersion() {
		t.Fatalf("denied writes changed the object: resourceVersion %s -> %s", renewed.GetResourceVersion(), stored.GetResourceVersion())
	}

	// Once the lease is stale (1s lease + 1s clock skew), the next manager's
	// write takes it over and is stamped; the former one is then denied.
	time.Sleep(2500 * time.Millisecond)
	took, err := b.Patch(ctx, "auto", types.MergePatchType, renewPatch("cluster-a", 15), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("takeover of a stale lease: %v", err)
	}
	if got := took.GetAnnotations()[designation]; got != autoManagerB {
		t.Fatalf("designation after takeover = %q, want %q", got, autoManagerB)
	}
	_, err = a.Patch(ctx, "auto", types.MergePatchType, renewPatch("cluster-a", 20), metav1.PatchOptions{})
	if err == nil || !strings.Contains(err.Error(), "is not the designated manager of multiclusterlease it-auto/auto (designated: ...manager-b, stale in ") {
		t.Fatalf("former designated manager after takeover: %v", err)
	}
	// Its renewals are acknowledged, not stored.
	if acked, err := a.Patch(ctx, "auto", types.MergePatchType, renewPatch("cluster-a", 15), metav1.PatchOptions{}); err != nil || acked.GetResourceVersion() != took.GetResourceVersion() {
		t.Fatalf("former designated manager's renewal after takeover: %v (stored: %v)", err, err == nil && acked.GetResourceVersion() != took.GetResourceVersion())
	}

	// An operator (by group) may reassign the designation at any time.
	op, err := dynamic.NewForConfig(func() *rest.Config {
		cfg := impersonating("alice", "")
		cfg.Impersonate.Groups = []string{"it:operators"}
		return cfg
	}())
	if err != nil {
		t.Fatal(err)
	}
	back, err := op.Resource(mclv1alpha1.GroupVersionResource).Namespace(autoNS).Patch(ctx, "auto", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+designation+`":"`+autoManagerA+`"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("operator reassigning the designation: %v", err)
	}
	if got := back.GetAnnotations()[designation]; got != autoManagerA {
		t.Fatalf("designation after the operator's write = %q", got)
	}
}

func TestStatusSubresourceIsForTheStatusWriterOnly(t *testing.T) {
	ctx := context.Background()
	createNamespace(t, autoNS)
	a, ctrl := mcls(t, autoManagerA), mcls(t, mclCtrl)
	obj, err := a.Create(ctx, newMCL("status"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	withStatus := obj.DeepCopy()
	_ = unstructured.SetNestedField(withStatus.Object, "cluster-a", "status", "globalHolderIdentity")

	// A manager may not forge the global holder.
	_, err = a.UpdateStatus(ctx, withStatus, metav1.UpdateOptions{})
	assertDenied(t, err, http.StatusForbidden, `admission webhook "validate.leases.leaseguard.io" denied the request: leaseguard: rule auto-mcl: `+
		autoManagerA+` may not write the status of multiclusterlease it-auto/status (status writers: `+mclCtrl+`)`)

	// The MultiClusterLease controller writes status ...
	updated, err := ctrl.UpdateStatus(ctx, withStatus, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("status writer's status update: %v", err)
	}
	if got, _, _ := unstructured.NestedString(updated.Object, "status", "globalHolderIdentity"); got != "cluster-a" {
		t.Fatalf("stored globalHolderIdentity %q", got)
	}
	// ... and adds its finalizer with a full UPDATE that touches no lease field.
	updated.SetFinalizers([]string{mclv1alpha1.Finalizer})
	final, err := ctrl.Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("MCL controller's finalizer update: %v", err)
	}
	// But it is no manager: a spec write of its own is denied.
	final.Object["spec"].(map[string]any)["holderIdentity"] = "cluster-b"
	_, err = ctrl.Update(ctx, final, metav1.UpdateOptions{})
	assertDenied(t, err, http.StatusForbidden, `admission webhook "validate.leases.leaseguard.io" denied the request: leaseguard: rule auto-mcl: `+
		mclCtrl+` is not a manager of multiclusterlease it-auto/status (managers: system:serviceaccount:it-auto:manager-*)`)

	// Let the object go: remove the finalizer so the namespace can be cleaned.
	final.Object["spec"].(map[string]any)["holderIdentity"] = "cluster-a"
	final.SetFinalizers(nil)
	if _, err := ctrl.Update(ctx, final, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("removing the finalizer: %v", err)
	}
}

func TestWarnModeAdmitsWithAWarningKubectlPrints(t *testing.T) {
	ctx := context.Background()
	createNamespace(t, "it-warn")
	manifest := `apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: warned
  namespace: it-warn
spec:
  holderIdentity: someone
`
	f := t.TempDir() + "/lease.yaml"
	if err := os.WriteFile(f, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := cp.Kubectl(kubeconfig, "--as", intruder, "apply", "-f", f).CombinedOutput()
	if err != nil {
		t.Fatalf("warn mode refused the write: %v\n%s", err, out)
	}
	wantWarning := "Warning: leaseguard: rule warn-leases: " + intruder + " is not a manager of lease it-warn/warned (managers: system:serviceaccount:it-warn:manager)"
	if !strings.Contains(string(out), wantWarning) || !strings.Contains(string(out), "lease.coordination.k8s.io/warned created") {
		t.Fatalf("kubectl printed:\n%s\nwant the warning:\n%s", out, wantWarning)
	}
	stored, err := admin.CoordinationV1().Leases("it-warn").Get(ctx, "warned", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("warned write was not persisted: %v", err)
	}
	if *stored.Spec.HolderIdentity != "someone" {
		t.Fatalf("stored holder %q", *stored.Spec.HolderIdentity)
	}
	fams, err := guard.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := controlplane.Counter(fams, "leaseguard_decisions_total", map[string]string{"rule": "warn-leases", "verdict": "warn", "invariant": "I1"}); n < 1 {
		t.Fatalf("warn decision not counted (%v)", n)
	}
}

func TestPolicyReloadAppliesValidFilesAndKeepsTheLastGoodOne(t *testing.T) {
	ctx := context.Background()
	createNamespace(t, "it-reload")
	original, err := os.ReadFile(policyPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = os.WriteFile(policyPath, original, 0o600)
		waitFor(t, "policy restored", func() bool {
			_, err := as(t, "system:serviceaccount:it-reload:writer", "").CoordinationV1().Leases("it-reload").Create(ctx, newLease("it-reload", fmt.Sprintf("restored-%d", time.Now().UnixNano()), "x"), metav1.CreateOptions{})
			return err != nil
		})
	}()
	writer := as(t, "system:serviceaccount:it-reload:writer", "").CoordinationV1().Leases("it-reload")

	// Under the base policy the catch-all rule denies the writer.
	if _, err := writer.Create(ctx, newLease("it-reload", "before", "x"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("before reload: %v, want the catch-all denial", err)
	}

	// A valid new rule takes effect without a restart.
	reloaded := strings.Replace(string(original), "- name: catch-all", `- name: reload-leases
  resources: [leases]
  namespaces: [it-reload]
  managers: ["system:serviceaccount:it-reload:writer"]
- name: catch-all`, 1)
	if err := os.WriteFile(policyPath, []byte(reloaded), 0o600); err != nil {
		t.Fatal(err)
	}
	i := 0
	waitFor(t, "the new rule to admit the writer", func() bool {
		i++
		_, err := writer.Create(ctx, newLease("it-reload", fmt.Sprintf("after-%d", i), "x"), metav1.CreateOptions{})
		return err == nil
	})

	// An invalid file is refused: the last good policy stays in force, the
	// problem is counted, and the server stays ready.
	if err := os.WriteFile(policyPath, []byte(reloaded+"  bogusField: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the invalid reload to be counted", func() bool {
		fams, err := guard.Metrics(ctx)
		return err == nil && controlplane.Gauge(fams, "leaseguard_policy_file_valid") == 0
	})
	if _, err := writer.Create(ctx, newLease("it-reload", "still-good", "x"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("after an invalid reload the last good policy should still admit the writer: %v", err)
	}
	resp, err := http.Get(guard.ReadyURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("readyz = %d after an invalid reload, want 200", resp.StatusCode)
	}
	if !strings.Contains(guard.Log(), `field bogusField not found in type v1alpha1.Rule`) {
		t.Fatalf("the invalid reload is not logged with its field:\n%s", guard.Log())
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	waitWithin(t, what, 20*time.Second, ok)
}

// waitWithin is waitFor with a deadline of its own.
func waitWithin(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// staleIn is the "stale in Ns" of a designation's message.
var staleIn = regexp.MustCompile(`stale in [0-9]+s\)`)

// assertDeniedStaleIn is assertDenied for a message that says when a 1 s
// lease (with 1 s of clock skew) renewed moments ago goes stale: "stale in
// 2s" while under a second has passed since the renewal, "stale in 1s" if
// the requests before took longer (CI's loaded cores); both are the
// message a user would see, anything else is not.
func assertDeniedStaleIn(t *testing.T, err error, code int32, message string) {
	t.Helper()
	if err != nil {
		var status apierrors.APIStatus
		if errors.As(err, &status) && strings.Contains(status.Status().Message, "stale in 1s)") {
			message = staleIn.ReplaceAllString(message, "stale in 1s)")
		}
	}
	assertDenied(t, err, code, message)
}
