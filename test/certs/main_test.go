// Package certs tests leaseguard's serving-certificate modes through a real
// API server: it only calls a webhook whose certificate it can verify, so a
// write refused with leaseguard's message proves the chain works.
package certs

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/leaseguard/leaseguard/test/controlplane"
)

const (
	intruder = "system:serviceaccount:default:intruder"
	// The configurations installed are those `leaseguard manifests`
	// renders for this policy (controlplane.Options.Policy).
	policy = `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
rules:
- name: guarded
  resources: [leases]
  namespaces: [certs-guarded]
  managers: ["system:serviceaccount:certs-guarded:manager"]
  # designation: auto, so that the mutating webhook configuration is
  # rendered too and both get their CA injected.
  designation: auto
`
	// wantDenial is what a write by the intruder gets when the API server
	// reached leaseguard; with failurePolicy Ignore, a webhook it cannot
	// verify lets the write through instead.
	wantDenial = "leaseguard: rule guarded: " + intruder + " is not a manager of lease certs-guarded/"
)

var binary string

func TestMain(m *testing.M) {
	tmp, err := os.MkdirTemp("", "leaseguard-certs-")
	if err != nil {
		panic(err)
	}
	reaped := controlplane.ReapChildrenOnExit()
	code := func() int {
		defer reaped()
		defer os.RemoveAll(tmp)
		var err error
		if binary, err = buildLeaseguard(tmp); err != nil {
			println("building leaseguard:", err.Error())
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

func writePolicy(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(p, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func createNamespace(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// intruderWrite tries a lease create as a non-manager: nil means it was
// refused by leaseguard, as it must be when the webhook is reachable.
func intruderWrite(ctx context.Context, cfg *rest.Config, name string) error {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: intruder}
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return err
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "certs-guarded", Name: name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("x")}}
	_, err = cs.CoordinationV1().Leases("certs-guarded").Create(ctx, lease, metav1.CreateOptions{})
	switch {
	case err == nil:
		return errors.New("write admitted: the API server did not reach leaseguard")
	case !strings.Contains(err.Error(), wantDenial):
		return err
	}
	return nil
}

// servedCertificate dials the webhook and returns the leaf it serves.
func servedCertificate(addr string) (*x509.Certificate, error) {
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: "localhost"}) //nolint:gosec // only reading the certificate
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// testCA is a CA of the test's own, to issue and rotate serving certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "leaseguard-test-ca"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue writes a serving key pair for localhost and 127.0.0.1 into dir
// atomically (write, then rename), as a Secret volume update does.
func (ca *testCA) issue(t *testing.T, dir string, serial int64) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaseguard"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writeAtomically(t, filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	writeAtomically(t, filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func writeAtomically(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func eventually(t *testing.T, timeout time.Duration, what string, ok func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := ok()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
