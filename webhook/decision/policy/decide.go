package policy

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/oneline"
	"github.com/leaseguard/leaseguard/webhook/decision/pattern"
)

// Decide returns the decision for a request. It is pure: the same policy and
// request always give the same decision. Admitted writes (the renewal path
// included) do not allocate.
func Decide(p *Policy, req *leaseobject.Request) Decision {
	obj := req.Target()
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
	req  *leaseobject.Request
	obj  *leaseobject.Object
}

func (r *Rule) decide(skew time.Duration, req *leaseobject.Request, obj *leaseobject.Object) Decision {
	c := check{rule: r, skew: skew, req: req, obj: obj}
	caller := &req.Caller

	// Operators may do any write, including changing the designation.
	if r.operators.MatchAny(caller.Username, caller.Groups) {
		d := c.allowed()
		d.DesignationChanged = req.Operation != leaseobject.Delete && req.Subresource == "" && !SameDesignation(req.Old, req.New)
		return d
	}
	if req.Subresource == leaseobject.StatusSubresource && req.Resource == leaseobject.MultiClusterLeases {
		return c.status()
	}
	if d, ok := c.managedClock(); !ok {
		return d
	}
	return c.mainResource()
}

// managedClock enforces the managedFields half of I7: an UPDATE that adds
// or re-dates a managedFields entry ahead of the server clock (beyond the
// skew) is refused. The API server stamps the entry of the write it stores
// with its own clock (whole seconds) and keeps the times a client sends
// with managedFields in the body: a re-dated entry would make the
// renewer's next stamps look like a clock moving backwards (I7's record
// check) and the stored renewal look recent (I6) for as long as the client
// likes, and no one but an operator could repair the lease.
//
// A CREATE is held to the same: the API server keeps the entries a create
// sends too, so a time planted there would serve as the clock as well.
func (c *check) managedClock() (Decision, bool) {
	req := c.req
	if req.New == nil || (req.Operation != leaseobject.Update && req.Operation != leaseobject.Create) {
		return Decision{}, true
	}
	limit := req.Now.Add(c.skew)
	for i := range req.New.ManagedTimes {
		m := &req.New.ManagedTimes[i]
		if m.Time.IsZero() || !m.Time.After(limit) || (req.Old != nil && StoredStamp(req.Old, m)) {
			continue
		}
		return c.deny(InvariantLeaseTimes, http.StatusForbidden, "dates a managedFields entry ahead of the server clock on",
			"only the API server dates entries"), false
	}
	return c.renewRecordAhead()
}

// renewRecordAhead refuses an UPDATE that leaves renewTime as stored but
// moves the record of the last renewal (the time of the entry that owns
// spec.renewTime, RenewWrite) ahead of the server clock. The skew
// managedClock allows is for the API server's stamp, which may run ahead
// of leaseguard's clock; but a write that does not move renewTime gives
// that entry no stamp of its own unless its writer already owns it, and
// a record dated even a second ahead makes the rightful renewer's next
// stamps look like a clock moving backwards (renewWriteRecord refuses
// them) and the stored renewal look recent (I6): a manager that is not
// the designated one, or the status writer, re-dating it within the skew
// every second while changing a label kept the designated writer's every
// renewal refused until the lease expired (seventh attack round,
// docs/security.md). Backwards renewWriteRecord refuses already.
func (c *check) renewRecordAhead() (Decision, bool) {
	req := c.req
	if req.Operation != leaseobject.Update || req.Old == nil || req.New == nil {
		return Decision{}, true
	}
	old, new := req.Old, req.New
	if !new.Spec.RenewTime.Equal(old.Spec.RenewTime) || !new.RenewWrite.After(old.RenewWrite) || !new.RenewWrite.After(req.Now) {
		return Decision{}, true
	}
	return c.deny(InvariantLeaseTimes, http.StatusForbidden, "re-dates the record of the last renewal, ahead of the server clock, on",
		"the API server dates it when renewTime is written: record "+new.RenewWrite.UTC().Format(time.RFC3339)+", stored "+orNone(formatRecord(old.RenewWrite))), false
}

