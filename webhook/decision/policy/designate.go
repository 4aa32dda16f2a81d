package policy

// Designate says whether the mutating webhook should record the caller as the
// designated manager of the object (designation: auto), and returns the
// username to record. It stamps only where the validating webhook will admit
// the result: a manager's lease write when the designation is absent or
// stale. Everything else is left to validation, which judges whoever set the
// annotation.
func Designate(p *Policy, req *Request) (string, bool) {
	if req.Operation == Delete || req.Subresource != "" || req.New == nil {
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
	if !sameDesignation(req.Old, req.New) {
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
func (p *Policy) selectForMutation(req *Request) *Rule {
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
func Coalesce(p *Policy, req *Request) bool {
	if req.Operation != Update || req.Subresource != "" || req.Old == nil || req.New == nil {
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
	return rule.rightfulRenewer(&req.Caller, old)
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
func Acknowledge(p *Policy, req *Request) bool {
	if req.Resource != MultiClusterLeases || req.Operation != Update || req.Subresource != "" || req.Old == nil || req.New == nil {
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
	if writer == "" || writer == caller.Username || !rule.sharesRenewal(caller, old) {
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
		if r.resources[resourceIndex(MultiClusterLeases)] && r.designation != DesignationNone {
			out = append(out, "rule "+r.Name+": renewals of a shared MultiClusterLease by managers that are not designated are acknowledged without being stored only by the MutatingAdmissionPolicy or the mutating webhook that leaseguard manifests renders; without them they are admitted and stored")
		}
	}
	return out
}

// DesignatedWriter is the username whose writes of o are stored while its
// lease is fresh: the fixed designation, else the recorded one; "" when the
// rule designates none.
func (r *Rule) DesignatedWriter(o *Object) string {
	switch r.designation {
	case DesignationNone:
		return ""
	case DesignationFixed:
		return r.fixedManager
	}
	if o.HasDesignation {
		return o.Designated
	}
	return ""
}

// sharesRenewal reports whether the caller may renew the stored
// MultiClusterLease with its holder, whoever is designated: a manager of
// the rule (of its bound lease, under a bind template) that holder binding
// lets hold it.
func (r *Rule) sharesRenewal(caller *Caller, old *Object) bool {
	if !r.IsManager(caller.Username) {
		return false
	}
	if r.bind != nil {
		vals, bound := r.bind.MatchManager(caller.Username)
		if !bound || !r.bind.BoundTo(old.Namespace, old.Name, &vals) {
			return false
		}
	}
	switch r.holderBinding {
	case HolderBindingPod:
		return caller.PodName != "" && holderIsPod(old.Spec.Holder, caller.PodName)
	case HolderBindingUsername:
		return old.Spec.Holder == caller.Username
	}
	return true
}

// IdentityChange reports whether a write may change who holds or may write
// the lease, or whether it exists: anything but an UPDATE of the object
// itself that keeps the holder, every other lease field, the designation,
// the finalizers and the owner references (renewTime, labels and other
// annotations may move). Such writes must never be admitted without
// leaseguard: the rendered webhook that takes them fails closed, the one
// that takes the rest fails open (docs/security.md). The generated CEL
// decides the same.
func IdentityChange(req *Request) bool {
	if req.Operation != Update || req.Subresource != "" || req.Old == nil || req.New == nil {
		return true
	}
	old, new := req.Old, req.New
	moved := new.Spec
	moved.RenewTime = old.Spec.RenewTime
	if !old.Spec.Equal(&moved) || !sameDesignation(old, new) ||
		old.Finalizers != new.Finalizers || old.OwnerReferences != new.OwnerReferences {
		return true
	}
	// Fields leaseguard cannot read compare by their JSON text, as CEL
	// compares them; renewTime may move.
	raw := func(o *Object) map[string]string {
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

// FailClosed reports whether the fail-closed webhook decides req, which the
// fail-open one then leaves alone: every identity change (IdentityChange),
// every write that is not a renewal harmless unchecked (HarmlessRenewal),
// and every other write to a lease a rule selects by someone who is not the
// rule's rightful renewer of it (another manager, a sibling pod, a
// stranger). Only the rightful renewer's plain renewals flow while
// leaseguard is down (docs/security.md). The generated CEL decides the
// same, for the writes it sends at all (a write that changes nothing the
// API server stores goes to neither); where it cannot say who the
// rightful renewer is (a bind template with several captures that
// RenewerExpressible refuses), every
// harmless renewal is left to the fail-open webhook, and so here.
//
// One identity change is left to the fail-open webhook too: a status
// writer's UPDATE of a MultiClusterLease's status (StatusWriterStatusWrite).
func FailClosed(p *Policy, req *Request) bool {
	if StatusWriterStatusWrite(p, req) {
		return false
	}
	if IdentityChange(req) || !HarmlessRenewal(p, req) {
		return true
	}
	rule := p.Select(req.Resource, req.New.Namespace, req.New.Name)
	if rule == nil || !rule.RenewerExpressible() {
		return false
	}
	if req.Resource == MultiClusterLeases {
		// Every manager renews the shared holder's MultiClusterLease
		// (sharedRenewal): its renewals must not fail with leaseguard.
		return !rule.sharesRenewal(&req.Caller, req.Old)
	}
	return !rule.rightfulRenewer(&req.Caller, req.Old)
}

// StatusWriterStatusWrite reports whether req is an UPDATE of a
// MultiClusterLease's status subresource by a status writer of the rule
// that selects it. The policy admits every such write (I8 asks only who
// writes), so it harms nothing unchecked; and it must flow while leaseguard
// is down: every manager's lock, after each write, polls the status until
// the controller has observed the new generation, and a status refused for
// longer than the renew deadline ends every manager's leadership (found by
// the kind stage's namespace-mode workload on the real lock, 2026-12-05:
// all 10 managers exited with every replica down).
func StatusWriterStatusWrite(p *Policy, req *Request) bool {
	if req.Operation != Update || req.Subresource != StatusSubresource || req.Resource != MultiClusterLeases || req.New == nil {
		return false
	}
	rule := p.Select(req.Resource, req.New.Namespace, req.New.Name)
	return rule != nil && rule.statusWriters.MatchAny(req.Caller.Username, req.Caller.Groups)
}

// HarmlessRenewal reports whether an UPDATE that keeps every identity
// field (IdentityChange) is a renewal that harms nobody if it is stored
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
func HarmlessRenewal(p *Policy, req *Request) bool {
	if req.Operation != Update || req.Subresource != "" || req.Old == nil || req.New == nil {
		return false
	}
	old, new := req.Old, req.New
	if old.Labels != new.Labels || old.Annotations != new.Annotations {
		return false
	}
	for _, o := range [...]*Object{old, new} {
		if o.Spec.RenewTime.IsZero() || o.unreadable("spec.renewTime") != nil || o.untyped("spec.renewTime") != nil {
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
		if !storedStamp(old, m) {
			return false
		}
	}
	return stamped
}

// RenewerExpressible reports whether the rule's rightful renewer can be
// written in CEL: a bind template with several captures can be only where
// the lease's name and namespace give them (bind.expressible).
func (r *Rule) RenewerExpressible() bool {
	return r.bind == nil || r.bind.Expressible()
}

// plainRenewal reports whether new differs from old in renewTime alone, with
// a holder, as both say: nothing but the clock moves.
func plainRenewal(old, new *Object) bool {
	return renewsOnly(old, new) && sameDesignation(old, new)
}

// renewsOnly is plainRenewal but for the designation, which may change.
func renewsOnly(old, new *Object) bool {
	if old.Spec.Holder == "" || old.Spec.RenewTime.IsZero() || new.Spec.RenewTime.IsZero() ||
		len(old.Unreadable) > 0 || len(new.Unreadable) > 0 {
		return false
	}
	renewed := new.Spec
	renewed.RenewTime = old.Spec.RenewTime
	return old.Spec.Equal(&renewed) && old.Finalizers == new.Finalizers && old.OwnerReferences == new.OwnerReferences
}

// rightfulRenewer reports whether the caller is a manager the rule would let
// renew this lease as it stands: the designated manager when one is
// recorded (under designation by annotation, only then: until an operator
// records one, Decide refuses every spec write, I2), the holder's pod or
// user under a holder binding.
func (r *Rule) rightfulRenewer(caller *Caller, old *Object) bool {
	if old.HasDesignation && old.Designated != "" && old.Designated != caller.Username {
		return false
	}
	if r.designation == DesignationByAnnotation && (!old.HasDesignation || old.Designated != caller.Username) {
		return false
	}
	if r.designation == DesignationFixed && caller.Username != r.fixedManager {
		return false
	}
	return r.sharesRenewal(caller, old)
}

// IsManager reports whether username counts as a manager under the rule,
// through the bind template, the managers patterns or a fixed designation.
func (r *Rule) IsManager(username string) bool {
	if r.bind != nil {
		if _, ok := r.bind.MatchManager(username); ok {
			return true
		}
	}
	return r.managers.Match(username) || (r.designation == DesignationFixed && username == r.fixedManager)
}
