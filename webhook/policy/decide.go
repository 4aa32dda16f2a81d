package policy

import (
	"net/http"
	"strings"
	"time"
)

// Decide returns the decision for a request. It is pure: the same policy and
// request always give the same decision. Admitted writes (the renewal path
// included) do not allocate.
func Decide(p *Policy, req *Request) Decision {
	obj := req.object()
	if obj == nil {
		return Decision{}
	}
	rule := p.Select(req.Resource, obj.Namespace, obj.Name)
	if rule == nil {
		return Decision{}
	}
	d := rule.decide(p.ClockSkew, req, obj)
	d.Rule = rule.Name
	if d.Verdict == Deny {
		switch rule.enforcement {
		case EnforceWarn:
			d.Verdict, d.Code, d.RetryAfter = Warn, 0, 0
		case EnforceAudit:
			d.Verdict, d.Code, d.RetryAfter = Audit, 0, 0
		}
	}
	return d
}

// check is the context of one decision under one rule.
type check struct {
	rule *Rule
	skew time.Duration
	req  *Request
	obj  *Object
}

func (r *Rule) decide(skew time.Duration, req *Request, obj *Object) Decision {
	c := check{rule: r, skew: skew, req: req, obj: obj}
	caller := &req.Caller

	// Operators may do any write, including changing the designation.
	if r.operators.matchCaller(caller) {
		d := c.allowed()
		d.DesignationChanged = req.Operation != Delete && req.Subresource == "" && !sameDesignation(req.Old, req.New)
		return d
	}
	if req.Subresource == StatusSubresource && req.Resource == MultiClusterLeases {
		return c.status()
	}
	return c.mainResource()
}

// status decides a write to the MultiClusterLease status subresource (I8).
func (c *check) status() Decision {
	if c.rule.statusWriters.matchCaller(&c.req.Caller) {
		return c.allowed()
	}
	return c.deny(InvariantStatus, http.StatusForbidden,
		"may not write the status of", "status writers: "+orNone(c.rule.statusWriters.String()))
}

// mainResource decides a CREATE, UPDATE or DELETE of the object itself.
func (c *check) mainResource() Decision {
	r, req, caller := c.rule, c.req, &c.req.Caller
	metadataOnly := req.Operation == Update && req.Old != nil && req.New != nil &&
		req.Old.Spec.Equal(&req.New.Spec) && sameDesignation(req.Old, req.New)

	// I1 and I9: who counts as a manager of this object.
	var vals captures
	bound := false
	if r.bind != nil {
		vals, bound = r.bind.manager.match(caller.Username)
	}
	if !bound && !r.isManager(caller.Username) {
		// The MultiClusterLease controller adds and removes its finalizer with
		// full UPDATEs that touch no lease field.
		if metadataOnly && r.statusWriters.matchCaller(caller) {
			return c.allowed()
		}
		return c.deny(InvariantManager, http.StatusForbidden, "is not a manager of", c.managersHint())
	}
	if r.bind != nil {
		if !bound {
			return c.deny(InvariantBound, http.StatusForbidden, "may not write",
				"bound to no lease: username does not fit "+r.bind.manager.text)
		}
		if !r.bind.leaseMatches(c.obj.Name, &vals) {
			return c.deny(InvariantBound, http.StatusForbidden, "may not write",
				"bound lease: "+r.bind.leaseName(&vals))
		}
	}

	// I3: the designation annotation.
	designationChanged := false
	if req.Operation != Delete && !sameDesignation(req.Old, req.New) {
		if d, ok := c.designationChange(); !ok {
			return d
		}
		designationChanged = true
	}
	if metadataOnly {
		return c.allowed()
	}

	// I2: while the designation is fresh only the designated manager writes
	// the spec or deletes.
	if d, ok := c.designated(); !ok {
		return d
	}
	if req.Operation == Delete {
		return c.allowed()
	}

	if d, ok := c.specWrite(); !ok {
		return d
	}
	d := c.allowed()
	d.DesignationChanged = designationChanged
	if req.Old != nil && isRenewal(&req.Old.Spec, &req.New.Spec) {
		d.RenewalInterval = renewalElapsed(&req.Old.Spec, req.Now)
	}
	return d
}

