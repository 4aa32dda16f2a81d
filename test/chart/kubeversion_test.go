package chart

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

// mutatingAdmissionPolicyAPI is what the chart asks Helm's capabilities
// for (templates/_helpers.tpl) before it renders the coalescing policy:
// served from Kubernetes 1.36.
const mutatingAdmissionPolicyAPI = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"

// servesMutatingAdmissionPolicy are the helm template flags of a cluster
// that serves it, as the pinned control plane does. helm template asks no
// cluster: its default capabilities (Helm v4.3.1) list API group/versions
// only, never group/version/kind, so without this flag the chart sees no
// MutatingAdmissionPolicy on any --kube-version.
var servesMutatingAdmissionPolicy = []string{"--api-versions", mutatingAdmissionPolicyAPI}

// currentKubeVersion is the pinned control plane's (K8S_VERSION, which
// `make test-chart` sets), or the one this test was written against.
func currentKubeVersion() string {
	if v := os.Getenv("K8S_VERSION"); v != "" {
		return v
	}
	return "v1.37.2"
}

// templateFor renders the chart into namespace ns as Helm would for a
// cluster of Kubernetes version kube, with extra helm flags.
func templateFor(t *testing.T, kube, ns string, args ...string) ([]object, error) {
	t.Helper()
	helm := binary(t, "HELM")
	out, err := runErr(helm, append([]string{"template", "leaseguard", chartDir, "--namespace", ns, "--kube-version", kube}, args...)...)
	if err != nil {
		return nil, err
	}
	return objects(t, out), nil
}

// checkCoalescing fails the test unless objs hold the admission
// configuration of coalescing mode want, exactly as `leaseguard manifests
// --coalesce want` renders it, and says what differs in words: the
// MutatingAdmissionPolicy and its binding with policy only, and early
// renewals sent to the mutating webhook with webhook only.
func checkCoalescing(t *testing.T, objs []object, ns string, want manifests.Coalescing) {
	t.Helper()
	adm := admission(objs)
	_, hasPolicy := adm["MutatingAdmissionPolicy//leaseguard-coalesce-renewals"]
	_, hasBinding := adm["MutatingAdmissionPolicyBinding//leaseguard-coalesce-renewals"]
	if wantPolicy := want == manifests.CoalesceInAPIServer; hasPolicy != wantPolicy || hasBinding != wantPolicy {
		t.Errorf("coalescing %s: MutatingAdmissionPolicy rendered %v, its binding %v; want %v", want, hasPolicy, hasBinding, wantPolicy)
	}
	vwc := adm["ValidatingWebhookConfiguration//leaseguard-validating-webhook-configuration"]
	meta, _ := vwc["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	if got := ann[manifests.CoalesceAnnotation]; got != string(want) {
		t.Errorf("the validating configuration says it was rendered with --coalesce %v, want %s", got, want)
	}
	// The mutating webhook takes early renewals (their renewTime advanced
	// less than coalesceRenewals) only when it coalesces them.
	mwc := adm["MutatingWebhookConfiguration//leaseguard-mutating-webhook-configuration"]
	earlyRenewals := false
	webhooks, _ := mwc["webhooks"].([]any)
	for _, w := range webhooks {
		conds, _ := w.(map[string]any)["matchConditions"].([]any)
		for _, c := range conds {
			expr, _ := c.(map[string]any)["expression"].(string)
			if strings.Contains(expr, "timestamp(object.spec.renewTime) - timestamp(oldObject.spec.renewTime)") {
				earlyRenewals = true
			}
		}
	}
	if wantWebhook := want == manifests.CoalesceInWebhook; earlyRenewals != wantWebhook {
		t.Errorf("coalescing %s: the mutating webhook takes early renewals: %v, want %v", want, earlyRenewals, wantWebhook)
	}
	compare(t, "generator --coalesce "+string(want), adm, admission(objects(t, render(t, defaultPolicy, ns, want))))
}

