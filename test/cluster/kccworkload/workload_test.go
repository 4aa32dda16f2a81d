package kccworkload

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestSummarizeMeasuresTheLongestTimeANamespaceHadNoLeader(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	reconciled := []string{"kcc-01", "kcc-02"}
	look := func(s int, a, b bool) Sample {
		return Sample{At: t0.Add(time.Duration(s) * time.Second), Leading: map[string]map[string]bool{
			"cnrm-system": {"kcc-01": a, "kcc-02": b}}}
	}
	samples := []Sample{
		look(0, true, true),
		look(1, false, true), // kcc-01 loses its leader
		look(2, false, false),
		look(3, false, true),
		look(4, true, true), // kcc-01 leads again: 3 s without
		look(5, true, false),
		look(6, true, false), // kcc-02 still without at the end: 2 s (5, 6, and the period)
	}
	f := Summarize(samples, "cnrm-system", reconciled)
	if f.Samples != 7 || f.AllLeading != 2 || f.Fewest != 0 {
		t.Errorf("samples %d, all leading %d, fewest %d; want 7, 2, 0", f.Samples, f.AllLeading, f.Fewest)
	}
	if !f.Missed["kcc-01"] || !f.Missed["kcc-02"] || len(f.Missed) != 2 {
		t.Errorf("missed %v, want kcc-01 and kcc-02", f.Missed)
	}
	if f.LongestGap != 3*time.Second || f.GapNamespace != "kcc-01" {
		t.Errorf("longest gap %s of %q, want 3s of kcc-01", f.LongestGap, f.GapNamespace)
	}
	if want := "12:00:01 not leading: kcc-01"; f.FirstMiss != want {
		t.Errorf("first miss %q, want %q", f.FirstMiss, want)
	}
	// A cluster with no answer at all leads nowhere.
	if f := Summarize(samples, "cnrm-unguarded", reconciled); f.AllLeading != 0 || f.LongestGap != 7*time.Second {
		t.Errorf("a cluster never sampled leading: all leading %d, longest gap %s; want 0 and 7s", f.AllLeading, f.LongestGap)
	}
	if f := Summarize(nil, "cnrm-system", reconciled); f.Samples != 0 || f.Fewest != 0 || f.LongestGap != 0 {
		t.Errorf("no samples: %+v", f)
	}
}

func TestExitsCountRestartsAndReplacedPodsByNamespace(t *testing.T) {
	before := Processes{"cnrm-system": {"a": {Namespace: "kcc-01", Restarts: 0}, "b": {Namespace: "kcc-02", Restarts: 2}}, "cnrm-unguarded": {"c": {Namespace: "kcc-01", Restarts: 1}}}
	after := Processes{
		"cnrm-system":    {"a": {Namespace: "kcc-01", Restarts: 1}, "b": {Namespace: "kcc-02", Restarts: 2}, "d": {Namespace: "kcc-03", Restarts: 1}}, // a restarted; d is new and restarted once
		"cnrm-unguarded": {"e": {Namespace: "kcc-01", Restarts: 0}},                                                                                   // c replaced by e
	}
	got := Exits(before, after)
	if got["cnrm-system"]["kcc-01"] != 1 || got["cnrm-system"]["kcc-02"] != 0 || got["cnrm-system"]["kcc-03"] != 1 || Total(got["cnrm-system"]) != 2 {
		t.Errorf("cnrm-system's exits %v, want kcc-01 1 and kcc-03 1", got["cnrm-system"])
	}
	if got["cnrm-unguarded"]["kcc-01"] != 1 || Total(got["cnrm-unguarded"]) != 1 {
		t.Errorf("cnrm-unguarded's exits %v, want kcc-01 1", got["cnrm-unguarded"])
	}
}

// TestLookAsksEveryManagerAtOnce runs Look against managers' status
// endpoints (one leading, one not, one answering 500, one with no Pod IP),
// under -race: every manager is asked from its own goroutine.
func TestLookAsksEveryManagerAtOnce(t *testing.T) {
	leading := map[string]bool{"kcc-01": true, "kcc-02": false}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns := r.URL.Query().Get("ns")
		if ns == "kcc-03" {
			http.Error(w, "broken", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, `{"namespace":%q,"leading":%t}`, ns, leading[ns])
	}))
	defer srv.Close()
	host, port, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	w := &Workload{Reconciled: []string{"kcc-01", "kcc-02", "kcc-03", "kcc-04"}}
	s := w.NewSampler()
	s.port, _ = strconv.Atoi(port)
	// Every manager answers on the one test server; the namespace rides
	// in the query so that it can tell them apart.
	s.http.Transport = rewriteQuery{host: host, next: http.DefaultTransport}
	for _, c := range Clusters {
		for _, ns := range []string{"kcc-01", "kcc-02", "kcc-03"} {
			s.ips[c.System+"/"+ns] = ns + ".test"
		}
	}
	got := s.Look(context.Background())
	for _, c := range Clusters {
		want := map[string]bool{"kcc-01": true, "kcc-02": false, "kcc-03": false, "kcc-04": false}
		for ns, leads := range want {
			if got.Leading[c.System][ns] != leads {
				t.Errorf("%s/%s leads %t, want %t", c.System, ns, got.Leading[c.System][ns], leads)
			}
		}
	}
}

// rewriteQuery sends a request for host "kcc-01.test" to the test server
// at host, with ?ns=kcc-01.
type rewriteQuery struct {
	host string
	next http.RoundTripper
}

func (r rewriteQuery) RoundTrip(req *http.Request) (*http.Response, error) {
	name, port, _ := net.SplitHostPort(req.URL.Host)
	ns := strings.TrimSuffix(name, ".test")
	req = req.Clone(req.Context())
	req.URL.Host = net.JoinHostPort(r.host, port)
	req.URL.RawQuery = "ns=" + ns
	return r.next.RoundTrip(req)
}
