// Command leaseguard is a validating admission webhook that enforces lease
// identity, leader-election fencing and renewal rates on Leases and
// MultiClusterLeases.
//
//	leaseguard serve   the webhook server
//	leaseguard dev     a local control plane with leaseguard installed
//	leaseguard check   decide one write offline, as the webhook would
//	leaseguard top     live lease traffic per lease, writer and namespace
//	leaseguard vap     ValidatingAdmissionPolicies enforcing a policy without the webhook
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// version is stamped at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := newRootCommand().Execute(); err != nil {
		os.Exit(exitCode(err))
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "leaseguard",
		Short:         "Admission webhook that enforces lease identity, fencing and renewal rates",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServeCommand(), newDevCommand(), newCheckCommand(), newManifestsCommand(), newTopCommand(), newVAPCommand(), &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Run:   func(cmd *cobra.Command, _ []string) { fmt.Fprintln(cmd.OutOrStdout(), version) },
	})
	return root
}

// loggingFlags adds controller-runtime's zap flags (--zap-log-level, ...)
// and returns a function building the logger from them.
func loggingFlags(fs *pflag.FlagSet, development bool) func() logr.Logger {
	opts := zap.Options{Development: development}
	goFlags := flag.NewFlagSet("zap", flag.ContinueOnError)
	opts.BindFlags(goFlags)
	fs.AddGoFlagSet(goFlags)
	return func() logr.Logger { return zap.New(zap.UseFlagOptions(&opts)) }
}

// exitError carries a process exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func exitCode(err error) int {
	if e, ok := err.(*exitError); ok {
		if e.err != nil && e.err.Error() != "" {
			fmt.Fprintln(os.Stderr, "leaseguard:", e.err)
		}
		return e.code
	}
	fmt.Fprintln(os.Stderr, "leaseguard:", err)
	return 1
}
