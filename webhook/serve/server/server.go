// Package server assembles the running webhook: the admission handlers on
// leaseguard's own bounded TLS server (webhookserver.go), the metrics
// endpoint, the health and readiness probes and the policy file reloader.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/leaseguard/leaseguard/certs"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
	"github.com/leaseguard/leaseguard/webhook/render/configsync"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
	"github.com/leaseguard/leaseguard/webhook/serve/admission"
	"github.com/leaseguard/leaseguard/webhook/serve/leasestats"
	"github.com/leaseguard/leaseguard/webhook/serve/metrics"
)

// Options configure a webhook server.
type Options struct {
	// WebhookHost and WebhookPort are where the API server calls.
	WebhookHost string
	WebhookPort int
	// MetricsBindAddress serves /metrics and /debug/leases; "0" disables it.
	MetricsBindAddress string
	// MetricsAuth, when set, serves that port over TLS (the webhook's
	// serving certificate) to clients the API server behind it
	// authenticates (TokenReview) and authorizes (SubjectAccessReview: get
	// on the non-resource URL, e.g. /metrics), the kubebuilder way:
	// /debug/leases names users and leases, and anyone able to reach a pod
	// could read it otherwise. Nil serves plain HTTP to anyone (local
	// development, loopback only).
	MetricsAuth *rest.Config
	// HealthProbeBindAddress serves /healthz and /readyz; "0" disables it.
	HealthProbeBindAddress string
	// PolicyFile is the LeasePolicy to enforce; PolicyReloadInterval how often
	// it is re-read.
	PolicyFile           string
	PolicyReloadInterval time.Duration
	// Namespace is leaseguard's own namespace, never guarded.
	Namespace string
	Certs     certs.Source
	// Registry receives the metrics; a fresh registry when nil.
	Registry *prometheus.Registry
	Log      logr.Logger
	// Ready, when set, is called once the webhook server serves TLS.
	Ready func()
	// EnableHTTP2 serves HTTP/2 on the webhook port. Off by default, as
	// kubebuilder scaffolds it since the HTTP/2 rapid-reset and stream
	// cancellation CVEs (CVE-2023-44487, CVE-2023-39325): the API server
	// speaks HTTP/1.1 to webhooks just as well.
	EnableHTTP2 bool
	// ShutdownDrain is how long the webhook keeps answering after ctx ends,
	// with "Connection: close" on every response. The API server reaches a
	// webhook through the Service's cluster IP and keeps HTTP/1.1
	// connections to a terminating replica open after its endpoint is
	// gone; closing such an idle connection under it races its next POST,
	// which it does not retry, and a fail-open webhook then admits the
	// write unseen. Answering with "Connection: close" ends each connection
	// after a completed request instead. Zero stops at once.
	ShutdownDrain time.Duration
	// ManageConfiguration, when set, keeps leaseguard's admission
	// configuration equal to the rendering of the policy in force
	// (package configsync).
	ManageConfiguration *ManageConfiguration
}

// ManageConfiguration says which admission configuration leaseguard keeps.
type ManageConfiguration struct {
	Client kubernetes.Interface
	// Config reaches the same API server, for the watches.
	Config *rest.Config
	// Prefix names the objects (manifests.Options.Prefix).
	Prefix string
	// Resync is how often the configuration is checked without a watch
	// event, and how long an edit naming another policy waits; one minute
	// when zero.
	Resync time.Duration
}

