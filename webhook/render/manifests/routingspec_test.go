package manifests

// The Go specification of the routing that the generated match conditions
// render (manifests.go: generator.validating, harmlessRenewal,
// statusWriterStatusWrites; celexpr.IdentityChange, RightfulRenewer,
// SharedRenewer): which webhook, if any, a write reaches. It lives beside
// the CEL it specifies, and only the tests read it: the product decides
// every write it is sent the same way whichever webhook sent it
// (policy.Decide); only the API server routes.

import (
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
)

// goIdentityChange reports whether a write may change who holds or may write
// the lease, or whether it exists: anything but an UPDATE of the object
// itself that keeps the holder, every other lease field, the designation,
// the finalizers and the owner references (renewTime, labels and other
// annotations may move). Such writes must never be admitted without
// leaseguard: the rendered webhook that takes them fails closed, the one
// that takes the rest fails open (docs/security.md). The generated CEL
// decides the same.
func goIdentityChange(req *leaseobject.Request) bool {
	if req.Operation != leaseobject.Update || req.Subresource != "" || req.Old == nil || req.New == nil {
		return true
	}
	old, new := req.Old, req.New
	moved := new.Spec
	moved.RenewTime = old.Spec.RenewTime
	if !old.Spec.Equal(&moved) || !policy.SameDesignation(old, new) ||
		old.Finalizers != new.Finalizers || old.OwnerReferences != new.OwnerReferences {
		return true
	}
	// Fields leaseguard cannot read compare by their JSON text, as CEL
	// compares them; renewTime may move.
	raw := func(o *leaseobject.Object) map[string]string {
		m := map[string]string{}
		for _, u := range o.Unreadable {
			if u.Field != "spec.renewTime" {
				m[u.Field] = u.Raw
			}
		}
		return m
	}
	a, b := raw(old), raw(new)
	if len(a) != len(b) {
		return true
	}
	for f, v := range a {
		if b[f] != v {
			return true
		}
	}
	return false
}

// goFailClosed reports whether the fail-closed webhook decides req, which the
// fail-open one then leaves alone: every identity change (goIdentityChange),
// every write that is not a renewal harmless unchecked (goHarmlessRenewal),
// and every other write to a lease a rule selects by someone who is not the
// rule's rightful renewer of it (another manager, a sibling pod, a
// stranger). Only the rightful renewer's plain renewals flow while
// leaseguard is down (docs/security.md). The generated CEL decides the
// same, for the writes it sends at all (a write that changes nothing the
// API server stores goes to neither); where it cannot say who the
// rightful renewer is (a bind template with several captures that
// Rule.RenewerExpressible refuses), every
// harmless renewal is left to the fail-open webhook, and so here.
//
// One identity change is left to the fail-open webhook too: a status
// writer's UPDATE of a MultiClusterLease's status (goStatusWriterStatusWrite).
func goFailClosed(p *policy.Policy, req *leaseobject.Request) bool {
	if goStatusWriterStatusWrite(p, req) {
		return false
	}
	if goIdentityChange(req) || !goHarmlessRenewal(p, req) {
		return true
	}
	rule := p.Select(req.Resource, req.New.Namespace, req.New.Name)
	if rule == nil || !rule.RenewerExpressible() {
		return false
	}
	if req.Resource == leaseobject.MultiClusterLeases {
		// Every manager renews the shared holder's MultiClusterLease
		// (sharedRenewal): its renewals must not fail with leaseguard.
		return !rule.SharesRenewal(&req.Caller, req.Old)
	}
	return !rule.RightfulRenewer(&req.Caller, req.Old)
}

// goStatusWriterStatusWrite reports whether req is an UPDATE of a
// MultiClusterLease's status subresource by a status writer of the rule
// that selects it. The policy admits every such write (I8 asks only who
// writes), so it harms nothing unchecked; and it must flow while leaseguard
// is down: every manager's lock, after each write, polls the status until
// the controller has observed the new generation, and a status refused for
// longer than the renew deadline ends every manager's leadership (found by
// the kind stage's namespace-mode workload on the real lock, 2026-12-05:
// all 10 managers exited with every replica down).
func goStatusWriterStatusWrite(p *policy.Policy, req *leaseobject.Request) bool {
	if req.Operation != leaseobject.Update || req.Subresource != leaseobject.StatusSubresource || req.Resource != leaseobject.MultiClusterLeases || req.New == nil {
		return false
	}
	rule := p.Select(req.Resource, req.New.Namespace, req.New.Name)
	return rule != nil && rule.IsStatusWriter(&req.Caller)
}

// goHarmlessRenewal reports whether an UPDATE that keeps every identity
// field (goIdentityChange) is a renewal that harms nobody if it is stored
// unchecked, as the fail-open webhook's writes are while leaseguard is
// down: renewTime moves (never cleared) to no further ahead of the server
// clock than the skew, or it would hold the lease until then; forwards by
// any amount otherwise (a renewal composed before seconds of client-side
// throttling and server queues is late, not harmful: the lease reads no
// older than stored); backwards only to within the skew behind the clock,
// or the lease would read as expired and anyone would take it the moment
// leaseguard is back. (Backwards is bounded by the clock, not the stored
// value, so that repeated writes cannot walk it back, while renewals that
// cross on their way, milliseconds apart, still flow.) All in the one form
// typed clients read. And no managedFields entry is added or
// re-dated but the one the API server stamps for this write, the entry
// that owns renewTime (a planted time would serve later writes as the
// server's clock). Everything else goes to the fail-closed webhook, a
// write that changes labels or annotations too. (The view holds no
// generateName of an UPDATE: the generated CEL also sends a write that
// changes it to the fail-closed webhook.)
func goHarmlessRenewal(p *policy.Policy, req *leaseobject.Request) bool {
	if req.Operation != leaseobject.Update || req.Subresource != "" || req.Old == nil || req.New == nil {
		return false
	}
	old, new := req.Old, req.New
	if old.Labels != new.Labels || old.Annotations != new.Annotations {
		return false
	}
	for _, o := range [...]*leaseobject.Object{old, new} {
		if o.Spec.RenewTime.IsZero() || o.UnreadableEntry("spec.renewTime") != nil || o.UntypedEntry("spec.renewTime") != nil {
			return false
		}
	}
	if new.Spec.RenewTime.Equal(old.Spec.RenewTime) || new.Spec.RenewTime.After(req.Now.Add(p.ClockSkew)) ||
		(new.Spec.RenewTime.Before(old.Spec.RenewTime) && new.Spec.RenewTime.Before(req.Now.Add(-p.ClockSkew))) {
		return false
	}
	stamped := false
	for i := range new.ManagedTimes {
		m := &new.ManagedTimes[i]
		if m.RenewWriter {
			stamped = true
			continue
		}
		if !policy.StoredStamp(old, m) {
			return false
		}
	}
	return stamped
}