func formatRecord(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// StoredStamp reports whether old holds the entry with the very same time:
// the write keeps it as stored.
func StoredStamp(old *leaseobject.Object, m *leaseobject.ManagedTime) bool {
	for i := range old.ManagedTimes {
		if old.ManagedTimes[i].Key == m.Key {
			return old.ManagedTimes[i].Raw == m.Raw
		}
	}
	return false
}

// serverRenewWrite is o.RenewWrite unless it lies ahead of the server clock
// (beyond the skew): such a time was written by a client before leaseguard
// refused that (managedClock), and is no record of the server's.
func (c *check) serverRenewWrite(o *leaseobject.Object) time.Time {
	if o.RenewWrite.After(c.req.Now.Add(c.skew)) {
		return time.Time{}
	}
	return o.RenewWrite
}

// status decides a write to the MultiClusterLease status subresource (I8).
func (c *check) status() Decision {
	if c.rule.IsStatusWriter(&c.req.Caller) {
		return c.allowed()
	}
	return c.deny(InvariantStatus, http.StatusForbidden,
		"may not write the status of", "status writers: "+orNone(c.rule.statusWriters.String()))
}

// mainResource decides a CREATE, UPDATE or DELETE of the object itself.
func (c *check) mainResource() Decision {
	req := c.req
	update := req.Operation == leaseobject.Update && req.Old != nil && req.New != nil
	specUnchanged := update && sameSpec(req.Old, req.New)
	metadataOnly := specUnchanged && SameDesignation(req.Old, req.New)

	if d, ok := c.managerOfObject(metadataOnly); !ok {
		return d
	}

	// I3: the designation annotation.
	designationChanged := false
	if req.Operation != leaseobject.Delete && !SameDesignation(req.Old, req.New) {
		if d, ok := c.designationChange(); !ok {
			return d
		}
		designationChanged = true
	}
	if metadataOnly && !c.ownershipChanged() {
		// Labels and other annotations are free metadata for managers.
		return c.metadataWrite()
	}

	// I2: while the designation is fresh only the designated manager writes
	// the spec, deletes, or changes what decides whether and when the
	// object disappears (I11). A MultiClusterLease renewal that keeps the
	// holder is the cluster's candidate renewing, whichever of its managers
	// sends it: designation decides who writes, never who leads, so such a
	// renewal is never refused for who sent it (sharedRenewal).
	shared := c.sharedRenewal()
	if d, ok := c.designatedUnlessShared(shared, metadataOnly); !ok {
		return d
	}
	if req.Operation == leaseobject.Delete {
		if d, ok := c.deletion(); !ok {
			return d
		}
		return c.allowed()
	}
	if metadataOnly {
		return c.metadataWrite()
	}

	if d, ok := c.specWrite(shared); !ok {
		return d
	}
	d := c.allowed()
	d.DesignationChanged = designationChanged
	if req.Old != nil && isRenewal(&req.Old.Spec, &req.New.Spec) {
		d.RenewalInterval = c.sinceStoredWrite(req.Old)
	}
	d.Notice = c.unreadableNotice()
	return d
}

// managerOfObject enforces I1 and I9: who counts as a manager of this
// object. A caller that is not one is refused, except the MultiClusterLease
// controller's own finalizer writes, which it decides here (false, with its
// verdict either way).
func (c *check) managerOfObject(metadataOnly bool) (Decision, bool) {
	r, req, caller := c.rule, c.req, &c.req.Caller
	var vals pattern.Captures
	bound := false
	if r.bind != nil {
		vals, bound = r.bind.MatchManager(caller.Username)
	}
	if !bound && !r.IsManager(caller.Username) {
		// The MultiClusterLease controller adds and removes its finalizer with
		// full UPDATEs that touch no lease field and not the designation;
		// that is all it may do to the object itself (statusWriterWrite).
		if metadataOnly && req.Resource == leaseobject.MultiClusterLeases && r.IsStatusWriter(caller) {
			return c.statusWriterWrite(), false
		}
		return c.deny(InvariantManager, http.StatusForbidden, "is not a manager of", c.managersHint()), false
	}
	if r.bind != nil {
		if !bound {
			return c.deny(InvariantBound, http.StatusForbidden, "may not write",
				"bound to no lease: username does not fit "+r.bind.Manager().Text()), false
		}
		if !r.bind.BoundTo(c.obj.Namespace, c.obj.Name, &vals) {
			return c.deny(InvariantBound, http.StatusForbidden, "may not write",
				"bound lease: "+r.bind.BoundLease(&vals)), false
		}
	}
	return Decision{}, true
}

// metadataWrite admits a write that changes no lease field, once the server's
// record of the last renewal is known not to move backwards (I7): rewriting
// managedFields is the one way a metadata write could reset the clock the
// rate limit judges by.
func (c *check) metadataWrite() Decision {
	if d, ok := c.renewWriteRecord(); !ok {
		return d
	}
	d := c.allowed()
	d.Notice = c.unreadableNotice()
	return d
}

// statusWriterWrite decides an UPDATE of a MultiClusterLease itself by a
// status writer that is not a manager, once it is known to leave every
// lease field and the designation as stored. The MultiClusterLease
// controller adds its finalizer, and removes it once it has released the
// global lock; nothing else of the object is its to change (I11, I1).
// Another finalizer would keep the object from ever going (or, removed,
// let it go before its owner is done), owner references hand it to the
// garbage collector, and labels, annotations and generateName are the
// managers' and their tools'.
func (c *check) statusWriterWrite() Decision {
	old, new := c.req.Old, c.req.New
	inv, what := InvariantMetadata, ""
	switch {
	case !leaseobject.SameFinalizersBut(old.Finalizers, new.Finalizers, leaseobject.ControllerFinalizer):
		what = "finalizers"
	case old.OwnerReferences != new.OwnerReferences:
		what = "ownerReferences"
	case old.Labels != new.Labels:
		inv, what = InvariantManager, "labels"
	case old.Annotations != new.Annotations:
		inv, what = InvariantManager, "annotations"
	case old.GenerateName != new.GenerateName:
		inv, what = InvariantManager, "generateName"
	}
	if what != "" {
		return c.deny(inv, http.StatusForbidden, "may not change "+what+" of", StatusWriterHint)
	}
	return c.metadataWrite()
}

// StatusWriterHint is what a status writer's refusal says it may do to the
// object itself.
const StatusWriterHint = "status writers change only finalizer " + leaseobject.ControllerFinalizer

// deletion enforces I4 on a DELETE: deleting a live lease hands it to
// whoever creates it next, so it is a release, open only to the lease's
// holder (its pod under holderBinding pod, its user under username) or an
// operator. Otherwise a sibling pod of the holder's manager, which shares
// its service account, would delete the lease and create it again as its
// own holder while the holder still leads. An expired lease, or one
// without a holder, is anyone's to take, so anyone who passed I1, I9 and
// I2 may delete it. An object already being deleted is judged alike: the
// deletion was decided when it began; a later DELETE only adds the
// garbage collector's finalizers.
func (c *check) deletion() (Decision, bool) {
	old := c.req.Old
	if old == nil || old.Spec.Holder == "" || c.expired(old) || c.holdsLease(old.Spec.Holder) {
		return Decision{}, true
	}
	return c.deny(InvariantFencing, http.StatusForbidden,
		"may not delete the live lease of "+oneline.Clip(old.Spec.Holder)+" on", "only the holder or an operator may; "+c.heldUntil(old)), false
}

// ownershipChanged reports whether an UPDATE changes the finalizers or the
// owner references: what decides whether and when the object disappears.
func (c *check) ownershipChanged() bool {
	old, new := c.req.Old, c.req.New
	return old != nil && new != nil && (old.Finalizers != new.Finalizers || old.OwnerReferences != new.OwnerReferences)
}

// designationChange enforces I3 for a write that changes the annotation.
func (c *check) designationChange() (Decision, bool) {
	req, caller := c.req, &c.req.Caller
	mode := c.rule.designation
	if mode == DesignationByAnnotation || mode == DesignationFixed {
		return c.deny(InvariantDesignationChange, http.StatusForbidden,
			"may not change annotation "+leaseobject.DesignationAnnotation+" of", "only operators may: "+orNone(c.rule.operators.String())), false
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
			"may not remove annotation "+leaseobject.DesignationAnnotation+" of", "designated: "+c.designatedOf(old)), false
	}
	if req.New.Designated != caller.Username {
		return c.deny(InvariantDesignationChange, http.StatusForbidden,
			"may not designate "+oneline.Clip(req.New.Designated)+" for", "a manager may designate only itself"), false
	}
	if oldSet && old.Designated != caller.Username && c.fresh(old) {
		return c.deny(InvariantDesignationChange, http.StatusForbidden,
			"may not take over the designation of", "designated: "+c.relative(old.Designated)+", "+c.staleIn(old)), false
	}
	return Decision{}, true
}

