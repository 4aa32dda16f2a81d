package manifests

import (
	"testing"
	"time"

	"github.com/leaseguard/leaseguard/test/testfixtures"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
)

// The cases of the routing specification (routingspec_test.go), written as
// the decision core's tables are: requests in policy's own view, against the
// hardening policy's rules.

// specPolicy holds the rules the cases route by: the hardening rules (a
// shared lease with every defence on, a coalescing rule without holder
// binding, designation by annotation) and a fixed designation.
const specPolicy = testfixtures.HardeningPolicy + `- name: fixed
  resources: [multiclusterleases]
  namespaces: [fixed]
  managers: ["user:mgr-*"]
  designation: "user:mgr-a"
`

var specT0 = testfixtures.T0

var (
	specPodA     = leaseobject.Caller{Username: "user:mgr-a", PodName: "pod"}
	specPodA2    = leaseobject.Caller{Username: "user:mgr-a", PodName: "pod-2"}
	specPodB     = leaseobject.Caller{Username: "user:mgr-b", PodName: "pod-b"}
	specMgrA     = leaseobject.Caller{Username: "user:mgr-a"}
	specMgrB     = leaseobject.Caller{Username: "user:mgr-b"}
	specOp       = leaseobject.Caller{Username: "user:op"}
	specCtrl     = leaseobject.Caller{Username: "user:mcl-ctrl"}
	specStranger = leaseobject.Caller{Username: "user:stranger"}
)

type specOpt = testfixtures.ObjectOption

// specLease is lease name in ns as the hardening cases store it: held by
// pod_1 (specPodA's pod), designated to mgr-a.
func specLease(res leaseobject.Resource, ns, name string, opts ...specOpt) *leaseobject.Object {
	return testfixtures.Object(res, ns, name, append([]specOpt{testfixtures.Holder("pod_1"), testfixtures.Designated("user:mgr-a")}, opts...)...)
}

var (
	specHolder    = testfixtures.Holder
	specRenewAt   = testfixtures.RenewAt
	specStampedAt = testfixtures.StampedAt
)

func specUndesignated(o *leaseobject.Object) { o.HasDesignation, o.Designated = false, "" }

// specRenewal is caller's UPDATE of res ns/l 2 s after specT0 (or at
// specT0+at), renewTime and its stamp moved there, then opts applied to the
// object as written.
func specRenewal(res leaseobject.Resource, ns string, caller leaseobject.Caller, opts ...specOpt) *leaseobject.Request {
	return specRenewalAt(res, ns, caller, 2*time.Second, opts...)
}

func specRenewalAt(res leaseobject.Resource, ns string, caller leaseobject.Caller, at time.Duration, opts ...specOpt) *leaseobject.Request {
	nw := specLease(res, ns, "l", append([]specOpt{specRenewAt(at), specStampedAt(at)}, opts...)...)
	return &leaseobject.Request{Resource: res, Operation: leaseobject.Update, Caller: caller,
		Old: specLease(res, ns, "l"), New: nw, Now: specT0.Add(at)}
}

