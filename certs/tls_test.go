package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeKeyPair(t *testing.T, dir string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	must(t, os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func apply(opts []func(*tls.Config)) *tls.Config {
	c := &tls.Config{}
	for _, o := range opts {
		o(c)
	}
	return c
}

func TestFileSourceSettings(t *testing.T) {
	dir := t.TempDir()
	writeKeyPair(t, dir)

	opts, err := (&FileSource{Dir: dir}).TLSOptions()
	must(t, err)
	c := apply(opts)
	if c.MinVersion != tls.VersionTLS12 {
		t.Errorf("MinVersion = %x, want TLS 1.2", c.MinVersion)
	}
	if c.ClientAuth != tls.NoClientCert || c.GetCertificate != nil {
		t.Errorf("without --client-ca: ClientAuth %v, GetCertificate set %v", c.ClientAuth, c.GetCertificate != nil)
	}

	// --client-ca: the API server's client certificate is required and verified.
	opts, err = (&FileSource{Dir: dir, Clients: ClientAuth{CAFile: filepath.Join(dir, "tls.crt")}}).TLSOptions()
	must(t, err)
	if c := apply(opts); c.ClientAuth != tls.RequireAndVerifyClientCert || c.ClientCAs == nil {
		t.Errorf("with --client-ca: ClientAuth %v, ClientCAs set %v", c.ClientAuth, c.ClientCAs != nil)
	}
}

func TestFileSourceBadInputNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	writeKeyPair(t, dir)
	garbage := filepath.Join(dir, "garbage.pem")
	must(t, os.WriteFile(garbage, []byte("not a certificate"), 0o600))
	empty := t.TempDir()
	corrupt := t.TempDir()
	must(t, os.WriteFile(filepath.Join(corrupt, "tls.crt"), []byte("junk"), 0o600))
	must(t, os.WriteFile(filepath.Join(corrupt, "tls.key"), []byte("junk"), 0o600))

	cases := []struct {
		name string
		src  *FileSource
		want string
	}{
		{"missing key pair", &FileSource{Dir: empty}, "serving certificate " + filepath.Join(empty, "tls.crt") + " / key " + filepath.Join(empty, "tls.key") + ": open "},
		{"corrupt key pair", &FileSource{Dir: corrupt}, "serving certificate " + filepath.Join(corrupt, "tls.crt") + " / key " + filepath.Join(corrupt, "tls.key") + ": tls: failed to find any PEM data"},
		{"missing client CA", &FileSource{Dir: dir, Clients: ClientAuth{CAFile: filepath.Join(dir, "nope.pem")}}, "client CA: open " + filepath.Join(dir, "nope.pem")},
		{"garbage client CA", &FileSource{Dir: dir, Clients: ClientAuth{CAFile: garbage}}, "client CA " + garbage + ": no PEM certificate found"},
		{"names without a client CA", &FileSource{Dir: dir, Clients: ClientAuth{Names: []string{"kube-apiserver"}}}, "client certificate names are set, but no client CA to verify them with"},
		{"an empty client name", &FileSource{Dir: dir, Clients: ClientAuth{CAFile: filepath.Join(dir, "tls.crt"), Names: []string{""}}}, "client certificate names: an empty name would accept no certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.src.TLSOptions()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestSelfManagedNeedsItsSettings(t *testing.T) {
	cases := []struct {
		name string
		src  *SelfManaged
		want string
	}{
		{"no secret", &SelfManaged{DNSNames: []string{"x"}}, "need the CA Secret's namespace and name"},
		{"no DNS names", &SelfManaged{Namespace: "ns", SecretName: "ca"}, "need the webhook Service's DNS names"},
		{"no API access", &SelfManaged{Namespace: "ns", SecretName: "ca", DNSNames: []string{"x"}}, "need access to the API server"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.src.TLSOptions(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
