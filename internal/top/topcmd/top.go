// Package topcmd is `top`, the kubectl plugin's live view of lease traffic
// (docs/top.md). It is a package of its own, apart from internal/cli,
// because it links the terminal UI (internal/top/topui) and kubectl's client
// options (k8s.io/cli-runtime), which the server's binary must not carry.
package topcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/leaseguard/leaseguard/internal/cli"
	"github.com/leaseguard/leaseguard/internal/top/leaseprojection"
	"github.com/leaseguard/leaseguard/internal/top/leasetraffic"
	"github.com/leaseguard/leaseguard/internal/top/leasewatch"
	"github.com/leaseguard/leaseguard/internal/top/topui"
	"github.com/leaseguard/leaseguard/internal/top/webhookstats"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/oneline"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
)

type topOptions struct {
	// kube are kubectl's flags for reaching a cluster: --kubeconfig,
	// --context, -n/--namespace, --as, --as-group, ...
	kube *genericclioptions.ConfigFlags
	// templates are kubectl's template printers for -o jsonpath=…,
	// go-template=… and their file forms, with --template and
	// --allow-missing-template-keys.
	templates                *genericclioptions.KubeTemplatePrintFlags
	version                  string
	allNamespaces, once      bool
	resource, output, sort   string
	policyPath, ownNamespace string
	webhookStats             []string
	statsClient              webhookstats.ClientOptions
	window, interval         time.Duration
	limit                    int
}

