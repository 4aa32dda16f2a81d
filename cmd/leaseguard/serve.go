package main

import (
	"os"
	"time"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/leaseguard/leaseguard/certs"
	"github.com/leaseguard/leaseguard/webhook/server"
)

func newServeCommand() *cobra.Command {
	o := server.Options{}
	files := &certs.FileSource{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the webhook server",
		Args:  cobra.NoArgs,
	}
	fs := cmd.Flags()
	fs.StringVar(&o.PolicyFile, "config", "/etc/leaseguard/policy.yaml", "LeasePolicy file to enforce; re-read while running")
	fs.DurationVar(&o.PolicyReloadInterval, "policy-reload-interval", 2*time.Second, "how often the policy file is checked for changes")
	fs.StringVar(&o.WebhookHost, "webhook-host", "", "address the webhook server listens on (all when empty)")
	fs.IntVar(&o.WebhookPort, "webhook-port", 9443, "port the webhook server listens on")
	fs.StringVar(&files.Dir, "cert-dir", "/tmp/k8s-webhook-server/serving-certs", "folder with the serving key pair, re-read when it changes")
	fs.StringVar(&files.CertName, "tls-cert-name", "tls.crt", "serving certificate file name in --cert-dir")
	fs.StringVar(&files.KeyName, "tls-key-name", "tls.key", "serving key file name in --cert-dir")
	fs.StringVar(&files.ClientCAFile, "client-ca", "", "CA file: require API server client certificates signed by it")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8080", `address of /metrics ("0" disables)`)
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", `address of /healthz and /readyz ("0" disables)`)
	fs.StringVar(&o.Namespace, "namespace", envOr("POD_NAMESPACE", "leaseguard-system"), "leaseguard's own namespace, never guarded")
	newLogger := loggingFlags(fs, false)

	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		o.Log = newLogger().WithName("leaseguard")
		o.Certs = files
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
