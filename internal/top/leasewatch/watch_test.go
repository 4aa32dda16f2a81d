package leasewatch

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/leaseguard/leaseguard/internal/top/leasetraffic"
	"github.com/leaseguard/leaseguard/internal/top/leasewatch/leasewatchtest"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
)

// The initial list seeds the aggregator; every later delivery with a new
// resourceVersion is one write, attributed to its field manager.
func TestInformerFeedsTheAggregator(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := &leasewatchtest.Leases{N: 3, Namespaces: 2}
	counter := &countingSink{next: leasetraffic.New(leasetraffic.Options{Window: time.Minute})}
	st, err := StartSources(ctx, []Source{{Resource: leaseobject.Leases, ListerWatcher: src, Example: &coordinationv1.Lease{}}}, counter, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Watching) != 1 || st.Watching[0] != leaseobject.Leases {
		t.Fatalf("watching %v", st.Watching)
	}
	now := time.Now()
	src.Renew(0, now)
	src.Renew(0, now.Add(2*time.Second))
	src.Renew(2, now.Add(time.Second))
	deadline := time.Now().Add(10 * time.Second)
	for counter.delivered.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	r := counter.next.(*leasetraffic.Aggregator).Report(time.Now(), leasetraffic.ReportOptions{Sort: leasetraffic.SortName})
	if r.Cluster.Leases != 3 || r.Cluster.Writes != 3 {
		t.Fatalf("totals %+v, want 3 leases and 3 writes", r.Cluster)
	}
	ns, name := src.Name(0)
	l := r.Leases[0]
	if l.Namespace != ns || l.Name != name || l.Writes != 2 || l.RenewIntervalSeconds <= 0 || l.RenewIntervalSeconds > 2 ||
		len(l.Writers) != 1 || l.Writers[0].Manager != "manager" || l.Holder != name+"-0_3f9a4c1e-5b7d-4e2a-9c8b-1d2e3f4a5b6c" {
		t.Fatalf("lease 0: %+v", l)
	}
}

// A custom resource is stored as written: fields of the wrong shape are
// left unset instead of failing the watch.
func TestMultiClusterLeaseFieldsOfTheWrongShape(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "x", "namespace": "ns", "resourceVersion": "7",
			"annotations": map[string]any{leaseobject.DesignationAnnotation: "someone"}},
		"spec": map[string]any{"holderIdentity": "cluster-a", "renewTime": "yesterday", "leaseDurationSeconds": "15", "retryPeriodSeconds": int64(-1),
			"renewDeadlineSeconds": int64(10)},
		"status": map[string]any{"globalLeaseTransitions": int64(4)},
	}}
	o := fromMultiClusterLease(u)
	s := o.obs.Object.Spec
	if s.Holder != "cluster-a" || !s.RenewTime.IsZero() || s.LeaseDuration != 0 || s.RetryPeriod != 0 || s.RenewDeadline != 10*time.Second ||
		o.obs.Transitions != 4 || o.obs.Object.Designated != "someone" || o.obs.ResourceVersion != "7" {
		t.Fatalf("read %+v", o.obs)
	}
	if _, err := transform(leaseobject.MultiClusterLeases)(42); err == nil {
		t.Fatal("an unexpected object type was accepted")
	}
}
