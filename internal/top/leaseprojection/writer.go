package leaseprojection

import (
	"strings"

	"github.com/leaseguard/leaseguard/internal/top/leasetraffic"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
)

// assumedWriter returns the caller that the rule selecting obj admits as
// its writer, for a watcher that sees stored objects but not who wrote
// them: the API server's managedFields name field managers, not users. The
// caller is derived from, in order, the designation annotation, a fixed
// designation, the rule's bind template (the lease name gives the captures,
// the manager template the username) and its first managers pattern. The
// pod name is taken from the holder identity (`<pod>` or `<pod>_<id>`), and
// with holderBinding username the holder is the username: identity
// invariants (I1, I2, I3, I5, I9) are thereby assumed kept, and Decide
// judges what a watcher can see (I4, I6, I7). ok is false when no rule
// selects obj or the rule names no manager.
func assumedWriter(p *policy.Policy, res leaseobject.Resource, obj *leaseobject.Object) (rule string, c leaseobject.Caller, basis leasetraffic.WriterBasis, ok bool) {
	r := p.Select(res, obj.Namespace, obj.Name)
	if r == nil {
		return "", leaseobject.Caller{}, "", false
	}
	holder := obj.Spec.Holder
	if holder != "" {
		c.PodName = holder
		if i := strings.IndexByte(holder, '_'); i > 0 {
			c.PodName = holder[:i]
		}
	}
	designation := r.Designation()
	switch {
	case obj.HasDesignation && obj.Designated != "" && designation != policy.DesignationNone && designation != policy.DesignationFixed:
		c.Username, basis = obj.Designated, leasetraffic.WriterDesignated
	case designation == policy.DesignationFixed:
		c.Username, basis = r.FixedManager(), leasetraffic.WriterFixed
	case r.BoundManager(obj.Name) != "":
		c.Username, basis = r.BoundManager(obj.Name), leasetraffic.WriterBound
	case r.HolderBinding() == policy.HolderBindingUsername && holder != "" && r.IsManager(holder):
		c.Username, basis = holder, leasetraffic.WriterPattern
	case r.FirstManager() != "":
		c.Username, basis = r.FirstManager(), leasetraffic.WriterPattern
	default:
		return r.Name, leaseobject.Caller{}, "", false
	}
	return r.Name, c, basis, true
}
