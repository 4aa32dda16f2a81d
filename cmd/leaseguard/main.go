// Command leaseguard is a validating admission webhook that enforces lease
// identity, leader-election fencing and renewal rates on Leases and
// MultiClusterLeases. It is the binary of the image, and carries only what
// serving and operating the server need:
//
//	leaseguard serve      the webhook server
//	leaseguard check      decide one write offline, exactly as this server would
//	leaseguard manifests  the webhook configurations that send this server its writes
//	leaseguard version    the version
//	leaseguard dev        a local control plane with leaseguard installed (-tags dev only)
//
// check and manifests stay here because they are operations of the server:
// they use only the packages serve links (the decision core, the policy
// file, the rendering of its configuration), so they cost the binary no
// dependency; they answer for the version that runs (`kubectl exec ... --
// /leaseguard check --config /etc/leaseguard/policy.yaml ...` asks the
// deployed binary, with the deployed policy, why it refuses a write); and
// the Helm chart and `make chart` render the webhook configurations with
// `leaseguard manifests`. The tools around it — top (a terminal UI and
// kubectl's client options), vap (a policy for clusters without this
// server), and check and manifests again — are the kubectl plugin,
// cmd/kubectl-leaseguard. Each command's code is written once, in
// internal/cli.
package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/leaseguard/leaseguard/internal/cli"
)

// version is stamped at build time with -ldflags "-X main.version=..."
// (make: v$(cat VERSION)); unstamped, cli.Version reads the build info.
var version string

func main() { cli.Main(newRootCommand()) }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "leaseguard",
		Short: "Admission webhook that enforces lease identity, fencing and renewal rates",
		Long: `leaseguard is the admission webhook server (leaseguard serve). The tools
around it — top, vap, and check and manifests too — are the kubectl plugin
kubectl-leaseguard (kubectl leaseguard top):

  go install github.com/leaseguard/leaseguard/cmd/kubectl-leaseguard@latest

Exit status: 0 when done; 1 when refused (check: the write is denied;
manifests: --strict found limits) or when serve fails; 2 for bad usage or
unreadable input.`,
	}
	root.AddCommand(newServeCommand(), newDevCommand(), cli.NewCheckCommand(), cli.NewManifestsCommand(),
		movedToPlugin("top", "live lease traffic"), movedToPlugin("vap", "ValidatingAdmissionPolicies"))
	cli.AddVersion(root, version)
	cli.Prepare(root)
	return root
}

// movedToPlugin is a hidden command where one that moved to the kubectl
// plugin used to be: it exits 2 and says where the command is now.
func movedToPlugin(name, what string) *cobra.Command {
	return &cobra.Command{
		Use:                name,
		Short:              what + ": in the kubectl plugin, kubectl leaseguard " + name,
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return cli.Usage(fmt.Errorf("%q is not a command of the server's binary: it is in the kubectl plugin, `kubectl leaseguard %s` "+
				"(install: go install github.com/leaseguard/leaseguard/cmd/kubectl-leaseguard@latest, or make build-plugin: bin/kubectl-leaseguard)", name, name))
		},
	}
}

// loggingFlags adds controller-runtime's zap flags (--zap-log-level, ...)
// and returns a function building the logger from them.
func loggingFlags(fs *pflag.FlagSet, development bool) func() logr.Logger {
	opts := zap.Options{Development: development}
	goFlags := flag.NewFlagSet("zap", flag.ContinueOnError)
	opts.BindFlags(goFlags)
	// controller-runtime's usage says the time encoding defaults to epoch;
	// its options fall back to RFC 3339 when none is given, as every log
	// line shows: the help says what the binary does.
	if f := goFlags.Lookup("zap-time-encoding"); f != nil {
		f.Usage = strings.Replace(f.Usage, "Defaults to 'epoch'.", "Defaults to 'rfc3339'.", 1)
	}
	fs.AddGoFlagSet(goFlags)
	return func() logr.Logger { return zap.New(zap.UseFlagOptions(&opts)) }
}
