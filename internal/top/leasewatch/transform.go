package leasewatch

import (
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/leaseguard/leaseguard/internal/top/leasetraffic"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
)

// observed is what the informer caches instead of the full object: the
// identity the cache keys it by and the fields leaseguard reads.
type observed struct {
	metav1.ObjectMeta
	obs leasetraffic.Observation
}

func (o *observed) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (o *observed) DeepCopyObject() runtime.Object {
	c := &observed{obs: o.obs}
	o.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	c.obs.Managers = append([]leasetraffic.ManagedEntry(nil), o.obs.Managers...)
	return c
}

// transform cuts an object down before the informer caches it.
func transform(res leaseobject.Resource) cache.TransformFunc {
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *coordinationv1.Lease:
			return fromLease(o), nil
		case *unstructured.Unstructured:
			return fromMultiClusterLease(o), nil
		case *observed, cache.DeletedFinalStateUnknown:
			return obj, nil
		}
		return nil, fmt.Errorf("watching %s: unexpected object %T", res, obj)
	}
}

func newObserved(res leaseobject.Resource, m metav1.Object) *observed {
	o := &observed{ObjectMeta: metav1.ObjectMeta{
		Name: m.GetName(), Namespace: m.GetNamespace(), ResourceVersion: m.GetResourceVersion(),
	}}
	o.obs.Resource = res
	o.obs.ResourceVersion = o.ResourceVersion
	obj := &o.obs.Object
	obj.Name, obj.Namespace = o.Name, o.Namespace
	obj.CreationTimestamp = m.GetCreationTimestamp().Time
	if d, ok := m.GetAnnotations()[leaseobject.DesignationAnnotation]; ok {
		obj.Designated, obj.HasDesignation = d, true
	}
	managed := m.GetManagedFields()
	if len(managed) > 0 {
		o.obs.Managers = make([]leasetraffic.ManagedEntry, 0, min(len(managed), leasetraffic.MaxWriters))
	}
	for _, f := range managed {
		if len(o.obs.Managers) == leasetraffic.MaxWriters {
			break
		}
		e := leasetraffic.ManagedEntry{Manager: f.Manager, Subresource: f.Subresource}
		if f.Time != nil {
			e.Time = f.Time.Time
		}
		o.obs.Managers = append(o.obs.Managers, e)
	}
	return o
}

func fromLease(l *coordinationv1.Lease) *observed {
	o := newObserved(leaseobject.Leases, l)
	s := &o.obs.Object.Spec
	if h := l.Spec.HolderIdentity; h != nil {
		s.Holder = *h
	}
	if t := l.Spec.RenewTime; t != nil {
		s.RenewTime = t.Time
	}
	if t := l.Spec.AcquireTime; t != nil {
		s.AcquireTime = t.Time
	}
	if d := l.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		s.LeaseDuration = time.Duration(*d) * time.Second
	}
	if n := l.Spec.LeaseTransitions; n != nil {
		s.Transitions = *n
		o.obs.Transitions = *n
	}
	if st := l.Spec.Strategy; st != nil {
		s.Strategy = string(*st)
	}
	if p := l.Spec.PreferredHolder; p != nil {
		s.PreferredHolder = *p
	}
	return o
}

// fromMultiClusterLease reads the fields of a MultiClusterLease. A custom
// resource is stored as written, so a field of the wrong shape is left
// unset rather than failing the watch.
func fromMultiClusterLease(u *unstructured.Unstructured) *observed {
	o := newObserved(leaseobject.MultiClusterLeases, u)
	s := &o.obs.Object.Spec
	s.Holder, _, _ = unstructured.NestedString(u.Object, "spec", "holderIdentity")
	s.RenewTime = nestedTime(u, "spec", "renewTime")
	s.LeaseDuration = nestedSeconds(u, "spec", "leaseDurationSeconds")
	s.RenewDeadline = nestedSeconds(u, "spec", "renewDeadlineSeconds")
	s.RetryPeriod = nestedSeconds(u, "spec", "retryPeriodSeconds")
	if n, ok, _ := unstructured.NestedInt64(u.Object, "status", "globalLeaseTransitions"); ok && n >= 0 && n <= 1<<31-1 {
		o.obs.Transitions = int32(n)
	}
	return o
}

func nestedTime(u *unstructured.Unstructured, path ...string) time.Time {
	v, ok, _ := unstructured.NestedString(u.Object, path...)
	if !ok {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}
	}
	return t
}

func nestedSeconds(u *unstructured.Unstructured, path ...string) time.Duration {
	n, ok, _ := unstructured.NestedInt64(u.Object, path...)
	if !ok || n <= 0 || n > 1<<31-1 {
		return 0
	}
	return time.Duration(n) * time.Second
}
