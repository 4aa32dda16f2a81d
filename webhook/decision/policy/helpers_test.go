package policy

import (
	"os"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/leaseguard/leaseguard/api/v1alpha1"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
)

// ownNamespace is leaseguard's namespace in every test compilation.
const ownNamespace = "leaseguard-system"

// t0 is the stored renewTime of most test objects.
var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

const sec = time.Second

// decodePolicy strictly decodes a policy file, as the policyfile package
// does (unknown fields are errors).
func decodePolicy(tb testing.TB, src string) *v1alpha1.LeasePolicy {
	tb.Helper()
	var spec v1alpha1.LeasePolicy
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&spec); err != nil {
		tb.Fatalf("decoding policy: %v\n%s", err, src)
	}
	return &spec
}

func compileYAML(tb testing.TB, src string) (*Policy, field.ErrorList) {
	tb.Helper()
	return Compile(decodePolicy(tb, src), CompileOptions{OwnNamespace: ownNamespace})
}

func mustCompile(tb testing.TB, src string) *Policy {
	tb.Helper()
	p, errs := compileYAML(tb, src)
	if len(errs) > 0 {
		tb.Fatalf("policy does not compile: %v", errs.ToAggregate())
	}
	if p == nil {
		tb.Fatalf("Compile returned a nil policy and no errors")
	}
	return p
}

func readSample(tb testing.TB) string {
	tb.Helper()
	data, err := os.ReadFile("../../../config/samples/policy.yaml")
	if err != nil {
		tb.Fatalf("reading sample policy: %v", err)
	}
	return string(data)
}

// objOpt modifies a test object.
type objOpt func(*leaseobject.

	// mk builds an object held by "h1", renewed at t0, with a 15s lease duration;
	// a Lease additionally was acquired a minute before t0 and has seen one
	// transition. A MultiClusterLease has neither field.
	Object)

func mk(res leaseobject.Resource, ns, name string, opts ...objOpt) *leaseobject.Object {
	o := &leaseobject.Object{
		Namespace:         ns,
		Name:              name,
		CreationTimestamp: t0.Add(-time.Hour),
		Spec: leaseobject.Spec{
			Holder:        "h1",
			RenewTime:     t0,
			LeaseDuration: 15 * sec,
		},
	}
	if res == leaseobject.Leases {
		o.Spec.AcquireTime = t0.Add(-time.Minute)
		o.Spec.Transitions = 1
	}
	for _, f := range opts {
		f(o)
	}
	return o
}

func holder(h string) objOpt { return func(o *leaseobject.Object) { o.Spec.Holder = h } }

// renewAt sets renewTime to t0+d.
func renewAt(d time.Duration) objOpt {
	return func(o *leaseobject.Object) { o.Spec.RenewTime = t0.Add(d) }
}

// stampedAt gives the object the managedFields entry that owns renewTime,
// dated t0+d (whole seconds): the API server's stamp of the write that
// moved renewTime.
func stampedAt(d time.Duration) objOpt {
	return func(o *leaseobject.Object) {
		ts := t0.Add(d).UTC().Truncate(time.Second)
		o.ManagedTimes = append(o.ManagedTimes, leaseobject.ManagedTime{Key: "manager\nUpdate\n\nv1", Raw: ts.Format(time.RFC3339), Time: ts, RenewWriter: true})
		o.RenewWrite = ts
	}
}

func noRenew() objOpt { return func(o *leaseobject.Object) { o.Spec.RenewTime = time.Time{} } }

func noAcquire() objOpt { return func(o *leaseobject.Object) { o.Spec.AcquireTime = time.Time{} } }

// acquireAt sets acquireTime to t0+d.
func acquireAt(d time.Duration) objOpt {
	return func(o *leaseobject.Object) { o.Spec.AcquireTime = t0.Add(d) }
}

func transitions(n int32) objOpt { return func(o *leaseobject.Object) { o.Spec.Transitions = n } }

func leaseDur(d time.Duration) objOpt {
	return func(o *leaseobject.Object) { o.Spec.LeaseDuration = d }
}

// retryPeriod sets the retry period a MultiClusterLease declares
// (spec.retryPeriodSeconds).
func retryPeriod(d time.Duration) objOpt {
	return func(o *leaseobject.Object) { o.Spec.RetryPeriod = d }
}

// renewDeadline sets the renew deadline a MultiClusterLease declares
// (spec.renewDeadlineSeconds).
func renewDeadline(d time.Duration) objOpt {
	return func(o *leaseobject.Object) { o.Spec.RenewDeadline = d }
}

// createdAt sets the creation timestamp to t0+d.
func createdAt(d time.Duration) objOpt {
	return func(o *leaseobject.Object) { o.CreationTimestamp = t0.Add(d) }
}

// ctrlFinalizer gives the object the MultiClusterLease controller's
// finalizer.
func ctrlFinalizer() objOpt {
	return func(o *leaseobject.Object) { o.Finalizers = `["` + leaseobject.ControllerFinalizer + `"]` }
}

func ptr[T any](v T) *T { return &v }

// desig sets the designation annotation to u.
func desig(u string) objOpt {
	return func(o *leaseobject.Object) { o.Designated, o.HasDesignation = u, true }
}

// takeover makes the object a fresh acquisition by holder h at t0+at: the
// holder and renewTime change and, for a Lease, leaseTransitions goes from 1
// to 2 and acquireTime is the acquisition time.
func takeover(res leaseobject.Resource, h string, at time.Duration) objOpt {
	return func(o *leaseobject.Object) {
		o.Spec.Holder = h
		o.Spec.RenewTime = t0.Add(at)
		if res == leaseobject.Leases {
			o.Spec.Transitions = 2
			o.Spec.AcquireTime = t0.Add(at)
		}
	}
}

func kindOf(res leaseobject.Resource) string {
	if res == leaseobject.MultiClusterLeases {
		return "multiclusterlease"
	}
	return "lease"
}

var bothResources = []leaseobject.Resource{leaseobject.Leases, leaseobject.MultiClusterLeases}
