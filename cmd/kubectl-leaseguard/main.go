// Command kubectl-leaseguard is leaseguard's kubectl plugin: the tools
// around the webhook, apart from the server's binary (cmd/leaseguard),
// which carries only what serving needs.
//
//	kubectl leaseguard top        live lease traffic per lease, writer and namespace
//	kubectl leaseguard check      decide one write offline, as the webhook would
//	kubectl leaseguard vap        ValidatingAdmissionPolicies enforcing a policy without the webhook
//	kubectl leaseguard manifests  the webhook configurations that enforce a policy
//
// Install it on PATH, where kubectl finds plugins:
//
//	go install github.com/leaseguard/leaseguard/cmd/kubectl-leaseguard@latest
//
// or `make build-plugin` (bin/kubectl-leaseguard), or krew with
// plugins/leaseguard.yaml once releases carry archives.
package main

import (
	"github.com/spf13/cobra"

	"github.com/leaseguard/leaseguard/internal/cli"
	"github.com/leaseguard/leaseguard/internal/top/topcmd"
)

// version is stamped at build time with -ldflags "-X main.version=..."
// (make: v$(cat VERSION)); unstamped, cli.Version reads the build info.
var version string

func main() { cli.Main(newRootCommand()) }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-leaseguard",
		Short: "leaseguard's tools: live lease traffic, offline decisions and the admission configuration of a policy",
		Long: `kubectl leaseguard is leaseguard's kubectl plugin. top reads a cluster, with
kubectl's flags (--kubeconfig, --context, -n, --as, ...); check, vap and
manifests work offline on files. The webhook server itself is the
leaseguard binary (leaseguard serve), in the image.

Exit status, for every command: 0 when done (for check: the write is
admitted); 1 when refused (check: the write is denied; vap, manifests:
--strict found limits; top: the cluster refused or could not serve the
watch); 2 for bad usage or unreadable input.`,
		Annotations: map[string]string{
			// kubectl runs the plugin as `kubectl leaseguard`: help says so.
			cobra.CommandDisplayNameAnnotation: "kubectl leaseguard",
		},
	}
	root.AddCommand(topcmd.New(cli.Version(version)), cli.NewCheckCommand(), cli.NewVAPCommand(), cli.NewManifestsCommand())
	cli.AddVersion(root, version)
	cli.Prepare(root)
	return root
}
