// Command dashshot renders leaseguard's Grafana dashboard
// (config/grafana/leaseguard.json) from a real run, as a PNG:
//
//	go run ./dashshot -o ../../docs/dashboard.png   # make dashboard-png
//
// It starts a real kube-apiserver and etcd (internal/controlplane) with
// leaseguard's admission configuration for config/samples/policy.yaml
// (Config Connector namespace mode; as shipped: early renewals coalesced and
// the other managers' shared renewals acknowledged by the
// MutatingAdmissionPolicy in the API server), the real `leaseguard serve`, and for --duration a workload
// shaped like Config Connector's: three namespace-mode managers leading
// their bound Leases with client-go's LeaderElector every 2 s, the same
// three renewing the one shared MultiClusterLease every 2 s with the
// cluster's one holder identity, a manager writing another team's Lease and
// a stranger writing the MultiClusterLease every 5 s. Every 2 s it scrapes
// leaseguard's and the API server's /metrics into an in-memory Prometheus
// TSDB; then it runs every panel's query, as written in the dashboard,
// through Prometheus's own PromQL engine ($__rate_interval = 20 s) and draws
// each panel: a time series per result series, labelled by the panel's
// legend format, or the stat panels' value.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

const (
	ns        = "cnrm-system"
	managerSA = "system:serviceaccount:cnrm-system:cnrm-controller-manager-"
	scrape    = 2 * time.Second
)

var teams = []string{"team-a", "team-b", "team-c"}

// printQuery is the -print query.
var printQuery string

func main() {
	out := flag.String("o", "docs/dashboard.png", "PNG to write")
	duration := flag.Duration("duration", 3*time.Minute, "how long the workload runs")
	flag.StringVar(&printQuery, "print", "", "also print this PromQL query's result at the end of the run (to look into a panel)")
	flag.Parse()
	if err := run(*out, *duration); err != nil {
		fmt.Fprintln(os.Stderr, "dashshot:", err)
		os.Exit(1)
	}
}

func run(out string, duration time.Duration) error {
	klog.SetLogger(logr.Discard())
	root, err := controlplane.RepoRoot()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "leaseguard-dashshot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	progress("building leaseguard, starting kube-apiserver and etcd ...")
	binary, err := controlplane.BuildLeaseguard(tmp)
	if err != nil {
		return err
	}
	policyPath := filepath.Join(root, "config/samples/policy.yaml")
	// As shipped (--coalesce policy): the renewals the API server answers
	// show only in its own metrics, as they would in a real cluster.
	cp, err := controlplane.Start(controlplane.Options{Policy: policyPath, Manifests: manifests.Options{Coalescing: manifests.CoalesceInAPIServer}})
	if err != nil {
		return err
	}
	defer func() { _ = cp.Stop() }()
	// As shipped: leaseguard keeps its webhook configurations the rendering
	// of its policy.
	kubeconfig := filepath.Join(tmp, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	guard, err := cp.StartLeaseguard(binary, policyPath, "--manage-webhook-configurations", "--kubeconfig", kubeconfig)
	if err != nil {
		return err
	}
	defer guard.Stop()
	admin, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}

	db, err := tsdb.Open(filepath.Join(tmp, "tsdb"), slog.New(slog.DiscardHandler), nil, tsdb.DefaultOptions(), nil)
	if err != nil {
		return err
	}
	defer db.Close()
	start := time.Now()
	var wg sync.WaitGroup
	var scrapeErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		scrapeErr = scrapeLoop(ctx, db, cp.Config, guard.MetricsURL)
	}()
	progress("workload for %s: 3 electors, 3 managers sharing a MultiClusterLease, an intruder and a stranger ...", duration)
	workload(ctx, cp.Config)
	time.Sleep(duration)
	cancel()
	wg.Wait()
	if scrapeErr != nil {
		return scrapeErr
	}
	end := time.Now()

	dash, err := os.ReadFile(filepath.Join(root, "config/grafana/leaseguard.json"))
	if err != nil {
		return err
	}
	if printQuery != "" {
		if err := printInstant(db, printQuery, end); err != nil {
			return err
		}
	}
	panels, err := evaluate(db, dash, start, end)
	if err != nil {
		return err
	}
	if err := drawPanels(panels, out, fmt.Sprintf("leaseguard: lease traffic — a %s run of `go run ./dashshot` (test/perf), %s", duration, end.UTC().Format("2006-01-02"))); err != nil {
		return err
	}
	progress("wrote %s (%d panels)", out, len(panels))
	return nil
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s dashshot: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// impersonating is a client of the control plane as user, with the
// pod-name extra a pod's bound token carries.
func impersonating(base *rest.Config, user, pod string) *rest.Config {
	cfg := rest.CopyConfig(base)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	if pod != "" {
		cfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/pod-name": {pod}}
	}
	cfg.WarningHandler = rest.NoWarnings{}
	return cfg
}

