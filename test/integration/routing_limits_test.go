package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/webhook/render/configsync"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

// A policy leaseguard enforces is one the API server routes (issue 41,
// item 3). A MultiClusterLease rule listing 1,200 namespaces, first among
// the rules, was rendered as a condition of more than 100,000 code points,
// which the API server refuses: it kept routing by the previous policy,
// under which no rule selects MultiClusterLeases in a newly listed
// namespace, so a stranger's create there was stored without reaching
// leaseguard. Rendered within the limits now, the configuration follows
// within seconds and the stranger is refused by the fail-closed webhook.
func TestAPolicyOfManyNamespacesIsRouted(t *testing.T) {
	ctx := context.Background()
	const ns = "it-apps-new"
	createNamespace(t, ns)

	// The limit is the API server's: a condition over it is refused.
	long := "request.namespace == 'x'" + strings.Repeat(" || request.namespace == 'x'", 121581/28)
	none := admissionregistrationv1.SideEffectClassNone
	_, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "it-too-long"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "too-long.leaseguard.io", AdmissionReviewVersions: []string{"v1"}, SideEffects: &none,
			ClientConfig:    admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/x")},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "long", Expression: long}},
		}},
	}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "expression code point size exceeds limit") {
		t.Fatalf("a %d-code-point condition: %v, want it refused for its size", len(long), err)
	}

	original, err := os.ReadFile(policyPath)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, 1200)
	for i := range 1199 {
		names = append(names, fmt.Sprintf("it-apps-%05d", i))
	}
	names = append(names, ns)
	const rightful = "system:serviceaccount:" + ns + ":rightful"
	many := []byte(strings.Replace(string(original), "rules:\n", `rules:
- name: many-mcl
  resources: [multiclusterleases]
  namespaces: [`+strings.Join(names, ", ")+`]
  managers: ["`+rightful+`"]
`, 1))
	if string(many) == string(original) {
		t.Fatal("the base policy has no rules: list")
	}
	use := func(data []byte) time.Duration {
		t.Helper()
		start := time.Now()
		if err := os.WriteFile(policyPath, data, 0o600); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		want := hex.EncodeToString(sum[:])
		// What matters is that the configuration follows the policy at
		// all (it once never did, and the old routing stayed in force);
		// how fast is logged, not asserted: a 10,000-namespace rendering
		// on a machine running other suites beside this one takes some
		// 15 s, alone a few.
		waitWithin(t, "the validating configuration to be rendered from the new policy", time.Minute, func() bool {
			v, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, validatingName, metav1.GetOptions{})
			return err == nil && v.Annotations[configsync.PolicyAnnotation] == want
		})
		return time.Since(start)
	}
	defer use(original)

	took := use(many)
	v, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, validatingName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range v.Webhooks {
		for _, c := range w.MatchConditions {
			if n := len([]rune(c.Expression)); n > manifests.ExpressionBudget {
				t.Errorf("webhook %s condition %s: %d code points stored", w.Name, c.Name, n)
			}
		}
	}

	dyn := func(user string) dynamic.ResourceInterface {
		d, err := dynamic.NewForConfig(impersonating(user, ""))
		if err != nil {
			t.Fatal(err)
		}
		return d.Resource(mclv1alpha1.GroupVersionResource).Namespace(ns)
	}
	mcl := newMCL("leader")
	mcl.SetNamespace(ns)
	// The API server's informer takes the new configuration within a
	// moment of the write.
	var stranger error
	waitFor(t, "the stranger's create to be refused", func() bool {
		obj, err := dyn("system:serviceaccount:"+ns+":stranger").Create(ctx, mcl.DeepCopy(), metav1.CreateOptions{})
		if err == nil {
			// Stored without leaseguard: undo it and try again.
			_ = dyn(rightful).Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
			return false
		}
		stranger = err
		return true
	})
	if !apierrors.IsForbidden(stranger) || !strings.Contains(stranger.Error(), `admission webhook "`+manifests.ValidateWebhook+`" denied`) ||
		!strings.Contains(stranger.Error(), "rule many-mcl") {
		t.Fatalf("a stranger's create in a newly listed namespace: %v\nwant it denied by %s under rule many-mcl", stranger, manifests.ValidateWebhook)
	}
	if _, err := dyn(rightful).Create(ctx, mcl.DeepCopy(), metav1.CreateOptions{}); err != nil {
		t.Errorf("the rule's manager creates its MultiClusterLease: %v", err)
	}
	fams, err := guard.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g := controlplane.Gauge(fams, "leaseguard_admission_configuration_in_sync"); g != 1 {
		t.Errorf("leaseguard_admission_configuration_in_sync = %v, want 1", g)
	}
	t.Logf("the configuration followed the 1,200-namespace policy in %v", took)

	// At the seed's scale, 10,000 namespaces, the catch-all rule's glob
	// keeps the namespaceSelector from listing them: the rule's namespace
	// test is left to leaseguard (broader), and the API server takes it.
	const wide = "it-apps-wide"
	createNamespace(t, wide)
	names = names[:0]
	for i := range 9999 {
		names = append(names, fmt.Sprintf("it-apps-%05d", i))
	}
	names = append(names, wide)
	seed := []byte(strings.Replace(string(original), "rules:\n", `rules:
- name: many-mcl
  resources: [multiclusterleases]
  namespaces: [`+strings.Join(names, ", ")+`]
  managers: ["`+rightful+`"]
`, 1))
	took = use(seed)
	mcl.SetNamespace(wide)
	in := func(user string) dynamic.ResourceInterface {
		d, err := dynamic.NewForConfig(impersonating(user, ""))
		if err != nil {
			t.Fatal(err)
		}
		return d.Resource(mclv1alpha1.GroupVersionResource).Namespace(wide)
	}
	waitFor(t, "the stranger's create to be refused", func() bool {
		obj, err := in("system:serviceaccount:"+ns+":stranger").Create(ctx, mcl.DeepCopy(), metav1.CreateOptions{})
		if err == nil {
			_ = in(rightful).Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
			return false
		}
		stranger = err
		return true
	})
	if !apierrors.IsForbidden(stranger) || !strings.Contains(stranger.Error(), "rule many-mcl") {
		t.Fatalf("a stranger's create at 10,000 namespaces: %v", stranger)
	}
	if _, err := in(rightful).Create(ctx, mcl.DeepCopy(), metav1.CreateOptions{}); err != nil {
		t.Errorf("the rule's manager creates its MultiClusterLease at 10,000 namespaces: %v", err)
	}
	t.Logf("the configuration followed the 10,000-namespace policy in %v", took)
}
