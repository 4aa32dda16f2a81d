// Package server assembles the running webhook: the admission handlers on a
// controller-runtime webhook server, the metrics endpoint, the health and
// readiness probes and the policy file reloader.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/leaseguard/leaseguard/certs"
	"github.com/leaseguard/leaseguard/webhook/admission"
	"github.com/leaseguard/leaseguard/webhook/leasestats"
	"github.com/leaseguard/leaseguard/webhook/metrics"
	"github.com/leaseguard/leaseguard/webhook/policy"
	"github.com/leaseguard/leaseguard/webhook/policyfile"
)

// Options configure a webhook server.
type Options struct {
	// WebhookHost and WebhookPort are where the API server calls.
	WebhookHost string
	WebhookPort int
	// MetricsBindAddress serves /metrics; "0" disables it.
	MetricsBindAddress string
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

	tlsOpts, err := o.Certs.TLSOptions()
	if err != nil {
		return err
	}
	if !o.EnableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	dir, certName, keyName := o.Certs.Files()
	srv := webhook.NewServer(webhook.Options{
		Host:     o.WebhookHost,
		Port:     o.WebhookPort,
		CertDir:  dir,
		CertName: certName,
		KeyName:  keyName,
		TLSOpts:  tlsOpts,
	})
	// The heaviest leases and writers, served at /debug/leases.
	leaseStats := leasestats.New(0, 0)
	srv.Register(admission.ValidatePath, (&admission.Validator{
		Policies: store, Metrics: rec, Log: log.WithName("validate"), LeaseStats: leaseStats,
	}).Handler())
	srv.Register(admission.RenewalsPath, (&admission.Validator{
		OnlyRenewals: true, Policies: store, Metrics: rec, Log: log.WithName("validate"), LeaseStats: leaseStats,
	}).Handler())
	srv.Register(admission.MutatePath, (&admission.Designator{
		Policies: store, Metrics: rec, Log: log.WithName("designate"),
	}).Handler())

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return o.Certs.Start(ctx) })
	g.Go(func() error { return srv.Start(logr.NewContext(ctx, log)) })
	g.Go(func() error { store.Watch(ctx, o.PolicyReloadInterval); return nil })

	if o.MetricsBindAddress != "0" && o.MetricsBindAddress != "" {
		// leaseguard's own metrics, and controller-runtime's webhook metrics
		// (request counts, latencies, in-flight) from its registry.
		gatherers := prometheus.Gatherers{reg, ctrlmetrics.Registry}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{ErrorLog: promLogger{log}}))
		mux.Handle(leasestats.Path, leaseStats)
		g.Go(func() error { return serveHTTP(ctx, o.MetricsBindAddress, mux) })
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

func serveProbes(ctx context.Context, addr string, srv webhook.Server) error {
	mux := http.NewServeMux()
	mux.Handle("/healthz", http.StripPrefix("/healthz", &healthz.Handler{Checks: map[string]healthz.Checker{"ping": healthz.Ping}}))
	// Readiness follows the webhook's TLS listener only: an invalid policy
	// reload keeps the last good policy serving, so it does not unready.
	mux.Handle("/readyz", http.StripPrefix("/readyz", &healthz.Handler{Checks: map[string]healthz.Checker{"webhook": srv.StartedChecker()}}))
	return serveHTTP(ctx, addr, mux)
}

func serveHTTP(ctx context.Context, addr string, h http.Handler) error {
	hs := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
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

func waitReady(ctx context.Context, srv webhook.Server, ready func()) error {
	check := srv.StartedChecker()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if check(nil) == nil {
			ready()
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

type promLogger struct{ log logr.Logger }

func (p promLogger) Println(v ...any) { p.log.Info(fmt.Sprint(v...)) }