// designatedUnlessShared is designated, but for a shared renewal, which
// any manager may send.
func (c *check) designatedUnlessShared(shared, ownership bool) (Decision, bool) {
	if shared {
		return Decision{}, true
	}
	return c.designated(ownership)
}

// designated enforces I2 against the stored designation. ownership says the
// write changes only finalizers or owner references, and is judged as I11.
func (c *check) designated(ownership bool) (Decision, bool) {
	req, caller := c.req, &c.req.Caller
	inv, problem := InvariantDesignatedWriter, "is not the designated manager of"
	if ownership {
		inv, problem = InvariantMetadata, "may not change finalizers or ownerReferences of"
	}
	switch c.rule.designation {
	case DesignationNone:
		return Decision{}, true
	case DesignationFixed:
		if caller.Username == c.rule.fixedManager {
			return Decision{}, true
		}
		return c.deny(inv, http.StatusForbidden, problem,
			"designated: "+c.relative(c.rule.fixedManager)), false
	case DesignationByAnnotation:
		if req.Old != nil && req.Old.HasDesignation && req.Old.Designated == caller.Username {
			return Decision{}, true
		}
		if req.Old == nil || !req.Old.HasDesignation || req.Old.Designated == "" {
			if ownership {
				problem = "may not change finalizers or ownerReferences of"
			} else {
				problem = "may not write"
			}
			return c.deny(inv, http.StatusForbidden, problem,
				"no designated manager yet: an operator sets annotation "+leaseobject.DesignationAnnotation), false
		}
		return c.deny(inv, http.StatusForbidden, problem,
			"designated: "+c.relative(req.Old.Designated)), false
	}
	// Auto: an absent designation is taken by the first writer; a stale one
	// by whoever writes next.
	old := req.Old
	if old == nil || !old.HasDesignation || old.Designated == "" || old.Designated == caller.Username || !c.fresh(old) {
		return Decision{}, true
	}
	d := c.deny(inv, http.StatusForbidden, problem,
		"designated: "+c.relative(old.Designated)+", "+c.staleIn(old))
	if !ownership && c.backOff() {
		// client-go sleeps Retry-After and sends the same request again:
		// the losing candidates wait for the designation to go stale
		// instead of asking every retry period.
		d.Code = http.StatusTooManyRequests
		d.RetryAfter = min(c.expiry(old).Add(c.skew).Sub(req.Now), c.rule.maxLeaseDuration+c.skew)
	}
	return d, false
}