// designationChange enforces I3 for a write that changes the annotation.
func (c *check) designationChange() (Decision, bool) {
	req, caller := c.req, &c.req.Caller
	mode := c.rule.designation
	if mode == DesignationByAnnotation || mode == DesignationFixed {
		return c.deny(InvariantDesignationChange, http.StatusForbidden,
			"may not change annotation "+DesignationAnnotation+" of", "only operators may: "+orNone(c.rule.operators.String())), false
	}
	old := req.Old
	oldSet := old != nil && old.HasDesignation && old.Designated != ""
	if !req.New.HasDesignation || req.New.Designated == "" {
		// Removing the designation is a release, open to the designated
		// manager only.
		if oldSet && old.Designated == caller.Username {
			return Decision{}, true
		}
		return c.deny(InvariantDesignationChange, http.StatusForbidden,
			"may not remove annotation "+DesignationAnnotation+" of", "designated: "+c.designatedOf(old)), false
	}
	if req.New.Designated != caller.Username {
		return c.deny(InvariantDesignationChange, http.StatusForbidden,
			"may not designate "+clip(req.New.Designated)+" for", "a manager may designate only itself"), false
	}
	if oldSet && old.Designated != caller.Username && c.fresh(old) {
		return c.deny(InvariantDesignationChange, http.StatusForbidden,
			"may not take over the designation of", "designated: "+c.relative(old.Designated)+", stale in "+c.staleIn(old)), false
	}
	return Decision{}, true
}

// designated enforces I2 against the stored designation.
func (c *check) designated() (Decision, bool) {
	req, caller := c.req, &c.req.Caller
	switch c.rule.designation {
	case DesignationNone:
		return Decision{}, true
	case DesignationFixed:
		if caller.Username == c.rule.fixedManager {
			return Decision{}, true
		}
		return c.deny(InvariantDesignatedWriter, http.StatusForbidden, "is not the designated manager of",
			"designated: "+c.relative(c.rule.fixedManager)), false
	case DesignationByAnnotation:
		if req.Old != nil && req.Old.HasDesignation && req.Old.Designated == caller.Username {
			return Decision{}, true
		}
		if req.Old == nil || !req.Old.HasDesignation || req.Old.Designated == "" {
			return c.deny(InvariantDesignatedWriter, http.StatusForbidden, "may not write",
				"no designated manager yet: an operator sets annotation "+DesignationAnnotation), false
		}
		return c.deny(InvariantDesignatedWriter, http.StatusForbidden, "is not the designated manager of",
			"designated: "+c.relative(req.Old.Designated)), false
	}
	// Auto: an absent designation is taken by the first writer; a stale one
	// by whoever writes next.
	old := req.Old
	if old == nil || !old.HasDesignation || old.Designated == "" || old.Designated == caller.Username || !c.fresh(old) {
		return Decision{}, true
	}
	return c.deny(InvariantDesignatedWriter, http.StatusForbidden, "is not the designated manager of",
		"designated: "+c.relative(old.Designated)+", stale in "+c.staleIn(old)), false
}

// specWrite enforces I4, I5, I7 and I6 on a CREATE or an UPDATE that changes
// lease fields.
func (c *check) specWrite() (Decision, bool) {
	req := c.req
	newSpec := &req.New.Spec
	var oldSpec *Spec
	if req.Old != nil {
		oldSpec = &req.Old.Spec
	}

	// I4: fencing.
	if oldSpec != nil && oldSpec.Holder != newSpec.Holder {
		if oldSpec.Holder != "" && newSpec.Holder != "" && !c.expired(req.Old) {
			return c.deny(InvariantFencing, http.StatusForbidden,
				"may not change the holder ("+clip(oldSpec.Holder)+" to "+clip(newSpec.Holder)+") of",
				"held until "+c.expiry(req.Old).Add(c.skew).UTC().Format(time.RFC3339)+", expires in "+c.expiresIn(req.Old)), false
		}
		if req.Resource == Leases && newSpec.Holder != "" {
			if newSpec.Transitions != oldSpec.Transitions+1 {
				return c.deny(InvariantFencing, http.StatusForbidden,
					"changes the holder without counting the transition on",
					"leaseTransitions must go from "+itoa(int64(oldSpec.Transitions))+" to "+itoa(int64(oldSpec.Transitions)+1)), false
			}
			if newSpec.AcquireTime.IsZero() || newSpec.AcquireTime.Equal(oldSpec.AcquireTime) {
				return c.deny(InvariantFencing, http.StatusForbidden,
					"changes the holder without a new acquireTime on", "set spec.acquireTime to the time of acquisition"), false
			}
		}
	}

	// I5: the holder belongs to the caller.
	if newSpec.Holder != "" {
		if d, ok := c.holderBinding(newSpec.Holder); !ok {
			return d, false
		}
	}

	// I7: renewTime sanity.
	if !newSpec.RenewTime.IsZero() {
		if oldSpec != nil && newSpec.RenewTime.Before(oldSpec.RenewTime) {
			return c.deny(InvariantRenewTime, http.StatusForbidden, "moves renewTime backwards on",
				"stored renewTime: "+oldSpec.RenewTime.UTC().Format(time.RFC3339Nano)), false
		}
		if limit := req.Now.Add(c.skew); newSpec.RenewTime.After(limit) {
			return c.deny(InvariantRenewTime, http.StatusForbidden, "sets a renewTime in the future on",
				"renewTime "+newSpec.RenewTime.Sub(req.Now).Round(time.Millisecond).String()+" ahead of the server clock, allowed "+c.skew.String()), false
		}
	}

	// I6: renewal rate, judged against the stored object by the server
	// clock. client-go answers a 429 by sleeping Retry-After and sending the
	// very same body again; measured this way, that retry is admitted, so the
	// elector keeps its lease while its early write waits (docs/rate-limiting.md).
	if oldSpec != nil && isRenewal(oldSpec, newSpec) {
		interval := c.rule.renewInterval(req.Old)
		if elapsed := renewalElapsed(oldSpec, req.Now); interval > 0 && elapsed < interval {
			d := c.deny(InvariantRenewalRate, http.StatusTooManyRequests, "renews too often",
				"renewed "+elapsed.Truncate(time.Millisecond).String()+" after the stored renewal, minimum "+interval.String())
			d.RetryAfter = interval - elapsed
			d.RenewalInterval = elapsed
			return d, false
		}
	}
	return Decision{}, true
}

