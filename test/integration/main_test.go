// Package integration tests leaseguard through a real kube-apiserver and
// etcd: the real `leaseguard serve` binary behind the webhook configurations
// of config/, clients going through the API server, kubectl for dry-runs.
package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/leaseguard/leaseguard/test/controlplane"
)

// Shared by the tests of this package: one control plane, one leaseguard.
var (
	cp         *controlplane.ControlPlane
	guard      *controlplane.Leaseguard
	kubeconfig string
	policyPath string
	binary     string
	admin      kubernetes.Interface
)

func TestMain(m *testing.M) {
	reaped := controlplane.ReapChildrenOnExit()
	code, err := run(m)
	reaped()
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration setup:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	tmp, err := os.MkdirTemp("", "leaseguard-integration-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)

	if binary, err = controlplane.BuildLeaseguard(tmp); err != nil {
		return 0, err
	}
	policyPath = filepath.Join(tmp, "policy.yaml")
	if err := os.WriteFile(policyPath, []byte(basePolicy), 0o600); err != nil {
		return 0, err
	}
	if cp, err = controlplane.Start(controlplane.Options{Policy: policyPath}); err != nil {
		return 0, err
	}
	defer func() { _ = cp.Stop() }()
	kubeconfig = filepath.Join(tmp, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		return 0, err
	}
	if admin, err = kubernetes.NewForConfig(cp.Config); err != nil {
		return 0, err
	}
	// As shipped: leaseguard keeps its webhook configurations the
	// rendering of the policy in force.
	if guard, err = cp.StartLeaseguard(binary, policyPath, "--manage-webhook-configurations", "--kubeconfig", kubeconfig, "--webhook-configurations-resync", "2s"); err != nil {
		return 0, err
	}
	defer guard.Stop()

	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "--- leaseguard serve output ---\n%s\n", guard.Log())
	}
	return code, nil
}

// as returns a clientset impersonating username, with the pod-name extra
// when pod is not empty, as a pod's bound service-account token would carry.
func as(t *testing.T, username, pod string) kubernetes.Interface {
	t.Helper()
	cfg := impersonating(username, pod)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func impersonating(username, pod string) *rest.Config {
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: username}
	if pod != "" {
		cfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/pod-name": {pod}}
	}
	return cfg
}

func createNamespace(t *testing.T, name string) {
	t.Helper()
	_, err := admin.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func runtimeJSON(obj any) ([]byte, error) { return json.Marshal(obj) }

// putRaw sends body as a PUT to path (from /apis/...) as the user and pod,
// without client-go's encoding or retries: the answer as the API server
// gives it, its code, headers and body.
func putRaw(ctx context.Context, t *testing.T, user, pod, path string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	cfg := impersonating(user, pod)
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, strings.TrimSuffix(cfg.Host, "/")+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header, answer
}