// The fail-closed webhook decides identity changes and every write by
// someone other than the rightful renewer; the fail-open one only the
// rightful renewer's harmless renewals.
func TestFailClosed(t *testing.T) {
	p := parsePolicy(t, specPolicy)
	lease := func(ns string, caller leaseobject.Caller, opts ...specOpt) *leaseobject.Request {
		return specRenewal(leaseobject.Leases, ns, caller, opts...)
	}
	mcl := func(ns string, caller leaseobject.Caller, opts ...specOpt) *leaseobject.Request {
		return specRenewal(leaseobject.MultiClusterLeases, ns, caller, opts...)
	}
	// A write whose stored object is given apart from the written one.
	stored := func(res leaseobject.Resource, ns string, caller leaseobject.Caller, old, nw []specOpt) *leaseobject.Request {
		req := specRenewal(res, ns, caller)
		req.Old, req.New = specLease(res, ns, "l", old...), specLease(res, ns, "l", nw...)
		return req
	}
	deleted := lease("hard", specPodA)
	deleted.Operation, deleted.New = leaseobject.Delete, nil
	cases := []struct {
		name string
		req  *leaseobject.Request
		want bool
	}{
		{"the designated manager renews from the holder's pod", lease("hard", specPodA), false},
		{"a sibling pod of the same manager renews", lease("hard", specPodA2), true},
		{"another manager renews", lease("hard", specPodB), true},
		{"an operator renews", lease("hard", specOp), true},
		{"a stranger renews", lease("hard", specStranger), true},
		{"the designated manager changes the holder", lease("hard", specPodA, specHolder("pod_2")), true},
		{"the designated manager deletes", deleted, true},
		{"a rule without holder binding: the designated manager renews", lease("coalesce", specMgrA), false},
		{"a rule without holder binding: another manager renews", lease("coalesce", specMgrB), true},
		{"no rule selects the lease: only identity changes", lease("elsewhere", specStranger), false},
		// Under designation by annotation nobody renews until an operator
		// records the designated manager (I2): stored unjudged while
		// leaseguard is down, such a renewal would be a write the rule
		// forbids.
		{"designation by annotation: the designated manager renews", lease("hard-annot", specMgrA), false},
		{"designation by annotation: another manager renews", lease("hard-annot", specMgrB), true},
		{"designation by annotation, none recorded: a manager renews", stored(leaseobject.Leases, "hard-annot", specMgrA,
			[]specOpt{specUndesignated}, []specOpt{specUndesignated, specRenewAt(2 * time.Second), specStampedAt(2 * time.Second)}), true},
		{"designation by annotation, recorded empty: a manager renews", stored(leaseobject.Leases, "hard-annot", specMgrA,
			[]specOpt{func(o *leaseobject.Object) { o.Designated = "" }},
			[]specOpt{func(o *leaseobject.Object) { o.Designated = "" }, specRenewAt(2 * time.Second), specStampedAt(2 * time.Second)}), true},
		{"multiclusterlease: a renewal that also changes acquireTime", mcl("coalesce", specMgrB, func(o *leaseobject.Object) { o.Spec.AcquireTime = specT0.Add(time.Hour) }), true},
		// A MultiClusterLease is renewed by every manager of the cluster
		// (its shared candidate): their renewals must flow while
		// leaseguard is down, or the managers that are not designated
		// lose leadership and exit.
		{"multiclusterlease: another manager renews from the holder's pod", mcl("hard", leaseobject.Caller{Username: "user:mgr-b", PodName: "pod"}), false},
		{"multiclusterlease: another manager renews without binding", mcl("coalesce", specMgrB), false},
		{"multiclusterlease: another manager's pod is not the holder's", mcl("hard", specPodB), true},
		{"multiclusterlease: a stranger renews", mcl("coalesce", specStranger), true},
		{"multiclusterlease: another manager changes the holder", mcl("coalesce", specMgrB, specHolder("pod_2")), true},
		// Only a renewal harmless unchecked rides the fail-open route
		// (fourth and fifth attack rounds): stored while leaseguard is
		// down, anything else could lock, backdate or brick the lease.
		{"multiclusterlease: a renewal that moves renewTime backwards, far behind the clock", mcl("coalesce", specMgrB, specRenewAt(-time.Hour)), true},
		{"multiclusterlease: renewals that crossed on their way (a millisecond behind the stored one)", stored(leaseobject.MultiClusterLeases, "coalesce", specMgrB,
			[]specOpt{specRenewAt(2 * time.Second)}, []specOpt{specRenewAt(2*time.Second - time.Millisecond), specStampedAt(2 * time.Second)}), false},
		{"multiclusterlease: a renewal more than the skew behind the clock", mcl("coalesce", specMgrB, specRenewAt(-time.Second-time.Millisecond)), true},
		// Composed 7 s before the API server stamped it (client-side
		// throttling, a loaded server: the kind fault test's outage) but
		// still after the stored renewal: late, and harmless.
		{"multiclusterlease: a late renewal that still moves renewTime forwards", stored(leaseobject.MultiClusterLeases, "coalesce", specMgrB,
			[]specOpt{specRenewAt(-10 * time.Second)}, []specOpt{specRenewAt(-5 * time.Second), specStampedAt(2 * time.Second)}), false},
		{"multiclusterlease: a late renewal that moves renewTime backwards", stored(leaseobject.MultiClusterLeases, "coalesce", specMgrB,
			[]specOpt{specRenewAt(-4 * time.Second)}, []specOpt{specRenewAt(-5 * time.Second), specStampedAt(2 * time.Second)}), true},
		{"the holder's renewal that moves renewTime backwards", lease("hard", specPodA, specRenewAt(-time.Hour)), true},
		{"the holder's renewal that clears renewTime", lease("hard", specPodA, func(o *leaseobject.Object) { o.Spec.RenewTime = time.Time{} }), true},
		{"multiclusterlease: a renewal ahead of the clock", mcl("coalesce", specMgrB, specRenewAt(5*time.Second)), true},
		{"multiclusterlease: a renewTime typed clients cannot read", mcl("coalesce", specMgrB, func(o *leaseobject.Object) {
			o.Untyped = []leaseobject.Unreadable{{Field: "spec.renewTime", Raw: `"x"`}}
		}), true},
		{"multiclusterlease: a renewal that re-dates another managedFields entry", mcl("coalesce", specMgrB, func(o *leaseobject.Object) {
			o.ManagedTimes = append(o.ManagedTimes, leaseobject.ManagedTime{Key: "controller\nUpdate\nstatus\nv1", Raw: "2100-01-01T00:00:00Z"})
		}), true},
		{"multiclusterlease: a renewal that also writes a label", mcl("coalesce", specMgrB, func(o *leaseobject.Object) { o.Labels = `{"seen-by":"b"}` }), true},
		{"multiclusterlease: a renewal with no entry owning renewTime", stored(leaseobject.MultiClusterLeases, "coalesce", specMgrB,
			nil, []specOpt{specRenewAt(2 * time.Second)}), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := goFailClosed(p, c.req); got != c.want {
				t.Fatalf("goFailClosed = %v, want %v", got, c.want)
			}
		})
	}
}

