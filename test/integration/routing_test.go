package integration

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
)

// The fourth attack round through the real API server, with leaseguard up:
// what reaches no webhook, and what a create can plant. The same writes
// while leaseguard is down are tried by the e2e outage specs.

// createAutoMCL has manager-a create a MultiClusterLease in it-auto (rule
// auto-mcl: designation auto, client-go's timings), renewed at renewed, and
// returns it as stored: designated to manager-a.
func createAutoMCL(t *testing.T, name string, renewed time.Time) *unstructured.Unstructured {
	t.Helper()
	ctx := context.Background()
	createNamespace(t, autoNS)
	m := newMCL(name)
	_ = unstructured.SetNestedField(m.Object, micro(renewed), "spec", "renewTime")
	_ = unstructured.SetNestedField(m.Object, int64(15), "spec", "leaseDurationSeconds")
	created, err := mcls(t, autoManagerA).Create(ctx, m, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("manager-a's create of %s: %v", name, err)
	}
	if got := created.GetAnnotations()[designation]; got != autoManagerA {
		t.Fatalf("designation %q, want %q", got, autoManagerA)
	}
	t.Cleanup(func() { _ = mcls(t, autoManagerA).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return created
}

func expectMCLUnchanged(t *testing.T, want *unstructured.Unstructured) {
	t.Helper()
	got, err := mcls(t, autoManagerA).Get(context.Background(), want.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetResourceVersion() != want.GetResourceVersion() {
		mf, _ := json.Marshal(got.GetManagedFields())
		t.Errorf("the refused write was stored: resourceVersion %s, was %s; managedFields %s", got.GetResourceVersion(), want.GetResourceVersion(), mf)
	}
}

// A merge patch that changed generateName (a field nobody guards) and
// re-dated another managedFields entry to 2100 reached neither webhook:
// the "changes nothing" condition ignored generateName and managedFields
// times, and the API server kept the new times because generateName
// changed. Every write that changes something reaches leaseguard now, and
// this one is refused as round 3 refuses a time ahead of the clock.
func TestAWriteNoWebhookSawIsDecided(t *testing.T) {
	ctx := context.Background()
	created := createAutoMCL(t, "routing-generatename", time.Now())
	b := mcls(t, autoManagerB)
	asB := metav1.PatchOptions{FieldManager: "manager-b"}
	// First manager-b owns generateName: a metadata write of its own.
	stored, err := b.Patch(ctx, created.GetName(), types.MergePatchType, []byte(`{"metadata":{"generateName":"a-"}}`), asB)
	if err != nil {
		t.Fatalf("manager-b's first write of generateName: %v", err)
	}
	// Then it changes generateName again and re-dates the entry of the
	// manager that owns renewTime to 2100: managedFields then differ only
	// in their times.
	var entries []any
	for _, m := range stored.GetManagedFields() {
		e, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&m)
		if err != nil {
			t.Fatal(err)
		}
		if m.Manager != "manager-b" {
			e["time"] = "2100-01-01T00:00:00Z"
		}
		entries = append(entries, e)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"generateName": "b-", "managedFields": entries}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Patch(ctx, created.GetName(), types.MergePatchType, patch, asB)
	want := "leaseguard: rule auto-mcl: " + autoManagerB + " dates a managedFields entry ahead of the server clock on multiclusterlease it-auto/routing-generatename (only the API server dates entries)"
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("manager-b's patch of generateName and a managedFields time: %v\nwant HTTP 403 %q", err, want)
	}
	expectMCLUnchanged(t, stored)
}

// The API server keeps the managedFields a create sends, times included:
// a time planted on create would serve later writes as the server's
// clock (it turned coalescing off and passed renewals ahead), so a create
// is held to round 3's rule as an update is.
func TestACreateMayNotPlantAManagedFieldsTime(t *testing.T) {
	ctx := context.Background()
	createNamespace(t, autoNS)
	m := newMCL("routing-planted")
	m.SetManagedFields([]metav1.ManagedFieldsEntry{{
		Manager: "controller", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: m.GetAPIVersion(),
		Time: &metav1.Time{Time: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)}, FieldsType: "FieldsV1",
		// A field the object does not have: an entry owning only fields the
		// create sets loses them to the creator and is dropped.
		FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{"f:planted":{}}}}`),
	}})
	_, err := mcls(t, autoManagerA).Create(ctx, m, metav1.CreateOptions{})
	want := "leaseguard: rule auto-mcl: " + autoManagerA + " dates a managedFields entry ahead of the server clock on multiclusterlease it-auto/routing-planted"
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("a create with a managedFields entry dated 2100: %v\nwant HTTP 403 %q", err, want)
	}
	if _, err := mcls(t, autoManagerA).Get(ctx, "routing-planted", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused create left an object: %v", err)
	}
}

// The seventh attack round: a manager that is not the designated one dated
// the record of the last renewal (the managedFields entry that owns
// renewTime) a second ahead, within the clock skew, once a second, in a
// write that also changed a label, or that only re-dated entries out of
// their order (which the "changes nothing" condition compared as a set and
// let pass to no webhook). The API server stored it; the designated
// writer's next renewals were refused as a clock moving backwards and the
// shared lease expired. Both writes are refused now, the lease is left as
// stored, and the designated writer renews.
func TestTheRecordOfTheLastRenewalCannotBeDatedAhead(t *testing.T) {
	ctx := context.Background()
	created := createAutoMCL(t, "routing-record-ahead", time.Now())
	b := mcls(t, autoManagerB)
	asB := metav1.PatchOptions{FieldManager: "manager-b"}
	// manager-b's own entry first, by a label of its own: admitted.
	stored, err := b.Patch(ctx, created.GetName(), types.MergePatchType, []byte(`{"metadata":{"labels":{"seen-by":"b"}}}`), asB)
	if err != nil {
		t.Fatalf("manager-b's label: %v", err)
	}
	owner := -1
	for i, m := range stored.GetManagedFields() {
		if m.Subresource == "" && m.FieldsV1 != nil && strings.Contains(m.FieldsV1.GetRawString(), `"f:renewTime"`) {
			owner = i
		}
	}
	if owner < 0 || len(stored.GetManagedFields()) < 2 {
		t.Fatalf("want manager-a's entry owning renewTime and manager-b's: %+v", stored.GetManagedFields())
	}
	other := 1 - owner
	want := "leaseguard: rule auto-mcl: " + autoManagerB + " re-dates the record of the last renewal, ahead of the server clock, on multiclusterlease it-auto/routing-record-ahead"
	for _, c := range []struct {
		name  string
		patch func(ahead string) string
	}{
		{"with a label", func(ahead string) string {
			return `[{"op":"replace","path":"/metadata/managedFields/` + itoa(owner) + `/time","value":"` + ahead + `"},` +
				`{"op":"add","path":"/metadata/labels/x","value":"1"}]`
		}},
		{"out of the entries' order, nothing else changed", func(ahead string) string {
			return `[{"op":"replace","path":"/metadata/managedFields/` + itoa(owner) + `/time","value":"` + ahead + `"},` +
				`{"op":"replace","path":"/metadata/managedFields/` + itoa(other) + `/time","value":"1990-01-01T00:00:00Z"}]`
		}},
	} {
		// Right after a second begins: the record stays ahead of the clock
		// until the write is decided.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 20*time.Millisecond)))
		ahead := time.Now().UTC().Truncate(time.Second).Add(time.Second).Format(time.RFC3339)
		_, err := b.Patch(ctx, created.GetName(), types.JSONPatchType, []byte(c.patch(ahead)), asB)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: manager-b's patch dating the record %s: %v\nwant HTTP 403 %q", c.name, ahead, err, want)
		}
		expectMCLUnchanged(t, stored)
	}
	// The designated writer renews as before.
	if _, err := mcls(t, autoManagerA).Patch(ctx, created.GetName(), types.MergePatchType, renewPatch("cluster-a", 15), metav1.PatchOptions{}); err != nil {
		t.Errorf("the designated writer's renewal: %v", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// The seventh attack round: the "changes nothing" condition took CEL's
// equality for the API server's, and CEL's is looser (15 == 15.0). A
// manager's PUT of the stored object with "leaseDurationSeconds": 15.0 and
// the record of the last renewal dated 2100 was stored with that date and
// reached no webhook: the API server reverts managedFields times only where
// the objects are deeply equal, and an integer is not a float there. It is
// decided now, and refused as round 3 refuses a time ahead of the clock.
// (The lease is past the acknowledgement's window: a fresh one's
// acknowledgement re-encodes the object, 15.0 becoming 15.)
func TestAFloatForAnIntegerCarriesNoTimePastTheWebhooks(t *testing.T) {
	ctx := context.Background()
	created := createAutoMCL(t, "routing-float", time.Now().Add(-20*time.Second))
	var owner map[string]any
	for _, m := range created.GetManagedFields() {
		if m.Subresource == "" && m.FieldsV1 != nil && strings.Contains(m.FieldsV1.GetRawString(), `"f:renewTime"`) {
			e, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&m)
			if err != nil {
				t.Fatal(err)
			}
			owner = e
		}
	}
	if owner == nil {
		t.Fatalf("no entry owns renewTime: %+v", created.GetManagedFields())
	}
	owner["time"] = "2100-01-01T00:00:00Z"
	forged := created.DeepCopy()
	forged.Object["metadata"].(map[string]any)["managedFields"] = []any{owner}
	body, err := json.Marshal(forged.Object)
	if err != nil {
		t.Fatal(err)
	}
	body = []byte(strings.Replace(string(body), `"leaseDurationSeconds":15`, `"leaseDurationSeconds":15.0`, 1))
	if !strings.Contains(string(body), `"leaseDurationSeconds":15.0`) {
		t.Fatalf("no leaseDurationSeconds to write as a float: %s", body)
	}
	code, _, answer := putRaw(ctx, t, autoManagerB, "", "/apis/"+mclv1alpha1.Group+"/"+mclv1alpha1.Version+"/namespaces/"+autoNS+"/multiclusterleases/"+created.GetName()+"?fieldManager=manager-b", body)
	want := "leaseguard: rule auto-mcl: " + autoManagerB + " dates a managedFields entry ahead of the server clock on multiclusterlease it-auto/routing-float"
	if code != http.StatusForbidden || !strings.Contains(string(answer), want) {
		t.Fatalf("manager-b's PUT with leaseDurationSeconds 15.0 and the record dated 2100: HTTP %d %s\nwant 403 %q", code, answer, want)
	}
	expectMCLUnchanged(t, created)
}
