package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/leaseguard/leaseguard/internal/leaseprojection"
	"github.com/leaseguard/leaseguard/internal/leasetraffic"
	"github.com/leaseguard/leaseguard/internal/leasewatch"
	"github.com/leaseguard/leaseguard/internal/topui"
	"github.com/leaseguard/leaseguard/webhook/policy"
	"github.com/leaseguard/leaseguard/webhook/policyfile"
)

type topOptions struct {
	kubeconfig, context, namespace string
	allNamespaces, once            bool
	resource, output, sort         string
	policyPath, ownNamespace       string
	window, interval               time.Duration
	limit                          int
}

func newTopCommand() *cobra.Command {
	o := &topOptions{}
	cmd := &cobra.Command{
		Use:   "top [-A | -n NAMESPACE] [--once -o table|wide|json|yaml] [--policy policy.yaml]",
		Short: "Show live lease traffic per lease, writer and namespace (read-only)",
		Long: `top watches Leases and MultiClusterLeases (one watch per resource) and shows,
refreshed live, for every lease: holder, designated manager, writes per
second over a sliding window, the observed renew interval, transitions, time
to expiry, the field managers that wrote it and whether it is contested;
with totals per namespace and for the cluster. It works with or without the
webhook installed and needs only list and watch on the leases.

--policy projects a LeasePolicy onto the observed writes with the webhook's
decision core: what it would refuse (403), hold back (429) or warn about. A
watcher does not see who wrote, so each write is judged as if written by the
writer the rule admits; fencing, renewal rate and renewTime are judged,
identity invariants are assumed kept (docs/top.md).

On a terminal it runs a live UI (q quits); otherwise, or with --once, it
prints plain reports. --once watches for --window, prints one report and
exits.`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&o.context, "context", "", "the kubeconfig context to use")
	fs.StringVarP(&o.namespace, "namespace", "n", "", "watch only this namespace (default: the context's namespace)")
	fs.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "watch every namespace")
	fs.StringVar(&o.resource, "resource", "all", "leases, multiclusterleases or all")
	fs.BoolVar(&o.once, "once", false, "watch for --window, print one report and exit")
	fs.StringVarP(&o.output, "output", "o", "table", "table, wide, json or yaml")
	fs.DurationVar(&o.window, "window", 30*time.Second, "sliding window of the rates (and how long --once watches)")
	fs.DurationVar(&o.interval, "interval", time.Second, "refresh interval of the live view")
	fs.StringVar(&o.sort, "sort", string(leasetraffic.SortRate), "order of the leases: rate, name, expiry, writers, interval or projected")
	fs.IntVar(&o.limit, "limit", 0, "list at most this many leases (totals count all); 0 lists all")
	fs.StringVar(&o.policyPath, "policy", "", "LeasePolicy file to project onto the observed writes")
	fs.StringVar(&o.ownNamespace, "leaseguard-namespace", "leaseguard-system", "leaseguard's own namespace, for validating --policy")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return runTop(cmd, o) }
	return cmd
}

// topSettings are the checked flags.
type topSettings struct {
	format    topui.Format
	sort      leasetraffic.SortKey
	resources []policy.Resource
	projector leasetraffic.Projector
}

func (o *topOptions) check(cmd *cobra.Command) (*topSettings, error) {
	s := &topSettings{}
	var err error
	if s.format, err = topui.ParseFormat(o.output); err != nil {
		return nil, err
	}
	if s.sort, err = leasetraffic.ParseSortKey(o.sort); err != nil {
		return nil, err
	}
	switch o.resource {
	case "all", "":
	case "leases", "lease":
		s.resources = []policy.Resource{policy.Leases}
	case "multiclusterleases", "multiclusterlease", "mcl":
		s.resources = []policy.Resource{policy.MultiClusterLeases}
	default:
		return nil, fmt.Errorf("--resource %q: want leases, multiclusterleases or all", o.resource)
	}
	if o.window < time.Second {
		return nil, fmt.Errorf("--window %s: want at least 1s", o.window)
	}
	if o.interval <= 0 {
		return nil, fmt.Errorf("--interval %s: want a positive duration", o.interval)
	}
	if o.limit < 0 {
		return nil, fmt.Errorf("--limit %d: want 0 (all) or more", o.limit)
	}
	if o.allNamespaces && cmd.Flags().Changed("namespace") {
		return nil, errors.New("-A and -n are exclusive: -A watches every namespace")
	}
	if o.policyPath != "" {
		p, _, err := policyfile.Load(o.policyPath, policy.CompileOptions{OwnNamespace: o.ownNamespace})
		if err != nil {
			return nil, err
		}
		s.projector = &leaseprojection.Projector{Policy: p, OwnNamespace: o.ownNamespace}
	}
	return s, nil
}