// Bound by name and namespace (Config Connector's dedicated manager
// namespaces): CEL says exactly who the bound manager is
// (Rule.RenewerExpressible), so only its renewals ride the fail-open route.
func TestFailClosedBoundByNamespace(t *testing.T) {
	p := parsePolicy(t, `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
clockSkew: 2s
rules:
- name: mns
  resources: [leases]
  namespaces: [mns-a, mns-b]
  bind:
    manager: "user:{mns}:m-{id}"
    namespace: "{mns}"
    lease: "l-{id}"
`)
	for _, c := range []struct {
		user string
		want bool
	}{
		{"user:mns-a:m-x", false},
		{"user:mns-b:m-x", true},
		{"user:mns-a:m-y", true},
	} {
		req := specRenewal(leaseobject.Leases, "mns-a", leaseobject.Caller{Username: c.user}, specHolder("h"), specUndesignated)
		req.Old = specLease(leaseobject.Leases, "mns-a", "l-x", specHolder("h"), specUndesignated)
		req.New.Name = "l-x"
		if got := goFailClosed(p, req); got != c.want {
			t.Errorf("%s renews mns-a/l-x: goFailClosed = %v, want %v", c.user, got, c.want)
		}
	}
}

// Every write of a status writer to the object, and every DELETE, reaches
// the fail-closed webhook, refused or not: a DELETE and a status writer's finalizer write
// are identity changes, and a status writer is never a rule's rightful
// renewer, so its label write goes there too.
func TestStatusWriterAndDeleteRouteToTheFailClosedWebhook(t *testing.T) {
	p := parsePolicy(t, specPolicy)
	metadata := func(res leaseobject.Resource, caller leaseobject.Caller, opt specOpt) *leaseobject.Request {
		return &leaseobject.Request{Resource: res, Operation: leaseobject.Update, Caller: caller, Now: specT0.Add(time.Second),
			Old: specLease(res, "hard", "l"), New: specLease(res, "hard", "l", opt)}
	}
	del := metadata(leaseobject.Leases, specPodA2, func(*leaseobject.Object) {})
	del.Operation, del.New = leaseobject.Delete, nil
	finalizers := func(f string) specOpt { return func(o *leaseobject.Object) { o.Finalizers = f } }
	for _, c := range []struct {
		name    string
		req     *leaseobject.Request
		refused bool
	}{
		{"a sibling pod's delete", del, true},
		{"the status writer adds its finalizer", metadata(leaseobject.MultiClusterLeases, specCtrl, finalizers(`["`+leaseobject.ControllerFinalizer+`"]`)), false},
		{"the status writer replaces the finalizers", metadata(leaseobject.MultiClusterLeases, specCtrl, finalizers(`["example.com/never-released"]`)), true},
		{"the status writer labels the object", metadata(leaseobject.MultiClusterLeases, specCtrl, func(o *leaseobject.Object) { o.Labels = `{"a":"b"}` }), true},
	} {
		if d := policy.Decide(p, c.req); (d.Verdict == policy.Deny) != c.refused {
			t.Errorf("%s: decided %v %s, want refused %t", c.name, d.Verdict, d.Invariant, c.refused)
		}
		if c.req.Operation == leaseobject.Update && !goIdentityChange(c.req) && c.req.New.Finalizers != c.req.Old.Finalizers {
			t.Errorf("%s: goIdentityChange = false for a finalizer change", c.name)
		}
		if !goFailClosed(p, c.req) {
			t.Errorf("%s: goFailClosed = false, want the fail-closed webhook", c.name)
		}
	}
}

