package policy

import (
	"os"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/leaseguard/leaseguard/api/v1alpha1"
	"github.com/leaseguard/leaseguard/test/testfixtures"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
)

// ownNamespace is leaseguard's namespace in every test compilation.
const ownNamespace = "leaseguard-system"

// t0 is the stored renewTime of most test objects.
var t0 = testfixtures.T0

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

// The objects of the tables are the shared fixtures' (test/testfixtures):
// mk builds one held by "h1", renewed at t0, with a 15 s lease duration (a
// Lease also acquired a minute earlier, after one transition); holder,
// renewAt, stampedAt (the API server's stamp of the write that moved
// renewTime), noRenew and desig change it.
type objOpt = testfixtures.ObjectOption

var (
	mk        = testfixtures.Object
	holder    = testfixtures.Holder
	renewAt   = testfixtures.RenewAt
	stampedAt = testfixtures.StampedAt
	noRenew   = testfixtures.NoRenewTime
	desig     = testfixtures.Designated
)

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