// backOff reports whether a non-designated manager's refused write is
// answered with 429: the rule asks for it, and the request is neither a dry
// run nor sent by kubectl, whose user wants the answer at once.
func (c *check) backOff() bool {
	req := c.req
	return c.rule.backOffLosers && req.Operation != leaseobject.Delete && !req.DryRun &&
		!strings.HasPrefix(req.FieldManager, "kubectl")
}

// sharedRenewal reports whether the write is a plain renewal of a
// MultiClusterLease: an UPDATE of the object itself by which only renewTime
// moves, with a holder. In Config Connector's namespace mode every manager
// of a cluster renews the one MultiClusterLease with the one candidate
// identity of the cluster, and counts as leader only once its write
// succeeds and the controller confirms it (docs/multicluster.md): refusing
// one would stop its namespace. So I2 and I6 do not apply; the mutating
// step acknowledges such renewals without storing them (Acknowledge,
// Coalesce), and one that reaches validation unacknowledged (an install
// without the mutating step, or while it is down) is stored: it changes
// nothing but the clock of the holder that already holds the lease.
//
// A shared renewal may also change the designation (the mutating webhook
// stamps the first writer, or a takeover once the designation is stale):
// I3 has judged that change before.
func (c *check) sharedRenewal() bool {
	req := c.req
	return req.Resource == leaseobject.MultiClusterLeases && req.Operation == leaseobject.Update && req.Subresource == "" &&
		req.Old != nil && req.New != nil && renewsOnly(req.Old, req.New)
}

// specWrite enforces I4, I5, I10, I7 and I6 on a CREATE or an UPDATE that
// changes lease fields; a shared renewal (sharedRenewal) is not rate
// limited.
func (c *check) specWrite(shared bool) (Decision, bool) {
	if d, ok := c.fencing(); !ok {
		return d, false
	}
	if d, ok := c.holderBound(); !ok {
		return d, false
	}
	if d, ok := c.bounds(); !ok {
		return d, false
	}
	if d, ok := c.leaseTimes(); !ok {
		return d, false
	}
	if d, ok := c.renewWriteRecord(); !ok {
		return d, false
	}
	if shared {
		return Decision{}, true
	}
	return c.writeRate()
}

