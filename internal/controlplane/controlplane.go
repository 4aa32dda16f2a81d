// Package controlplane starts a real kube-apiserver and etcd (through
// controller-runtime's envtest) with leaseguard's CRD and webhook
// configurations from config/ installed, pointed at a local webhook server.
// `leaseguard dev` and the integration and e2e tests share it.
package controlplane

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/leaseguard/leaseguard/config"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

// KubernetesVersion is the version of the control-plane binaries built by
// `make controlplane` (pinned in test/tools/go.mod).
const KubernetesVersion = "v1.37.2"

// AssetsDir returns the folder holding kube-apiserver, etcd and kubectl:
// $KUBEBUILDER_ASSETS when set, else the build cache of `make controlplane`
// under the repository root.
func AssetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, checkAssets(dir)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "bin", "controlplane", KubernetesVersion)
	return dir, checkAssets(dir)
}

func checkAssets(dir string) error {
	for _, name := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("control-plane binary %s not found in %s: run `make controlplane` (builds %s from source, minutes on a cold cache) or set KUBEBUILDER_ASSETS", name, dir, KubernetesVersion)
		}
	}
	return nil
}

// RepoRoot finds the repository root from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "config", "embed.go")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("not inside the leaseguard repository (no config/embed.go above the working directory)")
		}
		dir = parent
	}
}

// Options configure the control plane.
type Options struct {
	// AssetsDir holds the binaries; AssetsDir() when empty.
	AssetsDir string
	// WebhookPort is where the webhook server will listen on 127.0.0.1;
	// a free port when 0.
	WebhookPort int
	// Log receives the control plane's output when set.
	Log io.Writer
	// WebhookHostName is the host the API server calls the webhook at
	// (default 127.0.0.1); "localhost" suits certificates with DNS names only.
	WebhookHostName string
	// WebhookCAData and WebhookCertDir bring a CA and serving key pair of the
	// caller's instead of generated ones.
	WebhookCAData  []byte
	WebhookCertDir string
	// Policy is the policy file whose admission configuration is installed,
	// rendered by `leaseguard manifests` (webhook/render/manifests); the embedded
	// config/samples/policy.yaml when empty.
	Policy string
	// Manifests tunes that rendering (coalescing, fail-open); the service
	// placement is the harness's.
	Manifests manifests.Options
	// SkipAdmission installs no admission configuration at all (the serving
	// key pair and CA are still made): for callers that install their own,
	// such as the benchmark through the API server.
	SkipAdmission bool
	// APIServerFlags are kube-apiserver flags on top of the harness's
	// (feature gates, runtime config), each set to its value.
	APIServerFlags map[string]string
}

// ControlPlane is a running kube-apiserver and etcd.
type ControlPlane struct {
	Env *envtest.Environment
	// Config is a system:masters client config.
	Config *rest.Config
	// WebhookHost, WebhookPort and WebhookCertDir are where the API server
	// expects the webhook server, and its serving key pair (tls.crt, tls.key).
	WebhookHost    string
	WebhookPort    int
	WebhookCertDir string
	KubectlPath    string
	// AdmissionClient is the client certificate the API server presents
	// to webhooks.
	AdmissionClient *AdmissionClient
	// caData is the caller's CA, when it brought one.
	caData []byte
}