// New is `top`; version goes into its User-Agent.
func New(version string) *cobra.Command {
	kube := genericclioptions.NewConfigFlags(true)
	// top makes no discovery calls: no discovery cache to place.
	kube.CacheDir = nil
	o := &topOptions{kube: kube, templates: genericclioptions.NewKubeTemplatePrintFlags(), version: version}
	cmd := &cobra.Command{
		Use:   "top [-A | -n NAMESPACE] [--once -o table|wide|json|yaml|jsonpath=...|go-template=...] [--policy policy.yaml]",
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
prints plain reports. -o json and -o yaml print the report object;
-o jsonpath=TEMPLATE, go-template=TEMPLATE (or --template), and their
-file forms print it through kubectl's template printers, client-written
values escaped as in the table. --once watches for --window, prints one report and
exits.

The cluster is reached as kubectl reaches it, with kubectl's flags
(--kubeconfig, --context, -n/--namespace, --as, --as-group, ...): without
-A it watches the namespace of -n, else the context's.

Exit status: 0 when it ran (until interrupted, or its --once report); 1
when the cluster refuses or cannot serve the list and watch (RBAC, an
unreachable server) or a --webhook-stats replica cannot be read; 2 for bad
usage or unreadable input (flags, --policy, the kubeconfig).`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	kube.AddFlags(fs)
	fs.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "watch every namespace")
	fs.StringVar(&o.resource, "resource", "all", "leases, multiclusterleases or all")
	fs.BoolVar(&o.once, "once", false, "watch for --window, print one report and exit")
	fs.StringVarP(&o.output, "output", "o", "table", "table, wide, json, yaml, or kubectl's template formats: "+strings.Join(templateFormats(o.templates), ", "))
	o.templates.AddFlags(cmd)
	fs.DurationVar(&o.window, "window", 30*time.Second, "sliding window of the rates (and how long --once watches)")
	fs.DurationVar(&o.interval, "interval", time.Second, "refresh interval of the live view")
	fs.StringVar(&o.sort, "sort", string(leasetraffic.SortRate), "order of the leases: rate, name, expiry, writers, interval or projected")
	fs.IntVar(&o.limit, "limit", 0, "list at most this many leases (totals count all); 0 lists all")
	fs.StringVar(&o.policyPath, "policy", "", "LeasePolicy file to project onto the observed writes")
	fs.StringVar(&o.ownNamespace, "leaseguard-namespace", "leaseguard-system", "leaseguard's own namespace, for validating --policy")
	fs.StringSliceVar(&o.webhookStats, "webhook-stats", nil, "https address of a webhook replica's metrics port (repeat for each replica, e.g. through kubectl port-forward): show what the webhook judged per lease and the users behind it (needs get on /debug/leases: ClusterRole leaseguard-debug-reader)")
	fs.StringVar(&o.statsClient.Token, "webhook-stats-token", "", "--webhook-stats: bearer token to send (default: the kubeconfig's; e.g. $(kubectl create token NAME) of a service account bound to leaseguard-debug-reader)")
	fs.StringVar(&o.statsClient.WebhookConfiguration, "webhook-configuration", "leaseguard-validating-webhook-configuration", "leaseguard's validating webhook configuration: top says when it is bypassed (leaseguard.io/bypass); with --webhook-stats its caBundle and service name verify the metrics port's certificate")
	fs.BoolVar(&o.statsClient.InsecureSkipVerify, "webhook-stats-insecure-skip-tls-verify", false, "--webhook-stats: do not verify the metrics port's certificate (the token is still sent)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return escapeError(runTop(cmd, o)) }
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return cli.Usage(err) })
	return cmd
}

// topSettings are the checked flags.
type topSettings struct {
	format topui.Format
	// printer prints the report with -o jsonpath=…, go-template=… (format
	// is then empty).
	printer   printers.ResourcePrinter
	sort      leasetraffic.SortKey
	resources []leaseobject.Resource
	projector leasetraffic.Projector
	// webhookStats are the /debug/leases URLs of the webhook replicas.
	webhookStats []string
}

// outputFormat reads -o: leaseguard's own formats (table, wide, json,
// yaml: json and yaml escape what a terminal would obey, escape.go), else
// one of kubectl's template printers. --template alone means
// go-template, as in kubectl.
func (o *topOptions) outputFormat(cmd *cobra.Command) (topui.Format, printers.ResourcePrinter, error) {
	output := o.output
	if *o.templates.TemplateArgument != "" && !cmd.Flags().Changed("output") {
		output = "go-template"
	}
	if f, err := topui.ParseFormat(output); err == nil {
		return f, nil, nil
	}
	p, err := o.templates.ToPrinter(output)
	if genericclioptions.IsNoCompatiblePrinterError(err) {
		return "", nil, fmt.Errorf("-o %q: want table, wide, json, yaml or one of %s", output, strings.Join(templateFormats(o.templates), ", "))
	}
	if err != nil {
		return "", nil, fmt.Errorf("-o %s: %w", output, err)
	}
	return "", p, nil
}

// templateFormats are the template printers' -o names, sorted.
func templateFormats(f *genericclioptions.KubeTemplatePrintFlags) []string {
	formats := f.AllowedFormats()
	slices.Sort(formats)
	return formats
}

func (o *topOptions) check(cmd *cobra.Command) (*topSettings, error) {
	s := &topSettings{}
	var err error
	if s.format, s.printer, err = o.outputFormat(cmd); err != nil {
		return nil, err
	}
	if s.sort, err = leasetraffic.ParseSortKey(o.sort); err != nil {
		return nil, err
	}
	switch o.resource {
	case "all", "":
	case "leases", "lease":
		s.resources = []leaseobject.Resource{leaseobject.Leases}
	case "multiclusterleases", "multiclusterlease", "mcl":
		s.resources = []leaseobject.Resource{leaseobject.MultiClusterLeases}
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
	for _, u := range o.webhookStats {
		parsed, err := webhookstats.ParseURL(u)
		if err != nil {
			return nil, err
		}
		s.webhookStats = append(s.webhookStats, parsed)
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

// clientConfig loads the kubeconfig with kubectl's flags, as kubectl does,
// and returns the namespace to watch ("" for all).
func (o *topOptions) clientConfig() (*rest.Config, string, error) {
	cfg, err := o.kube.ToRESTConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "leaseguard-top/" + o.version
	if o.allNamespaces {
		return cfg, "", nil
	}
	// -n when given, else the context's namespace.
	namespace, _, err := o.kube.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	return cfg, namespace, nil
}

func runTop(cmd *cobra.Command, o *topOptions) error {
	s, err := o.check(cmd)
	if err != nil {
		return cli.Usage(err)
	}
	cfg, namespace, err := o.clientConfig()
	if err != nil {
		return cli.Usage(err)
	}
	format, sortKey, resources, projector := s.format, s.sort, s.resources, s.projector
	write := func(w io.Writer, r *leasetraffic.Report) error {
		if s.printer != nil {
			return topui.WritePrinted(w, r, s.printer)
		}
		return topui.Write(w, r, format)
	}

	interactive := !o.once && (format == topui.Table || format == topui.Wide) && isTerminal(cmd.OutOrStdout())
	if interactive {
		// client-go logs watch errors through klog; on a full-screen UI they
		// would tear the screen, so they go to the status line instead.
		klog.SetLogger(logr.Discard())
	}
	// Not controller-runtime's SetupSignalHandler, which may be called
	// once per process: tests run top in process more than once. A second
	// signal ends top at once, as there.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()
	agg := leasetraffic.New(leasetraffic.Options{Window: o.window, Projector: projector})
	status, err := leasewatch.Start(ctx, leasewatch.Options{Config: cfg, Namespace: namespace, Resources: resources}, agg)
	if err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	for _, skipped := range status.Skipped {
		fmt.Fprintln(stderr, "leaseguard top: not watching", oneline.Escape(skipped))
	}
	tracker, err := startWebhookStats(ctx, cfg, o, s.webhookStats)
	if err != nil {
		return err
	}
	bypass, err := newBypassReader(cfg, o.statsClient.WebhookConfiguration)
	if err != nil {
		return err
	}
	bypass.read(ctx)
	if !o.once {
		go bypass.poll(ctx, 10*time.Second)
	}
	report := func(ro leasetraffic.ReportOptions) *leasetraffic.Report {
		if tracker != nil {
			ro.Webhook = tracker.Traffic()
		}
		r := agg.Report(time.Now(), ro)
		r.WebhookSources = s.webhookStats
		r.AdmissionBypass = bypass.current()
		return r
	}
	reportOpts := leasetraffic.ReportOptions{Sort: sortKey, Limit: o.limit}
	switch {
	case o.once:
		fmt.Fprintf(stderr, "leaseguard top: watching %s %s; report in %s\n", watched(status), where(namespace), o.window)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(o.window):
		}
		if tracker != nil {
			if err := tracker.Poll(ctx, time.Now()); err != nil {
				return err
			}
		}
		bypass.read(ctx)
		return write(cmd.OutOrStdout(), report(reportOpts))
	case interactive:
		return topui.Run(ctx, report, topui.UIOptions{
			Report: reportOpts, Wide: format == topui.Wide, Interval: o.interval,
			StatusLine: func() ([]string, string) {
				if tracker != nil && tracker.LastError() != nil {
					return status.Skipped, tracker.LastError().Error()
				}
				msg, at := status.LastError()
				if msg != "" && time.Since(at) < time.Minute {
					return status.Skipped, msg
				}
				return status.Skipped, ""
			},
		})
	}
	return streamReports(ctx, cmd.OutOrStdout(), report, reportOpts, write, format == topui.Table || format == topui.Wide, o.interval)
}

// startWebhookStats reads the webhooks' /debug/leases once and, unless
// top runs once, keeps reading them; nil when none was asked for.
func startWebhookStats(ctx context.Context, cfg *rest.Config, o *topOptions, urls []string) (*webhookstats.Tracker, error) {
	if len(urls) == 0 {
		return nil, nil
	}
	tracker := &webhookstats.Tracker{URLs: urls, Window: o.window}
	// A token goes only over HTTPS: plain addresses (leaseguard dev,
	// --metrics-secure=false) are read without one.
	if slices.ContainsFunc(urls, func(u string) bool { return strings.HasPrefix(u, "https://") }) {
		var err error
		if tracker.Client, err = webhookstats.NewClient(ctx, cfg, o.statsClient); err != nil {
			return nil, err
		}
	}
	if err := tracker.Poll(ctx, time.Now()); err != nil {
		return nil, err
	}
	if !o.once {
		go pollWebhookStats(ctx, tracker, max(o.interval, 2*time.Second))
	}
	return tracker, nil
}

// pollWebhookStats reads the webhook's /debug/leases until ctx ends; a
// failed poll shows on the status line and is retried.
func pollWebhookStats(ctx context.Context, t *webhookstats.Tracker, every time.Duration) {
	everyInterval(ctx, every, func() { _ = t.Poll(ctx, time.Now()) })
}

// everyInterval calls f every interval until ctx ends. A ticker, not
// wait.UntilWithContext: the first call is one interval after the one top
// makes at start, not at once again.
func everyInterval(ctx context.Context, every time.Duration, f func()) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			f()
		}
	}
}

// streamReports prints a report every interval until interrupted, as `top
// -b` does when the output is not a terminal.
func streamReports(ctx context.Context, w io.Writer, report topui.Source, ro leasetraffic.ReportOptions, write func(io.Writer, *leasetraffic.Report) error, blankLine bool, interval time.Duration) error {
	// A ticker, not wait.UntilWithContext: the first report covers one
	// interval of traffic, and a report's error ends the stream.
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := write(w, report(ro)); err != nil {
			return err
		}
		if blankLine {
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
	return "in namespace " + oneline.Escape(namespace)
}

// escapeError escapes what an error of top says, line by line (a policy
// file's problems are one a line): the API server's and a webhook
// replica's errors can quote what a client wrote, and they are printed to
// the operator's terminal. The exit status is kept.
func escapeError(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	lines := strings.Split(msg, "\n")
	for i, l := range lines {
		lines[i] = oneline.Escape(l)
	}
	if escaped := strings.Join(lines, "\n"); escaped != msg {
		return &cli.ExitError{Code: cli.ExitCode(err), Err: errors.New(escaped)}
	}
	return err
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
