package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The Secret's certificate must be what a TLS client of the webhook
// Service accepts with ca.crt as its only root: the caBundle the injector
// copies is that ca.crt.
func TestSelfSignedServesItsDNSNamesWithItselfAsCA(t *testing.T) {
	cert, err := certificate(filepath.Join("..", "..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	crtPEM, keyPEM, err := selfSigned(cert.Spec.DNSNames)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(crtPEM, keyPEM); err != nil {
		t.Fatalf("tls.crt and tls.key do not pair: %v", err)
	}
	block, _ := pem.Decode(crtPEM)
	parsed, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(parsed)
	for _, name := range cert.Spec.DNSNames {
		if _, err := parsed.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("a client with ca.crt as its root refuses %s: %v", name, err)
		}
	}
	if _, err := parsed.Verify(x509.VerifyOptions{DNSName: "leaseguard-webhook-service.other.svc", Roots: roots}); err == nil {
		t.Error("the certificate is accepted for a name the Certificate does not list")
	}
}

// A field the stand-in does not know in config/certmanager's Certificate
// is an error naming the file, not a request silently dropped.
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
	_, err := certificate(repo)
	if err == nil || !strings.Contains(err.Error(), "certificate.yaml") || !strings.Contains(err.Error(), "dnsNamez") {
		t.Fatalf("got %v, want an error naming certificate.yaml and the unknown field dnsNamez", err)
	}
}
