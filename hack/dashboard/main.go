// Command dashboard writes leaseguard's Grafana dashboard, built with the
// Grafana foundation SDK, as JSON to standard output (`make dashboard`
// writes config/grafana/leaseguard.json; test/chart checks that the
// committed file is this program's output and that every query names only
// exported metrics and labels).
//
// Lease and user names are deliberately not metric labels (10,000 leases
// cost the series of one): the dashboard shows lease traffic per resource,
// rule, verdict and webhook, and points at `kubectl leaseguard top
// --webhook-stats` for the leases and managers behind it.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Every query reads the Prometheus the user picks.
var datasource = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// leaseguardWebhooks selects leaseguard's webhooks in the API server's
// admission metrics (their names end in leaseguard.io).
const leaseguardWebhooks = `name=~".*leaseguard\\.io"`

// leaseResources selects Leases and MultiClusterLeases. The API server's
// request metrics name HTTP verbs (POST, PUT, PATCH, APPLY for a
// server-side apply), its etcd metrics operations (create, update): a real
// run (test/perf/dashshot -print) showed which.
const leaseResources = `group=~"coordination.k8s.io|multicluster.core.cnrm.cloud.google.com", resource=~"leases|multiclusterleases"`

func query(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().Datasource(datasource).Expr(expr).LegendFormat(legend).Range()
}

func series(title, description, unit string, queries ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().Title(title).Description(description).Datasource(datasource).
		Unit(unit).Min(0).Height(8).Span(12).
		Legend(common.NewVizLegendOptionsBuilder().DisplayMode(common.LegendDisplayModeTable).Placement(common.LegendPlacementBottom).ShowLegend(true).Calcs([]string{"mean", "max"}))
	for _, q := range queries {
		p.WithTarget(q)
	}
	return p
}

func single(title, description, expr string) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Title(title).Description(description).Datasource(datasource).Height(4).Span(6).
		WithTarget(prometheus.NewDataqueryBuilder().Datasource(datasource).Expr(expr).Instant())
}

