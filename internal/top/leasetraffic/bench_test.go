package leasetraffic

import (
	"fmt"
	"testing"
	"time"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
)

// benchLeases builds n leases renewed every 2s for a minute, so that their
// rings have grown as in a long run.
func benchLeases(b *testing.B, n int) (*Aggregator, []Observation, []string) {
	a := New(Options{Window: 30 * time.Second})
	obs := make([]Observation, n)
	for i := range obs {
		obs[i] = Observation{
			Resource:        leaseobject.Leases,
			ResourceVersion: "1",
			Object: leaseobject.Object{Namespace: fmt.Sprintf("ns-%04d", i%1000), Name: fmt.Sprintf("leader-%05d", i),
				Spec: leaseobject.Spec{Holder: "pod-0_x", LeaseDuration: 15 * time.Second, RenewTime: t0}},
			Managers: []ManagedEntry{{Manager: "manager", Time: t0}},
		}
		a.Seed(&obs[i])
	}
	a.Start(t0)
	rvs := make([]string, 64)
	for i := range rvs {
		rvs[i] = fmt.Sprint(i + 2)
	}
	return a, obs, rvs
}

// BenchmarkObserve is one renewal of one of 10,000 leases, each renewed
// every 2s: the aggregator's cost per watch event at 5,000 events/s.
func BenchmarkObserve(b *testing.B) {
	const n = 10_000
	a, obs, rvs := benchLeases(b, n)
	at := t0
	step := func(i int) {
		o := &obs[i%n]
		if i%n == 0 {
			at = at.Add(2 * time.Second)
		}
		o.ResourceVersion = rvs[(i/n)%len(rvs)]
		o.Object.Spec.RenewTime = at
		o.Managers[0].Time = at
		a.Observe(o, at)
	}
	for i := range 30 * n {
		step(i)
	}
	b.ReportAllocs()
	i := 30 * n
	for b.Loop() {
		step(i)
		i++
	}
}

// BenchmarkReport builds one report of 10,000 leases: the cost of one
// refresh of the live view.
func BenchmarkReport(b *testing.B) {
	a, _, _ := benchLeases(b, 10_000)
	b.ReportAllocs()
	for b.Loop() {
		_ = a.Report(t0.Add(time.Minute), ReportOptions{Limit: 50})
	}
}