// holderBinding enforces I5.
func (c *check) holderBinding(holder string) (Decision, bool) {
	caller := &c.req.Caller
	switch c.rule.holderBinding {
	case HolderBindingPod:
		if caller.PodName == "" {
			return c.deny(InvariantHolder, http.StatusForbidden, "has no pod-bound token and may not write",
				"holderBinding pod needs the "+PodNameExtra+" extra"), false
		}
		if holder != caller.PodName && !(strings.HasPrefix(holder, caller.PodName) && holder[len(caller.PodName)] == '_') {
			return c.deny(InvariantHolder, http.StatusForbidden, "writes holder "+clip(holder)+" of another pod on",
				"want "+clip(caller.PodName)+"[_<id>]"), false
		}
	case HolderBindingUsername:
		if holder != caller.Username {
			return c.deny(InvariantHolder, http.StatusForbidden, "writes holder "+clip(holder)+" that is not its username on",
				"holder must be the caller's username"), false
		}
	}
	return Decision{}, true
}

// renewalElapsed is the time since the stored renewal, by the server clock
// (zero when the stored renewTime is ahead of it, within the skew allowance).
func renewalElapsed(old *Spec, now time.Time) time.Duration {
	if e := now.Sub(old.RenewTime); e > 0 {
		return e
	}
	return 0
}

// isRenewal reports whether new renews old: same holder, renewTime advanced.
func isRenewal(old, new *Spec) bool {
	return old.Holder != "" && old.Holder == new.Holder &&
		!old.RenewTime.IsZero() && new.RenewTime.After(old.RenewTime)
}

func sameDesignation(old, new *Object) bool {
	oldValue, newValue := "", ""
	if old != nil && old.HasDesignation {
		oldValue = old.Designated
	}
	if new != nil && new.HasDesignation {
		newValue = new.Designated
	}
	return oldValue == newValue
}

// expiry is when the stored lease stops being held: its last renewal (or
// acquisition, or creation) plus its lease duration.
func (c *check) expiry(o *Object) time.Time {
	ref := o.Spec.RenewTime
	if ref.IsZero() {
		ref = o.Spec.AcquireTime
	}
	if ref.IsZero() {
		ref = o.CreationTimestamp
	}
	d := o.Spec.LeaseDuration
	if d <= 0 {
		d = DefaultLeaseDuration
	}
	return ref.Add(d)
}

// expired reports whether the lease has expired, past the skew grace.
func (c *check) expired(o *Object) bool { return c.req.Now.After(c.expiry(o).Add(c.skew)) }

// fresh reports whether a designation recorded on o still holds: the lease
// it guards has not gone stale.
func (c *check) fresh(o *Object) bool { return !c.expired(o) }

// expiresIn is the time left until o expires, past the skew grace, rounded
// up to whole seconds so that a denied caller never reads "0s".
func (c *check) expiresIn(o *Object) string {
	left := c.expiry(o).Add(c.skew).Sub(c.req.Now)
	return ((left + time.Second - 1) / time.Second * time.Second).String()
}

func (c *check) staleIn(o *Object) string { return c.expiresIn(o) }

func (c *check) allowed() Decision { return Decision{Verdict: Allow} }

func (c *check) managersHint() string {
	var parts []string
	if c.rule.bind != nil {
		parts = append(parts, c.rule.bind.manager.text)
	}
	if len(c.rule.managers) > 0 {
		parts = append(parts, c.rule.managers.String())
	}
	if c.rule.designation == DesignationFixed {
		parts = append(parts, c.rule.fixedManager)
	}
	return "managers: " + orNone(strings.Join(parts, ", "))
}

func (c *check) designatedOf(o *Object) string {
	if o == nil || !o.HasDesignation || o.Designated == "" {
		return "none"
	}
	return c.relative(o.Designated)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
