// Command cert-manager-standin plays cert-manager for leaseguard's
// cert-manager overlay (config/e2e) on a cluster where cert-manager's
// controller images cannot be pulled (the kind stage here; with a registry,
// hack/kind installs the real cert-manager instead):
//
//	cert-manager-standin issue --kubeconfig K [--repo DIR]  # the Secret cert-manager's selfSigned issuer would write
//	cert-manager-standin cainjector --kubeconfig K          # cert-manager's real CA injector, until SIGTERM
//
// `issue` does the issuing controller's one job for config/certmanager's
// Certificate: a self-signed ECDSA P-256 certificate for its DNS names, in a
// kubernetes.io/tls Secret whose ca.crt is the certificate itself, as the
// selfSigned issuer writes it. `cainjector` runs cert-manager's own injector
// (pkg/controller/cainjector, the module's code, not a copy) for the webhook
// configurations, so the caBundle the API server trusts comes from the path
// operators run.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/leaseguard/leaseguard/test/certmanager"
)

// namespace is config/default's.
const namespace = "leaseguard-system"

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "issue" && os.Args[1] != "cainjector") {
		fmt.Fprintln(os.Stderr, "usage: cert-manager-standin issue|cainjector --kubeconfig FILE [--repo DIR]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("cert-manager-standin "+os.Args[1], flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "the cluster's administrator kubeconfig (required)")
	repo := fs.String("repo", ".", "the leaseguard repository, whose config/certmanager/certificate.yaml is issued")
	_ = fs.Parse(os.Args[2:])
	if *kubeconfig == "" {
		fail(errors.New("--kubeconfig is required"))
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch os.Args[1] {
	case "issue":
		err = issue(ctx, cfg, *repo)
	case "cainjector":
		err = runCAInjector(ctx, cfg)
	}
	if err != nil {
		fail(fmt.Errorf("%s: %w", os.Args[1], err))
	}
}

// issue writes the Secret of config/certmanager's Certificate into
// leaseguard's namespace (made when missing, once a previous installation's
// is gone).
func issue(ctx context.Context, cfg *rest.Config, repo string) error {
	cert, err := certmanager.Certificate(repo)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
		if err == nil {
			return true, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return false, err
		}
		got, err := cs.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		return err == nil && got.DeletionTimestamp == nil, nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s (a previous installation's still being deleted?): %w", namespace, err)
	}
	crt, key, err := selfSigned(cert.Spec.DNSNames)
	if err != nil {
		return err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: cert.Spec.SecretName,
			Annotations: map[string]string{cmapi.CertificateNameKey: cert.Name}},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": crt},
	}
	if _, err := cs.CoreV1().Secrets(namespace).Create(ctx, secret, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		_, err = cs.CoreV1().Secrets(namespace).Update(ctx, secret, metav1.UpdateOptions{})
		return err
	} else if err != nil {
		return err
	}
	fmt.Printf("cert-manager-standin: issued Secret %s/%s for %s\n", namespace, cert.Spec.SecretName, strings.Join(cert.Spec.DNSNames, ", "))
	return nil
}

// selfSigned makes the certificate cert-manager's selfSigned issuer makes
// for an ECDSA 256 Certificate: its own CA, the DNS names as SANs, the
// first one as common name.
func selfSigned(dnsNames []string) (crtPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: dnsNames[0]},
		DNSNames:              dnsNames,
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// runCAInjector runs cert-manager's CA injector for the two webhook
// configurations until ctx ends.
func runCAInjector(ctx context.Context, cfg *rest.Config) error {
	mgr, err := certmanager.NewCAInjector(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Println("cert-manager-standin: CA injector running")
	return mgr.Start(ctx)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "cert-manager-standin: %v\n", err)
	os.Exit(1)
}
