package localcluster

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/leaseguard/leaseguard/test/controlplane"
)

// cert-manager's own images cannot be pulled here, so for the cert-manager
// overlay (config/e2e) the harness plays cert-manager's issuing controller
// (it writes the Certificate's Secret, signed by the cluster CA) and runs
// cert-manager's real CA injector (pkg/controller/cainjector) on the node,
// as test/certs does against the local control plane.

// certManagerCertificate reads config/certmanager's Certificate.
func certManagerCertificate(repoRoot string) (*cmapi.Certificate, error) {
	path := filepath.Join(repoRoot, "config", "certmanager", "certificate.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		if strings.Contains(doc, "kind: Certificate\n") {
			c := &cmapi.Certificate{}
			if err := yaml.UnmarshalStrict([]byte(doc), c); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			return c, nil
		}
	}
	return nil, fmt.Errorf("%s: no Certificate", path)
}

// IssueCertManagerSecret writes the Secret cert-manager would issue for
// leaseguard's Certificate, into leaseguard's namespace (made when missing,
// after a previous installation's is gone).
func IssueCertManagerSecret(ctx context.Context, s State, repoRoot string) error {
	cert, err := certManagerCertificate(repoRoot)
	if err != nil {
		return err
	}
	cs, err := s.AdminClient()
	if err != nil {
		return err
	}
	const ns = "leaseguard-system"
	if err := waitFor(ctx, "namespace "+ns, 3*time.Minute, nil, func() string { return "" }, func() error {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			got, gerr := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if gerr == nil && got.DeletionTimestamp == nil {
				return nil
			}
			return errors.New("the previous installation's namespace is still being deleted")
		}
		return err
	}); err != nil {
		return err
	}
	p, err := loadPKI(s.path("pki"))
	if err != nil {
		return err
	}
	if err := p.issue("cert-manager-serving", cert.Spec.DNSNames[0], nil, cert.Spec.DNSNames...); err != nil {
		return err
	}
	var data = map[string][]byte{}
	for key, file := range map[string]string{"tls.crt": "cert-manager-serving.crt", "tls.key": "cert-manager-serving.key", "ca.crt": "ca.crt"} {
		if data[key], err = os.ReadFile(p.path(file)); err != nil {
			return err
		}
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: cert.Spec.SecretName,
			Annotations: map[string]string{cmapi.CertificateNameKey: cert.Name}},
		Type: corev1.SecretTypeTLS,
		Data: data,
	}
	_, err = cs.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{})
	return err
}

// loadPKI reads the cluster CA written by Up.
func loadPKI(dir string) (*pki, error) {
	p := &pki{dir: dir}
	crtPEM, err := os.ReadFile(p.path("ca.crt"))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(p.path("ca.key"))
	if err != nil {
		return nil, err
	}
	crtBlock, _ := pem.Decode(crtPEM)
	keyBlock, _ := pem.Decode(keyPEM)
	if crtBlock == nil || keyBlock == nil {
		return nil, fmt.Errorf("%s: unreadable CA", dir)
	}
	if p.caCert, err = x509.ParseCertificate(crtBlock.Bytes); err != nil {
		return nil, err
	}
	if p.caKey, err = x509.ParseECPrivateKey(keyBlock.Bytes); err != nil {
		return nil, err
	}
	return p, nil
}

// RunCAInjector runs cert-manager's CA injector against the cluster, for
// the two webhook configurations, until ctx ends.
func RunCAInjector(ctx context.Context, s State) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", s.AdminKubeconfig())
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := cmapi.AddToScheme(scheme); err != nil {
		return err
	}
	// Its server-side-apply field manager is named after the user agent,
	// as in its own deployment.
	injectorConfig := rest.CopyConfig(cfg)
	injectorConfig.UserAgent = "cert-manager-cainjector/" + controlplane.CertManagerVersion
	mgr, err := ctrl.NewManager(injectorConfig, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Client:                 client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		return err
	}
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			"validatingwebhookconfiguration": true,
			"mutatingwebhookconfiguration":   true,
		},
	}); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// StartCAInjector runs `self cainjector` as a recorded component.
func StartCAInjector(s State, self string, args ...string) error {
	_, _, err := s.Start("cert-manager-cainjector", self, append([]string{"cainjector"}, args...)...)
	return err
}
