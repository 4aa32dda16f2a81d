package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/webhook/serve/leasestats"
)

// The metrics port as shipped (--metrics-secure, the default of `leaseguard
// serve`): HTTPS with the serving certificate, and only for bearer tokens the
// API server authenticates (TokenReview) and authorizes (SubjectAccessReview)
// — leaseguard running as its own service account with nothing but the
// roles of config/rbac. /debug/leases names users and leases, so it needs its
// own role.
func TestMetricsPortNeedsATokenTheAPIServerAuthorizes(t *testing.T) {
	ctx := context.Background()
	const ns = "it-metrics"
	createNamespace(t, ns)
	applyShippedRBAC(t, ns, "config/rbac/metrics_auth.yaml", "config/rbac/metrics_reader.yaml")

	bind := func(name, role string) {
		b := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "it-metrics-" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
		}
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), b.Name, metav1.DeleteOptions{})
		})
	}
	bind("prometheus", "leaseguard-metrics-reader")
	bind("operator", "leaseguard-debug-reader")
	tokens := map[string]string{}
	for _, sa := range []string{"prometheus", "operator", "stranger"} {
		if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("a bound token for %s/%s: %v", ns, sa, err)
		}
		tokens[sa] = tr.Status.Token
	}

	// leaseguard as its own service account: only config/rbac's roles.
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.WriteKubeconfigFor(kc, "system:serviceaccount:"+ns+":leaseguard"); err != nil {
		t.Fatal(err)
	}
	_, webhookPort, _ := net.SplitHostPort(freeAddr(t))
	lg, err := cp.StartLeaseguard(binary, policyPath, "--metrics-secure", "--kubeconfig", kc, "--webhook-port", webhookPort)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lg.Stop)
	if !strings.HasPrefix(lg.MetricsURL, "https://") {
		t.Fatalf("metrics at %s, want HTTPS", lg.MetricsURL)
	}
	base := strings.TrimSuffix(lg.MetricsURL, "/metrics")

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cp.CAData())
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	get := func(path, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		if resp.ProtoMajor != 1 {
			t.Errorf("GET %s answered over %s: HTTP/2 must be off", path, resp.Proto)
		}
		return resp.StatusCode, string(body)
	}
	for _, tc := range []struct {
		what, path, token, wantBody string
		want                        int
	}{
		{"no token", "/metrics", "", "Unauthorized", http.StatusUnauthorized},
		{"a forged token", "/metrics", "forged", "Unauthorized", http.StatusUnauthorized},
		{"a token RBAC allows nothing", "/metrics", tokens["stranger"], "Forbidden: user system:serviceaccount:it-metrics:stranger may not get /metrics", http.StatusForbidden},
		{"leaseguard-metrics-reader", "/metrics", tokens["prometheus"], "leaseguard_policy_file_valid 1", http.StatusOK},
		{"leaseguard-metrics-reader", leasestats.Path, tokens["prometheus"], "Forbidden", http.StatusForbidden},
		{"no token", leasestats.Path, "", "Unauthorized", http.StatusUnauthorized},
		{"leaseguard-debug-reader", leasestats.Path, tokens["operator"], `"leases"`, http.StatusOK},
		{"leaseguard-debug-reader", "/metrics", tokens["operator"], "Forbidden", http.StatusForbidden},
	} {
		code, body := get(tc.path, tc.token)
		if code != tc.want || !strings.Contains(body, tc.wantBody) {
			t.Errorf("GET %s with %s: HTTP %d %.200q, want %d with %q", tc.path, tc.what, code, body, tc.want, tc.wantBody)
		}
		if code == http.StatusOK && tc.path == leasestats.Path {
			var snap leasestats.Snapshot
			if err := json.Unmarshal([]byte(body), &snap); err != nil {
				t.Errorf("GET %s: %v", tc.path, err)
			}
		}
	}
	// kubectl leaseguard top --webhook-stats reads /debug/leases as shipped:
	// the certificate verified with the webhook configuration's caBundle,
	// the token given (the test's kubeconfig has a client certificate,
	// which the port does not take).
	top := func(extra ...string) (string, error) {
		args := append([]string{"top", "--kubeconfig", kubeconfig, "--once", "--window", "1s", "-o", "json", "-n", ns, "--webhook-stats", base}, extra...)
		out, err := exec.Command(pluginBinary(t), args...).CombinedOutput()
		return string(out), err
	}
	if out, err := top("--webhook-stats-token", tokens["operator"]); err != nil || !strings.Contains(out, `"webhookSources"`) {
		t.Errorf("top --webhook-stats with a debug reader's token: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		what string
		args []string
		want string
	}{
		{"no token", nil, "HTTP 401"},
		{"a metrics reader's token", []string{"--webhook-stats-token", tokens["prometheus"]}, "HTTP 403"},
		{"an unknown webhook configuration", []string{"--webhook-stats-token", tokens["operator"], "--webhook-configuration", "nonexistent"}, "verified with the caBundle of nonexistent"},
	} {
		out, err := top(tc.args...)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(out, tc.want) {
			t.Errorf("top --webhook-stats with %s: %v, want exit 1 saying %q:\n%s", tc.what, err, tc.want, out)
		}
	}

	// Plain HTTP gets no metrics from the TLS port.
	if resp, err := http.Get("http://" + strings.TrimPrefix(base, "https://") + "/metrics"); err == nil {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		resp.Body.Close()
		if strings.Contains(string(body), "leaseguard_") {
			t.Errorf("plain HTTP on the metrics port: HTTP %d with the metrics", resp.StatusCode)
		}
	}
}

// applyShippedRBAC creates the ClusterRoles and ClusterRoleBindings of the
// given files of the repository, the bindings' service account moved to ns,
// and deletes them when the test ends.
func applyShippedRBAC(t *testing.T, ns string, files ...string) {
	t.Helper()
	ctx := context.Background()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := r.Read()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			applyRBACObject(t, ctx, f, ns, obj)
		}
	}
}

func applyRBACObject(t *testing.T, ctx context.Context, file, ns string, obj runtime.Object) {
	t.Helper()
	switch o := obj.(type) {
	case *rbacv1.ClusterRole:
		if _, err := admin.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: %v", file, err)
		}
		t.Cleanup(func() { _ = admin.RbacV1().ClusterRoles().Delete(context.Background(), o.Name, metav1.DeleteOptions{}) })
	case *rbacv1.ClusterRoleBinding:
		for i := range o.Subjects {
			o.Subjects[i].Namespace = ns
		}
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: %v", file, err)
		}
		t.Cleanup(func() {
			_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), o.Name, metav1.DeleteOptions{})
		})
	default:
		t.Fatalf("%s: a %T, want ClusterRoles and ClusterRoleBindings", file, obj)
	}
}
