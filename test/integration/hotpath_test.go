package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"

	"github.com/leaseguard/leaseguard/test/controlplane"
)

// apiserverCounts are the API server's own counts of what admission did:
// calls to leaseguard's webhooks (apiserver_admission_webhook_admission_duration_seconds,
// every webhook whose name ends in .leaseguard.io), evaluations of its
// MutatingAdmissionPolicy (apiserver_mutating_admission_policy_check_total)
// and of its renewals policy (apiserver_validating_admission_policy_check_total).
type apiserverCounts struct {
	webhookCalls    float64
	policyMutations float64
	policyErrors    float64
	// renewalsChecks counts what the API server counts of the renewals
	// policy: its refusals and its evaluation errors (an admission is not
	// counted); renewalsDenials its refusals; renewalsErrors the errors it
	// tells from refusals (compile errors, an exhausted cost budget).
	renewalsChecks, renewalsDenials, renewalsErrors float64
}

func scrapeAPIServer(t *testing.T) apiserverCounts {
	t.Helper()
	raw, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("scraping the API server: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
	if err != nil {
		t.Fatalf("parsing the API server's metrics: %v", err)
	}
	label := func(m *dto.Metric, name string) string {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	var c apiserverCounts
	for _, m := range fams["apiserver_admission_webhook_admission_duration_seconds"].GetMetric() {
		if strings.HasSuffix(label(m, "name"), ".leaseguard.io") {
			c.webhookCalls += float64(m.GetHistogram().GetSampleCount())
		}
	}
	for _, m := range fams["apiserver_mutating_admission_policy_check_total"].GetMetric() {
		if label(m, "policy") != "leaseguard-coalesce-renewals" {
			continue
		}
		if label(m, "error_type") == "no_error" {
			c.policyMutations += m.GetCounter().GetValue()
		} else {
			c.policyErrors += m.GetCounter().GetValue()
		}
	}
	for _, m := range fams["apiserver_validating_admission_policy_check_total"].GetMetric() {
		if label(m, "policy") != "leaseguard-renewals" {
			continue
		}
		c.renewalsChecks += m.GetCounter().GetValue()
		if label(m, "enforcement_action") == "deny" {
			c.renewalsDenials += m.GetCounter().GetValue()
		}
		// A refusal is counted as error_type invalid_error, as is a
		// runtime error; compile errors and an exhausted cost budget
		// alone are told apart.
		if e := label(m, "error_type"); e == "compile_error" || e == "out_of_budget" {
			c.renewalsErrors += m.GetCounter().GetValue()
		}
	}
	return c
}

// The designated manager's renewals of a MultiClusterLease (the stored
// ones) are decided inside the API server by the renewals policy, with no
// webhook call: a plain renewal is stored, one that moves renewTime
// backwards is refused with leaseguard's message (HTTP 403) and leaves the
// lease as it was. Before, both went to the fail-open webhook, so while
// leaseguard was down the second was stored unjudged; no webhook call means
// leaseguard being down changes nothing.
func TestPlainRenewalsAreDecidedInTheAPIServer(t *testing.T) {
	ctx := context.Background()
	createNamespace(t, autoNS)
	a := mcls(t, autoManagerA)
	obj := newMCL("decided-in-process")
	if err := unstructured.SetNestedField(obj.Object, int64(15), "spec", "leaseDurationSeconds"); err != nil {
		t.Fatal(err)
	}
	created, err := a.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the manager's create: %v", err)
	}
	deleteAsOperator(t, "decided-in-process")
	if got := created.GetAnnotations()[designation]; got != autoManagerA {
		t.Fatalf("designation = %q, want %q", got, autoManagerA)
	}

	before := scrapeAPIServer(t)
	const renewals = 3
	stored := created
	for i := range renewals {
		time.Sleep(300 * time.Millisecond)
		renewTime := micro(time.Now())
		patch := []byte(fmt.Sprintf(`{"spec":{"holderIdentity":"cluster-a","renewTime":%q}}`, renewTime))
		got, err := a.Patch(ctx, "decided-in-process", types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			t.Fatalf("renewal %d by the designated manager: %v", i, err)
		}
		if rt, _, _ := unstructured.NestedString(got.Object, "spec", "renewTime"); rt != renewTime || got.GetResourceVersion() == stored.GetResourceVersion() {
			t.Fatalf("renewal %d was not stored: renewTime %s (sent %s), resourceVersion %s", i, rt, renewTime, got.GetResourceVersion())
		}
		stored = got
	}
	after := scrapeAPIServer(t)
	if calls := after.webhookCalls - before.webhookCalls; calls != 0 {
		t.Errorf("%v webhook calls for %d plain renewals, want 0", calls, renewals)
	}
	// The API server counts a policy's refusals and errors, not what it
	// admits (docs/operations.md): the stored renewals are counted by
	// apiserver_request_total.
	if n := after.renewalsChecks - before.renewalsChecks; n != 0 {
		t.Errorf("the renewals policy counted %v refusals or errors for %d plain renewals, want 0", n, renewals)
	}

	// Backwards, within the clock skew of the API server's stamp: on the
	// fail-open route before. Sent at once after a renewal, so that the
	// stamp has not moved a second on (then it is more than the skew
	// behind, and the fail-closed webhook refuses it: tried again).
	var status apierrors.APIStatus
	for attempt := 1; ; attempt++ {
		before := scrapeAPIServer(t)
		fresh, err := a.Patch(ctx, "decided-in-process", types.MergePatchType,
			[]byte(fmt.Sprintf(`{"spec":{"holderIdentity":"cluster-a","renewTime":%q}}`, micro(time.Now()))), metav1.PatchOptions{})
		if err != nil {
			t.Fatalf("a renewal by the designated manager: %v", err)
		}
		freshText, _, _ := unstructured.NestedString(fresh.Object, "spec", "renewTime")
		freshTime, err := time.Parse(time.RFC3339Nano, freshText)
		if err != nil {
			t.Fatal(err)
		}
		back := []byte(fmt.Sprintf(`{"spec":{"holderIdentity":"cluster-a","renewTime":%q}}`, micro(freshTime.Add(-time.Millisecond))))
		_, err = a.Patch(ctx, "decided-in-process", types.MergePatchType, back, metav1.PatchOptions{})
		if err == nil {
			t.Fatal("a renewal moving renewTime backwards was admitted")
		}
		if !errors.As(err, &status) {
			t.Fatalf("error %v is not an API status", err)
		}
		if strings.Contains(status.Status().Message, `admission webhook "validate.leases.leaseguard.io"`) && attempt < 5 {
			t.Logf("attempt %d: the stamp moved a second on between the two writes; again", attempt)
			continue
		}
		want := "multiclusterleases.multicluster.core.cnrm.cloud.google.com \"decided-in-process\" is forbidden: " +
			"ValidatingAdmissionPolicy 'leaseguard-renewals' with binding 'leaseguard-renewals' denied request: leaseguard: rule auto-mcl: " +
			autoManagerA + " moves renewTime backwards on multiclusterlease " + autoNS + "/decided-in-process (stored renewTime: " + freshTime.UTC().Format(time.RFC3339Nano) + ")"
		if status.Status().Code != http.StatusForbidden || status.Status().Message != want {
			t.Errorf("HTTP %d %q\nwant HTTP 403 %q", status.Status().Code, status.Status().Message, want)
		}
		final := scrapeAPIServer(t)
		if calls := final.webhookCalls - before.webhookCalls; calls != 0 {
			t.Errorf("%v webhook calls for a plain renewal and a refused one, want 0", calls)
		}
		if n := final.renewalsDenials - before.renewalsDenials; n != 1 {
			t.Errorf("the renewals policy refused %v renewals, want 1", n)
		}
		if n := final.renewalsErrors - before.renewalsErrors; n != 0 {
			t.Errorf("the renewals policy failed to evaluate %v times", n)
		}
		got, err := a.Get(ctx, "decided-in-process", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.GetResourceVersion() != fresh.GetResourceVersion() {
			t.Errorf("the refused renewal changed the lease: resourceVersion %s -> %s", fresh.GetResourceVersion(), got.GetResourceVersion())
		}
		return
	}
}

// The other managers' renewals of a shared MultiClusterLease are
// acknowledged inside the API server, by the MutatingAdmissionPolicy: each
// is answered success with the stored lease, nothing is stored, and no
// webhook is called (the API server's own counts say so, and leaseguard
// counts no acknowledgement of its own). The stored renewTime is copied
// byte for byte, trailing zeros and all. What CEL leaves to leaseguard
// still reaches it: a renewal in a form typed clients cannot read is
// refused by the fail-closed webhook, as without the policy.
func TestSharedRenewalsAreAcknowledgedInTheAPIServer(t *testing.T) {
	ctx := context.Background()
	createNamespace(t, autoNS)
	a, b := mcls(t, autoManagerA), mcls(t, autoManagerB)
	obj := newMCL("hot-path")
	// Microseconds ending in zeros: a date-time re-rendered by CEL would
	// lose them, and the write would change the stored bytes.
	storedText := micro(time.Now().Truncate(100 * time.Microsecond))
	if !strings.HasSuffix(storedText, "00Z") {
		t.Fatalf("setup: %s does not end in zeros", storedText)
	}
	if err := unstructured.SetNestedField(obj.Object, storedText, "spec", "renewTime"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(obj.Object, int64(15), "spec", "leaseDurationSeconds"); err != nil {
		t.Fatal(err)
	}
	created, err := a.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the first manager's create: %v", err)
	}
	if got := created.GetAnnotations()[designation]; got != autoManagerA {
		t.Fatalf("designation = %q, want %q", got, autoManagerA)
	}
	deleteAsOperator(t, "hot-path")

	families, err := guard.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ackedBefore := controlplane.Counter(families, "leaseguard_acknowledged_renewals_total", nil)
	before := scrapeAPIServer(t)
	const renewals = 5
	for i := range renewals {
		time.Sleep(300 * time.Millisecond)
		patch := []byte(fmt.Sprintf(`{"spec":{"holderIdentity":"cluster-a","renewTime":%q}}`, micro(time.Now())))
		got, err := b.Patch(ctx, "hot-path", types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			t.Fatalf("renewal %d by the second manager: %v", i, err)
		}
		rt, _, _ := unstructured.NestedString(got.Object, "spec", "renewTime")
		if got.GetResourceVersion() != created.GetResourceVersion() || rt != storedText {
			t.Fatalf("renewal %d was stored: resourceVersion %s -> %s, renewTime %s -> %s",
				i, created.GetResourceVersion(), got.GetResourceVersion(), storedText, rt)
		}
	}
	after := scrapeAPIServer(t)
	if calls := after.webhookCalls - before.webhookCalls; calls != 0 {
		t.Errorf("%v webhook calls for %d acknowledged renewals, want 0", calls, renewals)
	}
	if n := after.policyMutations - before.policyMutations; n != renewals {
		t.Errorf("the MutatingAdmissionPolicy acknowledged %v renewals, want %d", n, renewals)
	}
	if n := after.policyErrors - before.policyErrors; n != 0 {
		t.Errorf("the MutatingAdmissionPolicy failed %v times", n)
	}
	if families, err = guard.Metrics(ctx); err != nil {
		t.Fatal(err)
	}
	if n := controlplane.Counter(families, "leaseguard_acknowledged_renewals_total", nil) - ackedBefore; n != 0 {
		t.Errorf("leaseguard acknowledged %v renewals itself, want 0 (the API server did)", n)
	}

	// A renewal CEL does not judge goes to leaseguard, which refuses it.
	oddText := time.Now().UTC().Format(time.RFC3339)
	odd := []byte(fmt.Sprintf(`{"spec":{"holderIdentity":"cluster-a","renewTime":%q}}`, oddText))
	_, err = b.Patch(ctx, "hot-path", types.MergePatchType, odd, metav1.PatchOptions{})
	assertDenied(t, err, http.StatusBadRequest, `admission webhook "validate.leases.leaseguard.io" denied the request: leaseguard: cannot decide: request.object: spec.renewTime "`+
		oddText+`" cannot be read by typed clients (metav1.MicroTime): write it as 2006-01-02T15:04:05.000000Z07:00`)
	if n := scrapeAPIServer(t).policyMutations - after.policyMutations; n != 0 {
		t.Errorf("the MutatingAdmissionPolicy acknowledged a renewTime typed clients cannot read")
	}
}

// deleteAsOperator deletes the MultiClusterLease name of it-auto as an
// operator when the test ends.
func deleteAsOperator(t *testing.T, name string) {
	t.Cleanup(func() {
		cfg := impersonating("it-operator", "")
		cfg.Impersonate.Groups = []string{"it:operators"}
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := dyn.Resource(mclv1alpha1.GroupVersionResource).Namespace(autoNS).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("an operator's delete: %v", err)
		}
	})
}
