//go:build dev

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/yaml"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/certs"
	"github.com/leaseguard/leaseguard/config"
	"github.com/leaseguard/leaseguard/internal/controlplane"
	"github.com/leaseguard/leaseguard/internal/devexamples"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
	"github.com/leaseguard/leaseguard/webhook/serve/server"
)

// The demo's designated manager keeps the sample MultiClusterLease fresh, so
// a second manager's write is refused as it would be in a real cluster.
const (
	demoNamespace = devexamples.Namespace
	demoManager   = devexamples.Manager
	demoMCL       = devexamples.MCL
)

func newDevCommand() *cobra.Command {
	var policyPath, kubeconfigOut, assets, metricsAddr, probeAddr string
	var port int
	var demo bool
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run leaseguard on a local control plane (kube-apiserver + etcd), no cluster needed",
		Long: `dev starts kube-apiserver and etcd, installs the MultiClusterLease CRD and
leaseguard's webhook configurations from config/ (pointed at a local webhook
server with a generated CA), serves the webhook with the given policy, writes
an admin kubeconfig and runs until interrupted, then removes what it started.`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	fs.StringVar(&policyPath, "config", "", "LeasePolicy file (default: the embedded config/samples/policy.yaml)")
	fs.StringVar(&kubeconfigOut, "kubeconfig-out", "leaseguard-dev.kubeconfig", "where to write the admin kubeconfig")
	fs.StringVar(&assets, "assets", "", "folder with kube-apiserver, etcd and kubectl (default: $KUBEBUILDER_ASSETS, else bin/controlplane/"+controlplane.KubernetesVersion+")")
	fs.IntVar(&port, "webhook-port", 0, "webhook port on 127.0.0.1 (a free one when 0)")
	fs.StringVar(&metricsAddr, "metrics-bind-address", "127.0.0.1:8080", `address of /metrics ("0" disables)`)
	fs.StringVar(&probeAddr, "health-probe-bind-address", "127.0.0.1:8081", `address of /healthz and /readyz ("0" disables)`)
	fs.BoolVar(&demo, "demo", true, "create namespace "+demoNamespace+" and keep a sample MultiClusterLease renewed by "+demoManager)
	newLogger := loggingFlags(fs, true)

	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		log := newLogger().WithName("leaseguard")
		ctrl.SetLogger(log)
		ctx := ctrl.SetupSignalHandler()
		out := cmd.OutOrStdout()

		tmp, err := os.MkdirTemp("", "leaseguard-dev-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		if policyPath == "" {
			policyPath = filepath.Join(tmp, "policy.yaml")
			data, _ := config.Files.ReadFile(config.SamplePolicyPath)
			if err := os.WriteFile(policyPath, data, 0o600); err != nil {
				return err
			}
		}

		fmt.Fprintln(out, "starting kube-apiserver and etcd ...")
		cp, err := controlplane.Start(controlplane.Options{AssetsDir: assets, WebhookPort: port, Policy: policyPath})
		if err != nil {
			return err
		}
		defer func() {
			fmt.Fprintln(out, "stopping kube-apiserver and etcd ...")
			if err := cp.Stop(); err != nil {
				log.Error(err, "stopping the control plane")
			}
			_ = os.Remove(kubeconfigOut)
		}()
		if err := cp.WriteKubeconfig(kubeconfigOut); err != nil {
			return err
		}

		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		client, err := kubernetes.NewForConfig(cp.Config)
		if err != nil {
			return err
		}
		ready := make(chan struct{})
		serveErr := make(chan error, 1)
		go func() {
			serveErr <- server.Run(ctx, server.Options{
				WebhookHost: cp.WebhookHost, WebhookPort: cp.WebhookPort,
				MetricsBindAddress: metricsAddr, HealthProbeBindAddress: probeAddr,
				PolicyFile: policyPath, PolicyReloadInterval: 2 * time.Second,
				Namespace: "leaseguard-system",
				// Only the API server's reviews, by its client certificate.
				Certs: &certs.FileSource{Dir: cp.WebhookCertDir, Clients: certs.ClientAuth{
					CAFile: cp.AdmissionClient.CAFile, Names: []string{controlplane.AdmissionClientName},
				}},
				Log: log, Ready: func() { close(ready) },
				// Edits of the policy file re-render the webhook
				// configurations, as in a cluster.
				ManageConfiguration: &server.ManageConfiguration{Client: client, Config: cp.Config, Prefix: manifests.Defaults().Prefix},
			})
		}()
		select {
		case err := <-serveErr:
			return err
		case <-ready:
		}

		if demo {
			if err := startDemo(ctx, cp.Config, log.WithName("demo")); err != nil {
				// A server that stopped meanwhile (a port taken between
				// its choice and its use, say) is the cause: say so.
				select {
				case serr := <-serveErr:
					if serr != nil {
						return fmt.Errorf("leaseguard stopped while setting up the demo: %w", serr)
					}
				case <-time.After(2 * time.Second):
				}
				return fmt.Errorf("setting up the demo: %w", err)
			}
		}
		abs, _ := filepath.Abs(kubeconfigOut)
		printTryIt(out, abs, policyPath, metricsAddr, demo)
		fmt.Fprintln(out, "ready")

		select {
		case <-ctx.Done():
			return nil
		case err := <-serveErr:
			return err
		}
	}
	return cmd
}

func printTryIt(out interface{ Write([]byte) (int, error) }, kubeconfig, policyPath, metricsAddr string, demo bool) {
	fmt.Fprintf(out, `
leaseguard is guarding a local kube-apiserver.
  kubeconfig: %s
  policy:     %s (edits are picked up while running)
  metrics:    http://%s/metrics

`, kubeconfig, policyPath, metricsAddr)
	if !demo {
		return
	}
	fmt.Fprintf(out, "%s is the designated manager of multiclusterlease %s/%s\nand renews it every 6s. Try, from the repository root:\n\n", demoManager, demoNamespace, demoMCL)
	for _, e := range devexamples.Examples() {
		fmt.Fprintf(out, "  # %s\n  %s\n\n", e.Comment, strings.ReplaceAll(e.Command("kubectl --kubeconfig "+kubeconfig), "\n", "\n  "))
	}
}

// startDemo creates the demo namespace and MultiClusterLease as the demo
// manager and renews it in the background until ctx ends.
func startDemo(ctx context.Context, admin *rest.Config, log logr.Logger) error {
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demoNamespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	asManager := rest.CopyConfig(admin)
	asManager.Impersonate = rest.ImpersonationConfig{UserName: demoManager}
	dyn, err := dynamic.NewForConfig(asManager)
	if err != nil {
		return err
	}
	mcls := dyn.Resource(mclv1alpha1.GroupVersionResource).Namespace(demoNamespace)
	data, err := config.Files.ReadFile("samples/multiclusterlease.yaml")
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &obj.Object); err != nil {
		return err
	}
	_ = unstructured.SetNestedField(obj.Object, metav1.NowMicro().UTC().Format(metav1.RFC3339Micro), "spec", "renewTime")
	if _, err := mcls.Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	go func() {
		// The first renewal one period after the create, which stamped
		// renewTime (at once it would be refused as too early).
		t := time.NewTicker(6 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			patch := fmt.Sprintf(`{"spec":{"holderIdentity":"cluster-a","renewTime":%q}}`, metav1.NowMicro().UTC().Format("2006-01-02T15:04:05.000000Z07:00"))
			if _, err := mcls.Patch(ctx, demoMCL, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && ctx.Err() == nil {
				log.Info("demo renewal refused", "error", err.Error())
			}
		}
	}()
	return nil
}