// Run serves until ctx ends. It refuses to start on an invalid policy file
// or unreadable certificates.
func Run(ctx context.Context, o Options) error {
	log := o.Log
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	rec, err := metrics.New(reg)
	if err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	store, err := policyfile.NewStore(o.PolicyFile, policy.CompileOptions{OwnNamespace: o.Namespace}, log.WithName("policy"), rec)
	if err != nil {
		return err
	}
	rec.PolicyLoaded()
	log.Info("policy loaded", "path", o.PolicyFile, "rules", len(store.Policy().Rules))
	for _, n := range store.Policy().AcknowledgementNotes() {
		log.Info("namespace mode needs the mutating webhook", "note", n)
	}

	servingTLS, watchCerts, err := certs.ServingTLS(o.Certs)
	if err != nil {
		return err
	}
	// The heaviest leases and writers, served at /debug/leases.
	leaseStats := leasestats.New(0, 0)
	var draining atomic.Bool
	mux := http.NewServeMux()
	for path, h := range map[string]http.Handler{
		manifests.ValidatePath: (&admission.Validator{
			Policies: store, Metrics: rec, Log: log.WithName("validate"), LeaseStats: leaseStats,
		}).Handler(),
		manifests.RenewalsPath: (&admission.Validator{
			OnlyRenewals: true, Policies: store, Metrics: rec, Log: log.WithName("validate"), LeaseStats: leaseStats,
		}).Handler(),
		manifests.MutatePath: (&admission.Designator{
			Policies: store, Metrics: rec, Log: log.WithName("designate"),
		}).Handler(),
	} {
		mux.Handle(path, closeWhenDraining(&draining, rec.InstrumentWebhook(path, h)))
	}
	srv := &webhookServer{
		addr: net.JoinHostPort(o.WebhookHost, strconv.Itoa(o.WebhookPort)),
		tls:  servingTLS, handler: mux, log: log.WithName("webhook"), recorder: rec,
	}

	g, ctx := errgroup.WithContext(ctx)
	// The webhook (and the certificates it serves) outlive ctx by the drain.
	serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	g.Go(func() error {
		defer stopServing()
		<-ctx.Done()
		if o.ShutdownDrain <= 0 {
			return nil
		}
		draining.Store(true)
		log.Info("draining: answering with Connection: close before stopping", "for", o.ShutdownDrain.String())
		select {
		case <-time.After(o.ShutdownDrain):
		case <-serveCtx.Done():
		}
		return nil
	})
	g.Go(func() error { return o.Certs.Start(serveCtx) })
	g.Go(func() error { return watchCerts(serveCtx) })
	g.Go(func() error { return srv.serve(serveCtx, o.EnableHTTP2) })
	g.Go(func() error { store.Watch(ctx, o.PolicyReloadInterval); return nil })
	if m := o.ManageConfiguration; m != nil {
		if err := rec.ManageAdmissionConfiguration(reg); err != nil {
			return fmt.Errorf("registering metrics: %w", err)
		}
		syncer := &configsync.Syncer{
			Client: m.Client, Config: m.Config, Prefix: m.Prefix, Namespace: o.Namespace, Resync: m.Resync,
			Policies: store, Recorder: rec, Log: log.WithName("configuration"),
		}
		g.Go(func() error { return syncer.Run(ctx) })
	}

	if o.MetricsBindAddress != "0" && o.MetricsBindAddress != "" {
		// leaseguard's own metrics, and what controller-runtime's registry
		// holds (its client-go and certificate watcher metrics).
		gatherers := prometheus.Gatherers{reg, ctrlmetrics.Registry}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{ErrorLog: promLogger{log}}))
		mux.Handle(leasestats.Path, leaseStats)
		if o.MetricsAuth == nil {
			g.Go(func() error { return serveHTTP(ctx, o.MetricsBindAddress, mux, nil) })
		} else {
			if err := rec.MetricsAuth(reg); err != nil {
				return fmt.Errorf("registering metrics: %w", err)
			}
			handler, tlsConfig, watch, err := secureMetrics(o.MetricsAuth, o.Certs, mux, []string{"/metrics", leasestats.Path}, rec, log.WithName("metrics"))
			if err != nil {
				return err
			}
			g.Go(func() error { return watch(serveCtx) })
			g.Go(func() error { return serveHTTP(ctx, o.MetricsBindAddress, handler, tlsConfig) })
		}
	}
	if o.HealthProbeBindAddress != "0" && o.HealthProbeBindAddress != "" {
		g.Go(func() error { return serveProbes(ctx, o.HealthProbeBindAddress, srv) })
	}
	if o.Ready != nil {
		g.Go(func() error { return waitReady(ctx, srv, o.Ready) })
	}
	log.Info("serving", "webhook", net.JoinHostPort(o.WebhookHost, strconv.Itoa(o.WebhookPort)),
		"metrics", o.MetricsBindAddress, "probes", o.HealthProbeBindAddress)
	return g.Wait()
}