// fencing enforces I4: who may change the holder, and how a Lease counts
// its transitions.
func (c *check) fencing() (Decision, bool) {
	req := c.req
	newSpec := &req.New.Spec
	if req.Old == nil {
		// client-go creates with 0; any count will do, but one that leaves
		// no room for the next acquisition would fence everyone out.
		if req.Resource == leaseobject.Leases && newSpec.Transitions == math.MaxInt32 {
			return c.deny(InvariantFencing, http.StatusForbidden, "creates with leaseTransitions "+itoa(int64(newSpec.Transitions)),
				"leaves no room to count the next acquisition"), false
		}
		return Decision{}, true
	}
	oldSpec := &req.Old.Spec
	live := oldSpec.Holder != "" && !c.expired(req.Old)
	switch {
	case oldSpec.Holder == newSpec.Holder:
		if req.Resource == leaseobject.Leases && newSpec.Transitions != oldSpec.Transitions {
			return c.deny(InvariantFencing, http.StatusForbidden,
				"changes leaseTransitions ("+itoa(int64(oldSpec.Transitions))+" to "+itoa(int64(newSpec.Transitions))+") without a new holder on",
				"leaseTransitions changes only on acquisition"), false
		}
		return Decision{}, true
	case newSpec.Holder != "" && live:
		return c.deny(InvariantFencing, http.StatusForbidden,
			"may not change the holder ("+oneline.Clip(oldSpec.Holder)+" to "+oneline.Clip(newSpec.Holder)+") of",
			c.heldUntil(req.Old)), false
	case newSpec.Holder == "" && live && !c.holdsLease(oldSpec.Holder):
		// A release hands the lease to whoever asks next: only its holder
		// may do that before it expires.
		return c.deny(InvariantFencing, http.StatusForbidden,
			"may not release the lease of "+oneline.Clip(oldSpec.Holder)+" on", "only the holder or an operator may; "+c.heldUntil(req.Old)), false
	}
	if req.Resource != leaseobject.Leases {
		return Decision{}, true
	}
	if newSpec.Holder == "" {
		// client-go's ReleaseOnCancel keeps the count; the next acquisition
		// increments it.
		if newSpec.Transitions != oldSpec.Transitions {
			return c.deny(InvariantFencing, http.StatusForbidden,
				"changes leaseTransitions ("+itoa(int64(oldSpec.Transitions))+" to "+itoa(int64(newSpec.Transitions))+") on release of",
				"a release keeps leaseTransitions"), false
		}
		return Decision{}, true
	}
	if int64(newSpec.Transitions) != int64(oldSpec.Transitions)+1 {
		return c.deny(InvariantFencing, http.StatusForbidden,
			"changes the holder without counting the transition on",
			"leaseTransitions must go from "+itoa(int64(oldSpec.Transitions))+" to "+itoa(int64(oldSpec.Transitions)+1)), false
	}
	if newSpec.AcquireTime.IsZero() || newSpec.AcquireTime.Equal(oldSpec.AcquireTime) {
		return c.deny(InvariantFencing, http.StatusForbidden,
			"changes the holder without a new acquireTime on", "set spec.acquireTime to the time of acquisition"), false
	}
	return Decision{}, true
}

// holdsLease reports whether the caller is the lease's holder, as far as the
// rule's holder binding can tell: its pod under holderBinding pod, its
// username under username. Without a binding the holder cannot be told
// from the caller, and I2 has already decided who may write.
func (c *check) holdsLease(holder string) bool {
	caller := &c.req.Caller
	switch c.rule.holderBinding {
	case HolderBindingPod:
		return caller.PodName != "" && holderIsPod(holder, caller.PodName)
	case HolderBindingUsername:
		return holder == caller.Username
	}
	return true
}

// holderBound enforces I5 on a written non-empty holder.
func (c *check) holderBound() (Decision, bool) {
	holder := c.req.New.Spec.Holder
	if holder == "" {
		return Decision{}, true
	}
	caller := &c.req.Caller
	switch c.rule.holderBinding {
	case HolderBindingPod:
		if caller.PodName == "" {
			return c.deny(InvariantHolder, http.StatusForbidden, "has no pod-bound token and may not write",
				"holderBinding pod needs the "+leaseobject.PodNameExtra+" extra"), false
		}
		if !holderIsPod(holder, caller.PodName) {
			return c.deny(InvariantHolder, http.StatusForbidden, "writes holder "+oneline.Clip(holder)+" of another pod on",
				"want "+oneline.Clip(caller.PodName)+"[_<id>]"), false
		}
	case HolderBindingUsername:
		if holder != caller.Username {
			return c.deny(InvariantHolder, http.StatusForbidden, "writes holder "+oneline.Clip(holder)+" that is not its username on",
				"holder must be the caller's username"), false
		}
	}
	return Decision{}, true
}