// clientConfig loads the kubeconfig as kubectl does and returns the
// namespace to watch ("" for all).
func (o *topOptions) clientConfig() (*rest.Config, string, error) {
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: o.kubeconfig, Precedence: clientcmd.NewDefaultClientConfigLoadingRules().Precedence},
		&clientcmd.ConfigOverrides{CurrentContext: o.context})
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "leaseguard-top/" + version
	if o.allNamespaces {
		return cfg, "", nil
	}
	namespace := o.namespace
	if namespace == "" {
		if namespace, _, err = loader.Namespace(); err != nil {
			return nil, "", fmt.Errorf("kubeconfig: %w", err)
		}
	}
	return cfg, namespace, nil
}

func runTop(cmd *cobra.Command, o *topOptions) error {
	s, err := o.check(cmd)
	if err != nil {
		return err
	}
	cfg, namespace, err := o.clientConfig()
	if err != nil {
		return err
	}
	format, sortKey, resources, projector := s.format, s.sort, s.resources, s.projector

	interactive := !o.once && format != topui.JSON && format != topui.YAML && isTerminal(cmd.OutOrStdout())
	if interactive {
		// client-go logs watch errors through klog; on a full-screen UI they
		// would tear the screen, so they go to the status line instead.
		klog.SetLogger(logr.Discard())
	}
	ctx := ctrl.SetupSignalHandler()
	agg := leasetraffic.New(leasetraffic.Options{Window: o.window, Projector: projector})
	status, err := leasewatch.Start(ctx, leasewatch.Options{Config: cfg, Namespace: namespace, Resources: resources}, agg)
	if err != nil {
		return err
	}
	reportOpts := leasetraffic.ReportOptions{Sort: sortKey, Limit: o.limit}
	stderr := cmd.ErrOrStderr()
	for _, s := range status.Skipped {
		fmt.Fprintln(stderr, "leaseguard top: not watching", s)
	}
	switch {
	case o.once:
		fmt.Fprintf(stderr, "leaseguard top: watching %s %s; report in %s\n", watched(status), where(namespace), o.window)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.window):
		}
		return topui.Write(cmd.OutOrStdout(), agg.Report(time.Now(), reportOpts), format)
	case interactive:
		return topui.Run(ctx, func(ro leasetraffic.ReportOptions) *leasetraffic.Report { return agg.Report(time.Now(), ro) },
			topui.UIOptions{
				Report: reportOpts, Wide: format == topui.Wide, Interval: o.interval,
				StatusLine: func() ([]string, string) {
					msg, at := status.LastError()
					if msg != "" && time.Since(at) < time.Minute {
						return status.Skipped, msg
					}
					return status.Skipped, ""
				},
			})
	}
	return streamReports(ctx, cmd.OutOrStdout(), agg, reportOpts, format, o.interval)
}

// streamReports prints a report every interval until interrupted, as `top
// -b` does when the output is not a terminal.
func streamReports(ctx context.Context, w io.Writer, agg *leasetraffic.Aggregator, ro leasetraffic.ReportOptions, f topui.Format, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := topui.Write(w, agg.Report(time.Now(), ro), f); err != nil {
			return err
		}
		if f == topui.Table || f == topui.Wide {
			fmt.Fprintln(w)
		}
	}
}

func watched(st *leasewatch.Status) string {
	s := ""
	for i, r := range st.Watching {
		if i > 0 {
			s += " and "
		}
		s += string(r)
	}
	return s
}

func where(namespace string) string {
	if namespace == "" {
		return "in all namespaces"
	}
	return "in namespace " + namespace
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
