package topui

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"sigs.k8s.io/yaml"

	"github.com/leaseguard/leaseguard/internal/top/leasetraffic"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// source builds reports of n leases in two namespaces, one contested.
func source(n int) (Source, *[]leasetraffic.ReportOptions) {
	a := leasetraffic.New(leasetraffic.Options{Window: 10 * time.Second})
	for i := 0; i < n; i++ {
		o := &leasetraffic.Observation{Resource: leaseobject.Leases, ResourceVersion: "1",
			Object: leaseobject.Object{Namespace: []string{"team-a", "team-b"}[i%2], Name: "lease-" + string(rune('a'+i)),
				Spec: leaseobject.Spec{Holder: "pod-0_x", RenewTime: t0, LeaseDuration: 15 * time.Second}},
			Managers: []leasetraffic.ManagedEntry{{Manager: "m1", Time: t0}}}
		a.Seed(o)
	}
	a.Start(t0)
	shared := &leasetraffic.Observation{Resource: leaseobject.MultiClusterLeases, ResourceVersion: "2",
		Object:   leaseobject.Object{Namespace: "team-a", Name: "shared", Spec: leaseobject.Spec{Holder: "cluster-a", RenewTime: t0.Add(time.Second)}},
		Managers: []leasetraffic.ManagedEntry{{Manager: "m1", Time: t0.Add(time.Second)}, {Manager: "m2", Time: t0}}}
	a.Observe(shared, t0.Add(time.Second))
	s2 := *shared
	s2.ResourceVersion = "3"
	s2.Object.Spec.RenewTime = t0.Add(2 * time.Second)
	s2.Managers = []leasetraffic.ManagedEntry{{Manager: "m1", Time: t0.Add(time.Second)}, {Manager: "m2", Time: t0.Add(2 * time.Second)}}
	a.Observe(&s2, t0.Add(2*time.Second))
	var asked []leasetraffic.ReportOptions
	return func(o leasetraffic.ReportOptions) *leasetraffic.Report {
		asked = append(asked, o)
		return a.Report(t0.Add(3*time.Second), o)
	}, &asked
}

func TestWriteFormats(t *testing.T) {
	src, _ := source(3)
	r := src(leasetraffic.ReportOptions{})
	var table, wide, js, ym bytes.Buffer
	for f, w := range map[Format]*bytes.Buffer{Table: &table, Wide: &wide, JSON: &js, YAML: &ym} {
		if err := Write(w, r, f); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"cluster: 4 leases, 0.67 writes/s, 2 writes, 1 contested", "NAMESPACE  LEASES  WRITES/S", "team-a     shared", "mcl", "yes"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if !strings.Contains(wide.String(), "m1×1,m2×1") || !strings.Contains(wide.String(), "yes: 2 writers") {
		t.Errorf("wide lacks the writers and the reason:\n%s", wide.String())
	}
	wh, _ := source(3)
	withWebhook := wh(leasetraffic.ReportOptions{Webhook: map[leasetraffic.Key]*leasetraffic.WebhookTraffic{
		{Resource: leaseobject.MultiClusterLeases, Namespace: "team-a", Name: "shared"}: {Requests: 5, Verdicts: leasetraffic.WebhookVerdicts{Allow: 3, Deny: 2},
			Users: []leasetraffic.UserRequests{{User: "system:serviceaccount:a:x", Requests: 3}, {User: "system:serviceaccount:a:y", Requests: 2}}},
	}})
	withWebhook.WebhookSources = []string{"http://127.0.0.1:8080/debug/leases"}
	var webhookWide bytes.Buffer
	if err := Write(&webhookWide, withWebhook, Wide); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(webhookWide.String(), "sa:a:x×3,sa:a:y×2  allow 3,deny 2") || !strings.Contains(webhookWide.String(), "2 writers, 2 users (webhook)") {
		t.Errorf("wide lacks the webhook's users and verdicts:\n%s", webhookWide.String())
	}
	var back leasetraffic.Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Cluster.Leases != 4 || back.Leases[0].Name != "shared" {
		t.Errorf("JSON does not round-trip (%v): %s", err, js.String())
	}
	if err := yaml.Unmarshal(ym.Bytes(), &back); err != nil || back.Cluster.Contested != 1 {
		t.Errorf("YAML does not round-trip (%v): %s", err, ym.String())
	}
	if _, err := ParseFormat("xml"); err == nil {
		t.Error("-o xml accepted")
	}
}

// The live view fits the terminal, scrolls, and its keys change the sort,
// the resource filter and the columns.
func TestLiveViewKeysAndLayout(t *testing.T) {
	src, asked := source(40)
	m := &model{src: src, interval: time.Second}
	m.refresh()
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	lines := strings.Split(m.render(), "\n")
	if len(lines) != 24 {
		t.Errorf("%d lines on a 24-line terminal", len(lines))
	}
	for _, l := range lines {
		if w := ansi.StringWidth(l); w > 80 {
			t.Errorf("line %d columns wide on an 80-column terminal: %q", w, l)
		}
	}
	if !strings.Contains(lines[len(lines)-1], "q quit") {
		t.Errorf("last line %q, want the controls", lines[len(lines)-1])
	}
	first := m.render()
	m.Update(tea.KeyPressMsg{Code: tea.KeyDown})
	if m.offset != 1 || m.render() == first {
		t.Errorf("down did not scroll (offset %d)", m.offset)
	}
	m.Update(tea.KeyPressMsg{Code: 's', Text: "s"})
	m.Update(tea.KeyPressMsg{Code: 'r', Text: "r"})
	m.Update(tea.KeyPressMsg{Code: 'w', Text: "w"})
	last := (*asked)[len(*asked)-1]
	if last.Sort != leasetraffic.SortName || last.Resource != leaseobject.Leases || !m.wide {
		t.Errorf("after s, r, w: sort %q, resource %q, wide %v", last.Sort, last.Resource, m.wide)
	}
	if _, cmd := m.Update(tea.KeyPressMsg{Code: 'q', Text: "q"}); cmd == nil {
		t.Error("q does not quit")
	}
}