// bounds enforces I10: the durations a write declares stay within the rule's
// maximum, so that no holder keeps a lease for longer than its clients would.
func (c *check) bounds() (Decision, bool) {
	s, limit := &c.req.New.Spec, c.rule.maxLeaseDuration
	for _, f := range [...]struct {
		name string
		d    time.Duration
	}{{"leaseDurationSeconds", s.LeaseDuration}, {"renewDeadlineSeconds", s.RenewDeadline}, {"retryPeriodSeconds", s.RetryPeriod}} {
		if f.d > limit {
			return c.deny(InvariantBounds, http.StatusForbidden,
				"sets "+f.name+" "+itoa(int64(f.d/time.Second))+" on", "at most "+itoa(int64(limit/time.Second))+" (maxLeaseDuration)"), false
		}
	}
	return Decision{}, true
}

// leaseTimes enforces I7 on the times a write declares: renewTime never moves
// backwards, no time lies in the future beyond the clock-skew allowance, and
// a held lease never loses its renewTime or acquireTime.
func (c *check) leaseTimes() (Decision, bool) {
	req := c.req
	newSpec := &req.New.Spec
	limit := req.Now.Add(c.skew)
	for _, f := range [...]struct {
		article, name string
		t             time.Time
	}{{"a ", "renewTime", newSpec.RenewTime}, {"an ", "acquireTime", newSpec.AcquireTime}} {
		if f.t.After(limit) {
			return c.deny(InvariantLeaseTimes, http.StatusForbidden, "sets "+f.article+f.name+" in the future on",
				f.name+" "+durationText(f.t.Sub(req.Now))+" ahead of the server clock, allowed "+c.skew.String()), false
		}
	}
	if req.Old == nil {
		return Decision{}, true
	}
	oldSpec := &req.Old.Spec
	if !newSpec.RenewTime.IsZero() && newSpec.RenewTime.Before(oldSpec.RenewTime) {
		return c.deny(InvariantLeaseTimes, http.StatusForbidden, "moves renewTime backwards on",
			"stored renewTime: "+oldSpec.RenewTime.UTC().Format(time.RFC3339Nano)), false
	}
	if oldSpec.Holder != "" && newSpec.Holder == oldSpec.Holder {
		if newSpec.RenewTime.IsZero() && (!oldSpec.RenewTime.IsZero() || req.Old.UnreadableEntry("spec.renewTime") != nil) {
			return c.deny(InvariantLeaseTimes, http.StatusForbidden, "clears renewTime of held", "a held lease keeps its renewTime"), false
		}
		if newSpec.AcquireTime.IsZero() && !oldSpec.AcquireTime.IsZero() {
			return c.deny(InvariantLeaseTimes, http.StatusForbidden, "clears acquireTime of held", "a held lease keeps its acquireTime"), false
		}
	}
	return Decision{}, true
}

// renewWriteRecord enforces the server-time half of I7: the managedFields
// time of the last renewal, which the API server stamps, never moves
// backwards and never goes missing while renewTime stays. Otherwise a client
// could rewrite managedFields and pass the rate limit with an old renewTime.
func (c *check) renewWriteRecord() (Decision, bool) {
	old, new := c.req.Old, c.req.New
	if old == nil || new == nil {
		return Decision{}, true
	}
	oldWrite := c.serverRenewWrite(old)
	if oldWrite.IsZero() {
		return Decision{}, true
	}
	if new.RenewWrite.Before(oldWrite) && (!new.RenewWrite.IsZero() || !new.Spec.RenewTime.IsZero()) {
		return c.deny(InvariantLeaseTimes, http.StatusForbidden, "rewrites the managedFields time of the last renewal of",
			"the API server records it: "+old.RenewWrite.UTC().Format(time.RFC3339)), false
	}
	return Decision{}, true
}

// writeRate enforces I6, judged against the stored object by the server
// clock: every spec write but a release comes at least the interval after
// the stored renewal, measured from the later of its renewTime and the time
// the API server stored it. client-go answers a 429 by sleeping Retry-After
// and sending the very same body again; measured this way, that retry is
// admitted, so the elector keeps its lease while its early write waits
// (docs/rate-limiting.md).
func (c *check) writeRate() (Decision, bool) {
	req := c.req
	if req.Old == nil || req.New.Spec.Holder == "" {
		return Decision{}, true
	}
	interval := c.rule.renewInterval(req.Old)
	if interval <= 0 || (req.Old.Spec.RenewTime.IsZero() && c.serverRenewWrite(req.Old).IsZero()) {
		return Decision{}, true
	}
	elapsed := c.sinceStoredWrite(req.Old)
	if elapsed >= interval {
		return Decision{}, true
	}
	problem, did := "writes too often", "written "
	if isRenewal(&req.Old.Spec, &req.New.Spec) {
		problem, did = "renews too often", "renewed "
	}
	d := c.deny(InvariantRenewalRate, http.StatusTooManyRequests, problem,
		did+elapsed.Truncate(time.Millisecond).String()+" after the stored renewal, minimum "+interval.String())
	d.RetryAfter = interval - elapsed
	d.RenewalInterval = elapsed
	return d, false
}

