// Package metrics defines leaseguard's Prometheus metrics. Labels are bounded
// by the policy (resource, rule, verdict, invariant), never by lease name, so
// 10,000 leases cost no more series than one.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
)

// NoRule labels decisions about objects no rule selects.
const NoRule = "none"

// Recorder holds the collectors. Create one with New and register it once.
type Recorder struct {
	decisions          *prometheus.CounterVec
	decisionLatency    *prometheus.HistogramVec
	renewalIntervals   *prometheus.HistogramVec
	designationChanges *prometheus.CounterVec
	badRequests        *prometheus.CounterVec
	unreadableStored   *prometheus.CounterVec
	coalesced          *prometheus.CounterVec
	acknowledged       *prometheus.CounterVec
	reviewBytes        *prometheus.HistogramVec
	policyReloads      *prometheus.CounterVec
	policyValid        prometheus.Gauge
	configInSync       prometheus.Gauge
	configUpdates      prometheus.Counter
	configRepairs      prometheus.Counter
	configBypassed     prometheus.Gauge
	webhookRequests    *prometheus.CounterVec
	webhookInFlight    *prometheus.GaugeVec
	handshakeErrors    prometheus.Counter
	// The metrics port's token authentication (MetricsAuth).
	metricsTokenReviews  *prometheus.CounterVec
	metricsTokensRefused *prometheus.CounterVec
}

