package certs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/leaseguard/leaseguard/test/certmanager"
	"github.com/leaseguard/leaseguard/test/controlplane"
)

// cert-manager mode: cert-manager's real CRDs, config/'s Issuer and
// Certificate, the webhook configurations annotated as config/default does,
// and cert-manager's real CA injector (pkg/controller/cainjector) against the
// API server. The test plays the part of cert-manager's issuing controller
// (writing the Certificate's Secret, which leaseguard reads as mounted files);
// the injector fills caBundle, and the API server then reaches leaseguard.
func TestCertManagerModeWithTheRealCAInjector(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	policyPath := writePolicy(t)
	cp, err := controlplane.Start(controlplane.Options{Policy: policyPath})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cp.Stop() }()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := cp.Kubectl(kubeconfig, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	admin, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	createNamespace(t, admin, "certs-guarded")
	createNamespace(t, admin, "leaseguard-system")

	crds, err := controlplane.CertManagerCRDs()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range crds {
		kubectl("apply", "--server-side", "-f", f)
	}
	// Polled, not `kubectl wait --for=condition=Established`: read before
	// the API server has set any condition on a CRD just created, kubectl
	// wait fails at once (".status.conditions accessor error: <nil> is of
	// the type <nil>"), as it did once in CI.
	for _, crd := range []string{"certificates.cert-manager.io", "issuers.cert-manager.io"} {
		var status string
		for deadline := time.Now().Add(time.Minute); status != "True"; time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("CRD %s not Established after a minute (Established: %q)", crd, status)
			}
			out, err := cp.Kubectl(kubeconfig, "get", "crd", crd, "-o", `jsonpath={.status.conditions[?(@.type=="Established")].status}`).Output()
			if err != nil {
				t.Fatalf("kubectl get crd %s: %v", crd, err)
			}
			status = strings.TrimSpace(string(out))
		}
	}
	kubectl("apply", "-n", "leaseguard-system", "-f", filepath.Join(root, "config", "certmanager", "certificate.yaml"))

	// The annotation config/default puts on both webhook configurations; the
	// local ones start with no caBundle, so only injection can make them work.
	rendered, err := exec.Command(cp.KubectlPath, "kustomize", filepath.Join(root, "config", "default")).Output()
	if err != nil {
		t.Fatal(err)
	}
	const annotation = "cert-manager.io/inject-ca-from"
	want := "leaseguard-system/leaseguard-serving-cert"
	if !bytes.Contains(rendered, []byte(annotation+": "+want)) {
		t.Fatalf("config/default does not annotate the webhook configurations with %s: %s", annotation, want)
	}
	if err := controlplane.SetCABundle(ctx, cp.Config, nil); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"validatingwebhookconfiguration/leaseguard-validating-webhook-configuration", "mutatingwebhookconfiguration/leaseguard-mutating-webhook-configuration"} {
		kubectl("annotate", "--overwrite", kind, annotation+"="+want)
	}

	// cert-manager's issuing controller: the Certificate's Secret.
	ca := newCA(t)
	certDir := t.TempDir()
	ca.issue(t, certDir, 7)
	crt, _ := os.ReadFile(filepath.Join(certDir, "tls.crt"))
	key, _ := os.ReadFile(filepath.Join(certDir, "tls.key"))
	certificate, err := certmanager.Certificate(root)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "leaseguard-system", Name: certificate.Spec.SecretName,
			Annotations: map[string]string{cmapi.CertificateNameKey: certificate.Name}},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": ca.pem},
	}
	if _, err := admin.CoreV1().Secrets("leaseguard-system").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// cert-manager's CA injector, as its own binary sets it up.
	mgr, err := certmanager.NewCAInjector(ctx, cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if err := mgr.Start(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("CA injector: %v", err)
		}
	}()

	guard, err := cp.StartLeaseguard(binary, policyPath, "--cert-mode", "cert-manager", "--cert-dir", certDir)
	if err != nil {
		t.Fatal(err)
	}
	defer guard.Stop()

	eventually(t, 60*time.Second, "the CA injector to fill caBundle", func() error {
		v, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "leaseguard-validating-webhook-configuration", metav1.GetOptions{})
		if err != nil {
			return err
		}
		m, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "leaseguard-mutating-webhook-configuration", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !bytes.Equal(v.Webhooks[0].ClientConfig.CABundle, ca.pem) || !bytes.Equal(m.Webhooks[0].ClientConfig.CABundle, ca.pem) {
			return fmt.Errorf("caBundle not injected yet")
		}
		return nil
	})
	i := 0
	eventually(t, 30*time.Second, "the API server to reach leaseguard", func() error {
		i++
		return intruderWrite(ctx, cp.Config, fmt.Sprintf("cm-%d", i))
	})
}
