package controlplane

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// The harness looks for binaries of the version `make controlplane` builds.
func TestKubernetesVersionMatchesToolsModule(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "test", "tools", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes (v\S+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("test/tools/go.mod does not require k8s.io/kubernetes")
	}
	if string(m[1]) != KubernetesVersion {
		t.Fatalf("test/tools/go.mod pins k8s.io/kubernetes %s, KubernetesVersion is %s", m[1], KubernetesVersion)
	}
}

func TestMissingAssetsErrorSaysWhatToRun(t *testing.T) {
	err := checkAssets(t.TempDir())
	if err == nil {
		t.Fatal("empty folder accepted")
	}
	if !regexp.MustCompile("run `make controlplane`").MatchString(err.Error()) {
		t.Fatalf("error %q does not say how to get the binaries", err)
	}
}
