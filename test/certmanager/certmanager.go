// Package certmanager is the part of cert-manager that leaseguard's tests
// run where cert-manager's own controller images cannot be pulled: its real
// CA injector (pkg/controller/cainjector, from the pinned module) for the two
// webhook configurations, and config/certmanager's Certificate read as the
// issuing controller would read it. test/certs runs it against a local
// control plane; test/cluster's cert-manager-standin against kind.
package certmanager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/leaseguard/leaseguard/test/controlplane"
)

// Certificate reads config/certmanager's Certificate below repoRoot,
// strictly: a field this code does not know is an error naming the file,
// not a request silently dropped.
func Certificate(repoRoot string) (*cmapi.Certificate, error) {
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
			if len(c.Spec.DNSNames) == 0 || c.Spec.SecretName == "" {
				return nil, fmt.Errorf("%s: the Certificate names no DNS names or no Secret", path)
			}
			return c, nil
		}
	}
	return nil, fmt.Errorf("%s: no Certificate", path)
}

// NewCAInjector sets up cert-manager's CA injector as its own binary does,
// for the validating and mutating webhook configurations; Start runs it.
func NewCAInjector(ctx context.Context, cfg *rest.Config) (ctrl.Manager, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := cmapi.AddToScheme(scheme); err != nil {
		return nil, err
	}
	// The injector names its server-side-apply field manager after the
	// client's user agent, as in its own deployment.
	injectorConfig := rest.CopyConfig(cfg)
	injectorConfig.UserAgent = "cert-manager-cainjector/" + controlplane.CertManagerVersion
	mgr, err := ctrl.NewManager(injectorConfig, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Client:                 client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		return nil, err
	}
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			// The injector's own names for the kinds it reconciles.
			"validatingwebhookconfiguration": true,
			"mutatingwebhookconfiguration":   true,
		},
	}); err != nil {
		return nil, err
	}
	return mgr, nil
}
