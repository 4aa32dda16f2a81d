package leasetraffic

import (
	"fmt"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// writer simulates one client renewing one lease: every write stores a new
// resourceVersion, renewTime and managedFields time.
type writer struct {
	obs     Observation
	rv      int
	manager string
}

func newWriter(res leaseobject.Resource, ns, name, holder, manager string) *writer {
	w := &writer{manager: manager}
	w.obs.Resource = res
	w.obs.Object = leaseobject.Object{Namespace: ns, Name: name, Spec: leaseobject.Spec{Holder: holder, LeaseDuration: 15 * time.Second, RenewTime: t0}}
	w.obs.Managers = []ManagedEntry{{Manager: manager, Time: t0}}
	w.obs.ResourceVersion = "1"
	return w
}

// write renews at t as manager (the writer's own when empty).
func (w *writer) write(a *Aggregator, t time.Time, manager string) {
	if manager == "" {
		manager = w.manager
	}
	w.rv++
	w.obs.ResourceVersion = fmt.Sprint(w.rv + 1)
	w.obs.Object.Spec.RenewTime = t
	found := false
	for i := range w.obs.Managers {
		if w.obs.Managers[i].Manager == manager {
			w.obs.Managers[i].Time = t.Truncate(time.Second)
			found = true
		}
	}
	if !found {
		w.obs.Managers = append(w.obs.Managers, ManagedEntry{Manager: manager, Time: t.Truncate(time.Second)})
	}
	a.Observe(&w.obs, t)
}

func within(t *testing.T, what string, got, want, tolerance float64) {
	t.Helper()
	if math.Abs(got-want) > tolerance*want {
		t.Errorf("%s = %.4f, want %.4f ± %.0f%%", what, got, want, tolerance*100)
	}
}

func find(t *testing.T, r *Report, ns, name string) *LeaseTraffic {
	t.Helper()
	for i := range r.Leases {
		if r.Leases[i].Namespace == ns && r.Leases[i].Name == name {
			return &r.Leases[i]
		}
	}
	t.Fatalf("lease %s/%s not in the report", ns, name)
	return nil
}

// Leases written at known periods report their rates and renew intervals,
// and the totals add up.
func TestRatesAndIntervalsAtKnownPeriods(t *testing.T) {
	a := New(Options{Window: 30 * time.Second})
	periods := map[string]time.Duration{"fast": 500 * time.Millisecond, "client-go": 2 * time.Second, "slow": 10 * time.Second, "kcc": 3 * time.Second}
	writers := map[string]*writer{}
	for name := range periods {
		ns := "a"
		if name == "kcc" {
			ns = "b"
		}
		writers[name] = newWriter(leaseobject.Leases, ns, name, "h", "m")
		a.Seed(&writers[name].obs)
	}
	a.Start(t0)
	end := t0.Add(95 * time.Second)
	for name, p := range periods {
		for at := t0.Add(p); !at.After(end); at = at.Add(p) {
			writers[name].write(a, at, "")
		}
	}
	r := a.Report(end.Add(time.Millisecond), ReportOptions{})
	if r.ObservedSeconds != 30 {
		t.Errorf("observed %vs, want the 30s window", r.ObservedSeconds)
	}
	var sum float64
	for name, p := range periods {
		l := find(t, r, writers[name].obs.Object.Namespace, name)
		within(t, name+" writes/s", l.WritesPerSecond, 1/p.Seconds(), 0.10)
		within(t, name+" renew interval", l.RenewIntervalSeconds, p.Seconds(), 0.001)
		if l.Contested {
			t.Errorf("%s is contested (%s) with a single writer", name, l.ContestedReason)
		}
		if len(l.Writers) != 1 || l.Writers[0].Manager != "m" {
			t.Errorf("%s writers %+v, want m", name, l.Writers)
		}
		sum += l.WritesPerSecond
	}
	within(t, "cluster writes/s", r.Cluster.WritesPerSecond, sum, 1e-9)
	if r.Cluster.Leases != 4 || len(r.Namespaces) != 2 || r.Namespaces[0].Namespace != "a" || r.Namespaces[0].Leases != 3 {
		t.Errorf("totals %+v, namespaces %+v", r.Cluster, r.Namespaces)
	}
	if r.Leases[0].Name != "fast" || r.Leases[len(r.Leases)-1].Name != "slow" {
		t.Errorf("not sorted by rate: %s ... %s", r.Leases[0].Name, r.Leases[len(r.Leases)-1].Name)
	}
}

// Just after the start, rates are averaged over the time observed, not over
// the whole window.
func TestRatesBeforeTheWindowFills(t *testing.T) {
	a := New(Options{Window: time.Minute})
	w := newWriter(leaseobject.Leases, "a", "x", "h", "m")
	a.Seed(&w.obs)
	a.Start(t0)
	for i := 1; i <= 5; i++ {
		w.write(a, t0.Add(time.Duration(i)*2*time.Second), "")
	}
	r := a.Report(t0.Add(10*time.Second+time.Millisecond), ReportOptions{})
	within(t, "writes/s after 10s", find(t, r, "a", "x").WritesPerSecond, 0.5, 0.01)
}

// A lease written more often than the ring holds still reports its rate,
// from the span of its last writes, and says so.
func TestRateOfABusyLeasePastTheRing(t *testing.T) {
	a := New(Options{Window: 30 * time.Second})
	w := newWriter(leaseobject.Leases, "a", "busy", "h", "m")
	a.Seed(&w.obs)
	a.Start(t0)
	for at := t0.Add(50 * time.Millisecond); at.Before(t0.Add(40 * time.Second)); at = at.Add(50 * time.Millisecond) {
		w.write(a, at, "")
	}
	l := find(t, a.Report(t0.Add(40*time.Second), ReportOptions{}), "a", "busy")
	within(t, "writes/s", l.WritesPerSecond, 20, 0.10)
	if !l.RatesTruncated || l.Writes != MaxEvents {
		t.Errorf("truncated %v with %d writes kept, want true with %d", l.RatesTruncated, l.Writes, MaxEvents)
	}
}

// Writers come from the managedFields entry that advanced; two field
// managers renewing one lease make it contested; a holder change too.
func TestWritersAndContention(t *testing.T) {
	a := New(Options{Window: 30 * time.Second})
	shared := newWriter(leaseobject.MultiClusterLeases, "cnrm-system", "kcc-leader", "cluster-a", "manager-a")
	handover := newWriter(leaseobject.Leases, "a", "handover", "pod-1", "elector")
	a.Seed(&shared.obs)
	a.Seed(&handover.obs)
	a.Start(t0)
	for i := 1; i <= 10; i++ {
		at := t0.Add(time.Duration(i) * 2 * time.Second)
		shared.write(a, at, "manager-a")
		shared.write(a, at.Add(700*time.Millisecond), "manager-b")
	}
	handover.write(a, t0.Add(time.Second), "")
	handover.obs.Object.Spec.Holder = "pod-2"
	handover.write(a, t0.Add(20*time.Second), "")
	r := a.Report(t0.Add(22*time.Second), ReportOptions{Sort: SortWriters})
	l := find(t, r, "cnrm-system", "kcc-leader")
	if len(l.Writers) != 2 || l.Writers[0].Writes != 10 || l.Writers[1].Writes != 10 {
		t.Errorf("writers %+v, want manager-a and manager-b with 10 writes each", l.Writers)
	}
	if !l.Contested || l.ContestedReason != "2 writers" {
		t.Errorf("contested %v (%q), want true (2 writers)", l.Contested, l.ContestedReason)
	}
	if r.Leases[0].Name != "kcc-leader" {
		t.Errorf("sort by writers put %s first", r.Leases[0].Name)
	}
	h := find(t, r, "a", "handover")
	if !h.Contested || h.HolderChanges != 1 || h.Holder != "pod-2" {
		t.Errorf("handover: contested %v, %d holder changes, holder %q", h.Contested, h.HolderChanges, h.Holder)
	}
	if r.Cluster.Contested != 2 {
		t.Errorf("cluster contested %d, want 2", r.Cluster.Contested)
	}
}

// The initial list is state, not writes; a re-delivered resourceVersion is
// not a write; deleted leases leave the report.
func TestSeedsRelistsAndDeletes(t *testing.T) {
	a := New(Options{Window: 30 * time.Second})
	w := newWriter(leaseobject.Leases, "a", "x", "h", "m")
	a.Seed(&w.obs)
	a.Start(t0)
	a.Observe(&w.obs, t0.Add(time.Second)) // same resourceVersion
	r := a.Report(t0.Add(2*time.Second), ReportOptions{})
	if l := find(t, r, "a", "x"); l.Writes != 0 {
		t.Errorf("%d writes, want 0", l.Writes)
	}
	w.write(a, t0.Add(3*time.Second), "")
	if l := find(t, a.Report(t0.Add(4*time.Second), ReportOptions{}), "a", "x"); l.Writes != 1 {
		t.Errorf("%d writes, want 1", l.Writes)
	}
	a.Delete(leaseobject.Leases, "a", "x")
	if r := a.Report(t0.Add(5*time.Second), ReportOptions{}); len(r.Leases) != 0 || r.Cluster.Leases != 0 {
		t.Errorf("deleted lease still reported: %+v", r.Leases)
	}
}

func TestFiltersAndLimit(t *testing.T) {
	a := New(Options{})
	for _, k := range []Key{{leaseobject.Leases, "a", "1"}, {leaseobject.Leases, "b", "2"}, {leaseobject.MultiClusterLeases, "a", "3"}} {
		w := newWriter(k.Resource, k.Namespace, k.Name, "h", "m")
		a.Seed(&w.obs)
	}
	a.Start(t0)
	if r := a.Report(t0, ReportOptions{Namespace: "a"}); len(r.Leases) != 2 || r.Cluster.Leases != 2 {
		t.Errorf("namespace a: %d leases, totals %d", len(r.Leases), r.Cluster.Leases)
	}
	if r := a.Report(t0, ReportOptions{Resource: leaseobject.MultiClusterLeases}); len(r.Leases) != 1 || r.Leases[0].Name != "3" {
		t.Errorf("multiclusterleases: %+v", r.Leases)
	}
	if r := a.Report(t0, ReportOptions{Limit: 1, Sort: SortName}); len(r.Leases) != 1 || r.Cluster.Leases != 3 || r.Leases[0].Name != "1" {
		t.Errorf("limit 1: %d leases (first %s), totals %d", len(r.Leases), r.Leases[0].Name, r.Cluster.Leases)
	}
}

func TestParseSortKey(t *testing.T) {
	if k, err := ParseSortKey("expiry"); err != nil || k != SortExpiry {
		t.Errorf("expiry: %v %v", k, err)
	}
	if _, err := ParseSortKey("speed"); err == nil || err.Error() != `--sort "speed": want one of rate, name, expiry, writers, interval, projected` {
		t.Errorf("speed: %v", err)
	}
}

// countingProjector holds back every renewal and refuses holder changes;
// renewals with a renewTime on an even second it coalesces when coalesce is
// set.
type countingProjector struct{ coalesce bool }

func (c countingProjector) Project(_ leaseobject.Resource, old, new *leaseobject.Object, _ time.Time, status bool) Projection {
	switch {
	case status || old == nil:
		return Projection{}
	case old.Spec.Holder != new.Spec.Holder:
		return Projection{Judged: true, Rule: "r", Verdict: policy.Deny, Invariant: policy.InvariantFencing, Code: http.StatusForbidden}
	case c.coalesce && new.Spec.RenewTime.Second()%2 == 0:
		return Projection{Judged: true, Rule: "r", Coalesced: true}
	}
	return Projection{Judged: true, Rule: "r", Verdict: policy.Deny, Invariant: policy.InvariantRenewalRate, Code: http.StatusTooManyRequests}
}

func TestProjectionCounts(t *testing.T) {
	a := New(Options{Window: 30 * time.Second, Projector: countingProjector{}})
	w := newWriter(leaseobject.Leases, "a", "x", "h", "m")
	a.Seed(&w.obs)
	a.Start(t0)
	for i := 1; i <= 5; i++ {
		w.write(a, t0.Add(time.Duration(i)*time.Second), "")
	}
	w.obs.Object.Spec.Holder = "other"
	w.write(a, t0.Add(6*time.Second), "")
	r := a.Report(t0.Add(7*time.Second), ReportOptions{})
	l := find(t, r, "a", "x")
	if l.Projected == nil || l.Projected.HeldBack != 5 || l.Projected.Refused != 1 {
		t.Fatalf("lease effects %+v, want 5 held back, 1 refused", l.Projected)
	}
	if p := r.Cluster.Projected; p == nil || p.HeldBack != 5 || p.Refused != 1 {
		t.Fatalf("cluster effects %+v", p)
	}
	want := []ProjectedOutcome{
		{Rule: "r", Verdict: "deny", Invariant: "I4", Code: 403, Effect: "refuse", Writes: 1},
		{Rule: "r", Verdict: "deny", Invariant: "I6", Code: 429, Effect: "hold back", Writes: 5},
	}
	if fmt.Sprint(r.Policy.Outcomes) != fmt.Sprint(want) {
		t.Fatalf("outcomes %+v, want %+v", r.Policy.Outcomes, want)
	}
}

// Coalesced renewals are counted apart: neither refused nor held back, and
// not admitted either (never stored).
func TestProjectionCountsCoalesced(t *testing.T) {
	a := New(Options{Window: 30 * time.Second, Projector: countingProjector{coalesce: true}})
	w := newWriter(leaseobject.Leases, "a", "x", "h", "m")
	a.Seed(&w.obs)
	a.Start(t0)
	for i := 1; i <= 6; i++ {
		w.obs.Object.Spec.RenewTime = t0.Add(time.Duration(i) * time.Second)
		w.write(a, t0.Add(time.Duration(i)*time.Second), "")
	}
	r := a.Report(t0.Add(7*time.Second), ReportOptions{})
	if p := r.Cluster.Projected; p == nil || p.Coalesced != 3 || p.HeldBack != 3 || p.Admitted != 0 {
		t.Fatalf("cluster effects %+v, want 3 coalesced, 3 held back", p)
	}
	want := []ProjectedOutcome{
		{Rule: "r", Verdict: "allow", Effect: "coalesce", Writes: 3},
		{Rule: "r", Verdict: "deny", Invariant: "I6", Code: 429, Effect: "hold back", Writes: 3},
	}
	if fmt.Sprint(r.Policy.Outcomes) != fmt.Sprint(want) {
		t.Fatalf("outcomes %+v, want %+v", r.Policy.Outcomes, want)
	}
}

// Observing a renewal does not allocate once the lease's ring has grown.
func TestObserveDoesNotAllocate(t *testing.T) {
	a := New(Options{Window: 30 * time.Second})
	w := newWriter(leaseobject.Leases, "a", "x", "h", "m")
	a.Seed(&w.obs)
	a.Start(t0)
	rvs := make([]string, 1000)
	for i := range rvs {
		rvs[i] = fmt.Sprint(i + 2)
	}
	at := t0
	i := 0
	step := func() {
		at = at.Add(2 * time.Second)
		w.obs.ResourceVersion = rvs[i%len(rvs)]
		i++
		w.obs.Object.Spec.RenewTime = at
		w.obs.Managers[0].Time = at
		a.Observe(&w.obs, at)
	}
	for range 2 * MaxEvents {
		step()
	}
	if n := testing.AllocsPerRun(200, step); n != 0 {
		t.Fatalf("%v allocations per observed write, want 0", n)
	}
}

// Informers deliver from their own goroutines while the UI reads reports.
func TestConcurrentObserveAndReport(t *testing.T) {
	a := New(Options{Window: 5 * time.Second, Projector: countingProjector{}})
	a.Start(t0)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := newWriter(leaseobject.Leases, "ns", fmt.Sprint("lease-", g), "h", "m")
			a.Seed(&w.obs)
			for i := 1; i <= 500; i++ {
				w.write(a, t0.Add(time.Duration(i)*10*time.Millisecond), "")
			}
		}()
	}
	for range 50 {
		_ = a.Report(t0.Add(3*time.Second), ReportOptions{})
	}
	wg.Wait()
	r := a.Report(t0.Add(5*time.Second), ReportOptions{})
	if r.Cluster.Leases != 4 {
		t.Fatalf("%d leases, want 4", r.Cluster.Leases)
	}
}
