package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

const (
	chartDir = root + "/charts/leaseguard"
	// namespacePlaceholder is what `make chart` renders the webhook
	// configurations with (leaseguard manifests --leaseguard-namespace); the chart
	// replaces it by the release namespace (templates/_helpers.tpl).
	namespacePlaceholder = "zz-leaseguard-release-namespace"
	// defaultPolicy is the chart's default policy: config/manager's.
	defaultPolicy = "config/manager/policy.yaml"
)

var coalescingModes = []manifests.Coalescing{manifests.CoalesceInAPIServer, manifests.CoalesceInWebhook, manifests.CoalesceOff}

// render is what `leaseguard manifests --config policyPath --leaseguard-namespace ns
// --coalesce c` writes.
func render(t *testing.T, policyPath, ns string, c manifests.Coalescing) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, policyPath))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policyfile.Parse(data, policy.CompileOptions{OwnNamespace: ns})
	if err != nil {
		t.Fatalf("%s: %v", policyPath, err)
	}
	o := manifests.Defaults()
	o.Namespace, o.Coalescing = ns, c
	r, err := manifests.Render(p, o)
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.YAML(manifests.Header(policyPath))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameFile(t *testing.T, got, want string) {
	t.Helper()
	g, err := os.ReadFile(filepath.Join(root, got))
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.ReadFile(filepath.Join(root, want))
	if err != nil {
		t.Fatal(err)
	}
	if string(g) != string(w) {
		t.Errorf("%s is not a copy of %s: run `make chart`", got, want)
	}
}

// The chart's generated files are what the generator renders now, like
// config/'s TestWebhookManifestsAreGeneratedFromThePolicy: the webhook
// configurations of the default policy for every coalescing mode, and the
// copies of the default policy, the alerts and the dashboard.
func TestChartFilesAreGenerated(t *testing.T) {
	for _, c := range coalescingModes {
		file := fmt.Sprintf("charts/leaseguard/files/webhooks-coalesce-%s.yaml", c)
		got, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(render(t, defaultPolicy, namespacePlaceholder, c)) {
			t.Errorf("%s is not what `leaseguard manifests --config %s --coalesce %s` renders: run `make chart`", file, defaultPolicy, c)
		}
	}
	sameFile(t, "charts/leaseguard/files/policy.yaml", defaultPolicy)
	sameFile(t, "charts/leaseguard/files/alerts.yaml", "config/prometheus/alerts.yaml")
	sameFile(t, "charts/leaseguard/files/dashboard.json", "config/grafana/leaseguard.json")
	// One placeholder everywhere: the chart's, the Makefile's, this test's.
	for _, f := range []string{"charts/leaseguard/templates/_helpers.tpl", "Makefile"} {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), namespacePlaceholder) {
			t.Errorf("%s does not use the namespace placeholder %s", f, namespacePlaceholder)
		}
	}
}

// templateArgs are the arguments of `helm template` into namespace ns, for
// the Kubernetes version of the pinned control plane when K8S_VERSION is set
// (helm template otherwise assumes its own default, v1.20 for a Helm 3
// built from source, which the chart's kubeVersion refuses).
func templateArgs(ns string, args ...string) []string {
	out := []string{"template", "leaseguard", chartDir, "--namespace", ns}
	if v := os.Getenv("K8S_VERSION"); v != "" {
		out = append(out, "--kube-version", v)
	}
	return append(out, args...)
}

// helmTemplate renders the chart, CRDs included, into namespace ns with
// extra helm flags.
func helmTemplate(t *testing.T, ns string, args ...string) []object {
	t.Helper()
	helm := binary(t, "HELM")
	return objects(t, run(t, helm, templateArgs(ns, append([]string{"--include-crds"}, args...)...)...))
}

// helmLabels are the labels the chart adds to config/'s (templates/_helpers.tpl).
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}

func dropHelmLabels(o object) {
	meta, _ := o["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	for _, l := range helmLabels {
		delete(labels, l)
	}
}

// diff lists where a and b differ, by path.
func diff(path string, a, b any, out *[]string) {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			*out = append(*out, fmt.Sprintf("%s: %v != %v", path, a, b))
			return
		}
		keys := map[string]bool{}
		for k := range av {
			keys[k] = true
		}
		for k := range bv {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			diff(path+"."+k, av[k], bv[k], out)
		}
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			*out = append(*out, fmt.Sprintf("%s: %s!= %s", path, toYAML(a), toYAML(b)))
			return
		}
		for i := range av {
			diff(fmt.Sprintf("%s[%d]", path, i), av[i], bv[i], out)
		}
	default:
		if !reflect.DeepEqual(a, b) {
			*out = append(*out, fmt.Sprintf("%s: %v != %v", path, a, b))
		}
	}
}

