// Package leasewatchtest is a synthetic source of Lease watch events for
// measuring leaseguard top's client side (informer, transform, aggregation)
// at rates a real API server on one machine cannot sustain. It is a
// list-watch, not an API server: tests of behaviour go through the real
// kube-apiserver.
package leasewatchtest

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// Leases lists N Leases spread over namespaces and streams the renewals
// that Renew sends, each a new object with a new resourceVersion, as a
// watch decoding them from the API server would hand them over.
type Leases struct {
	N          int
	Namespaces int

	once    sync.Once
	watcher *watch.FakeWatcher
	mu      sync.Mutex
	rv      int64
	names   []string
	nss     []string
	// fields is a managedFields body of a realistic size (client-go's
	// leader election writes every spec field).
	fields string
}

// IsWatchListSemanticsUnSupported tells client-go's reflector to list and
// then watch, as it does with an API server without streaming lists.
func (l *Leases) IsWatchListSemanticsUnSupported() bool { return true }

func (l *Leases) init() {
	l.once.Do(func() {
		if l.Namespaces <= 0 {
			l.Namespaces = 1
		}
		l.watcher = watch.NewFakeWithChanSize(1024, false)
		l.names = make([]string, l.N)
		l.nss = make([]string, l.N)
		for i := range l.names {
			l.names[i] = fmt.Sprintf("leader-%05d", i)
			l.nss[i] = fmt.Sprintf("ns-%04d", i%l.Namespaces)
		}
		l.fields = `{"f:spec":{"f:acquireTime":{},"f:holderIdentity":{},"f:leaseDurationSeconds":{},"f:leaseTransitions":{},"f:renewTime":{}}}`
		l.rv = 1
	})
}

// Lease i as stored at resourceVersion rv, renewed at t.
func (l *Leases) lease(i int, rv int64, t time.Time) *coordinationv1.Lease {
	holder := l.names[i] + "-0_3f9a4c1e-5b7d-4e2a-9c8b-1d2e3f4a5b6c"
	duration, transitions := int32(15), int32(1)
	renew := metav1.NewMicroTime(t)
	acquired := metav1.NewMicroTime(time.Unix(1_700_000_000, 0))
	stamp := metav1.NewTime(t.Truncate(time.Second))
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: l.names[i], Namespace: l.nss[i], ResourceVersion: strconv.FormatInt(rv, 10),
			UID:               "00000000-0000-0000-0000-000000000000",
			CreationTimestamp: metav1.NewTime(time.Unix(1_700_000_000, 0)),
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager: "manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "coordination.k8s.io/v1",
				Time: &stamp, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(l.fields),
			}},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: &holder, LeaseDurationSeconds: &duration, AcquireTime: &acquired,
			RenewTime: &renew, LeaseTransitions: &transitions,
		},
	}
}

// List returns every lease, renewed at the time of listing.
func (l *Leases) List(metav1.ListOptions) (runtime.Object, error) {
	l.init()
	now := time.Now()
	list := &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	list.Items = make([]coordinationv1.Lease, l.N)
	for i := range list.Items {
		list.Items[i] = *l.lease(i, 1, now)
	}
	return list, nil
}

// Watch returns the stream of renewals.
func (l *Leases) Watch(metav1.ListOptions) (watch.Interface, error) {
	l.init()
	return l.watcher, nil
}

// Renew sends lease i renewed at t; it blocks while the informer lags
// more than a buffer behind.
func (l *Leases) Renew(i int, t time.Time) {
	l.init()
	l.mu.Lock()
	l.rv++
	rv := l.rv
	l.mu.Unlock()
	l.watcher.Modify(l.lease(i, rv, t))
}

// Name returns the namespace and name of lease i.
func (l *Leases) Name(i int) (string, string) {
	l.init()
	return l.nss[i], l.names[i]
}
