package chart

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/leaseguard/leaseguard/webhook/serve/metrics"
)

const (
	alertsFile = "config/prometheus/alerts.yaml"
	runbook    = "docs/alerts.md"
	// runbookBase is where runbook_url points: docs/alerts.md on the
	// default branch.
	runbookBase = "https://github.com/leaseguard/leaseguard/blob/main/docs/alerts.md#"
)

// family is a metric family a collector describes.
type family struct {
	labels    []string
	histogram bool
}

// describer is a Registerer that only records what is registered with it:
// every metric of every collector (by Describe), whether or not it has been
// observed yet, which Gather would not show.
type describer struct {
	families map[string]family
}

var descName = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

func (d *describer) Register(c prometheus.Collector) error {
	_, histogram := c.(*prometheus.HistogramVec)
	if _, ok := c.(prometheus.Histogram); ok {
		histogram = true
	}
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		m := descName.FindStringSubmatch(desc.String())
		if m == nil {
			continue
		}
		var labels []string
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		d.families[m[1]] = family{labels: labels, histogram: histogram}
	}
	return nil
}

func (d *describer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = d.Register(c)
	}
}

func (*describer) Unregister(prometheus.Collector) bool { return false }

// registered returns the metrics webhook/serve/metrics registers, by name.
func registered(t *testing.T) map[string]family {
	t.Helper()
	d := &describer{families: map[string]family{}}
	described, err := metrics.New(d)
	if err != nil {
		t.Fatal(err)
	}
	// Registered only where leaseguard keeps its configuration (as shipped).
	if err := described.ManageAdmissionConfiguration(d); err != nil {
		t.Fatal(err)
	}
	// What Describe says is what a registry serves: cross-check the one
	// metric that exists before any observation.
	reg := prometheus.NewRegistry()
	rec, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	rec.PolicyLoaded()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if _, ok := d.families[mf.GetName()]; !ok {
			t.Fatalf("the registry serves %s, which Describe did not show", mf.GetName())
		}
	}
	if len(d.families) < 5 {
		t.Fatalf("webhook/serve/metrics describes %d metrics: %v", len(d.families), d.families)
	}
	return d.families
}

// external are the metrics the alerts read from other exporters, with their
// labels: kube-apiserver 1.37 (k8s.io/apiserver/pkg/admission/metrics),
// cert-manager v1.21 (pkg/metrics), controller-runtime's certwatcher, which
// leaseguard serves on its /metrics (webhook/serve/server gathers ctrlmetrics).
var external = map[string][]string{
	"apiserver_admission_webhook_rejection_count":          {"name", "type", "operation", "error_type", "rejection_code"},
	"apiserver_admission_webhook_fail_open_count":          {"name", "type"},
	"apiserver_mutating_admission_policy_check_total":      {"policy", "policy_binding", "error_type"},
	"apiserver_validating_admission_policy_check_total":    {"policy", "policy_binding", "error_type", "enforcement_action"},
	"certmanager_certificate_expiration_timestamp_seconds": {"name", "namespace", "issuer_name", "issuer_kind", "issuer_group"},
	"certwatcher_read_certificate_errors_total":            nil,
	"certwatcher_read_certificate_total":                   nil,
}

// targetLabels are what a Prometheus scrape adds (a ServiceMonitor's target
// labels, or job and instance of a static scrape).
var targetLabels = []string{"job", "instance", "namespace", "pod", "service", "endpoint", "container"}

// resolve returns the family a series name belongs to, and its labels: a
// family's own name, or a histogram's _bucket (with le), _sum, _count.
func resolve(fams map[string]family, name string) ([]string, bool) {
	if f, ok := fams[name]; ok && !f.histogram {
		return f.labels, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		if f, ok := fams[base]; ok && f.histogram {
			if suffix == "_bucket" {
				return append(slices.Clone(f.labels), "le"), true
			}
			return f.labels, true
		}
	}
	return nil, false
}

type promrulesOutput struct {
	Rules []struct {
		Group, Name string
		Metrics     []string
	}
	Series []struct {
		File, Text, Metric string
		Labels             []string
	}
}

