package leasestats

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
)

// Below capacity the counts are exact, with verdicts and users per lease.
func TestExactBelowCapacity(t *testing.T) {
	s := New(10, 10)
	for i := 0; i < 30; i++ {
		s.Observe(leaseobject.MultiClusterLeases, "cnrm-system", "kcc-leader", "manager-a", policy.Allow)
	}
	for i := 0; i < 20; i++ {
		s.Observe(leaseobject.MultiClusterLeases, "cnrm-system", "kcc-leader", "manager-b", policy.Deny)
	}
	s.Observe(leaseobject.Leases, "cnrm-system", "kcc-leader-a", "manager-a", policy.Warn)
	snap := s.Snapshot(0)
	if snap.Requests != 51 || len(snap.Leases) != 2 || len(snap.Writers) != 2 {
		t.Fatalf("snapshot %+v", snap)
	}
	top := snap.Leases[0]
	want := LeaseCount{Resource: "multiclusterleases", Namespace: "cnrm-system", Name: "kcc-leader", Requests: 50,
		Verdicts: Verdicts{Allow: 30, Deny: 20}, Users: []UserCount{{"manager-a", 30}, {"manager-b", 20}}}
	if fmt.Sprint(top) != fmt.Sprint(want) {
		t.Fatalf("top lease %+v, want %+v", top, want)
	}
	if w := snap.Writers[0]; w.User != "manager-a" || w.Requests != 31 || w.Error != 0 || w.Verdicts != (Verdicts{Allow: 30, Warn: 1}) {
		t.Fatalf("top writer %+v", w)
	}
}

// Past capacity, every key seen more than total/capacity times is kept,
// and its true count lies within [count - error, count].
func TestHeavyHittersPastCapacity(t *testing.T) {
	const capacity, n = 50, 200_000
	s := New(capacity, capacity)
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rng, 1.2, 1, 9_999)
	truth := map[string]int64{}
	for i := 0; i < n; i++ {
		name := fmt.Sprint("lease-", zipf.Uint64())
		truth[name]++
		s.Observe(leaseobject.Leases, "ns", name, "user-"+name, policy.Allow)
	}
	snap := s.Snapshot(0)
	kept := map[string]LeaseCount{}
	for _, l := range snap.Leases {
		kept[l.Name] = l
		if got := truth[l.Name]; got > l.Requests || got < l.Requests-l.Error {
			t.Errorf("%s: true %d outside [%d, %d]", l.Name, got, l.Requests-l.Error, l.Requests)
		}
	}
	heavy := 0
	for name, c := range truth {
		if c > n/capacity {
			heavy++
			if _, ok := kept[name]; !ok {
				t.Errorf("%s seen %d times (> %d) is not kept", name, c, n/capacity)
			}
		}
	}
	if heavy == 0 || len(snap.Leases) != capacity {
		t.Fatalf("%d heavy hitters, %d counters: the test proves nothing", heavy, len(snap.Leases))
	}
	if snap.Leases[0].Name != "lease-0" {
		t.Errorf("heaviest %s, want lease-0", snap.Leases[0].Name)
	}
}

func TestNilStatsIgnoresObservations(t *testing.T) {
	var s *Stats
	s.Observe(leaseobject.Leases, "a", "b", "c", policy.Deny)
	s.ObserveRequest(&leaseobject.Request{Resource: leaseobject.Leases, Old: &leaseobject.Object{Name: "x"}}, policy.Allow)
}

func TestObserveRequestUsesTheOldObjectOfADelete(t *testing.T) {
	s := New(0, 0)
	s.ObserveRequest(&leaseobject.Request{Resource: leaseobject.Leases, Operation: leaseobject.Delete, Caller: leaseobject.Caller{Username: "u"},
		Old: &leaseobject.Object{Namespace: "ns", Name: "gone"}}, policy.Deny)
	if snap := s.Snapshot(0); len(snap.Leases) != 1 || snap.Leases[0].Name != "gone" || snap.Leases[0].Verdicts.Deny != 1 {
		t.Fatalf("snapshot %+v", snap)
	}
}

func TestServeHTTP(t *testing.T) {
	s := New(0, 0)
	for i := 0; i < 5; i++ {
		s.Observe(leaseobject.Leases, "ns", fmt.Sprint("l", i), "u", policy.Allow)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Path+"?limit=2", nil))
	var snap Snapshot
	if err := json.Unmarshal(rec.Body.Bytes(), &snap); err != nil || rec.Code != 200 || len(snap.Leases) != 2 || snap.Requests != 5 {
		t.Fatalf("HTTP %d %s (%v)", rec.Code, rec.Body, err)
	}
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Path+"?limit=x", nil))
	if rec.Code != http.StatusBadRequest || rec.Body.String() != "limit \"x\": want a whole number, 0 for all\n" {
		t.Fatalf("bad limit: HTTP %d %q", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("POST: HTTP %d", rec.Code)
	}
}

func TestConcurrentObservations(t *testing.T) {
	s := New(8, 8)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				s.Observe(leaseobject.Leases, "ns", fmt.Sprint("l", i%16), fmt.Sprint("u", g), policy.Verdict(i%4))
				if i%100 == 0 {
					_ = s.Snapshot(3)
				}
			}
		}()
	}
	wg.Wait()
	if snap := s.Snapshot(0); snap.Requests != 4000 {
		t.Fatalf("%d requests, want 4000", snap.Requests)
	}
}

func BenchmarkObserve(b *testing.B) {
	s := New(0, 0)
	names := make([]string, 10_000)
	users := make([]string, 10_000)
	for i := range names {
		names[i], users[i] = fmt.Sprint("lease-", i), fmt.Sprint("manager-", i)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s.Observe(leaseobject.Leases, "ns", names[i%len(names)], users[i%len(users)], policy.Allow)
	}
}

// The table keeps its keys until others push them out: a megabyte name,
// namespace or user (posted straight to the port; the API server allows
// 253 bytes of name) is kept cut, and the table holds little.
func TestLongKeysAreKeptCut(t *testing.T) {
	s := New(100, 100)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range 50 {
		long := fmt.Sprint(i) + strings.Repeat("x", 1<<20)
		s.Observe(leaseobject.Leases, long, long, long, policy.Deny)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if held := int64(after.HeapAlloc) - int64(before.HeapAlloc); held > 4<<20 {
		t.Errorf("50 observations of 1 MiB keys hold %d MiB", held>>20)
	}
	snap := s.Snapshot(1)
	l, w := snap.Leases[0], snap.Writers[0]
	for _, k := range []string{l.Namespace, l.Name, l.Users[0].User, w.User} {
		if len(k) != maxKeyBytes+len("...") || !strings.HasSuffix(k, "...") {
			t.Errorf("key of %d bytes: %.40q", len(k), k)
		}
	}
}
