package testfixtures

import (
	"time"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
)

// HardeningPolicy holds the rules of the hardening cases
// (docs/security.md), which the decision core's tables and the routing's
// specification both decide: a shared lease with every defence on, a
// coalescing rule, a plain one and designation by annotation, each
// selecting its own namespace.
const HardeningPolicy = `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
clockSkew: 2s
rules:
- name: hard
  resources: [leases, multiclusterleases]
  namespaces: [hard]
  managers: ["user:mgr-*"]
  designation: auto
  operators: ["user:op"]
  statusWriters: ["user:mcl-ctrl"]
  holderBinding: pod
  minRenewInterval: 5s
  backOffLosers: true
- name: coalesce
  resources: [leases, multiclusterleases]
  namespaces: [coalesce]
  managers: ["user:mgr-*"]
  designation: auto
  coalesceRenewals: auto
  minRenewInterval: auto
- name: plain
  resources: [leases, multiclusterleases]
  namespaces: [plain]
  managers: ["user:mgr-*"]
  minRenewInterval: 5s
- name: hard-annot
  resources: [leases]
  namespaces: [hard-annot]
  managers: ["user:mgr-*"]
  designation: annotation
  operators: ["user:op"]
`

// T0 is the stored renewTime of the fixtures' objects.
var T0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// ObjectOption changes a fixture object.
type ObjectOption func(*leaseobject.Object)

// Object is lease name of resource res in ns, held by "h1", renewed at T0,
// with a 15 s lease duration; a Lease was also acquired a minute before T0
// and has seen one transition (a MultiClusterLease has neither field).
func Object(res leaseobject.Resource, ns, name string, opts ...ObjectOption) *leaseobject.Object {
	o := &leaseobject.Object{
		Namespace:         ns,
		Name:              name,
		CreationTimestamp: T0.Add(-time.Hour),
		Spec: leaseobject.Spec{
			Holder:        "h1",
			RenewTime:     T0,
			LeaseDuration: 15 * time.Second,
		},
	}
	if res == leaseobject.Leases {
		o.Spec.AcquireTime = T0.Add(-time.Minute)
		o.Spec.Transitions = 1
	}
	for _, f := range opts {
		f(o)
	}
	return o
}

// Holder sets spec.holderIdentity.
func Holder(h string) ObjectOption { return func(o *leaseobject.Object) { o.Spec.Holder = h } }

// RenewAt sets renewTime to T0+d.
func RenewAt(d time.Duration) ObjectOption {
	return func(o *leaseobject.Object) { o.Spec.RenewTime = T0.Add(d) }
}

// StampedAt gives the object the managedFields entry that owns renewTime,
// dated T0+d (whole seconds): the API server's stamp of the write that
// moved renewTime.
func StampedAt(d time.Duration) ObjectOption {
	return func(o *leaseobject.Object) {
		ts := T0.Add(d).UTC().Truncate(time.Second)
		o.ManagedTimes = append(o.ManagedTimes, leaseobject.ManagedTime{Key: "manager\nUpdate\n\nv1", Raw: ts.Format(time.RFC3339), Time: ts, RenewWriter: true})
		o.RenewWrite = ts
	}
}

// NoRenewTime clears renewTime.
func NoRenewTime() ObjectOption {
	return func(o *leaseobject.Object) { o.Spec.RenewTime = time.Time{} }
}

// Designated sets the designation annotation to u.
func Designated(u string) ObjectOption {
	return func(o *leaseobject.Object) { o.Designated, o.HasDesignation = u, true }
}
