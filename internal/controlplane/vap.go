package controlplane

import (
	"context"
	"fmt"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/leaseguard/leaseguard/webhook/render/manifests"
	"github.com/leaseguard/leaseguard/webhook/render/vap"
)

// StartWithoutWebhooks starts kube-apiserver and etcd with the
// MultiClusterLease CRD and lease access for every user, and installs no
// webhook configuration: for admission that runs inside the API server
// alone, such as the ValidatingAdmissionPolicies of `leaseguard vap`
// (InstallVAP). Options other than AssetsDir and Log are ignored.
func StartWithoutWebhooks(o Options) (*ControlPlane, error) {
	env, assets, err := newEnvironment(o)
	if err != nil {
		return nil, err
	}
	cfg, err := startEnv(env, o.Log, assets)
	if err != nil {
		return nil, err
	}
	return &ControlPlane{Env: env, Config: cfg, KubectlPath: filepath.Join(assets, "kubectl")}, nil
}

// InstallVAP creates the rendered ValidatingAdmissionPolicies, their
// bindings and, when rendered, the coalescing MutatingAdmissionPolicy. The
// API server enforces them shortly after; callers that need them enforced
// probe with a write they refuse. (Their status, with the type checking,
// is written by kube-controller-manager, which this control plane does
// not run.)
func InstallVAP(ctx context.Context, cfg *rest.Config, r *vap.Rendered) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	api := cs.AdmissionregistrationV1()
	if r.Coalescing != nil {
		if err := InstallAdmissionPolicies(ctx, cfg, &manifests.Rendered{Coalescing: r.Coalescing, CoalescingBinding: r.CoalescingBinding}); err != nil {
			return err
		}
	}
	for _, p := range r.Policies {
		if _, err := api.ValidatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("installing %s: %w", p.Name, err)
		}
	}
	for _, b := range r.Bindings {
		if _, err := api.ValidatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("installing %s: %w", b.Name, err)
		}
	}
	return nil
}
