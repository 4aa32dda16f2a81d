package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// AdmissionClientName is the Common Name of the client certificate the
// harness's API server presents to webhooks, and what leaseguard is told to
// accept (--client-name), as a cluster administrator configures it.
const AdmissionClientName = "kube-apiserver-admission"

// AdmissionClient is the identity the API server presents to webhooks: a
// CA of its own and a client certificate it signs, given to kube-apiserver
// through --admission-control-config-file (a WebhookAdmissionConfiguration
// whose kubeconfig holds the certificate for every webhook, user "*").
type AdmissionClient struct {
	// Dir holds ca.crt, client.crt, client.key,
	// admission-client.kubeconfig and admission-configuration.yaml.
	Dir string
	// CAFile is what leaseguard verifies the API server with (--client-ca).
	CAFile string
	// ConfigFile is kube-apiserver's --admission-control-config-file.
	ConfigFile string
	ca         *x509.Certificate
	caKey      *ecdsa.PrivateKey
	cert       tls.Certificate
}

// NewAdmissionClient makes the identity in dir.
func NewAdmissionClient(dir string) (*AdmissionClient, error) {
	a := &AdmissionClient{Dir: dir, CAFile: filepath.Join(dir, "ca.crt"), ConfigFile: filepath.Join(dir, "admission-configuration.yaml")}
	var err error
	a.ca, a.caKey, err = newCert("leaseguard-test-admission-client-ca", nil, nil)
	if err != nil {
		return nil, err
	}
	a.cert, err = a.Sign(AdmissionClientName)
	if err != nil {
		return nil, err
	}
	certFile, keyFile := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	keyDER, err := x509.MarshalECPrivateKey(a.cert.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		return nil, err
	}
	for path, data := range map[string][]byte{
		a.CAFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.ca.Raw}),
		certFile: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.cert.Certificate[0]}),
		keyFile:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	if err := WriteAdmissionConfiguration(a.ConfigFile, certFile, keyFile); err != nil {
		return nil, err
	}
	return a, nil
}

// WriteAdmissionConfiguration writes kube-apiserver's
// --admission-control-config-file at path, and the kubeconfig beside it
// (admission-client.kubeconfig), so that the API server presents the client
// certificate certFile/keyFile to every webhook it calls (user "*": by URL
// or by Service), as an administrator configures it for leaseguard's
// --client-ca (docs/operations.md).
func WriteAdmissionConfiguration(path, certFile, keyFile string) error {
	kubeconfig := filepath.Join(filepath.Dir(path), "admission-client.kubeconfig")
	data := fmt.Sprintf(`apiVersion: v1
kind: Config
users:
- name: "*"
  user:
    client-certificate: %s
    client-key: %s
`, certFile, keyFile)
	if err := os.WriteFile(kubeconfig, []byte(data), 0o600); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n")
	for _, plugin := range []string{"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"} {
		fmt.Fprintf(&b, "- name: %s\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: %s\n", plugin, kubeconfig)
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

// Sign issues a client certificate with this Common Name from the API
// server's client CA: what a test needs to post reviews as the API server
// would, or as a client that has the CA's signature but not the name.
func (a *AdmissionClient) Sign(commonName string) (tls.Certificate, error) {
	cert, key, err := newCert(commonName, a.ca, a.caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}, nil
}

// Certificate is the API server's own client certificate.
func (a *AdmissionClient) Certificate() tls.Certificate { return a.cert }

// LeaseguardArgs are the flags that make leaseguard accept only the API
// server's certificate.
func (a *AdmissionClient) LeaseguardArgs() []string {
	return []string{"--client-ca", a.CAFile, "--client-name", AdmissionClientName}
}

// newCert makes a CA (parent nil) or a client certificate signed by parent.
func newCert(commonName string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
	}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	} else {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, key.Public(), signerKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}
