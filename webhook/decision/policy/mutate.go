package policy

import "github.com/leaseguard/leaseguard/webhook/decision/leaseobject"

// Designate says whether the mutating webhook should record the caller as the
// designated manager of the object (designation: auto), and returns the
// username to record. It stamps only where the validating webhook will admit
// the result: a manager's lease write when the designation is absent or
// stale. Everything else is left to validation, which judges whoever set the
// annotation.
func Designate(p *Policy, req *leaseobject.Request) (string, bool) {
	if req.Operation == leaseobject.Delete || req.Subresource != "" || req.New == nil {
		return "", false
	}
	rule := p.selectForMutation(req)
	if rule == nil || rule.designation != DesignationAuto {
		return "", false
	}
	caller := &req.Caller
	if rule.operators.MatchAny(caller.Username, caller.Groups) || !rule.IsManager(caller.Username) {
		return "", false
	}
	if !SameDesignation(req.Old, req.New) {
		return "", false
	}
	old := req.Old
	if old != nil && sameSpec(old, req.New) {
		return "", false
	}
	if old != nil && old.HasDesignation && old.Designated != "" {
		c := check{rule: rule, skew: p.ClockSkew, req: req, obj: old}
		if old.Designated == caller.Username || c.fresh(old) {
			return "", false
		}
	}
	return caller.Username, true
}

// selectForMutation selects the rule of the object a mutating request
// writes. A CREATE with generateName reaches the mutating webhooks before
// the API server names the object, so only a rule that does not select by
// name can be known to apply; validation sees the final name.
func (p *Policy) selectForMutation(req *leaseobject.Request) *Rule {
	obj := req.New
	if obj.Name != "" || obj.GenerateName == "" {
		return p.Select(req.Resource, obj.Namespace, obj.Name)
	}
	for _, r := range p.Rules {
		if r.resources[resourceIndex(req.Resource)] && r.namespaces.MatchesOrEmpty(obj.Namespace) {
			if r.names.SelectsAny() {
				return r
			}
			// The rule selects by name: whether it applies depends on the
			// name the API server has yet to choose.
			return nil
		}
	}
	return nil
}

// Coalesce says whether an early renewal should be acknowledged without
// being stored (coalesceRenewals, docs/rate-limiting.md): the mutating step
// sets renewTime back to the stored value, the write then changes nothing,
// and the API server stores nothing and sends no watch event. It applies to
// an UPDATE by a manager that is the lease's rightful writer, changing
// nothing but renewTime, advancing it by less than the rule's interval. The
// generated MutatingAdmissionPolicy (leaseguard manifests) decides the
// same, from the same conditions written in CEL.
func Coalesce(p *Policy, req *leaseobject.Request) bool {
	if req.Operation != leaseobject.Update || req.Subresource != "" || req.Old == nil || req.New == nil {
		return false
	}
	rule := p.Select(req.Resource, req.New.Namespace, req.New.Name)
	if rule == nil || rule.coalesceInterval <= 0 {
		return false
	}
	old, new := req.Old, req.New
	if !plainRenewal(old, new) || len(old.Untyped) > 0 || len(new.Untyped) > 0 {
		// A stored time typed clients cannot read is repaired by storing
		// the renewal; a written one is refused by validation.
		return false
	}
	advance := new.Spec.RenewTime.Sub(old.Spec.RenewTime)
	if advance <= 0 || advance >= rule.coalesceInterval {
		return false
	}
	// By the server's clock, the stored lease must outlive the coalescing
	// interval: a renewal of a lease that has expired (or would before the
	// next stored renewal), from a client whose clock lags, is stored, or
	// another manager could take over a lease whose holder was told its
	// renewal succeeded.
	c := check{rule: rule, skew: p.ClockSkew, req: req, obj: old}
	if !c.expiry(old).After(req.Now.Add(rule.coalesceInterval)) {
		return false
	}
	return rule.RightfulRenewer(&req.Caller, old)
}

// Acknowledge says whether a MultiClusterLease renewal by a manager that is
// not the designated writer should be acknowledged without being stored:
// the mutating step sets renewTime back to the stored value, the write then
// changes nothing, and the API server answers success with the object (and
// its generation) unchanged. Config Connector's lock then finds the
// controller's status already confirming its cluster, and the manager
// leads (docs/multicluster.md). It applies while the designated writer's
// lease is fresh, so that the one stored writer keeps the lease alive; once
// it has gone stale the renewal is stored and, with designation: auto, the
// caller takes the designation over (Designate). A renewal that validation
// would refuse (a time ahead of the clock, one typed clients cannot read,
// an unreadable stored object) is left to validation.
func Acknowledge(p *Policy, req *leaseobject.Request) bool {
	if req.Resource != leaseobject.MultiClusterLeases || req.Operation != leaseobject.Update || req.Subresource != "" || req.Old == nil || req.New == nil {
		return false
	}
	rule := p.Select(req.Resource, req.New.Namespace, req.New.Name)
	if rule == nil {
		return false
	}
	caller, old, new := &req.Caller, req.Old, req.New
	if rule.operators.MatchAny(caller.Username, caller.Groups) || !plainRenewal(old, new) || len(old.Untyped) > 0 || len(new.Untyped) > 0 {
		return false
	}
	writer := rule.DesignatedWriter(old)
	if writer == "" || writer == caller.Username || !rule.SharesRenewal(caller, old) {
		return false
	}
	c := check{rule: rule, skew: p.ClockSkew, req: req, obj: old}
	return c.fresh(old) && !new.Spec.RenewTime.After(req.Now.Add(p.ClockSkew))
}

// AcknowledgementNotes says, per rule that designates a writer of
// MultiClusterLeases, that the other managers' renewals are acknowledged
// without being stored only by the admission configuration `leaseguard
// manifests` renders (its MutatingAdmissionPolicy in the API server, or
// leaseguard's mutating webhook): where neither is installed (a
// validating-only install, the ValidatingAdmissionPolicies of `leaseguard
// vap` without --coalesce) they are admitted and stored (sharedRenewal), so
// that every namespace still leads. `leaseguard check`, `vap` and `serve`
// print them.
func (p *Policy) AcknowledgementNotes() []string {
	var out []string
	for _, r := range p.Rules {
		if r.resources[resourceIndex(leaseobject.MultiClusterLeases)] && r.designation != DesignationNone {
			out = append(out, "rule "+r.Name+": renewals of a shared MultiClusterLease by managers that are not designated are acknowledged without being stored only by the MutatingAdmissionPolicy or the mutating webhook that leaseguard manifests renders; without them they are admitted and stored")
		}
	}
	return out
}