// A renewal the MutatingAdmissionPolicy would acknowledge is, where it is
// not (no mutating step, or the webhook mode's mutating webhook down), a
// rightful renewal that the decision core admits as written, and one that
// rides the fail-open route: it must keep flowing while leaseguard is down.
func TestAcknowledgeableRenewalsRideTheFailOpenRoute(t *testing.T) {
	p := parsePolicy(t, specPolicy)
	for name, req := range map[string]*leaseobject.Request{
		"another manager renews while the designation is fresh":        specRenewal(leaseobject.MultiClusterLeases, "coalesce", specMgrB),
		"another manager renews 1ns before the designation goes stale": specRenewalAt(leaseobject.MultiClusterLeases, "coalesce", specMgrB, 17*time.Second),
		"another manager's pod renews the holder's lease":              specRenewal(leaseobject.MultiClusterLeases, "hard", leaseobject.Caller{Username: "user:mgr-b", PodName: "pod"}),
		"a fixed designation: another manager":                         specRenewal(leaseobject.MultiClusterLeases, "fixed", specMgrB),
		"another manager renews a second after the stored renewal":     specRenewalAt(leaseobject.MultiClusterLeases, "coalesce", specMgrB, time.Second),
	} {
		if !policy.Acknowledge(p, req) {
			t.Errorf("%s: policy.Acknowledge = false: the case no longer shows an acknowledgement", name)
			continue
		}
		if d := policy.Decide(p, req); d.Verdict != policy.Allow {
			t.Errorf("%s: the unacknowledged renewal is decided %+v, want allow", name, d)
		}
		if goFailClosed(p, req) {
			t.Errorf("%s: goFailClosed = true: the renewal would fail while leaseguard is down", name)
		}
	}
}