// compare fails the test where the two sets of objects differ.
func compare(t *testing.T, what string, got, want map[string]object) {
	t.Helper()
	var keys []string
	for k := range want {
		keys = append(keys, k)
		if _, ok := got[k]; !ok {
			t.Errorf("%s: %s is missing", what, k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %s is extra", what, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		g, ok := got[k]
		if !ok {
			continue
		}
		var d []string
		diff(k, g, want[k], &d)
		for _, line := range d {
			t.Errorf("%s: the chart differs at %s (chart != want)", what, line)
		}
	}
}

// The chart with its defaults installs what config/'s overlays install:
// every object of `kubectl kustomize` equal, field by field (Deployment
// args, ports, probes, resources, securityContext, volumes; Services; the
// webhook configurations' rules, matchConditions, failurePolicy, timeouts;
// RBAC; PDB; ConfigMap), after the normalisations below, which are the
// only intended differences.
// apiServerCIDR is where the tests' API server calls webhooks from, in
// the NetworkPolicy of the chart (apiServerPeers) and of config/ (a patch).
const (
	apiServerCIDR  = "192.0.2.10/32"
	apiServerPeers = `networkPolicy.apiServer=[{"ipBlock":{"cidr":"` + apiServerCIDR + `"}}]`
)

// The NetworkPolicy opens the webhook port to the API server only, so it
// cannot be rendered without being told where the API server is; and the
// API server's client certificate, when given, is what leaseguard requires.
func TestChartRestrictsTheWebhookToTheAPIServer(t *testing.T) {
	helm := binary(t, "HELM")
	base := templateArgs("lg")
	_, err := runErr(helm, append(base, "--set", "networkPolicy.enabled=true")...)
	if err == nil || !strings.Contains(err.Error(), "networkPolicy.apiServer: name the peers the API server calls webhooks from") {
		t.Errorf("networkPolicy.enabled without networkPolicy.apiServer: err = %v, want the chart to ask for it", err)
	}
	objs := byKey(t, objects(t, run(t, helm, append(base, "--set", "networkPolicy.enabled=true", "--set-json", apiServerPeers)...)))
	np := objs["NetworkPolicy/lg/leaseguard"]
	ingress, _ := np["spec"].(map[string]any)["ingress"].([]any)
	webhook, _ := ingress[0].(map[string]any)
	if got := fmt.Sprint(webhook["from"]); got != "[map[ipBlock:map[cidr:"+apiServerCIDR+"]]]" {
		t.Errorf("the webhook port is open to %s, want the API server's %s only", got, apiServerCIDR)
	}

	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	objs = byKey(t, objects(t, run(t, helm, append(base, "--set-file", "apiServerAuthentication.clientCA="+ca,
		"--set", "apiServerAuthentication.clientNames={kube-apiserver-admission}")...)))
	deploy := fmt.Sprint(objs["Deployment/lg/leaseguard"])
	for _, want := range []string{"--client-ca=/etc/leaseguard-client-ca/ca.crt", "--client-name=kube-apiserver-admission", "leaseguard-client-ca"} {
		if !strings.Contains(deploy, want) {
			t.Errorf("the Deployment lacks %s", want)
		}
	}
	if cm := objs["ConfigMap/lg/leaseguard-client-ca"]; cm == nil || !strings.Contains(fmt.Sprint(cm["data"]), "BEGIN CERTIFICATE") {
		t.Errorf("no ConfigMap leaseguard-client-ca holding the CA: %v", cm)
	}
}

func TestChartMatchesKustomize(t *testing.T) {
	kubectl := binary(t, "KUBECTL")
	abs := func(p string) string {
		a, err := filepath.Abs(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	// config/default with its two optional components uncommented
	// (kustomize wants relative paths to them).
	everything := t.TempDir()
	rel := func(p string) string {
		r, err := filepath.Rel(everything, abs(p))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	overlay := fmt.Sprintf(`namespace: leaseguard-system
labels:
- pairs:
    app.kubernetes.io/part-of: leaseguard
resources:
- %s
- %s
- %s
- %s
components:
- %s
patches:
- target:
    kind: NetworkPolicy
    name: leaseguard
  patch: |-
    - op: replace
      path: /spec/ingress/0/from/0/ipBlock/cidr
      value: %s
`, rel("config/default"), rel("config/network-policy"), rel("config/prometheus"), rel("config/grafana"), rel("config/components/flowcontrol"), apiServerCIDR)
	if err := os.WriteFile(filepath.Join(everything, "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		helmArgs  []string
		kustomize string
	}{
		{"certManager", nil, abs("config/default")},
		{"selfManaged", []string{"--set", "certificates.mode=selfManaged"}, abs("config/self-managed")},
		{"every toggle", []string{"--set", "serviceMonitor.enabled=true,prometheusRule.enabled=true,networkPolicy.enabled=true,grafanaDashboard.enabled=true,flowControl.enabled=true", "--set-json", apiServerPeers}, everything},
	} {
		t.Run(c.name, func(t *testing.T) {
			// config/ installs the coalescing MutatingAdmissionPolicy,
			// which the chart's default (coalescing: auto) renders for a
			// cluster that serves it, as the pinned control plane does
			// (below 1.36: TestChartCoalescingFollowsTheCluster).
			rendered := helmTemplate(t, "leaseguard-system", slices.Concat(c.helmArgs, servesMutatingAdmissionPolicy)...)
			chart := rendered
			for _, o := range chart {
				// Intended: Helm's own labels (chart, release, manager,
				// app version) on every object.
				dropHelmLabels(o)
				// Intended: the chart names every object's app
				// (app.kubernetes.io/name); config/ leaves it off the
				// generated ConfigMap and the self-managed RBAC.
				switch key(o) {
				case "ConfigMap/leaseguard-system/leaseguard-policy",
					"Role/leaseguard-system/leaseguard-ca", "RoleBinding/leaseguard-system/leaseguard-ca":
					dropLabel(o, "app.kubernetes.io/name")
				}
			}
			kust := objects(t, run(t, kubectl, "kustomize", "--load-restrictor", "LoadRestrictionsNone", c.kustomize))
			var want []object
			for _, o := range kust {
				switch o["kind"] {
				case "Deployment":
					// Intended: config/ names the image leaseguard:latest,
					// which `make deploy` (build-installer) replaces with
					// $(IMG), by default leaseguard:v$(VERSION): the
					// chart's default, its appVersion.
					setImage(t, o, "leaseguard:latest", "leaseguard:"+appVersion(t))
				case "Namespace":
					// Intended: the chart installs into the release
					// namespace and creates none (helm --create-namespace,
					// or the admin's, labelled as docs/helm.md says).
					continue
				case "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
					"FlowSchema", "PriorityLevelConfiguration":
					// Intended: they are cluster-scoped, but kustomize's
					// namespace transformer does not know these kinds and
					// sets metadata.namespace on them (the API server
					// ignores it on a cluster-scoped object); the chart
					// renders them as the generator does, without.
					if meta, ok := o["metadata"].(map[string]any); ok {
						delete(meta, "namespace")
					}
				}
				want = append(want, o)
			}
			compare(t, "kustomize "+c.name, byKey(t, chart), byKey(t, want))
		})
	}
}

func dropLabel(o object, label string) {
	meta, _ := o["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	delete(labels, label)
	if labels != nil && len(labels) == 0 {
		delete(meta, "labels")
	}
}

// admissionKinds are what `leaseguard manifests` renders.
var admissionKinds = []string{"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
	"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}

// admission picks the generator's objects out of a rendering, without what
// the chart adds to them (Helm's labels, config/'s part-of, the CA injection
// annotation of certManager mode, checked elsewhere).
func admission(objs []object) map[string]object {
	out := map[string]object{}
	for _, o := range objs {
		if !slices.Contains(admissionKinds, o["kind"].(string)) {
			continue
		}
		dropHelmLabels(o)
		dropLabel(o, "app.kubernetes.io/part-of")
		meta, _ := o["metadata"].(map[string]any)
		if ann, ok := meta["annotations"].(map[string]any); ok {
			delete(ann, "cert-manager.io/inject-ca-from")
			if len(ann) == 0 {
				delete(meta, "annotations")
			}
		}
		out[key(o)] = o
	}
	return out
}

// In any namespace and mode, the chart's admission configuration is exactly
// what `leaseguard manifests --leaseguard-namespace <release namespace> --coalesce
// <mode>` renders, and nothing names another namespace: the namespace is
// never hard-coded.
func TestChartNamespaceIsTheReleaseNamespace(t *testing.T) {
	const ns = "team-guard"
	for _, mode := range []string{"certManager", "selfManaged"} {
		for _, c := range coalescingModes {
			t.Run(fmt.Sprintf("%s/%s", mode, c), func(t *testing.T) {
				helm := binary(t, "HELM")
				// A cluster that serves MutatingAdmissionPolicy, without
				// which coalescing=policy fails (TestChartExplicitCoalescing).
				out := run(t, helm, templateArgs(ns, "--include-crds", "--api-versions", mutatingAdmissionPolicyAPI,
					"--set", "certificates.mode="+mode, "--set", "coalescing="+string(c),
					"--set", "serviceMonitor.enabled=true,prometheusRule.enabled=true,networkPolicy.enabled=true,grafanaDashboard.enabled=true",
					"--set-json", apiServerPeers)...)
				for _, s := range []string{"leaseguard-system", namespacePlaceholder} {
					if strings.Contains(string(out), s) {
						t.Errorf("the rendering names %s", s)
					}
				}
				objs := objects(t, out)
				for _, o := range objs {
					meta, _ := o["metadata"].(map[string]any)
					switch o["kind"] {
					case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
						ann, _ := meta["annotations"].(map[string]any)
						got, has := ann["cert-manager.io/inject-ca-from"]
						if want := ns + "/leaseguard-serving-cert"; mode == "certManager" && got != want {
							t.Errorf("%s: inject-ca-from = %v, want %s", key(o), got, want)
						}
						if mode == "selfManaged" && has {
							t.Errorf("%s: inject-ca-from in selfManaged mode", key(o))
						}
					case "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
						"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "FlowSchema", "PriorityLevelConfiguration":
					default:
						if meta["namespace"] != ns {
							t.Errorf("%s: namespace %v, want %s", key(o), meta["namespace"], ns)
						}
					}
				}
				want := admission(objects(t, render(t, defaultPolicy, ns, c)))
				compare(t, "generator", admission(objs), want)
				if len(want) == 0 {
					t.Fatal("the generator rendered nothing")
				}
			})
		}
	}
}

// A policy of one's own needs its own webhook configurations: the chart
// refuses it alone, and with `leaseguard manifests` output installs exactly
// that output.
func TestChartCustomPolicy(t *testing.T) {
	helm := binary(t, "HELM")
	const ns = "lg"
	dir := t.TempDir()
	custom := "config/e2e-policy/policy.yaml"
	webhooks := filepath.Join(dir, "webhooks.yaml")
	if err := os.WriteFile(webhooks, render(t, custom, ns, manifests.CoalesceInWebhook), 0o644); err != nil {
		t.Fatal(err)
	}
	base := templateArgs(ns)

	_, err := runErr(helm, append(base, "--set-file", "policy="+filepath.Join(root, custom))...)
	if err == nil || !strings.Contains(err.Error(), "leaseguard manifests") {
		t.Errorf("a custom policy without webhookConfigurations: err = %v, want the chart to refuse it and name `leaseguard manifests`", err)
	}

	out := run(t, helm, append(base, "--set-file", "policy="+filepath.Join(root, custom), "--set-file", "webhookConfigurations="+webhooks)...)
	objs := objects(t, out)
	compare(t, "custom policy", admission(objs), admission(objects(t, render(t, custom, ns, manifests.CoalesceInWebhook))))
	policyData, err := os.ReadFile(filepath.Join(root, custom))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o["kind"] == "ConfigMap" {
			data, _ := o["data"].(map[string]any)
			if data["policy.yaml"] != string(policyData) {
				t.Errorf("the ConfigMap holds\n%v\nwant %s", data["policy.yaml"], custom)
			}
		}
	}

	// The default policy given explicitly is the default.
	run(t, helm, append(base, "--set-file", "policy="+filepath.Join(root, defaultPolicy))...)

	for _, bad := range [][]string{
		{"--set", "coalescing=sometimes"},
		{"--set", "certificates.mode=manual"},
		{"--set", "webhookConfigurations=kind: Deployment"},
		// A kustomize patch is not the configuration itself.
		{"--set-file", "webhookConfigurations=" + filepath.Join(root, "config/e2e-policy/webhooks-patch.yaml")},
		// A misspelt value is refused (values.schema.json), not ignored.
		{"--set", "certificate.mode=selfManaged"},
		// Client names mean nothing without the CA that verifies them.
		{"--set", "apiServerAuthentication.clientNames={kube-apiserver-admission}"},
	} {
		if _, err := runErr(helm, append(base, bad...)...); err == nil {
			t.Errorf("helm template %s: no error", strings.Join(bad, " "))
		}
	}
}

// appVersion is the chart's appVersion.
func appVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct{ AppVersion string }
	if err := yaml.Unmarshal(data, &chart); err != nil || chart.AppVersion == "" {
		t.Fatalf("Chart.yaml: appVersion %q: %v", chart.AppVersion, err)
	}
	return chart.AppVersion
}

// setImage replaces image from by to in a Deployment's containers, and
// fails the test if none had it.
func setImage(t *testing.T, o object, from, to string) {
	t.Helper()
	spec, _ := o["spec"].(map[string]any)
	tmpl, _ := spec["template"].(map[string]any)
	pod, _ := tmpl["spec"].(map[string]any)
	containers, _ := pod["containers"].([]any)
	found := false
	for _, c := range containers {
		if m, _ := c.(map[string]any); m["image"] == from {
			m["image"], found = to, true
		}
	}
	if !found {
		t.Errorf("%s: no container with image %s", key(o), from)
	}
}