// Every metric an alert selects exists: leaseguard_* ones are registered by
// webhook/serve/metrics (read by Prometheus's own PromQL parser, through
// promrules), the others are listed in external with their source. And the
// promtool unit tests' input series have exactly the labels their exporter
// gives them, so the tests test the alerts against the real shape.
func TestAlertsNameOnlyExportedMetrics(t *testing.T) {
	promrules := binary(t, "PROMRULES")
	tests, err := filepath.Glob(filepath.Join(root, "config/prometheus/tests/*.yaml"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no unit tests in config/prometheus/tests: %v", err)
	}
	var out promrulesOutput
	if err := json.Unmarshal(run(t, promrules, append([]string{"metrics", filepath.Join(root, alertsFile)}, tests...)...), &out); err != nil {
		t.Fatal(err)
	}
	fams := registered(t)
	if len(out.Rules) == 0 {
		t.Fatal("promrules found no rules")
	}
	for _, r := range out.Rules {
		if len(r.Metrics) == 0 {
			t.Errorf("%s selects no metric", r.Name)
		}
		for _, m := range r.Metrics {
			if strings.HasPrefix(m, "leaseguard_") {
				if _, ok := resolve(fams, m); !ok {
					t.Errorf("%s selects %s, which webhook/serve/metrics does not register", r.Name, m)
				}
			} else if _, ok := external[m]; !ok {
				t.Errorf("%s selects %s, neither leaseguard's nor a known exporter's", r.Name, m)
			}
		}
	}
	if len(out.Series) == 0 {
		t.Fatal("promrules found no input series")
	}
	for _, s := range out.Series {
		want, ok := resolve(fams, s.Metric)
		if !strings.HasPrefix(s.Metric, "leaseguard_") {
			want, ok = external[s.Metric]
		}
		if !ok {
			t.Errorf("%s: input series %s: no such metric", filepath.Base(s.File), s.Metric)
			continue
		}
		for _, l := range want {
			// A label exported empty (invariant of an allow) is no label
			// in Prometheus: the series must say so explicitly.
			if !slices.Contains(s.Labels, l) && !strings.Contains(s.Text, l+`=""`) {
				t.Errorf("%s: input series %s lacks label %s (exported: %v)", filepath.Base(s.File), s.Metric, l, want)
			}
		}
		for _, l := range s.Labels {
			if !slices.Contains(want, l) && !slices.Contains(targetLabels, l) {
				t.Errorf("%s: input series %s has label %s, which is not exported (exported: %v)", filepath.Base(s.File), s.Metric, l, want)
			}
		}
	}
}

type prometheusRule struct {
	Spec struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Alert       string
				Expr        string
				Labels      map[string]string
				Annotations map[string]string
			}
		}
	}
}

type unitTests struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string `json:"alertname"`
			ExpAlerts []any  `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	}
}

// Every alert has a severity, a summary and a description, a runbook_url
// that is its section of docs/alerts.md (which exists and says what it
// means, what users see and what to do), and a promtool unit test in which
// it fires; config/prometheus's kustomization installs the alerts.
func TestAlertsHaveRunbooksAndTests(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, alertsFile))
	if err != nil {
		t.Fatal(err)
	}
	var pr prometheusRule
	if err := yaml.Unmarshal(data, &pr); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, runbook))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{}
	parts := regexp.MustCompile(`(?m)^## `).Split(string(doc), -1)
	for _, p := range parts[1:] {
		heading, body, _ := strings.Cut(p, "\n")
		sections[strings.ToLower(strings.TrimSpace(heading))] = body
	}
	fires := map[string]bool{}
	tests, _ := filepath.Glob(filepath.Join(root, "config/prometheus/tests/*.yaml"))
	for _, f := range tests {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var ut unitTests
		if err := yaml.Unmarshal(data, &ut); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, tc := range ut.Tests {
			for _, a := range tc.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					fires[a.Alertname] = true
				}
			}
		}
	}
	n := 0
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" {
				t.Errorf("group %s: a rule that is not an alert", g.Name)
				continue
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
			}
			for _, a := range []string{"summary", "description"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: no %s", r.Alert, a)
				}
			}
			anchor := strings.ToLower(r.Alert)
			if got := r.Annotations["runbook_url"]; got != runbookBase+anchor {
				t.Errorf("%s: runbook_url %q, want %s", r.Alert, got, runbookBase+anchor)
			}
			body, ok := sections[anchor]
			if !ok {
				t.Errorf("%s: %s has no section ## %s", r.Alert, runbook, r.Alert)
			}
			for _, part := range []string{"What it means", "What users see", "What to do"} {
				if ok && !strings.Contains(body, part) {
					t.Errorf("%s: its section of %s does not say %q", r.Alert, runbook, part)
				}
			}
			if !fires[r.Alert] {
				t.Errorf("%s: no unit test in config/prometheus/tests expects it to fire", r.Alert)
			}
		}
	}
	if n == 0 {
		t.Fatal("no alerts")
	}
	var kust struct{ Resources []string }
	data, err = os.ReadFile(filepath.Join(root, "config/prometheus/kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &kust); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(kust.Resources, filepath.Base(alertsFile)) {
		t.Errorf("config/prometheus/kustomization.yaml does not install %s", alertsFile)
	}
}
