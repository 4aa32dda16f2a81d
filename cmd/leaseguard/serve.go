package main

import (
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/leaseguard/leaseguard/certs"
	"github.com/leaseguard/leaseguard/internal/cli"
	"github.com/leaseguard/leaseguard/webhook/render/configsync"
	"github.com/leaseguard/leaseguard/webhook/serve/server"
)

func newServeCommand() *cobra.Command {
	o := server.Options{}
	files := &certs.FileSource{}
	self := &certs.SelfManaged{}
	var certMode, serviceName, kubeconfig, validatingName, mutatingName string
	var manageConfig, metricsSecure bool
	var resync time.Duration
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the webhook server",
		Long: `serve runs the admission webhook server: it enforces the policy file of
--config, re-reading it while it runs, and serves /metrics, /healthz and
/readyz.

Exit status: 0 after a clean shutdown (SIGTERM or SIGINT, after
--shutdown-drain); 1 when it cannot start or stops on an error (the policy
file, the serving certificate, a port); 2 for bad usage (flags, arguments).`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	fs.StringVar(&o.PolicyFile, "config", "/etc/leaseguard/policy.yaml", "LeasePolicy file to enforce; re-read while running")
	fs.DurationVar(&o.PolicyReloadInterval, "policy-reload-interval", 2*time.Second, "how often the policy file is checked for changes")
	fs.StringVar(&o.WebhookHost, "webhook-host", "", "address the webhook server listens on (all when empty)")
	fs.IntVar(&o.WebhookPort, "webhook-port", 9443, "port the webhook server listens on")
	fs.StringVar(&files.Dir, "cert-dir", "/tmp/k8s-webhook-server/serving-certs", "folder with the serving key pair, re-read when it changes")
	fs.StringVar(&files.CertName, "tls-cert-name", "tls.crt", "serving certificate file name in --cert-dir")
	fs.StringVar(&files.KeyName, "tls-key-name", "tls.key", "serving key file name in --cert-dir")
	fs.StringVar(&files.Clients.CAFile, "client-ca", "", "CA file: require the API server's client certificate (its AdmissionConfiguration's webhook kubeconfig), signed by this CA; reviews from anyone else fail the TLS handshake, undecided and uncounted")
	fs.StringSliceVar(&files.Clients.Names, "client-name", nil, "with --client-ca: accept only client certificates with one of these Common Names or DNS names (needed when the CA signs other clients too)")
	fs.StringVar(&certMode, "cert-mode", "cert-manager", `where the serving certificate comes from: "cert-manager" (the Secret it issues, mounted at --cert-dir), "files" (any key pair at --cert-dir, re-read on change) or "self-managed" (leaseguard's own CA in a Secret, caBundle kept current)`)
	fs.StringVar(&self.SecretName, "ca-secret-name", "leaseguard-ca", "self-managed: the Secret in --namespace holding the CA")
	fs.StringVar(&serviceName, "webhook-service-name", "leaseguard-webhook-service", "self-managed: the webhook Service, whose DNS names the certificate carries")
	fs.StringSliceVar(&self.DNSNames, "dns-name", nil, "self-managed: DNS names of the serving certificate (default: the Service's names)")
	fs.StringVar(&validatingName, "validating-webhook-configuration", "leaseguard-validating-webhook-configuration", "leaseguard's validating webhook configuration: the one whose caBundle (self-managed) and webhooks (--manage-webhook-configurations) are kept current; its name gives the mutating configuration's and the coalescing policy's prefix")
	fs.StringVar(&mutatingName, "mutating-webhook-configuration", "leaseguard-mutating-webhook-configuration", "self-managed: the configuration whose caBundle is kept current")
	fs.BoolVar(&manageConfig, "manage-webhook-configurations", false, "keep the webhooks of leaseguard's configurations (and its coalescing policy) the rendering of the policy in force, on every reload (needs get and update on them; docs/design.md §5)")
	fs.DurationVar(&resync, "webhook-configurations-resync", time.Minute, "--manage-webhook-configurations: how often the configuration is checked for edits by others without a watch event (a safety net: each object is watched), and how long an edit that names another policy is left for a replica holding that policy")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "self-managed, --manage-webhook-configurations and --metrics-secure: kubeconfig (default: $KUBECONFIG, else in-cluster, else ~/.kube/config)")
	fs.DurationVar(&self.LeafDuration, "leaf-duration", 7*24*time.Hour, "self-managed: lifetime of the serving certificate (renewed at two thirds)")
	fs.DurationVar(&self.CADuration, "ca-duration", 365*24*time.Hour, "self-managed: lifetime of the CA (longer than --leaf-duration)")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8443", `address of /metrics and /debug/leases ("0" disables)`)
	fs.BoolVar(&metricsSecure, "metrics-secure", true, "serve /metrics and /debug/leases over TLS (the serving certificate) to bearer tokens the API server authenticates and authorizes (get on the URL: ClusterRoles leaseguard-metrics-reader, leaseguard-debug-reader); false serves plain HTTP to anyone who can reach the port")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", `address of /healthz and /readyz ("0" disables)`)
	fs.DurationVar(&o.ShutdownDrain, "shutdown-drain", 3*time.Second, "after SIGTERM, keep answering this long with Connection: close before stopping, so the API server's pooled connections end cleanly")
	fs.BoolVar(&o.EnableHTTP2, "enable-http2", false, "serve HTTP/2 on the webhook port (off: HTTP/2 rapid-reset and stream cancellation CVEs)")
	fs.StringVar(&o.Namespace, "namespace", envOr("POD_NAMESPACE", "leaseguard-system"), "leaseguard's own namespace, never guarded")
	newLogger := loggingFlags(fs, false)

	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		o.Log = newLogger().WithName("leaseguard")
		if manageConfig {
			prefix, err := configsync.PrefixOf(validatingName)
			if err != nil {
				return cli.Usage(fmt.Errorf("--manage-webhook-configurations: %w", err))
			}
			cfg, err := restConfig(kubeconfig)
			if err != nil {
				return fmt.Errorf("--manage-webhook-configurations needs the API server: %w", err)
			}
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			o.ManageConfiguration = &server.ManageConfiguration{Client: client, Config: cfg, Prefix: prefix, Resync: resync}
		}
		switch certMode {
		case "cert-manager", "files":
			o.Certs = files
		case "self-managed":
			cfg, err := restConfig(kubeconfig)
			if err != nil {
				return fmt.Errorf("self-managed certificates need the API server: %w", err)
			}
			self.Namespace, self.Config, self.Clients = o.Namespace, cfg, files.Clients
			selfManaged(self, o.Log.WithName("certs"), serviceName, validatingName, mutatingName)
			o.Certs = self
		default:
			return cli.Usage(fmt.Errorf(`--cert-mode %q: want "cert-manager", "files" or "self-managed"`, certMode))
		}
		if metricsSecure && o.MetricsBindAddress != "0" && o.MetricsBindAddress != "" {
			cfg, err := restConfig(kubeconfig)
			if err != nil {
				return fmt.Errorf("--metrics-secure needs the API server to review scrapers' tokens (--metrics-secure=false serves plain HTTP without authentication): %w", err)
			}
			o.MetricsAuth = cfg
		}
		return server.Run(ctrl.SetupSignalHandler(), o)
	}
	return cmd
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// restConfig is how serve reaches the API server: --kubeconfig when given,
// else controller-runtime's search (ctrl.GetConfig): $KUBECONFIG, the
// Pod's service account in a cluster, ~/.kube/config. It used to ignore
// $KUBECONFIG and go in-cluster only, unlike every other Kubernetes tool.
// The config comes with client-side rate limiting off, as controller-runtime
// hands it out (the API server's priority and fairness applies): what uses
// it directly (configsync, the caBundle writer) sends a few requests a
// minute, and the TokenReview lanes of --metrics-secure set their own
// limits (webhook/serve/server/metricsauth.go).
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return ctrl.GetConfig()
}

// selfManaged completes the self-managed certificate source: its log, the
// webhook Service's names when none were given, and the caBundle keeper of
// leaseguard's two webhook configurations run beside it.
func selfManaged(self *certs.SelfManaged, log logr.Logger, serviceName, validating, mutating string) {
	self.Log = log
	keeper := &configsync.CABundleKeeper{Config: self.Config, Namespace: self.Namespace, SecretName: self.SecretName,
		Validating: validating, Mutating: mutating, Log: log.WithName("cabundle")}
	self.Alongside = keeper.Run
	if len(self.DNSNames) == 0 {
		self.DNSNames = []string{serviceName + "." + self.Namespace + ".svc", serviceName + "." + self.Namespace + ".svc.cluster.local"}
	}
}
