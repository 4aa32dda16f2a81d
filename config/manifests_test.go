package config

import (
	"os"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

// config/webhook/manifests.yaml is what `leaseguard manifests` renders for
// the deployed policy, config/manager/policy.yaml, and the e2e overlays'
// patch what it renders for theirs: run `make manifests` after changing
// either. (test/e2e checks that the patched overlays select what their
// policy selects.)
func TestWebhookManifestsAreGeneratedFromThePolicy(t *testing.T) {
	for _, c := range []struct {
		policy, generated string
		render            func(*manifests.Rendered, string) ([]byte, error)
		header            func(string) string
	}{
		{"manager/policy.yaml", "webhook/manifests.yaml", (*manifests.Rendered).YAML, manifests.Header},
		{"e2e-policy/policy.yaml", "e2e-policy/webhooks-patch.yaml", (*manifests.Rendered).KustomizePatch, manifests.PatchHeader},
	} {
		data, err := os.ReadFile(c.policy)
		if err != nil {
			t.Fatal(err)
		}
		p, err := policyfile.Parse(data, policy.CompileOptions{OwnNamespace: "leaseguard-system"})
		if err != nil {
			t.Fatalf("%s: %v", c.policy, err)
		}
		r, err := manifests.Render(p, manifests.Defaults())
		if err != nil {
			t.Fatal(err)
		}
		want, err := c.render(r, c.header("config/"+c.policy))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(c.generated)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("config/%s is not what config/%s renders: run `make manifests`", c.generated, c.policy)
		}
	}
}

// The safety rules of docs/design.md §5, checked on the shipped webhook
// configurations.
func TestWebhookConfigurationsFollowTheSafetyRules(t *testing.T) {
	mutating, validating, err := Webhooks()
	if err != nil {
		t.Fatal(err)
	}
	if len(validating) != 1 || len(mutating) != 1 {
		t.Fatalf("got %d validating and %d mutating configurations, want 1 and 1", len(validating), len(mutating))
	}
	type hook struct {
		name              string
		sideEffects       *admissionregistrationv1.SideEffectClass
		matchPolicy       *admissionregistrationv1.MatchPolicyType
		timeout           *int32
		failurePolicy     *admissionregistrationv1.FailurePolicyType
		namespaceSelector *metav1.LabelSelector
		conditions        []admissionregistrationv1.MatchCondition
	}
	var hooks []hook
	for _, w := range validating[0].Webhooks {
		hooks = append(hooks, hook{w.Name, w.SideEffects, w.MatchPolicy, w.TimeoutSeconds, w.FailurePolicy, w.NamespaceSelector, w.MatchConditions})
	}
	for _, w := range mutating[0].Webhooks {
		hooks = append(hooks, hook{w.Name, w.SideEffects, w.MatchPolicy, w.TimeoutSeconds, w.FailurePolicy, w.NamespaceSelector, w.MatchConditions})
	}
	// Fail closed where identity changes, open for the holder's renewals
	// and the designation stamp (docs/security.md).
	wantPolicy := map[string]admissionregistrationv1.FailurePolicyType{
		manifests.ValidateWebhook:  admissionregistrationv1.Fail,
		manifests.RenewalsWebhook:  admissionregistrationv1.Ignore,
		manifests.DesignateWebhook: admissionregistrationv1.Ignore,
	}
	if len(hooks) != len(wantPolicy) {
		t.Fatalf("%d webhooks, want %d", len(hooks), len(wantPolicy))
	}
	for _, h := range hooks {
		t.Run(h.name, func(t *testing.T) {
			if h.sideEffects == nil || *h.sideEffects != admissionregistrationv1.SideEffectClassNone {
				t.Errorf("sideEffects = %v, want None", h.sideEffects)
			}
			if h.matchPolicy == nil || *h.matchPolicy != admissionregistrationv1.Equivalent {
				t.Errorf("matchPolicy = %v, want Equivalent", h.matchPolicy)
			}
			if h.timeout == nil || *h.timeout > 3 || *h.timeout < 1 {
				t.Errorf("timeoutSeconds = %v, want 1..3", h.timeout)
			}
			if want, ok := wantPolicy[h.name]; !ok || h.failurePolicy == nil || *h.failurePolicy != want {
				t.Errorf("failurePolicy = %v, want %v", h.failurePolicy, want)
			}
			var excluded []string
			if h.namespaceSelector != nil {
				for _, e := range h.namespaceSelector.MatchExpressions {
					if e.Key == "kubernetes.io/metadata.name" && e.Operator == metav1.LabelSelectorOpNotIn {
						excluded = append(excluded, e.Values...)
					}
				}
			}
			for _, ns := range []string{"kube-system", "kube-node-lease", "leaseguard-system"} {
				if !slices.Contains(excluded, ns) {
					t.Errorf("namespaceSelector does not exclude %s", ns)
				}
			}
			var exprs strings.Builder
			for _, c := range h.conditions {
				exprs.WriteString(c.Expression)
			}
			for _, who := range []string{"system:node:", "system:nodes", "system:kube-controller-manager", "system:kube-scheduler", "system:apiserver", "system:serviceaccount:kube-system:"} {
				if !strings.Contains(exprs.String(), who) {
					t.Errorf("matchConditions do not exclude %s", who)
				}
			}
		})
	}
}

func TestCRDHasStatusSubresource(t *testing.T) {
	crds, err := CRDs()
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) != 1 || crds[0].Spec.Names.Plural != "multiclusterleases" {
		t.Fatalf("want the multiclusterleases CRD, got %d CRDs", len(crds))
	}
	v := crds[0].Spec.Versions[0]
	if v.Name != "v1alpha1" || v.Subresources == nil || v.Subresources.Status == nil {
		t.Fatalf("version %s must be v1alpha1 with a status subresource", v.Name)
	}
}