// workload starts the clients; they stop with ctx.
func workload(ctx context.Context, base *rest.Config) {
	for _, team := range teams {
		pod := "cnrm-controller-manager-" + team + "-0"
		cs := kubernetes.NewForConfigOrDie(impersonating(base, managerSA+team, pod))
		lock := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: "kcc-leader-" + team},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: pod},
		}
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
			Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}},
		})
		if err == nil {
			go le.Run(ctx)
		}
		// The cluster's one MultiClusterLease, renewed by every manager
		// with the cluster's one identity (Config Connector namespace mode).
		mcl := dynamic.NewForConfigOrDie(impersonating(base, managerSA+team, pod)).Resource(mclv1alpha1.GroupVersionResource).Namespace(ns)
		go every(ctx, 2*time.Second, func() {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": mclv1alpha1.Group + "/" + mclv1alpha1.Version, "kind": mclv1alpha1.Kind,
				"metadata": map[string]any{"name": "kcc-leader", "namespace": ns},
				"spec":     map[string]any{"holderIdentity": "cluster-a", "renewTime": micro(time.Now()), "leaseDurationSeconds": int64(15)},
			}}
			// As Config Connector's lock does: create only what is not
			// there (a create that fails as AlreadyExists is still judged,
			// and stamps a designation the API server then drops).
			if _, err := mcl.Get(ctx, "kcc-leader", metav1.GetOptions{}); apierrors.IsNotFound(err) {
				_, _ = mcl.Create(ctx, obj, metav1.CreateOptions{})
			} else if err == nil {
				patch := fmt.Sprintf(`{"spec":{"holderIdentity":"cluster-a","renewTime":%q,"leaseDurationSeconds":15}}`, micro(time.Now()))
				_, _ = mcl.Patch(ctx, "kcc-leader", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			}
		})
	}
	// team-b's manager labels team-a's Lease (the bound-lease rule warns),
	// and a stranger renews the MultiClusterLease (denied: not a manager).
	intruder := kubernetes.NewForConfigOrDie(impersonating(base, managerSA+"team-b", "cnrm-controller-manager-team-b-0")).CoordinationV1().Leases(ns)
	go every(ctx, 5*time.Second, func() {
		_, _ = intruder.Patch(ctx, "kcc-leader-team-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"touched-by":"team-b"}}}`), metav1.PatchOptions{})
	})
	stranger := dynamic.NewForConfigOrDie(impersonating(base, "system:serviceaccount:default:stranger", "")).Resource(mclv1alpha1.GroupVersionResource).Namespace(ns)
	go every(ctx, 5*time.Second, func() {
		patch := fmt.Sprintf(`{"spec":{"holderIdentity":"cluster-b","renewTime":%q}}`, micro(time.Now()))
		_, _ = stranger.Patch(ctx, "kcc-leader", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	})
	_ = coordinationv1.SchemeGroupVersion
}

func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

func micro(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00") }

// scrapeLoop appends leaseguard's (job leaseguard) and the API server's
// (job apiserver) metrics to db every scrape interval, with up as
// Prometheus adds it, until ctx ends.
func scrapeLoop(ctx context.Context, db *tsdb.DB, cfg *rest.Config, metricsURL string) error {
	apiserver, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	targets := []struct {
		job, url string
		client   *http.Client
	}{
		{"leaseguard", metricsURL, &http.Client{Timeout: 5 * time.Second}},
		{"apiserver", strings.TrimSuffix(cfg.Host, "/") + "/metrics", apiserver},
	}
	t := time.NewTicker(scrape)
	defer t.Stop()
	for {
		now := time.Now()
		app := db.Appender(context.Background())
		for _, tg := range targets {
			up := 1.0
			if err := scrapeInto(app, tg.client, tg.url, tg.job, now); err != nil {
				up = 0
			}
			_, _ = app.Append(0, labels.FromStrings("__name__", "up", "job", tg.job, "instance", tg.job), now.UnixMilli(), up)
		}
		if err := app.Commit(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func scrapeInto(app storage.Appender, client *http.Client, url, job string, at time.Time) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d %v", url, resp.StatusCode, err)
	}
	p := textparse.NewPromParser(body, labels.NewSymbolTable(), false)
	for {
		et, err := p.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", url, err)
		}
		if et != textparse.EntrySeries {
			continue
		}
		var lset labels.Labels
		p.Labels(&lset)
		_, _, v := p.Series()
		b := labels.NewBuilder(lset)
		b.Set("job", job)
		b.Set("instance", job)
		if _, err := app.Append(0, b.Labels(), at.UnixMilli(), v); err != nil {
			return err
		}
	}
}