// Start starts etcd and kube-apiserver, installs the MultiClusterLease CRD
// and the admission configuration rendered from the policy (o.Policy), its
// webhooks rewritten to call https://127.0.0.1:<port> with a generated CA.
func Start(o Options) (*ControlPlane, error) {
	env, assets, err := newEnvironment(o)
	if err != nil {
		return nil, err
	}
	rendered, err := renderPolicy(o)
	if err != nil {
		return nil, err
	}
	var mutating []*admissionregistrationv1.MutatingWebhookConfiguration
	var validating []*admissionregistrationv1.ValidatingWebhookConfiguration
	if o.SkipAdmission {
		rendered = &manifests.Rendered{}
	} else {
		if rendered.Mutating != nil {
			mutating = append(mutating, rendered.Mutating)
		}
		validating = append(validating, rendered.Validating)
	}
	env.WebhookInstallOptions = envtest.WebhookInstallOptions{
		MutatingWebhooks:             mutating,
		ValidatingWebhooks:           validating,
		LocalServingHost:             "127.0.0.1",
		LocalServingPort:             o.WebhookPort,
		LocalServingHostExternalName: o.WebhookHostName,
	}
	// The API server authenticates itself to webhooks with a client
	// certificate, and leaseguard started by StartLeaseguard accepts only
	// that one, as shipped clusters should be configured (docs/security.md).
	clientDir, err := os.MkdirTemp("", "leaseguard-admission-client-")
	if err != nil {
		return nil, err
	}
	admissionClient, err := NewAdmissionClient(clientDir)
	if err != nil {
		_ = os.RemoveAll(clientDir)
		return nil, fmt.Errorf("the API server's admission client certificate: %w", err)
	}
	env.ControlPlane.GetAPIServer().Configure().Set("admission-control-config-file", admissionClient.ConfigFile)
	for flag, value := range o.APIServerFlags {
		env.ControlPlane.GetAPIServer().Configure().Set(flag, value)
	}
	cfg, err := startEnv(env, o.Log, assets)
	if err != nil {
		_ = os.RemoveAll(clientDir)
		return nil, err
	}
	if err := InstallAdmissionPolicies(context.Background(), cfg, rendered); err != nil {
		_ = env.Stop()
		return nil, err
	}
	c := &ControlPlane{
		Env:             env,
		Config:          cfg,
		WebhookHost:     env.WebhookInstallOptions.LocalServingHost,
		WebhookPort:     env.WebhookInstallOptions.LocalServingPort,
		WebhookCertDir:  env.WebhookInstallOptions.LocalServingCertDir,
		KubectlPath:     filepath.Join(assets, "kubectl"),
		AdmissionClient: admissionClient,
	}
	c.caData = o.WebhookCAData
	if len(o.WebhookCAData) > 0 {
		// envtest always makes its own CA; trust the caller's instead.
		if err := SetCABundle(context.Background(), cfg, o.WebhookCAData); err != nil {
			_ = env.Stop()
			return nil, err
		}
		c.WebhookCertDir = o.WebhookCertDir
	}
	return c, nil
}

// newEnvironment is the envtest environment of o's binaries (AssetsDir by
// default) with leaseguard's CRDs, not started.
func newEnvironment(o Options) (env *envtest.Environment, assets string, err error) {
	if assets = o.AssetsDir; assets == "" {
		if assets, err = AssetsDir(); err != nil {
			return nil, "", err
		}
	}
	crds, err := config.CRDs()
	if err != nil {
		return nil, "", err
	}
	return &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDInstallOptions:        envtest.CRDInstallOptions{CRDs: crds},
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}, assets, nil
}

// startEnv starts kube-apiserver and etcd, sending the API server's output
// to log when set, and grants the tests' identities lease access.
func startEnv(env *envtest.Environment, log io.Writer, assets string) (*rest.Config, error) {
	if log != nil {
		env.ControlPlane.GetAPIServer().Out = log
		env.ControlPlane.GetAPIServer().Err = log
	}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", assets, err)
	}
	if err := GrantLeaseAccess(context.Background(), cfg); err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("granting lease access: %w", err)
	}
	return cfg, nil
}

// renderPolicy renders the admission configuration of o.Policy.
func renderPolicy(o Options) (*manifests.Rendered, error) {
	var data []byte
	var err error
	if o.Policy == "" {
		data, err = config.Files.ReadFile(config.SamplePolicyPath)
	} else {
		data, err = os.ReadFile(o.Policy)
	}
	if err != nil {
		return nil, err
	}
	mo := o.Manifests
	def := manifests.Defaults()
	if mo.Namespace == "" {
		mo.Namespace = def.Namespace
	}
	mo.ServiceName, mo.Prefix = def.ServiceName, def.Prefix
	p, err := policyfile.Parse(data, policy.CompileOptions{OwnNamespace: mo.Namespace})
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", o.Policy, err)
	}
	return manifests.Render(p, mo)
}