// sinceStoredWrite is the time since the stored renewal by the server clock:
// since the later of the stored renewTime and the managedFields time at which
// the API server stored it (zero when that lies ahead of the clock).
func (c *check) sinceStoredWrite(o *leaseobject.Object) time.Duration {
	ref := o.Spec.RenewTime
	if w := c.serverRenewWrite(o); w.After(ref) {
		ref = w
	}
	if e := c.req.Now.Sub(ref); e > 0 {
		return e
	}
	return 0
}

// isRenewal reports whether new renews old: same holder, renewTime advanced.
func isRenewal(old, new *leaseobject.Spec) bool {
	return old.Holder != "" && old.Holder == new.Holder &&
		!old.RenewTime.IsZero() && new.RenewTime.After(old.RenewTime)
}

// SameDesignation reports whether a write keeps the designation annotation
// as stored (absent and empty alike).
func SameDesignation(old, new *leaseobject.Object) bool {
	oldValue, newValue := "", ""
	if old != nil && old.HasDesignation {
		oldValue = old.Designated
	}
	if new != nil && new.HasDesignation {
		newValue = new.Designated
	}
	return oldValue == newValue
}

// sameSpec reports whether a write leaves the lease fields as stored,
// comparing fields leaseguard could not read by their JSON text.
func sameSpec(old, new *leaseobject.Object) bool {
	if !old.Spec.Equal(&new.Spec) || len(old.Unreadable) != len(new.Unreadable) {
		return false
	}
	for i := range old.Unreadable {
		if u := new.UnreadableEntry(old.Unreadable[i].Field); u == nil || u.Raw != old.Unreadable[i].Raw {
			return false
		}
	}
	return true
}

// expiry is when the stored lease stops being held: its last renewal (or
// acquisition, or creation) plus its lease duration. A renewTime leaseguard
// cannot read is replaced by the time the API server stored it.
func (c *check) expiry(o *leaseobject.Object) time.Time {
	ref := o.Spec.RenewTime
	if ref.IsZero() && o.UnreadableEntry("spec.renewTime") != nil {
		ref = c.serverRenewWrite(o)
	}
	if ref.IsZero() {
		ref = o.Spec.AcquireTime
	}
	if ref.IsZero() {
		ref = o.CreationTimestamp
	}
	d := o.Spec.LeaseDuration
	if d <= 0 {
		d = leaseobject.DefaultLeaseDuration
	}
	return ref.Add(d)
}

// expired reports whether the lease has expired, past the skew grace.
func (c *check) expired(o *leaseobject.Object) bool { return c.req.Now.After(c.expiry(o).Add(c.skew)) }

// fresh reports whether a designation recorded on o still holds: the lease
// it guards has not gone stale.
func (c *check) fresh(o *leaseobject.Object) bool { return !c.expired(o) }

// heldUntil says when the stored lease expires, for messages.
func (c *check) heldUntil(o *leaseobject.Object) string {
	end := c.expiry(o).Add(c.skew)
	return "held until " + end.UTC().Format(time.RFC3339) + ", expires " + c.in(end)
}

// staleIn says when the designation recorded on o goes stale.
func (c *check) staleIn(o *leaseobject.Object) string {
	return "stale " + c.in(c.expiry(o).Add(c.skew))
}

// in is "in 12s" for a time shortly ahead, rounded up to whole seconds so
// that a denied caller never reads "in 0s", and the date itself for one far
// ahead (a lease stored before its duration was bounded, say).
func (c *check) in(t time.Time) string {
	if t.After(c.req.Now.Add(48 * time.Hour)) {
		return "at " + t.UTC().Format(time.RFC3339)
	}
	left := t.Sub(c.req.Now)
	return "in " + ((left + time.Second - 1) / time.Second * time.Second).String()
}

// durationText renders a duration for a message: milliseconds for a short
// one, whole hours for one beyond two days.
func durationText(d time.Duration) string {
	if d > 48*time.Hour || d < -48*time.Hour {
		return itoa(int64(d/time.Hour)) + "h"
	}
	return d.Round(time.Millisecond).String()
}

