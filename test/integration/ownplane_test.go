package integration

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/config"
	"github.com/leaseguard/leaseguard/test/controlplane"
)

// ownSamplePlane starts a control plane of the test's own (for tests that
// change what is cluster-wide: the CRD, the API server itself) with the
// sample policy as shipped, served by the real leaseguard, and creates
// namespace ns. Both are stopped when the test ends; leaseguard's output
// is logged if it failed.
func ownSamplePlane(t *testing.T, ns string) (*controlplane.ControlPlane, dynamic.Interface) {
	t.Helper()
	own, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = own.Stop() })
	data, err := config.Files.ReadFile(config.SamplePolicyPath)
	if err != nil {
		t.Fatal(err)
	}
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	lg, err := own.StartLeaseguard(binary, policyFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		lg.Stop()
		if t.Failed() {
			t.Logf("leaseguard serve output:\n%s", lg.Log())
		}
	})
	admin, err := dynamic.NewForConfig(own.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(context.Background(),
		&unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return own, admin
}

// multiClusterLeasesAs is namespace's MultiClusterLeases as user (a
// service account) writes them through cfg.
func multiClusterLeasesAs(t *testing.T, cfg *rest.Config, user, namespace string) dynamic.ResourceInterface {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dyn.Resource(mclv1alpha1.GroupVersionResource).Namespace(namespace)
}
