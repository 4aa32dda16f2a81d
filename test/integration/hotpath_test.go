package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"

	"github.com/leaseguard/leaseguard/test/controlplane"
)

// apiserverCounts are the API server's own counts of what admission did:
// calls to leaseguard's webhooks (apiserver_admission_webhook_admission_duration_seconds,
// every webhook whose name ends in .leaseguard.io) and evaluations of its
// MutatingAdmissionPolicy (apiserver_mutating_admission_policy_check_total).
type apiserverCounts struct {
	webhookCalls    float64
	policyMutations float64
	policyErrors    float64
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
	return c
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
	t.Cleanup(func() {
		cfg := impersonating("it-operator", "")
		cfg.Impersonate.Groups = []string{"it:operators"}
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := dyn.Resource(mclv1alpha1.GroupVersionResource).Namespace(autoNS).Delete(context.Background(), "hot-path", metav1.DeleteOptions{}); err != nil {
			t.Errorf("an operator's delete: %v", err)
		}
	})

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