// unreadableNotice tells the client, on an admitted write, that the stored
// object holds a field leaseguard could not read and judged without.
func (c *check) unreadableNotice() string {
	old := c.req.Old
	if old == nil || len(old.Unreadable) == 0 {
		return ""
	}
	u := &old.Unreadable[0]
	return oneline.Truncate("leaseguard: stored "+c.req.Resource.Kind()+" "+c.obj.Namespace+"/"+c.obj.Name+" has an unreadable "+u.Field+
		" ("+oneline.Clip(strings.TrimLeft(u.Problem, ": "))+"); judged without it, by the time the API server stored the last renewal", MaxMessageLength)
}

func (c *check) allowed() Decision { return Decision{Verdict: Allow} }

func (c *check) managersHint() string {
	var parts []string
	if c.rule.bind != nil {
		parts = append(parts, c.rule.bind.Manager().Text())
	}
	if len(c.rule.managers) > 0 {
		parts = append(parts, c.rule.managers.String())
	}
	if c.rule.designation == DesignationFixed {
		parts = append(parts, c.rule.fixedManager)
	}
	return "managers: " + orNone(strings.Join(parts, ", "))
}

func (c *check) designatedOf(o *leaseobject.Object) string {
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

// plainRenewal reports whether new differs from old in renewTime alone, with
// a holder, as both say: nothing but the clock moves.
func plainRenewal(old, new *leaseobject.Object) bool {
	return renewsOnly(old, new) && SameDesignation(old, new)
}

// renewsOnly is plainRenewal but for the designation, which may change.
func renewsOnly(old, new *leaseobject.Object) bool {
	if old.Spec.Holder == "" || old.Spec.RenewTime.IsZero() || new.Spec.RenewTime.IsZero() ||
		len(old.Unreadable) > 0 || len(new.Unreadable) > 0 {
		return false
	}
	renewed := new.Spec
	renewed.RenewTime = old.Spec.RenewTime
	return old.Spec.Equal(&renewed) && old.Finalizers == new.Finalizers && old.OwnerReferences == new.OwnerReferences
}

// MaxMessageLength bounds every denial message (docs/design.md §4): one line, fit for
// kubectl's error output and an event.
const MaxMessageLength = 255

// deny builds a denial: "leaseguard: rule R: CALLER PROBLEM KIND NS/NAME (HINT)".
// Messages are built only on this path, so admitted writes never allocate.
func (c *check) deny(inv Invariant, code int32, problem, hint string) Decision {
	msg := "leaseguard: rule " + c.rule.Name + ": " + oneline.Clip(c.req.Caller.Username) + " " + problem + " " +
		c.req.Resource.Kind() + " " + c.obj.Namespace + "/" + c.obj.Name
	if hint != "" {
		msg += " (" + hint + ")"
	}
	return Decision{Verdict: Deny, Invariant: inv, Code: code, Message: oneline.Truncate(msg, MaxMessageLength)}
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// relative abbreviates a username that shares a long prefix with the
// caller's, so both fit in one message: for the caller
// system:serviceaccount:cnrm-system:cnrm-controller-manager-b, the user
// system:serviceaccount:cnrm-system:cnrm-controller-manager-a is written
// ...cnrm-controller-manager-a. The cut falls after the last ':' shared.
func (c *check) relative(user string) string {
	caller := c.req.Caller.Username
	n := 0
	for n < len(user) && n < len(caller) && user[n] == caller[n] {
		n++
	}
	cut := strings.LastIndexByte(user[:n], ':')
	if cut < 16 {
		return oneline.Clip(user)
	}
	return oneline.Clip("..." + user[cut+1:])
}

// Decision is the answer to a Request.
type Decision struct {
	Verdict Verdict
	// Rule is the name of the rule that selected the object; empty when no
	// rule did.
	Rule string
	// Invariant is the invariant the write breaks (also for Warn and Audit).
	Invariant Invariant
	// Code is the HTTP status of a denial: 403, or 429 for I6.
	Code int32
	// RetryAfter is, for an I6 denial, the time until the renewal would pass.
	RetryAfter time.Duration
	// Message is the one-line explanation of a denial, warning or audit.
	Message string
	// RenewalInterval is set when the write is a renewal: the time since the
	// stored renewTime, by the server clock.
	RenewalInterval time.Duration
	// DesignationChanged is set on an admitted write that changes the
	// designation annotation.
	DesignationChanged bool
	// Notice, on an admitted write, is a one-line note for the client (an
	// admission warning): the stored object had a field leaseguard could not
	// read and the decision was made without it.
	Notice string
}

// Allowed reports whether the write is admitted.
func (d *Decision) Allowed() bool { return d.Verdict != Deny }