// InstallAdmission renders the admission configuration of the policy file
// at path and puts it in place of what is installed, as `make manifests` and
// an apply do in a cluster: after a change to the rules' selection, the
// webhooks must be told which writes to send.
func (c *ControlPlane) InstallAdmission(ctx context.Context, path string, mo manifests.Options) error {
	url := "https://" + net.JoinHostPort(c.WebhookHost, strconv.Itoa(c.WebhookPort))
	ca := c.caData
	if len(ca) == 0 {
		ca = c.CAData()
	}
	def := manifests.Defaults()
	mo.Namespace, mo.ServiceName, mo.Prefix, mo.URL, mo.CABundle = def.Namespace, "", def.Prefix, url, ca
	if mo.Coalescing == "" {
		mo.Coalescing = def.Coalescing
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	p, err := policyfile.Parse(data, policy.CompileOptions{OwnNamespace: mo.Namespace})
	if err != nil {
		return err
	}
	rendered, err := manifests.Render(p, mo)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	api := cs.AdmissionregistrationV1()
	v := rendered.Validating
	// A leaseguard keeping its own configuration (--manage-webhook-
	// configurations) may write it between the Get and the Update.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		old, err := api.ValidatingWebhookConfigurations().Get(ctx, v.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = api.ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		v.ResourceVersion = old.ResourceVersion
		_, err = api.ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return err
	}
	mutatingName := mo.Prefix + "-mutating-webhook-configuration"
	_ = api.MutatingWebhookConfigurations().Delete(ctx, mutatingName, metav1.DeleteOptions{})
	if m := rendered.Mutating; m != nil {
		if _, err := api.MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	coalesce, renewals := mo.Prefix+"-coalesce-renewals", mo.Prefix+"-renewals"
	_ = api.MutatingAdmissionPolicyBindings().Delete(ctx, coalesce, metav1.DeleteOptions{})
	_ = api.MutatingAdmissionPolicies().Delete(ctx, coalesce, metav1.DeleteOptions{})
	_ = api.ValidatingAdmissionPolicyBindings().Delete(ctx, renewals, metav1.DeleteOptions{})
	_ = api.ValidatingAdmissionPolicies().Delete(ctx, renewals, metav1.DeleteOptions{})
	return InstallAdmissionPolicies(ctx, c.Config, rendered)
}

// RemoveAdmission deletes the admission configuration named with prefix:
// leaseguard no longer sees any write.
func (c *ControlPlane) RemoveAdmission(ctx context.Context, prefix string) error {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	api := cs.AdmissionregistrationV1()
	for _, err := range []error{
		api.ValidatingWebhookConfigurations().Delete(ctx, prefix+"-validating-webhook-configuration", metav1.DeleteOptions{}),
		api.MutatingWebhookConfigurations().Delete(ctx, prefix+"-mutating-webhook-configuration", metav1.DeleteOptions{}),
		api.MutatingAdmissionPolicyBindings().Delete(ctx, prefix+"-coalesce-renewals", metav1.DeleteOptions{}),
		api.MutatingAdmissionPolicies().Delete(ctx, prefix+"-coalesce-renewals", metav1.DeleteOptions{}),
		api.ValidatingAdmissionPolicyBindings().Delete(ctx, prefix+"-renewals", metav1.DeleteOptions{}),
		api.ValidatingAdmissionPolicies().Delete(ctx, prefix+"-renewals", metav1.DeleteOptions{}),
	} {
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// InstallAdmissionPolicies creates the rendered admission policies and
// their bindings: the MutatingAdmissionPolicy that coalesces renewals and
// the ValidatingAdmissionPolicy that decides plain renewals, where
// rendered.
func InstallAdmissionPolicies(ctx context.Context, cfg *rest.Config, r *manifests.Rendered) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	api := cs.AdmissionregistrationV1()
	if r.Coalescing != nil {
		if _, err := api.MutatingAdmissionPolicies().Create(ctx, r.Coalescing, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("installing %s: %w", r.Coalescing.Name, err)
		}
		if _, err := api.MutatingAdmissionPolicyBindings().Create(ctx, r.CoalescingBinding, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("installing %s: %w", r.CoalescingBinding.Name, err)
		}
	}
	if r.Renewals != nil {
		if _, err := api.ValidatingAdmissionPolicies().Create(ctx, r.Renewals, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("installing %s: %w", r.Renewals.Name, err)
		}
		if _, err := api.ValidatingAdmissionPolicyBindings().Create(ctx, r.RenewalsBinding, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("installing %s: %w", r.RenewalsBinding.Name, err)
		}
	}
	return nil
}

// CAData is the CA that signs the webhook serving certificate of
// WebhookCertDir, for a caBundle.
func (c *ControlPlane) CAData() []byte { return c.Env.WebhookInstallOptions.LocalServingCAData }

// WriteKubeconfig writes a kubeconfig for a system:masters user to path.
func (c *ControlPlane) WriteKubeconfig(path string) error {
	return c.WriteKubeconfigFor(path, "leaseguard-admin", "system:masters")
}

// WriteKubeconfigFor writes a kubeconfig for the user name (a client
// certificate) to path. RBAC treats a name of the form
// system:serviceaccount:<ns>:<name> as that service account, so a process
// run with it has exactly the permissions the shipped roles give it.
func (c *ControlPlane) WriteKubeconfigFor(path, name string, groups ...string) error {
	user, err := c.Env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return err
	}
	data, err := user.KubeConfig()
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// Kubectl returns a kubectl command of the control plane's version against
// the given kubeconfig.
func (c *ControlPlane) Kubectl(kubeconfig string, args ...string) *exec.Cmd {
	return exec.Command(c.KubectlPath, append([]string{"--kubeconfig", kubeconfig}, args...)...)
}

// Stop stops kube-apiserver and etcd and removes their files.
func (c *ControlPlane) Stop() error {
	err := c.Env.Stop()
	if c.AdmissionClient != nil {
		_ = os.RemoveAll(c.AdmissionClient.Dir)
	}
	return err
}