func build() (dashboard.Dashboard, error) {
	rate := func(selector string) string { return "rate(" + selector + "[$__rate_interval])" }
	return dashboard.NewDashboardBuilder("leaseguard: lease traffic").
		Uid("leaseguard-lease-traffic").
		Description("Lease and MultiClusterLease writes as leaseguard judges them and as the API server serves and stores them. Per lease and manager: kubectl leaseguard top --webhook-stats (metrics carry no lease names).").
		Tags([]string{"leaseguard", "kubernetes", "admission"}).
		Refresh("30s").Time("now-1h", "now").Timezone(common.TimeZoneBrowser).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").Label("Prometheus").Type("prometheus")).
		WithRow(dashboard.NewRowBuilder("Health")).
		WithPanel(single("Replicas serving", "leaseguard targets Prometheus scrapes (the fail-closed webhook refuses identity changes when none is up).",
			`count(up{job=~".*leaseguard.*"} == 1)`)).
		WithPanel(single("Policy file valid", "0: a replica keeps the last good policy because the file it reads is invalid (LeaseguardPolicyFileInvalid).",
			`min(leaseguard_policy_file_valid)`)).
		WithPanel(single("Webhook configurations in sync", "0: a replica cannot render its webhook configurations for the policy in force (--manage-webhook-configurations).",
			`min(leaseguard_admission_configuration_in_sync)`)).
		WithPanel(single("Admitted fail-open (1h)", "Writes the API server admitted without leaseguard's answer (failurePolicy Ignore).",
			`sum(increase(apiserver_admission_webhook_fail_open_count{`+leaseguardWebhooks+`}[1h])) or vector(0)`)).
		WithRow(dashboard.NewRowBuilder("Verdicts")).
		WithPanel(series("Decisions by verdict", "Every lease write leaseguard judged, by verdict.", "reqps",
			query(`sum by (verdict) (`+rate(`leaseguard_decisions_total`)+`)`, "{{verdict}}"))).
		WithPanel(series("Refusals and warnings by rule", "Denied, warned and audited writes, by rule and the invariant they broke (docs/design.md).", "reqps",
			query(`sum by (rule, invariant, verdict) (`+rate(`leaseguard_decisions_total{verdict=~"deny|warn|audit"}`)+`)`, "{{rule}} {{invariant}} {{verdict}}"))).
		WithPanel(series("Requests by rule", "Lease writes per rule and resource: which managers' leases cost the most.", "reqps",
			query(`sum by (rule, resource) (`+rate(`leaseguard_decisions_total`)+`)`, "{{rule}} ({{resource}})"))).
		WithPanel(series("Designation changes", "The designated manager of a shared MultiClusterLease moved (a flap every few minutes is LeaseguardDesignationFlapping).", "short",
			query(`sum by (rule) (increase(leaseguard_designation_changes_total[$__rate_interval]))`, "{{rule}}"))).
		WithRow(dashboard.NewRowBuilder("Lease traffic: requested, stored, not stored")).
		WithPanel(series("Lease writes requested vs stored", "Writes the API server answered with success, and writes it stored in etcd: the difference is what coalescing and acknowledgement saved.", "reqps",
			query(`sum by (resource) (`+rate(`apiserver_request_total{`+leaseResources+`, verb=~"POST|PUT|PATCH|APPLY", code=~"2.."}`)+`)`, "requested {{resource}}"),
			query(`sum by (resource) (`+rate(`etcd_requests_total{`+leaseResources+`, operation=~"create|update"}`)+`)`, "stored {{resource}}"))).
		WithPanel(series("Renewals answered without storing", "Renewals answered in the API server by leaseguard's MutatingAdmissionPolicy (early renewals coalesced and shared MultiClusterLease renewals acknowledged, no webhook call; failures: sent on unjudged), and those the mutating webhook coalesced or acknowledged (clusters without the policy, or what it could not judge).", "reqps",
			query(`sum by (error_type) (`+rate(`apiserver_mutating_admission_policy_check_total{policy="leaseguard-coalesce-renewals"}`)+`)`, "in the API server ({{error_type}})"),
			query(`sum by (resource) (`+rate(`leaseguard_coalesced_renewals_total`)+`)`, "coalesced by the webhook {{resource}}"),
			query(`sum by (resource) (`+rate(`leaseguard_acknowledged_renewals_total`)+`)`, "acknowledged by the webhook {{resource}}"))).
		WithPanel(series("Renewal interval (p50, p10)", "Time since the stored renewal, by the server clock, per rule: below the rule's minRenewInterval is renewing too often.", "s",
			query(`histogram_quantile(0.5, sum by (rule, le) (`+rate(`leaseguard_renewal_interval_seconds_bucket`)+`))`, "p50 {{rule}}"),
			query(`histogram_quantile(0.1, sum by (rule, le) (`+rate(`leaseguard_renewal_interval_seconds_bucket`)+`))`, "p10 {{rule}}"))).
		WithRow(dashboard.NewRowBuilder("Webhook")).
		WithPanel(series("Admission latency (p99)", "What a lease write waits for leaseguard, as the API server measures it per webhook, and leaseguard's own decision time.", "s",
			query(`histogram_quantile(0.99, sum by (name, le) (`+rate(`apiserver_admission_webhook_admission_duration_seconds_bucket{`+leaseguardWebhooks+`}`)+`))`, "API server: {{name}}"),
			query(`histogram_quantile(0.99, sum by (resource, le) (`+rate(`leaseguard_decision_duration_seconds_bucket`)+`))`, "decision: {{resource}}"))).
		WithPanel(series("Failed calls and refused reviews", "Calls the API server could not complete (by error type) and reviews leaseguard refused unread (busy: 503, the failurePolicy decides).", "reqps",
			query(`sum by (name, error_type) (`+rate(`apiserver_admission_webhook_rejection_count{`+leaseguardWebhooks+`, error_type!="no_error"}`)+`)`, "{{name}}: {{error_type}}"),
			query(`sum by (webhook, reason) (`+rate(`leaseguard_bad_requests_total`)+`)`, "refused {{webhook}}: {{reason}}"))).
		WithPanel(series("Webhook requests by HTTP code", "leaseguard's HTTP answers per webhook path: 200 carries a verdict, 503 is busy (the failurePolicy decides).", "reqps",
			query(`sum by (webhook, code) (`+rate(`leaseguard_webhook_requests_total`)+`)`, "{{webhook}} {{code}}"))).
		WithPanel(series("Review size (p99)", "The AdmissionReviews leaseguard reads: a lease write's is a few KiB.", "bytes",
			query(`histogram_quantile(0.99, sum by (webhook, le) (`+rate(`leaseguard_admission_review_bytes_bucket`)+`))`, "{{webhook}}"))).
		Build()
}

func main() {
	d, err := build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}
