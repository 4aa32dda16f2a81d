package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	mcl "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
)

// deleteAs sends a DELETE of path (a Lease, or with a labelSelector the
// collection) as user from pod, with the groups given, and returns what the
// client sees.
func deleteAs(t *testing.T, user, pod string, groups []string, path string, query url.Values) (code int, message string) {
	t.Helper()
	cfg := impersonating(user, pod)
	cfg.Impersonate.Groups = groups
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u := strings.TrimSuffix(cfg.Host, "/") + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequest(http.MethodDelete, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var status metav1.Status
	_ = json.Unmarshal(data, &status)
	return resp.StatusCode, status.Message
}

const hardLeases = "/apis/coordination.k8s.io/v1/namespaces/" + hardNS + "/leases"

// Deleting a live lease and creating it again is a takeover: on a bound
// Lease every pod of the bound manager shares its service account, so
// before this check a sibling pod deleted the Lease its peer held and
// created it again as its own holder, and both electors led until the
// holder's renew deadline (issue 36). A DELETE of a live, held lease is now
// a release: its holder's pod or an operator only, also one item at a time
// in a deletecollection (the API server sends a DELETE review per item).
// Once the lease has expired, or its holder has deleted it, the sibling
// may take it.
func TestASiblingPodCannotDeleteAndRecreateALiveLease(t *testing.T) {
	ctx := context.Background()
	stored := hardLease(t, "leader-a")
	want := "leaseguard: rule hard-leases: " + hardManagerA + " may not delete the live lease of a-0_1 on lease it-hard/leader-a (only the holder or an operator may; held until "

	code, msg := deleteAs(t, hardManagerA, "a-1", nil, hardLeases+"/leader-a", nil)
	expectRefused(t, stored, http.StatusForbidden, code, msg, want)
	if !strings.Contains(msg, ", expires in ") {
		t.Errorf("the refusal %q does not say when the lease expires", msg)
	}
	code, msg = deleteAs(t, hardManagerA, "", nil, hardLeases+"/leader-a", nil)
	expectRefused(t, stored, http.StatusForbidden, code, msg, want)
	// A dry run gets the same answer and changes nothing.
	code, msg = deleteAs(t, hardManagerA, "a-1", nil, hardLeases+"/leader-a", url.Values{"dryRun": {"All"}})
	expectRefused(t, stored, http.StatusForbidden, code, msg, want)

	// deletecollection: one DELETE review per item, each decided.
	labelled := stored.DeepCopy()
	labelled.Labels = map[string]string{"reach": "collection"}
	stored, err := admin.CoordinationV1().Leases(hardNS).Update(ctx, labelled, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	collection := url.Values{"labelSelector": {"reach=collection"}}
	code, msg = deleteAs(t, hardManagerA, "a-1", nil, hardLeases, collection)
	expectRefused(t, stored, http.StatusForbidden, code, msg, want)

	// The holder's own pod may: a release. The sibling then acquires it by
	// creating it anew.
	if code, msg := deleteAs(t, hardManagerA, "a-0", nil, hardLeases, collection); code != http.StatusOK {
		t.Fatalf("the holder's deletecollection: HTTP %d %s", code, msg)
	}
	if _, err := admin.CoordinationV1().Leases(hardNS).Get(ctx, "leader-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after the holder's deletecollection: %v, want NotFound", err)
	}
	now := metav1.NewMicroTime(time.Now())
	acquired := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: hardNS, Name: "leader-a"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a-1_1"), LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To[int32](0)}}
	if _, err := as(t, hardManagerA, "a-1").CoordinationV1().Leases(hardNS).Create(ctx, acquired, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the sibling acquires the lease its holder deleted: %v", err)
	}

	// An operator may delete a live lease.
	if code, msg := deleteAs(t, "admin", "", []string{"system:masters"}, hardLeases+"/leader-a", nil); code != http.StatusOK {
		t.Fatalf("an operator's delete of a live lease: HTTP %d %s", code, msg)
	}

	// An expired lease is anyone's to take, so any pod of the manager may
	// delete it.
	old := metav1.NewMicroTime(time.Now().Add(-time.Minute))
	expired := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: hardNS, Name: "leader-a"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a-0_1"), LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime: &old, RenewTime: &old, LeaseTransitions: ptr.To[int32](0)}}
	if _, err := admin.CoordinationV1().Leases(hardNS).Create(ctx, expired, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if code, msg := deleteAs(t, hardManagerA, "a-1", nil, hardLeases+"/leader-a", nil); code != http.StatusOK {
		t.Fatalf("a sibling's delete of an expired lease: HTTP %d %s", code, msg)
	}
}

// The MultiClusterLease controller (a status writer) writes the status and
// its own finalizer, nothing else of the object (issue 41). Before this
// check it could replace the whole finalizer list (dropping the designated
// manager's and planting one nobody removes, so that the designated
// manager's DELETE left the object Terminating for good) and store labels
// and annotations. Now each such write is refused and the object left as
// stored; adding and removing its own finalizer beside another's is
// admitted, and the object goes once the designated manager deletes it and
// each removes its own finalizer.
func TestTheStatusWriterChangesOnlyItsOwnFinalizer(t *testing.T) {
	ctx := context.Background()
	createNamespace(t, hardNS)
	const name = "reach-status-writer"
	a, ctrl := hardMCLs(t, hardManagerA), hardMCLs(t, mclCtrl)
	if _, err := a.Create(ctx, newHardMCL(name, micro(time.Now())), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		operator := hardMCLs(t, "admin", "system:masters")
		_, _ = operator.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		_ = operator.Delete(ctx, name, metav1.DeleteOptions{})
	})
	finalizers := func(list string) string { return `{"metadata":{"finalizers":` + list + `}}` }
	own := `"` + mcl.Finalizer + `"`

	if _, err := a.Patch(ctx, name, types.MergePatchType, []byte(finalizers(`["example.com/mine"]`)), metav1.PatchOptions{}); err != nil {
		t.Fatalf("the designated manager's finalizer: %v", err)
	}
	if _, err := ctrl.Patch(ctx, name, types.MergePatchType, []byte(finalizers(`["example.com/mine",`+own+`]`)), metav1.PatchOptions{}); err != nil {
		t.Fatalf("the controller adds its finalizer: %v", err)
	}
	stored, err := a.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	refusal := func(what string) string {
		return `admission webhook "validate.leases.leaseguard.io" denied the request: leaseguard: rule hard-mcl: ` + mclCtrl +
			" may not change " + what + " of multiclusterlease it-hard/" + name + " (status writers change only finalizer " + mcl.Finalizer + ")"
	}
	for _, c := range []struct{ name, patch, want string }{
		{"the finalizers replaced", finalizers(`["example.com/never-released"]`), refusal("finalizers")},
		{"the designated manager's finalizer dropped", finalizers(`[` + own + `]`), refusal("finalizers")},
		{"every finalizer dropped", finalizers(`null`), refusal("finalizers")},
		{"another finalizer beside its own", finalizers(`["example.com/mine",` + own + `,"example.com/never-released"]`), refusal("finalizers")},
		{"an owner reference", `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"00000000-0000-0000-0000-000000000041"}]}}`, refusal("ownerReferences")},
		{"a label", `{"metadata":{"labels":{"controller":"was-here"}}}`, refusal("labels")},
		{"an annotation", `{"metadata":{"annotations":{"controller":"was-here"}}}`, refusal("annotations")},
	} {
		_, err := ctrl.Patch(ctx, name, types.MergePatchType, []byte(c.patch), metav1.PatchOptions{})
		if !apierrors.IsForbidden(err) || err.Error() != c.want {
			t.Errorf("%s by the status writer: %v\nwant 403 %s", c.name, err, c.want)
		}
	}
	after, err := a.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.GetResourceVersion() != stored.GetResourceVersion() {
		t.Errorf("the refused writes changed the object: finalizers %v, labels %v, annotations %v", after.GetFinalizers(), after.GetLabels(), after.GetAnnotations())
	}

	// The designated manager deletes; the controller removes its own
	// finalizer (releasing the global lock), the manager its own: gone.
	if err := a.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("the designated manager's delete: %v", err)
	}
	if _, err := ctrl.Patch(ctx, name, types.MergePatchType, []byte(finalizers(`["example.com/mine"]`)), metav1.PatchOptions{}); err != nil {
		t.Fatalf("the controller removes its finalizer from the terminating object: %v", err)
	}
	if _, err := a.Patch(ctx, name, types.MergePatchType, []byte(finalizers(`null`)), metav1.PatchOptions{}); err != nil {
		t.Fatalf("the designated manager removes its finalizer: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := a.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the object is still there after its finalizers went: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