// closeWhenDraining answers with "Connection: close" once draining is set,
// so that the server ends the connection after the response (Options.
// ShutdownDrain).
func closeWhenDraining(draining *atomic.Bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if draining.Load() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	})
}

func serveProbes(ctx context.Context, addr string, srv *webhookServer) error {
	mux := http.NewServeMux()
	mux.Handle("/healthz", http.StripPrefix("/healthz", &healthz.Handler{Checks: map[string]healthz.Checker{"ping": healthz.Ping}}))
	// Readiness follows the webhook's TLS listener only: an invalid policy
	// reload keeps the last good policy serving, so it does not unready.
	mux.Handle("/readyz", http.StripPrefix("/readyz", &healthz.Handler{Checks: map[string]healthz.Checker{"webhook": srv.ready}}))
	return serveHTTP(ctx, addr, mux, nil)
}

// secureMetrics puts h behind token authentication and authorization by
// cfg's API server (withTokenAuth; only paths are served) and returns the
// TLS it is served with (certs.ScrapeTLS) and its certificate watcher.
func secureMetrics(cfg *rest.Config, src certs.Source, h http.Handler, paths []string, rec *metrics.Recorder, log logr.Logger) (http.Handler, *tls.Config, func(context.Context) error, error) {
	secured, err := withTokenAuth(cfg, h, paths, rec, log)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("metrics authentication: %w", err)
	}
	tlsConfig, watch, err := certs.ScrapeTLS(src)
	if err != nil {
		return nil, nil, nil, err
	}
	return secured, tlsConfig, watch, nil
}

// Bounds of the metrics and probe servers (docs/security.md): a scrape or
// a probe is one small GET, answered within seconds. Without them, idle
// keep-alive connections were held for ever (1,000 of them were all still
// open after 95 s, about 20 KB each: a replica's memory limit for whoever
// can reach the port), so every connection gets idle, read and write
// deadlines, headers are small, and connections are bounded in number.
var (
	plainIdleTimeout       = 30 * time.Second
	plainReadHeaderTimeout = 5 * time.Second
	plainReadTimeout       = 10 * time.Second
	plainWriteTimeout      = 30 * time.Second
)

const (
	plainMaxHeaderBytes = 16 << 10
	plainMaxConnections = 256
)

// serveHTTP serves h at addr within the bounds above, over TLS when
// tlsConfig is set (HTTP/1.1 only: an empty TLSNextProto turns HTTP/2 off).
func serveHTTP(ctx context.Context, addr string, h http.Handler, tlsConfig *tls.Config) error {
	hs := &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: plainReadHeaderTimeout,
		ReadTimeout:       plainReadTimeout,
		WriteTimeout:      plainWriteTimeout,
		IdleTimeout:       plainIdleTimeout,
		MaxHeaderBytes:    plainMaxHeaderBytes,
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	ln = netutil.LimitListener(ln, plainMaxConnections)
	if tlsConfig != nil {
		hs.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
		ln = tls.NewListener(ln, tlsConfig)
	}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(shutdownCtx)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func waitReady(ctx context.Context, srv *webhookServer, ready func()) error {
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return srv.ready(nil) == nil, nil
	})
	if err == nil {
		ready()
	}
	return nil
}

type promLogger struct{ log logr.Logger }

func (p promLogger) Println(v ...any) { p.log.Info(fmt.Sprint(v...)) }
