package certs

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/leaseguard/leaseguard/test/controlplane"
)

// Self-managed mode from an empty namespace to a working webhook with no
// manual step; a deleted CA Secret and an expiring serving certificate are
// both recovered on their own.
func TestSelfManagedCertificates(t *testing.T) {
	ctx := context.Background()
	// The API server calls https://localhost:<port>: the dynamic source
	// issues certificates for DNS names.
	policyPath := writePolicy(t)
	cp, err := controlplane.Start(controlplane.Options{Policy: policyPath, WebhookHostName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cp.Stop() }()
	admin, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	createNamespace(t, admin, "certs-guarded")
	createNamespace(t, admin, "leaseguard-self")
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	guard, err := cp.StartLeaseguard(binary, policyPath, "--cert-mode", "self-managed", "--kubeconfig", kubeconfig,
		"--namespace", "leaseguard-self", "--dns-name", "localhost", "--leaf-duration", "30s", "--ca-duration", "1h")
	if err != nil {
		t.Fatal(err)
	}
	defer guard.Stop()
	addr := net.JoinHostPort(cp.WebhookHost, strconv.Itoa(cp.WebhookPort))
	secrets := admin.CoreV1().Secrets("leaseguard-self")

	caBundleMatches := func() error {
		s, err := secrets.Get(ctx, "leaseguard-ca", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, name := range []string{"leaseguard-validating-webhook-configuration"} {
			cfg, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if !bytes.Equal(cfg.Webhooks[0].ClientConfig.CABundle, s.Data["ca.crt"]) {
				return fmt.Errorf("caBundle of %s is not the CA of Secret leaseguard-ca", name)
			}
		}
		m, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "leaseguard-mutating-webhook-configuration", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !bytes.Equal(m.Webhooks[0].ClientConfig.CABundle, s.Data["ca.crt"]) {
			return fmt.Errorf("caBundle of the mutating configuration is not the CA")
		}
		return nil
	}

	eventually(t, 60*time.Second, "the CA Secret and the caBundles", caBundleMatches)
	i := 0
	write := func() error { i++; return intruderWrite(ctx, cp.Config, fmt.Sprintf("self-%d", i)) }
	eventually(t, 30*time.Second, "the API server to reach leaseguard", write)

	// An apply that resets the caBundles (the install re-applied, a helm
	// upgrade) is followed within seconds, twice in a row: the keeper
	// watches both configurations. It used to poll once a minute, and
	// meanwhile the API server could not call the webhooks.
	for i := range 2 {
		// As applying the install's manifests over them does: every
		// webhook's caBundle empty.
		if err := controlplane.SetCABundle(ctx, cp.Config, nil); err != nil {
			t.Fatal(err)
		}
		cleared := time.Now()
		eventually(t, 10*time.Second, fmt.Sprintf("the caBundles cleared by an apply (%d) to be restored", i+1), caBundleMatches)
		t.Logf("caBundles restored %v after apply %d", time.Since(cleared).Round(10*time.Millisecond), i+1)
	}
	first, err := secrets.Get(ctx, "leaseguard-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// Deleting the CA Secret: a new CA, new serving certificate, new caBundle.
	if err := secrets.Delete(ctx, "leaseguard-ca", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "a new CA", func() error {
		s, err := secrets.Get(ctx, "leaseguard-ca", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if bytes.Equal(s.Data["ca.crt"], first.Data["ca.crt"]) {
			return fmt.Errorf("still the old CA")
		}
		return nil
	})
	eventually(t, 60*time.Second, "the caBundles to follow the new CA", caBundleMatches)
	eventually(t, 30*time.Second, "the API server to reach leaseguard with the new CA", write)

	// A CA Secret overwritten with garbage is replaced by a valid CA too.
	broken, err := secrets.Get(ctx, "leaseguard-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	beforeGarbage := broken.Data["ca.crt"]
	broken.Data = map[string][]byte{"ca.crt": []byte("garbage"), "tls.crt": []byte("garbage"), "tls.key": []byte("garbage")}
	if _, err := secrets.Update(ctx, broken, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "a valid CA to replace the garbage", func() error {
		s, err := secrets.Get(ctx, "leaseguard-ca", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if bytes.Equal(s.Data["ca.crt"], []byte("garbage")) || bytes.Equal(s.Data["ca.crt"], beforeGarbage) {
			return fmt.Errorf("CA Secret not regenerated yet")
		}
		return nil
	})
	eventually(t, 60*time.Second, "the caBundles to follow the regenerated CA", caBundleMatches)
	eventually(t, 30*time.Second, "the API server to reach leaseguard after the garbage", write)

	// The 30s serving certificate is renewed before it expires.
	served, err := servedCertificate(addr)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 45*time.Second, "the serving certificate to be renewed", func() error {
		now, err := servedCertificate(addr)
		if err != nil {
			return err
		}
		if now.SerialNumber.Cmp(served.SerialNumber) == 0 {
			return fmt.Errorf("still serving serial %s (expires %s)", served.SerialNumber, served.NotAfter)
		}
		return nil
	})
	if err := write(); err != nil {
		t.Fatalf("after renewal: %v", err)
	}
}
