package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
)

// Config Connector is moving the MultiClusterLease into its own codebase,
// with new status fields and x-kubernetes-preserve-unknown-fields on the
// status (issue 39 item 5). Against that CRD variant, with the sample
// policy as shipped (renewals acknowledged and coalesced in the API
// server): whatever a status writer adds to the status is stored and
// breaks no decision, and nobody else can write the status, known fields
// or unknown ones, through the status subresource or the object itself.
// A control plane of its own: the CRD is cluster-wide.
func TestUnknownStatusFieldsBreakNoDecision(t *testing.T) {
	ctx := context.Background()
	const ns = "cnrm-system"
	own, admin := ownSamplePlane(t, ns)
	preserveUnknownStatusFields(t, admin)

	const (
		name     = "kcc-leader"
		writer   = "system:serviceaccount:multiclusterlease-system:default"
		managerA = "system:serviceaccount:cnrm-system:cnrm-controller-manager-team-a"
		managerB = "system:serviceaccount:cnrm-system:cnrm-controller-manager-team-b"
	)
	as := func(user string) dynamic.ResourceInterface { return multiClusterLeasesAs(t, own.Config, user, ns) }
	get := func() *unstructured.Unstructured {
		t.Helper()
		u, err := admin.Resource(mclv1alpha1.GroupVersionResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return u
	}

	created, err := as(managerA).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mclv1alpha1.Group + "/" + mclv1alpha1.Version, "kind": mclv1alpha1.Kind,
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{"holderIdentity": "cluster-a", "renewTime": micro(time.Now()),
			"leaseDurationSeconds": int64(15), "retryPeriodSeconds": int64(2)},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := created.GetAnnotations()[designation]; got != managerA {
		t.Fatalf("designated after team-a's create: %q, want %q", got, managerA)
	}

	// The status writer writes the status Config Connector's controller
	// may write next: fields of every JSON type leaseguard has never heard
	// of, one of them 64 KiB.
	unknown := map[string]any{
		"candidates": []any{
			map[string]any{"identity": "cluster-a", "lastSeen": micro(time.Now()), "weights": []any{int64(1), "x", nil, true, 2.5}},
			map[string]any{"identity": "cluster-b", "lastSeen": "not a time at all", "nested": map[string]any{"deeper": map[string]any{"holderIdentity": "cluster-evil"}}},
		},
		"backendGeneration": int64(42),
		"note":              strings.Repeat("x", 64<<10),
		"globalRenewTime2":  "2099-01-01T00:00:00Z",
	}
	status := map[string]any{"observedGeneration": created.GetGeneration(), "globalHolderIdentity": "cluster-a",
		"globalRenewTime": time.Now().UTC().Format(time.RFC3339), "globalLeaseDurationSeconds": int64(15)}
	for k, v := range unknown {
		status[k] = v
	}
	withStatus := created.DeepCopy()
	withStatus.Object["status"] = status
	written, err := as(writer).UpdateStatus(ctx, withStatus, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("the status writer's status with unknown fields: %v", err)
	}
	for k := range unknown {
		if _, ok := written.Object["status"].(map[string]any)[k]; !ok {
			t.Errorf("status.%s was not preserved: the CRD variant is not in force", k)
		}
	}

	// The designated manager renews; another manager's renewal is
	// acknowledged without being stored; its designation takeover, a
	// stranger's renewal and a holder change are refused as before.
	renew := func(user string) error {
		_, err := as(user).Patch(ctx, name, types.MergePatchType,
			[]byte(fmt.Sprintf(`{"spec":{"holderIdentity":"cluster-a","renewTime":%q}}`, micro(time.Now()))), metav1.PatchOptions{})
		return err
	}
	// After a CRD changes, the API server's MutatingAdmissionPolicy
	// refuses the writes it would patch (503 "Resource kind … not found",
	// whatever its failurePolicy: the dispatcher returns status errors as
	// they are) until its type converter has the new schema: seconds, a
	// cost any CRD upgrade has for guarded renewals (docs/operations.md).
	// Only that refusal is waited out; it is counted.
	// The type converter polls the API server's OpenAPI every 5 s, and a
	// poll under load has come back without the kind again after a
	// renewal had passed (a real renewal refused so in CI after an
	// acknowledged dry run): every renewal below waits it out, within a
	// minute in all.
	var schemaWait time.Duration
	renewPast503 := func(user string) error {
		err := renew(user)
		for err != nil && apierrors.IsServiceUnavailable(err) && strings.Contains(err.Error(), "Resource kind") && schemaWait < time.Minute {
			time.Sleep(500 * time.Millisecond)
			schemaWait += 500 * time.Millisecond
			err = renew(user)
		}
		return err
	}
	defer func() {
		if schemaWait > 0 {
			t.Logf("the MutatingAdmissionPolicy refused renewals for %s in all after the CRD changed (its type converter)", schemaWait)
		}
	}()
	if err := renewPast503(managerA); err != nil {
		t.Errorf("the designated manager's renewal: %v", err)
	}
	// And the acknowledgement: until the API server's admission policies
	// have caught up with the CRD update, a shared renewal may be stored
	// (seen once under load). Dry runs of managerB's renewal, until one
	// comes back acknowledged (renewTime as stored); then the real one.
	for start := time.Now(); ; time.Sleep(500 * time.Millisecond) {
		stored := get()
		got, err := as(managerB).Patch(ctx, name, types.MergePatchType,
			[]byte(fmt.Sprintf(`{"spec":{"holderIdentity":"cluster-a","renewTime":%q}}`, micro(time.Now()))), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil && fmt.Sprint(got.Object["spec"].(map[string]any)["renewTime"]) == fmt.Sprint(stored.Object["spec"].(map[string]any)["renewTime"]) {
			if d := time.Since(start); d > time.Second {
				t.Logf("shared renewals acknowledged %s after the designated manager's renewal", d.Round(100*time.Millisecond))
			}
			break
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("another manager's dry-run renewal not acknowledged for a minute after the CRD update (last: %v)", err)
		}
	}
	if err := renewPast503(managerA); err != nil {
		t.Errorf("the designated manager's renewal: %v", err)
	}
	// Then real renewals. An acknowledged renewal leaves the spec as
	// stored, and the API server drops a write that changes nothing but
	// managedFields times, comparing the entries pairwise: when the
	// renewing manager's entry is re-dated past the status writer's
	// (entries are sorted by time, whole seconds), the order changes and
	// the API server stores the write, managedFields only. That costs at
	// most one write per status write (seen in CI: the first renewal
	// after the status writer's write). What a user must see: renewTime
	// never moved by it, and once the entry is last, none stored.
	stored := 0
	for i := 0; i < 4; i++ {
		before := get()
		if err := renewPast503(managerB); err != nil {
			t.Fatalf("another manager's renewal of the shared lease: %v", err)
		}
		after := get()
		if b, a := fmt.Sprint(before.Object["spec"]), fmt.Sprint(after.Object["spec"]); b != a {
			t.Fatalf("another manager's renewal changed the stored spec (%s → %s): it should be acknowledged", b, a)
		}
		if after.GetResourceVersion() != before.GetResourceVersion() {
			stored++
			t.Logf("another manager's acknowledged renewal was stored, managedFields only (resourceVersion %s → %s)", before.GetResourceVersion(), after.GetResourceVersion())
		}
		time.Sleep(1100 * time.Millisecond) // re-dates the entry: a new second
	}
	if stored > 1 {
		t.Errorf("%d of another manager's 4 acknowledged renewals were stored: at most the first, whose managedFields entry moves past the status writer's, may be", stored)
	}
	// The refusals below are of a live designation: renewed now, however
	// long the loop above took on loaded cores.
	if err := renewPast503(managerA); err != nil {
		t.Errorf("the designated manager's renewal: %v", err)
	}
	_, err = as(managerB).Patch(ctx, name, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+designation+`":"`+managerB+`"}}}`), metav1.PatchOptions{})
	refusedByLeaseguard(t, "a takeover of the fresh designation", err, "may not take over the designation of")
	_, err = as(managerA).Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"holderIdentity":"cluster-evil"}}`), metav1.PatchOptions{})
	refusedByLeaseguard(t, "a holder change of the live lease", err, "")
	err = renew("system:serviceaccount:default:stranger")
	refusedByLeaseguard(t, "a stranger's renewal", err, "is not a manager of")

	// Nobody but the status writer writes the status: not a manager
	// through the subresource (known or unknown fields), and not through
	// the object itself (the API server ignores status there; whatever it
	// stores, the status stays the writer's).
	before := get()
	for _, c := range []struct {
		what  string
		field string
		value any
	}{
		{"a manager forging globalHolderIdentity", "globalHolderIdentity", "cluster-evil"},
		{"a manager adding an unknown field", "candidates", []any{map[string]any{"identity": "cluster-evil"}}},
		{"a manager changing an unknown field", "backendGeneration", int64(43)},
	} {
		forged := before.DeepCopy()
		forged.Object["status"].(map[string]any)[c.field] = c.value
		_, err := as(managerB).UpdateStatus(ctx, forged, metav1.UpdateOptions{})
		refusedByLeaseguard(t, c.what, err, "may not write the status of multiclusterlease "+ns+"/"+name)
	}
	_, err = as(managerA).Patch(ctx, name, types.MergePatchType,
		[]byte(`{"status":{"globalHolderIdentity":"cluster-evil","candidates":[{"identity":"cluster-evil"}]}}`), metav1.PatchOptions{})
	if err != nil && !apierrors.IsForbidden(err) {
		t.Errorf("the designated manager's status through the object itself: %v", err)
	}
	after := get()
	if got, _, _ := unstructured.NestedString(after.Object, "status", "globalHolderIdentity"); got != "cluster-a" {
		t.Errorf("status.globalHolderIdentity is %q after the managers' writes, want cluster-a", got)
	}
	if got, _, _ := unstructured.NestedInt64(after.Object, "status", "backendGeneration"); got != 42 {
		t.Errorf("status.backendGeneration is %d after the managers' writes, want 42", got)
	}
	if got, _, _ := unstructured.NestedSlice(after.Object, "status", "candidates"); len(got) != 2 {
		t.Errorf("status.candidates has %d entries after the managers' writes, want the writer's 2", len(got))
	}

	// And the status writer keeps writing it: a next status with the
	// unknown fields changed and one removed.
	next := after.DeepCopy()
	st := next.Object["status"].(map[string]any)
	st["backendGeneration"] = int64(43)
	delete(st, "note")
	if _, err := as(writer).UpdateStatus(ctx, next, metav1.UpdateOptions{}); err != nil {
		t.Errorf("the status writer's next status: %v", err)
	}
}

// preserveUnknownStatusFields turns the installed MultiClusterLease CRD into
// the variant Config Connector is moving to: unknown status fields kept.
// It returns once a status write keeps one (the API server serves a changed
// schema a moment after the CRD update).
func preserveUnknownStatusFields(t *testing.T, admin dynamic.Interface) {
	t.Helper()
	ctx := context.Background()
	crds := admin.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	crdName := "multiclusterleases." + mclv1alpha1.Group
	crd, err := crds.Get(ctx, crdName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for i := range versions {
		v := versions[i].(map[string]any)
		if err := unstructured.SetNestedField(v, true, "schema", "openAPIV3Schema", "properties", "status", "x-kubernetes-preserve-unknown-fields"); err != nil {
			t.Fatal(err)
		}
	}
	if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	if _, err := crds.Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the CRD variant: %v", err)
	}
	// A probe object in a namespace no rule selects.
	probes := admin.Resource(mclv1alpha1.GroupVersionResource).Namespace("default")
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mclv1alpha1.Group + "/" + mclv1alpha1.Version, "kind": mclv1alpha1.Kind,
		"metadata": map[string]any{"name": "schema-probe"}, "spec": map[string]any{"holderIdentity": "probe"}}}
	created, err := probes.Create(ctx, probe, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		created.Object["status"] = map[string]any{"unknownProbe": "kept"}
		got, err := probes.UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if err == nil {
			if _, ok := got.Object["status"].(map[string]any)["unknownProbe"]; ok {
				return
			}
			created = got
		} else if created, err = probes.Get(ctx, "schema-probe", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("30 s after the CRD update, status writes still drop unknown fields")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// refusedByLeaseguard fails unless err is leaseguard's 403 (with want in its
// message, when set).
func refusedByLeaseguard(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: admitted, want refused", what)
		return
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "leaseguard") || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %v\nwant leaseguard's 403 saying %q", what, err, want)
	}
}