// coalescing: auto (the default) coalesces in the API server where the
// cluster serves MutatingAdmissionPolicy and in leaseguard's mutating
// webhook elsewhere, so the default install works from the chart's
// kubeVersion floor on. The choice follows the API, not the version
// number: the same 1.37 without the API (disabled, or helm template
// without --api-versions) gets the webhook.
func TestChartCoalescingFollowsTheCluster(t *testing.T) {
	const ns = "lg"
	current := currentKubeVersion()
	for _, c := range []struct {
		kube   string
		serves bool
		want   manifests.Coalescing
	}{
		{"v1.30.0", false, manifests.CoalesceInWebhook},
		{"v1.35.0", false, manifests.CoalesceInWebhook},
		{current, true, manifests.CoalesceInAPIServer},
		{current, false, manifests.CoalesceInWebhook},
	} {
		t.Run(fmt.Sprintf("%s/serves=%v", c.kube, c.serves), func(t *testing.T) {
			var args []string
			if c.serves {
				args = servesMutatingAdmissionPolicy
			}
			objs, err := templateFor(t, c.kube, ns, args...)
			if err != nil {
				t.Fatalf("the default values do not render for Kubernetes %s: %v", c.kube, err)
			}
			checkCoalescing(t, objs, ns, c.want)
		})
	}
}

// An explicit mode is rendered as asked wherever it can be, and coalescing:
// policy where MutatingAdmissionPolicy is not served fails the render with
// a message naming the API and the alternatives, instead of an install
// that the API server refuses halfway.
func TestChartExplicitCoalescing(t *testing.T) {
	const ns = "lg"
	current := currentKubeVersion()
	_, err := templateFor(t, "v1.35.0", ns, "--set", "coalescing=policy")
	if err == nil {
		t.Fatal("coalescing=policy on Kubernetes 1.35 without MutatingAdmissionPolicy rendered; want the chart to fail")
	}
	for _, want := range []string{"coalescing: policy", "does not serve " + mutatingAdmissionPolicyAPI, "auto", "webhook", "off", "--api-versions " + mutatingAdmissionPolicyAPI} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("coalescing=policy on 1.35: the error does not say %q:\n%v", want, err)
		}
	}

	for _, c := range []struct {
		kube   string
		serves bool
		set    manifests.Coalescing
	}{
		{current, true, manifests.CoalesceInAPIServer},
		{current, true, manifests.CoalesceInWebhook},
		{current, true, manifests.CoalesceOff},
		{"v1.30.0", false, manifests.CoalesceInWebhook},
		{"v1.30.0", false, manifests.CoalesceOff},
	} {
		t.Run(fmt.Sprintf("%s/serves=%v/%s", c.kube, c.serves, c.set), func(t *testing.T) {
			args := []string{"--set", "coalescing=" + string(c.set)}
			if c.serves {
				args = append(args, servesMutatingAdmissionPolicy...)
			}
			objs, err := templateFor(t, c.kube, ns, args...)
			if err != nil {
				t.Fatal(err)
			}
			checkCoalescing(t, objs, ns, c.set)
		})
	}
}

// Chart.yaml's kubeVersion is the floor the rendered objects need
// (matchConditions, the preStop sleep action: 1.30), providers'
// pre-release versions included.
func TestChartKubeVersionFloor(t *testing.T) {
	if _, err := templateFor(t, "v1.29.15", "lg"); err == nil || !strings.Contains(err.Error(), "kubeVersion") {
		t.Errorf("Kubernetes 1.29: err = %v, want the chart's kubeVersion to refuse it", err)
	}
	for _, v := range []string{"v1.30.0", "v1.30.5-gke.1014001"} {
		if _, err := templateFor(t, v, "lg"); err != nil {
			t.Errorf("Kubernetes %s: %v", v, err)
		}
	}
}

// NOTES.txt says which mode auto chose, and why. Only helm install prints
// it; --dry-run=client asks no cluster and so, like helm template, sees no
// MutatingAdmissionPolicy.
func TestChartNotesSayWhyCoalescing(t *testing.T) {
	helm := binary(t, "HELM")
	kubeconfig, err := filepath.Abs(filepath.Join(root, "hack/unreachable-kubeconfig.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	notes := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(helm, append([]string{"install", "leaseguard", chartDir, "--namespace", "lg", "--dry-run=client"}, args...)...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm install --dry-run=client %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		_, n, ok := strings.Cut(string(out), "\nNOTES:\n")
		if !ok {
			t.Fatalf("no NOTES in\n%s", out)
		}
		return n
	}
	got := notes()
	for _, want := range []string{"coalescing: webhook)", "Coalescing (auto): the cluster does not serve " + mutatingAdmissionPolicyAPI} {
		if !strings.Contains(got, want) {
			t.Errorf("NOTES with the defaults do not say %q:\n%s", want, got)
		}
	}
	if got := notes("--set", "coalescing=off"); !strings.Contains(got, "coalescing: off)") || strings.Contains(got, "(auto)") {
		t.Errorf("NOTES with coalescing=off:\n%s", got)
	}
}