// New builds the collectors and registers them with reg.
func New(reg prometheus.Registerer) (*Recorder, error) {
	r := &Recorder{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leaseguard_decisions_total",
			Help: "Admission decisions on lease writes, by resource, rule, verdict (allow, deny, warn, audit) and broken invariant.",
		}, []string{"resource", "rule", "verdict", "invariant"}),
		decisionLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leaseguard_decision_duration_seconds",
			Help:    "Time to decode and decide one admission request.",
			Buckets: []float64{5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3, 0.025},
		}, []string{"resource"}),
		renewalIntervals: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leaseguard_renewal_interval_seconds",
			Help:    "How far each renewal advanced renewTime over the stored lease, by rule (admitted and refused renewals).",
			Buckets: []float64{0.5, 1, 2, 3, 5, 8, 10, 15, 30, 60, 120},
		}, []string{"rule"}),
		designationChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leaseguard_designation_changes_total",
			Help: "Admitted writes that changed the designated manager of a lease.",
		}, []string{"rule"}),
		badRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leaseguard_bad_requests_total",
			Help: "Admission requests leaseguard could not read, by webhook and reason (unreadable, too_large, busy); validation refuses them (busy: fails the call, the failurePolicy decides), never allows.",
		}, []string{"webhook", "reason"}),
		unreadableStored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leaseguard_unreadable_stored_objects_total",
			Help: "Admitted writes to a stored lease with a spec field leaseguard cannot read, decided without it.",
		}, []string{"resource"}),
		coalesced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leaseguard_coalesced_renewals_total",
			Help: "Early renewals the mutating webhook set back to the stored renewTime, so that the API server stores nothing.",
		}, []string{"resource"}),
		acknowledged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leaseguard_acknowledged_renewals_total",
			Help: "Renewals of a shared MultiClusterLease by managers that are not its designated writer, answered with success and not stored (the mutating webhook set renewTime back).",
		}, []string{"resource"}),
		reviewBytes: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "leaseguard_admission_review_bytes",
			Help:    "Size of the AdmissionReviews leaseguard reads, by webhook: a lease write is a few KiB; a large one is padded.",
			Buckets: []float64{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 32 << 20},
		}, []string{"webhook"}),
		policyReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leaseguard_policy_reloads_total",
			Help: "Policy file reloads, by result (success, invalid).",
		}, []string{"result"}),
		policyValid: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leaseguard_policy_file_valid",
			Help: "1 when the policy file on disk is the one being enforced, 0 when it is invalid and the last good policy is kept.",
		}),
		configInSync: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leaseguard_admission_configuration_in_sync",
			Help: "1 when leaseguard's webhook configurations (and coalescing policy) are the rendering of the policy in force (or, for a few minutes, of another replica's), 0 when they are not: keeping them so failed, an edit awaits repair, or a bypass keeps one (--manage-webhook-configurations; absent when off).",
		}),
		configUpdates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leaseguard_admission_configuration_updates_total",
			Help: "Writes of leaseguard's admission configuration to follow the policy in force (--manage-webhook-configurations).",
		}),
		configRepairs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leaseguard_admission_configuration_repairs_total",
			Help: "Writes that undid an edit of leaseguard's admission configuration by someone else, making it the rendering of the policy in force again (--manage-webhook-configurations).",
		}),
		configBypassed: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leaseguard_admission_configuration_bypassed",
			Help: "1 while leaseguard's validating webhook configuration carries the annotation leaseguard.io/bypass: an operator's deliberate bypass, and nothing is kept the rendering of the policy (--manage-webhook-configurations).",
		}),
		webhookRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leaseguard_webhook_requests_total",
			Help: "HTTP requests to the webhook port, by path (webhook) and HTTP status code: 200 carries a verdict, 503 is busy (the failurePolicy decides).",
		}, []string{"webhook", "code"}),
		webhookInFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "leaseguard_webhook_requests_in_flight",
			Help: "HTTP requests to the webhook port being read, decided or answered, by path (webhook).",
		}, []string{"webhook"}),
		handshakeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leaseguard_webhook_tls_handshake_errors_total",
			Help: "Connections to the webhook port whose TLS handshake failed: with --client-ca, every client that is not the API server; a steady rate while the API server's calls fail means its client certificate is missing or not accepted.",
		}),
	}
	for _, c := range []prometheus.Collector{r.decisions, r.decisionLatency, r.renewalIntervals, r.designationChanges, r.badRequests, r.unreadableStored, r.coalesced, r.acknowledged, r.reviewBytes, r.policyReloads, r.policyValid, r.webhookRequests, r.webhookInFlight, r.handshakeErrors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Decision records one decision.
func (r *Recorder) Decision(res leaseobject.Resource, d *policy.Decision, took time.Duration) {
	if r == nil {
		return
	}
	rule := d.Rule
	if rule == "" {
		rule = NoRule
	}
	r.decisions.WithLabelValues(string(res), rule, d.Verdict.String(), string(d.Invariant)).Inc()
	r.decisionLatency.WithLabelValues(string(res)).Observe(took.Seconds())
	if d.RenewalInterval > 0 {
		r.renewalIntervals.WithLabelValues(rule).Observe(d.RenewalInterval.Seconds())
	}
	if d.DesignationChanged && d.Verdict != policy.Deny {
		r.designationChanges.WithLabelValues(rule).Inc()
	}
}

// BadRequest records a request that could not be read.
func (r *Recorder) BadRequest(webhook, reason string) {
	if r == nil {
		return
	}
	r.badRequests.WithLabelValues(webhook, reason).Inc()
}

// ReviewSize records the size of an AdmissionReview read.
func (r *Recorder) ReviewSize(webhook string, n int) {
	if r == nil {
		return
	}
	r.reviewBytes.WithLabelValues(webhook).Observe(float64(n))
}

// UnreadableStored records an admitted write to a stored object with a field
// leaseguard could not read.
func (r *Recorder) UnreadableStored(res leaseobject.Resource) {
	if r == nil {
		return
	}
	r.unreadableStored.WithLabelValues(string(res)).Inc()
}

// Coalesced records an early renewal the mutating webhook coalesced.
func (r *Recorder) Coalesced(res leaseobject.Resource) {
	if r == nil {
		return
	}
	r.coalesced.WithLabelValues(string(res)).Inc()
}

// Acknowledged records a shared MultiClusterLease renewal by a manager that
// is not designated, acknowledged without being stored.
func (r *Recorder) Acknowledged(res leaseobject.Resource) {
	if r == nil {
		return
	}
	r.acknowledged.WithLabelValues(string(res)).Inc()
}

// PolicyReload records a reload attempt of the policy file.
func (r *Recorder) PolicyReload(ok bool) {
	if r == nil {
		return
	}
	if ok {
		r.policyReloads.WithLabelValues("success").Inc()
		r.policyValid.Set(1)
		return
	}
	r.policyReloads.WithLabelValues("invalid").Inc()
	r.policyValid.Set(0)
}

// PolicyLoaded marks the policy as valid at startup.
func (r *Recorder) PolicyLoaded() {
	if r != nil {
		r.policyValid.Set(1)
	}
}

// ManageAdmissionConfiguration registers the collectors of the admission
// configuration sync, so that they exist only where it runs.
func (r *Recorder) ManageAdmissionConfiguration(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{r.configInSync, r.configUpdates, r.configRepairs, r.configBypassed} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// AdmissionConfigurationSync records the outcome of one sync of the
// admission configuration with the policy in force: whether it is in sync,
// whether an operator bypassed it, the objects written and how many of
// those writes undid someone else's edit.
func (r *Recorder) AdmissionConfigurationSync(inSync, bypassed bool, updated, repaired int) {
	if r == nil {
		return
	}
	r.configInSync.Set(gauge(inSync))
	r.configBypassed.Set(gauge(bypassed))
	r.configUpdates.Add(float64(updated))
	r.configRepairs.Add(float64(repaired))
}

func gauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// InstrumentWebhook counts the requests h answers at path, by status code,
// and those in flight.
func (r *Recorder) InstrumentWebhook(path string, h http.Handler) http.Handler {
	if r == nil {
		return h
	}
	labels := prometheus.Labels{"webhook": path}
	return promhttp.InstrumentHandlerInFlight(r.webhookInFlight.With(labels),
		promhttp.InstrumentHandlerCounter(r.webhookRequests.MustCurryWith(labels), h))
}

// TLSHandshakeError records a connection to the webhook port whose TLS
// handshake failed.
func (r *Recorder) TLSHandshakeError() {
	if r == nil {
		return
	}
	r.handshakeErrors.Inc()
}

// MetricsAuth registers the collectors of the metrics port's token
// authentication (--metrics-secure), so that they exist only where it runs.
func (r *Recorder) MetricsAuth(reg prometheus.Registerer) error {
	r.metricsTokenReviews = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leaseguard_metrics_token_reviews_total",
		Help: "TokenReviews the metrics port sent, by lane (unseen: a token not seen to authenticate within the hour, budgeted per source; known: one that has) and result (authenticated, rejected, error).",
	}, []string{"lane", "result"})
	r.metricsTokensRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leaseguard_metrics_tokens_refused_total",
		Help: "Bearer tokens the metrics port refused without a TokenReview, by reason: not_a_token (401), source_limit (its source spent its budget of reviews of new tokens: 429), busy (every slot for reviews of new tokens stayed taken: 429).",
	}, []string{"reason"})
	for _, reason := range []string{"not_a_token", "source_limit", "busy"} {
		r.metricsTokensRefused.WithLabelValues(reason)
	}
	if err := reg.Register(r.metricsTokenReviews); err != nil {
		return err
	}
	return reg.Register(r.metricsTokensRefused)
}

// MetricsTokenReview records a TokenReview of the metrics port.
func (r *Recorder) MetricsTokenReview(lane, result string) {
	if r == nil || r.metricsTokenReviews == nil {
		return
	}
	r.metricsTokenReviews.WithLabelValues(lane, result).Inc()
}

// MetricsTokenRefused records a bearer token refused without a review.
func (r *Recorder) MetricsTokenRefused(reason string) {
	if r == nil || r.metricsTokensRefused == nil {
		return
	}
	r.metricsTokensRefused.WithLabelValues(reason).Inc()
}
