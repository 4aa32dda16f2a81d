package certmanager

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCertificateReadsTheRepositorysCertificate(t *testing.T) {
	c, err := Certificate(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if c.Spec.SecretName != "leaseguard-webhook-server-cert" || len(c.Spec.DNSNames) == 0 {
		t.Fatalf("got Secret %q, DNS names %v", c.Spec.SecretName, c.Spec.DNSNames)
	}
}

// A field this code does not know in config/certmanager's Certificate is an
// error naming the file and the field, not a request silently dropped.
func TestCertificateRefusesAFieldItDoesNotKnow(t *testing.T) {
	repo := t.TempDir()
	dir := filepath.Join(repo, "config", "certmanager")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	doc := "apiVersion: cert-manager.io/v1\nkind: Certificate\nmetadata:\n  name: c\nspec:\n  secretName: s\n  dnsNames: [a.svc]\n  issuerRef: {name: i}\n  dnsNamez: [typo]\n"
	if err := os.WriteFile(filepath.Join(dir, "certificate.yaml"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Certificate(repo)
	if err == nil || !strings.Contains(err.Error(), "certificate.yaml") || !strings.Contains(err.Error(), "dnsNamez") {
		t.Fatalf("got %v, want an error naming certificate.yaml and the unknown field dnsNamez", err)
	}
}
