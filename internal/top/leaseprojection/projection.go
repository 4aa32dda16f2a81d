// Package leaseprojection projects a LeasePolicy onto lease writes that a
// watcher observed: what the webhook would have done with each, decided by
// the webhook's own decision core (policy.Decide).
//
// A watcher sees the stored objects, not the requests: not who wrote
// (managedFields name field managers, not users), not the writes that were
// refused, and not the server's clock at admission. So each write is judged
// as if written by the writer the rule admits (assumedWriter, writer.go),
// at the time it was observed; identity invariants are thereby assumed
// kept, and what is judged is what the stored objects show: fencing (I4),
// the renewal rate (I6) and renewTime sanity (I7). Status writes, and
// writes in the namespaces the webhook is never called for, are not judged.
package leaseprojection

import (
	"time"

	"github.com/leaseguard/leaseguard/internal/top/leasetraffic"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
)

// Projector judges observed writes under one policy.
type Projector struct {
	Policy *policy.Policy
	// OwnNamespace is leaseguard's namespace: like kube-system and
	// kube-node-lease, the webhook is never called for it (docs/design.md §5),
	// so writes there are not judged.
	OwnNamespace string
}

var _ leasetraffic.Projector = (*Projector)(nil)

// Project judges one observed write: old is the stored object before it
// (nil for a creation), new the object it stored, at the time it was seen.
func (p *Projector) Project(res leaseobject.Resource, old, new *leaseobject.Object, at time.Time, status bool) leasetraffic.Projection {
	if status || new == nil || p.neverIntercepted(new.Namespace) {
		return leasetraffic.Projection{}
	}
	_, caller, basis, ok := assumedWriter(p.Policy, res, new)
	if !ok {
		return leasetraffic.Projection{}
	}
	req := &leaseobject.Request{Resource: res, Operation: leaseobject.Update, Caller: caller, Old: old, New: new, Now: at}
	if old == nil {
		req.Operation = leaseobject.Create
	}
	// An early renewal the rule coalesces never reaches validation: the
	// API server acknowledges it and stores nothing.
	if policy.Coalesce(p.Policy, req) {
		rule := p.Policy.Select(res, new.Namespace, new.Name)
		return leasetraffic.Projection{Judged: true, Rule: rule.Name, Coalesced: true, Basis: basis}
	}
	d := policy.Decide(p.Policy, req)
	return leasetraffic.Projection{
		Judged: true, Rule: d.Rule, Verdict: d.Verdict, Invariant: d.Invariant, Code: d.Code, Basis: basis,
	}
}

func (p *Projector) neverIntercepted(namespace string) bool {
	if namespace == p.OwnNamespace {
		return true
	}
	for _, ns := range policy.NeverIntercepted {
		if namespace == ns {
			return true
		}
	}
	return false
}
