package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const dashboardFile = "config/grafana/leaseguard.json"

// dashboardExternal are the metrics the dashboard reads from other
// exporters beside the alerts' (external), with their labels: kube-apiserver 1.37
// (k8s.io/apiserver/pkg/endpoints/metrics, pkg/storage/etcd3/metrics,
// pkg/admission/metrics) and Prometheus's own up.
var dashboardExternal = map[string][]string{
	"up":                      {"job", "instance"},
	"apiserver_request_total": {"verb", "dry_run", "group", "version", "resource", "subresource", "scope", "component", "code"},
	"etcd_requests_total":     {"operation", "group", "resource"},
	"apiserver_admission_webhook_admission_duration_seconds_bucket": {"name", "type", "operation", "rejected", "le"},
}

type dashboardQueries struct {
	Panels  int
	Queries []struct {
		Panel, Expr string
		Selectors   []struct {
			Metric string
			Labels []string
		}
		Groupings []struct {
			By      []string
			Metrics []string
		}
	}
}

// The committed dashboard is what hack/dashboard generates (the chart's copy:
// TestChartFilesAreGenerated).
func TestDashboardIsGenerated(t *testing.T) {
	generated := run(t, binary(t, "DASHBOARD"))
	committed, err := os.ReadFile(filepath.Join(root, dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	if string(generated) != string(committed) {
		t.Errorf("%s is not what hack/dashboard generates now: run `make dashboard`", dashboardFile)
	}
}

// Every panel queries, every query parses (Prometheus's own parser,
// through promrules), and every metric it selects, every label it matches
// and every label it groups by is one leaseguard (webhook/serve/metrics) or the
// named exporter really exports: a renamed metric or label fails here, not
// as an empty panel in production.
func TestDashboardQueriesNameExportedMetrics(t *testing.T) {
	var out dashboardQueries
	if err := json.Unmarshal(run(t, binary(t, "PROMRULES"), "dashboard", filepath.Join(root, dashboardFile)), &out); err != nil {
		t.Fatal(err)
	}
	fams := registered(t)
	labelsOf := func(metric string) ([]string, bool) {
		if strings.HasPrefix(metric, "leaseguard_") {
			return resolve(fams, metric)
		}
		if l, ok := dashboardExternal[metric]; ok {
			return l, true
		}
		l, ok := external[metric] // the alerts' (alerts_test.go)
		return l, ok
	}
	if out.Panels < 10 || len(out.Queries) < out.Panels {
		t.Fatalf("%d panels, %d queries", out.Panels, len(out.Queries))
	}
	used := map[string]bool{}
	for _, q := range out.Queries {
		if len(q.Selectors) == 0 {
			t.Errorf("panel %q has no query", q.Panel)
		}
		for _, s := range q.Selectors {
			want, ok := labelsOf(s.Metric)
			if !ok {
				t.Errorf("panel %q: %s is neither leaseguard's nor a listed exporter's", q.Panel, s.Metric)
				continue
			}
			used[s.Metric] = true
			for _, l := range s.Labels {
				if !slices.Contains(want, l) && !slices.Contains(targetLabels, l) {
					t.Errorf("panel %q: %s has no label %s (exported: %v)", q.Panel, s.Metric, l, want)
				}
			}
		}
		for _, g := range q.Groupings {
			for _, l := range g.By {
				for _, m := range g.Metrics {
					if want, ok := labelsOf(m); ok && !slices.Contains(want, l) && !slices.Contains(targetLabels, l) {
						t.Errorf("panel %q: groups %s by %s, which it does not have (exported: %v)", q.Panel, m, l, want)
					}
				}
			}
		}
	}
	// What the dashboard is for: traffic, verdicts, savings, designation,
	// latency.
	for _, m := range []string{"leaseguard_decisions_total", "leaseguard_coalesced_renewals_total", "leaseguard_acknowledged_renewals_total",
		"leaseguard_designation_changes_total", "leaseguard_decision_duration_seconds_bucket", "apiserver_request_total", "etcd_requests_total"} {
		if !used[m] {
			t.Errorf("no panel reads %s", m)
		}
	}
}
