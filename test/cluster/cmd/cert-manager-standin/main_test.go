package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"path/filepath"
	"testing"

	"github.com/leaseguard/leaseguard/test/certmanager"
)

// The Secret's certificate must be what a TLS client of the webhook
// Service accepts with ca.crt as its only root: the caBundle the injector
// copies is that ca.crt.
func TestSelfSignedServesItsDNSNamesWithItselfAsCA(t *testing.T) {
	cert, err := certmanager.Certificate(filepath.Join("..", "..", "..", ".."))
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
