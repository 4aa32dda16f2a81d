package leasewatch

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/leaseguard/leaseguard/internal/top/leasetraffic"
	"github.com/leaseguard/leaseguard/internal/top/leasewatch/leasewatchtest"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
)

// countingSink counts deliveries and passes them on (to nothing for the
// baseline).
type countingSink struct {
	next      Sink
	delivered atomic.Int64
}

func (s *countingSink) Seed(o *leasetraffic.Observation) {
	if s.next != nil {
		s.next.Seed(o)
	}
}

func (s *countingSink) Observe(o *leasetraffic.Observation, at time.Time) {
	if s.next != nil {
		s.next.Observe(o, at)
	}
	s.delivered.Add(1)
}

func (s *countingSink) Delete(res leaseobject.Resource, ns, name string) {
	if s.next != nil {
		s.next.Delete(res, ns, name)
	}
}

func (s *countingSink) Start(now time.Time) {
	if s.next != nil {
		s.next.Start(now)
	}
}

// BenchmarkInformerEvent is one lease renewal of 10,000 leases through the
// client side of leaseguard top: a client-go informer with the transform,
// into the aggregator (sink=aggregator) or into nothing (sink=noop, the
// baseline: what any informer costs). The synthetic source builds each
// event as a decoded Lease, so decoding itself is not measured.
func BenchmarkInformerEvent(b *testing.B) {
	for _, sink := range []string{"noop", "aggregator"} {
		b.Run("sink="+sink, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			src := &leasewatchtest.Leases{N: 10_000, Namespaces: 1000}
			counter := &countingSink{}
			if sink == "aggregator" {
				counter.next = leasetraffic.New(leasetraffic.Options{Window: 30 * time.Second})
			}
			if _, err := StartSources(ctx, []Source{{Resource: leaseobject.Leases, ListerWatcher: src, Example: &coordinationv1.Lease{}}}, counter, nil); err != nil {
				b.Fatal(err)
			}
			at := time.Now()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				src.Renew(i%src.N, at.Add(time.Duration(i)*200*time.Microsecond))
				i++
			}
			for counter.delivered.Load() < int64(i) {
				time.Sleep(time.Millisecond)
			}
		})
	}
}
