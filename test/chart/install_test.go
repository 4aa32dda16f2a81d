package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// crdName is the MultiClusterLease CRD: Config Connector's, of which
// config/crd holds a copy for test clusters.
const crdName = "multiclusterleases.multicluster.core.cnrm.cloud.google.com"

// keepAnnotations make the tools that delete what they applied keep the
// opt-in component's CRD (Helm, Argo CD, Flux).
var keepAnnotations = map[string]string{
	"helm.sh/resource-policy":           "keep",
	"argocd.argoproj.io/sync-options":   "Delete=false",
	"kustomize.toolkit.fluxcd.io/prune": "disabled",
}

// testOverlays are the kustomizations only the project's own tests install:
// they add the MultiClusterLease CRD, explicitly, with the opt-in component.
var testOverlays = map[string]bool{"config/e2e": true, "config/e2e-self-managed": true}

// An uninstall never deletes lease data: no install a user runs (the chart
// in every mode, config/default, config/self-managed and every other
// overlay or add-on under config/) applies a CustomResourceDefinition, so
// none deletes one — deleting the MultiClusterLease CRD would delete every
// MultiClusterLease of the cluster. The opt-in component that test
// clusters use carries the annotations that keep it, and the test overlays
// include it explicitly.
func TestChartAndOverlaysInstallNoCRD(t *testing.T) {
	if _, err := os.Stat(filepath.Join(chartDir, "crds")); !os.IsNotExist(err) {
		t.Errorf("charts/leaseguard/crds exists (Helm would install what it holds): %v", err)
	}
	helm := binary(t, "HELM")
	for name, args := range map[string][]string{
		"defaults":    nil,
		"selfManaged": {"--set", "certificates.mode=selfManaged"},
		"every toggle": {"--set", "serviceMonitor.enabled=true,prometheusRule.enabled=true,networkPolicy.enabled=true,grafanaDashboard.enabled=true,flowControl.enabled=true",
			"--set-json", apiServerPeers},
	} {
		// --include-crds: what `helm install` would apply from crds/ too.
		for _, o := range objects(t, run(t, helm, templateArgs("leaseguard-system", append([]string{"--include-crds"}, args...)...)...)) {
			if o["kind"] == "CustomResourceDefinition" {
				t.Errorf("the chart (%s) renders %s", name, key(o))
			}
		}
	}

	kubectl := binary(t, "KUBECTL")
	kustomizations, err := filepath.Glob(filepath.Join(root, "config/*/kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	userFacing := 0
	for _, k := range kustomizations {
		dir, err := filepath.Rel(root, filepath.Dir(k))
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(k)
		if err != nil {
			t.Fatal(err)
		}
		var head struct{ Kind string }
		if err := yaml.Unmarshal(data, &head); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if head.Kind == "Component" || dir == "config/crd" {
			// Parts of overlays (config/e2e-policy), and the CRD's copy itself.
			continue
		}
		var crds []object
		for _, o := range objects(t, run(t, kubectl, "kustomize", filepath.Join(root, dir))) {
			if o["kind"] == "CustomResourceDefinition" {
				crds = append(crds, o)
			}
		}
		if !testOverlays[dir] {
			userFacing++
			for _, o := range crds {
				t.Errorf("%s renders %s: `kubectl delete -k %s` would delete it", dir, key(o), dir)
			}
			continue
		}
		if len(crds) != 1 {
			t.Errorf("%s renders %d CRDs, want the MultiClusterLease CRD of config/components/multiclusterlease-crd", dir, len(crds))
		}
		for _, o := range crds {
			checkKept(t, dir, o)
		}
	}
	if userFacing < 3 {
		t.Errorf("only %d user-facing kustomizations under config/ (config/default, config/self-managed, ...)", userFacing)
	}
	crds := objects(t, run(t, kubectl, "kustomize", filepath.Join(root, "config/components/multiclusterlease-crd")))
	if len(crds) != 1 {
		t.Fatalf("config/components/multiclusterlease-crd renders %d objects, want the CRD", len(crds))
	}
	checkKept(t, "config/components/multiclusterlease-crd", crds[0])
}

// checkKept fails unless o is the MultiClusterLease CRD with the keep
// annotations.
func checkKept(t *testing.T, where string, o object) {
	t.Helper()
	meta, _ := o["metadata"].(map[string]any)
	if o["kind"] != "CustomResourceDefinition" || meta["name"] != crdName {
		t.Errorf("%s: %s, want CustomResourceDefinition %s", where, key(o), crdName)
	}
	ann, _ := meta["annotations"].(map[string]any)
	for k, v := range keepAnnotations {
		if ann[k] != v {
			t.Errorf("%s: %s has annotation %s=%v, want %s", where, key(o), k, ann[k], v)
		}
	}
}

// The project has one version, in VERSION: the chart's version is it, and
// its appVersion (the default image tag) is what the binaries print,
// v<VERSION> (the Makefile stamps it); CHANGELOG.md has its entry.
func TestChartVersionIsTheProjects(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(data))
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(version) || string(data) != version+"\n" {
		t.Fatalf("VERSION is %q, want one line MAJOR.MINOR.PATCH", data)
	}
	data, err = os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(data, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != version || chart.AppVersion != "v"+version {
		t.Errorf("Chart.yaml: version %q, appVersion %q; want %q and %q (VERSION)", chart.Version, chart.AppVersion, version, "v"+version)
	}
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(makefile), "VERSION ?= v$(shell cat VERSION)") || !strings.Contains(string(makefile), "-X main.version=$(VERSION)") {
		t.Error("the Makefile does not stamp v$(cat VERSION) into the binaries")
	}
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## [Unreleased]", "## [" + version + "] - "} {
		if !strings.Contains(string(changelog), want) {
			t.Errorf("CHANGELOG.md has no %q", want)
		}
	}
}

// The chart installs the image of its appVersion unless told otherwise, and
// pins it by digest when given one: with the tag (repository:tag@digest) or
// alone (repository@digest).
func TestChartImage(t *testing.T) {
	helm := binary(t, "HELM")
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, c := range []struct {
		name string
		set  string
		want string
	}{
		{"defaults", "", "leaseguard:" + appVersion(t)},
		{"tag", "image.repository=registry.example/lg,image.tag=v9.9.9", "registry.example/lg:v9.9.9"},
		{"digest", "image.digest=" + digest, "leaseguard@" + digest},
		{"tag and digest", "image.tag=v9.9.9,image.digest=" + digest, "leaseguard:v9.9.9@" + digest},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := templateArgs("leaseguard-system")
			if c.set != "" {
				args = append(args, "--set", c.set)
			}
			var images []string
			for _, o := range objects(t, run(t, helm, args...)) {
				if o["kind"] != "Deployment" {
					continue
				}
				spec, _ := o["spec"].(map[string]any)
				tmpl, _ := spec["template"].(map[string]any)
				pod, _ := tmpl["spec"].(map[string]any)
				containers, _ := pod["containers"].([]any)
				for _, ctr := range containers {
					m, _ := ctr.(map[string]any)
					images = append(images, m["image"].(string))
				}
			}
			if len(images) != 1 || images[0] != c.want {
				t.Errorf("images %q, want [%s]", images, c.want)
			}
		})
	}
	for _, bad := range []string{"image.digest=latest", "image.digest=sha256:abc", "image.digests=" + digest} {
		if _, err := runErr(helm, append(templateArgs("leaseguard-system"), "--set", bad)...); err == nil {
			t.Errorf("helm template --set %s: no error", bad)
		}
	}
}
