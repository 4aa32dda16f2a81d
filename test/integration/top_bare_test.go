package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/leaseguard/leaseguard/test/controlplane"
)

// On a cluster that has never heard of leaseguard or Config Connector — a
// bare kube-apiserver without the MultiClusterLease CRD — top watches the
// Leases and says why it does not watch MultiClusterLeases; a user without
// RBAC on leases is told what is needed.
func TestTopOnABareClusterAndWithoutPermission(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second control plane")
	}
	assets, err := controlplane.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	if _, err := env.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	dir := t.TempDir()
	writeKubeconfig := func(user envtest.User) string {
		u, err := env.AddUser(user, nil)
		if err != nil {
			t.Fatal(err)
		}
		data, err := u.KubeConfig()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, user.Name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}

	admin := writeKubeconfig(envtest.User{Name: "admin", Groups: []string{"system:masters"}})
	cmd := exec.Command(pluginBinary(t), "top", "--kubeconfig", admin, "-A", "--once", "--window", "2s", "-o", "wide")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("top on a bare cluster: %v\n%s", err, stderr.String())
	}
	if want := "leaseguard top: not watching multiclusterleases: the MultiClusterLease CRD (multiclusterleases.multicluster.core.cnrm.cloud.google.com) is not installed"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q, want %q", stderr.String(), want)
	}
	if !strings.Contains(stderr.String(), "watching leases in all namespaces") || !strings.Contains(stdout.String(), "kube-system") {
		t.Errorf("top did not report the cluster's Leases:\n%s\n%s", stderr.String(), stdout.String())
	}

	nobody := writeKubeconfig(envtest.User{Name: "nobody"})
	out, err := exec.Command(pluginBinary(t), "top", "--kubeconfig", nobody, "-n", "default", "--once", "--window", "1s").CombinedOutput()
	if want := "cannot list leases.coordination.k8s.io in namespace default: leaseguard top needs list and watch on it"; err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("without RBAC: %v\n%s\nwant %q", err, out, want)
	}
}
