package vap

import (
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/render/celexpr"
)

// vapCEL renders the decision procedure of docs/policy.md, for one rule and
// one resource, as the variables and validations of a
// ValidatingAdmissionPolicy.
//
// One variable, failure, walks the procedure in order and names the first
// check that fails (empty when the write is admitted); each check has one
// validation that fails exactly when failure names it, with a
// messageExpression that writes leaseguard's message. Variables are
// evaluated lazily and once per request, so a renewal pays only for the
// checks it reaches. As everywhere in this package, every field read is
// guarded: an evaluation error refuses the write (failurePolicy Fail).
//
// Admission CEL has no clock: the API server's is read where it writes it
// before admission (clockVariables). A DELETE has no object, hence no
// clock.
type vapCEL struct {
	r    *policy.RuleView
	res  leaseobject.Resource
	skew time.Duration
	// staticMessages: no messageExpressions (VAPOptions.StaticMessages).
	staticMessages bool
}

func v(name string) string { return "variables." + name }

// tv is the timestamp an optional timestamp variable holds: typed as one
// (optional.none() makes the variable's type optional(dyn)).
func tv(opt string) string { return "timestamp(" + opt + ".value())" }

// timeRE is a time CEL's timestamp() reads once upper-cased, with a year
// that leaves room for any lease duration: what the webhook reads beyond
// that (offsets of 24 hours or more, other years) is unreadable here.
const timeRE = `^[1-8][0-9]{3}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`

const maxInt32 = "2147483647"

func lit(s string) string { return celexpr.Quote(s) }

// kind is the lower-case singular leaseguard's messages use.
func (c *vapCEL) kind() string {
	if c.res == leaseobject.MultiClusterLeases {
		return "multiclusterlease"
	}
	return "lease"
}

func (c *vapCEL) lease() bool { return c.res == leaseobject.Leases }

// spec fields of the resource read as strings, times and integers.
func (c *vapCEL) timeFields() []string {
	if c.lease() {
		return []string{"renewTime", "acquireTime"}
	}
	return []string{"renewTime"}
}

func (c *vapCEL) intFields() []string {
	if c.lease() {
		return []string{"leaseDurationSeconds", "leaseTransitions"}
	}
	return []string{"leaseDurationSeconds", "renewDeadlineSeconds", "retryPeriodSeconds"}
}

func (c *vapCEL) stringFields() []string {
	if c.lease() {
		return []string{"holderIdentity", "strategy", "preferredHolder"}
	}
	return []string{"holderIdentity"}
}

// field names the variables of a spec field: old<Field>, new<Field>.
func field(side, name string) string {
	return side + strings.ToUpper(name[:1]) + name[1:]
}

func specValue(obj, name, zero string) string {
	return celexpr.Ternary(obj+" == null", zero, obj+".?spec.?"+name+".orValue("+zero+")")
}

// readableInt is what the webhook reads from a stored integer: an
// int32 >= 0, else nothing (0).
func readableInt(x string) string {
	return celexpr.Ternary(x+" >= 0 && "+x+" <= "+maxInt32, x, "0")
}

// parsedTime renders an optional timestamp from the raw string variable
// raw: none when empty or unreadable.
func parsedTime(raw string) string {
	return celexpr.Ternary(raw+" != '' && "+raw+".upperAscii().matches("+celexpr.Quote(timeRE)+")",
		"optional.of(timestamp("+raw+".upperAscii()))", "optional.none()")
}

// managedTimeOK renders "s is a time the policies read" for a
// managedFields or metadata time (the API server writes them canonical).
func managedTimeOK(s string) string { return s + ".matches(" + celexpr.Quote(timeRE) + ")" }

func managedFields(obj string) string { return obj + ".metadata.?managedFields.orValue([])" }

// entryKey identifies a managedFields entry as the API server does.
func entryKey(m string) string {
	return m + ".?manager.orValue('') + '\\n' + " + m + ".?operation.orValue('') + '\\n' + " +
		m + ".?subresource.orValue('') + '\\n' + " + m + ".?apiVersion.orValue('')"
}

// renewWrite renders when the API server stored the last write of
// spec.renewTime on obj: the earliest time of the main resource's
// managedFields entries owning it (leaseobject.Object.RenewWrite: a later
// co-owner applied the stored value unchanged).
func renewWrite(obj string) string {
	list := managedFields(obj) + ".filter(m, m.?subresource.orValue('') == '' && m.?fieldsV1[?'f:spec'][?'f:renewTime'].hasValue() && " +
		managedTimeOK("m.?time.orValue('')") + ").map(m, timestamp(m.time))"
	return celexpr.Ternary(obj+" == null", "optional.none()", "["+list+"].map(l, l.size() == 0 ? optional.none() : optional.of(l.min()))[0]")
}

// renewWriteVariables render the record of the last renewal before and
// after the write, and recordAhead: policy's renewRecordAhead, a write
// that leaves renewTime as stored moves that record no later than the
// clock. Within the skew ahead, it made the rightful renewer's stamps look
// like a clock moving backwards (seventh attack round).
func renewWriteVariables(add func(name, expr string)) {
	add("oldRenewWrite", renewWrite("oldObject"))
	add("newRenewWrite", renewWrite("object"))
	add("recordAhead", recordAhead())
}

func recordAhead() string {
	return celexpr.And("request.operation == 'UPDATE'", v("now")+".hasValue()", v("newRenewWrite")+".hasValue()",
		v("oldRenewTime")+" == "+v("newRenewTime"),
		"(!"+v("oldRenewWrite")+".hasValue() || "+tv(v("newRenewWrite"))+" > "+tv(v("oldRenewWrite"))+")",
		tv(v("newRenewWrite"))+" > "+tv(v("now")))
}

func (c *vapCEL) skewDuration() string { return "duration(" + celexpr.Quote(c.skew.String()) + ")" }

// variables are the rule's facts about the request, in dependency order.
func (c *vapCEL) variables() []admissionregistrationv1.Variable {
	r := c.r
	var out []admissionregistrationv1.Variable
	add := func(name, expr string) {
		out = append(out, admissionregistrationv1.Variable{Name: name, Expression: expr})
	}
	podKey := celexpr.Quote(leaseobject.PodNameExtra)

	// Who is who.
	add("user", celexpr.User)
	add("pod", celexpr.Ternary("has(request.userInfo.extra) && request.userInfo.extra[?"+podKey+"].orValue([]).size() > 0",
		"request.userInfo.extra["+podKey+"][0]", "''"))
	add("statusWriter", callerMatches(r.StatusWriters))
	bound := "false"
	if r.Bind != nil {
		bound = boundAnyCaptures(r.Bind, v("user"))
	}
	add("bound", bound)
	manager := []string{celexpr.AnyGlob(v("user"), r.Managers), v("bound")}
	if r.Designation == policy.DesignationFixed {
		manager = append(manager, v("user")+" == "+celexpr.Quote(r.FixedManager))
	}
	add("manager", celexpr.Or(manager...))
	boundLease := "true"
	if r.Bind != nil && r.Bind.Expressible {
		bl, _ := celexpr.BoundLease(r.Bind)
		boundLease = strings.ReplaceAll(bl, celexpr.User, v("user"))
	}
	add("boundLease", boundLease)

	// The stored (old) and written (new) lease, '' / 0 / none when absent.
	for _, side := range []string{"old", "new"} {
		obj := "oldObject"
		if side == "new" {
			obj = "object"
		}
		for _, f := range c.stringFields() {
			add(field(side, f), specValue(obj, f, "''"))
		}
		for _, f := range c.timeFields() {
			// A Lease's zero MicroTime is stored as null (celexpr.TimeSet):
			// read as absent.
			add(field(side, f)+"Raw", celexpr.Ternary(obj+" == null || !"+celexpr.TimeSet(obj, f), "''", "string("+obj+".spec."+f+")"))
			add(field(side, f), parsedTime(v(field(side, f)+"Raw")))
		}
		for _, f := range c.intFields() {
			add(field(side, f)+"Raw", "int("+specValue(obj, f, "0")+")")
			add(field(side, f), readableInt(v(field(side, f)+"Raw")))
		}
		add(side+"Designated", celexpr.Ternary(obj+" == null", "''", celexpr.Annotation(obj, leaseobject.DesignationAnnotation)+".orValue('')"))
	}

	// What the write changes.
	var same []string
	for _, f := range c.stringFields() {
		same = append(same, v(field("old", f))+" == "+v(field("new", f)))
	}
	for _, f := range c.timeFields() {
		o, n := v(field("old", f)), v(field("new", f))
		same = append(same, celexpr.Or(v(field("old", f)+"Raw")+" == "+v(field("new", f)+"Raw"),
			celexpr.And(o+".hasValue()", n+".hasValue()", tv(o)+" == "+tv(n))))
	}
	for _, f := range c.intFields() {
		same = append(same, v(field("old", f)+"Raw")+" == "+v(field("new", f)+"Raw"))
	}
	add("specSame", celexpr.And(append([]string{"request.operation == 'UPDATE'"}, same...)...))
	add("metadataOnly", celexpr.And(v("specSame"), v("oldDesignated")+" == "+v("newDesignated")))
	if !c.lease() {
		add("sharedRenewal", c.sharedRenewal())
	}
	add("ownerReferencesSame", "request.operation == 'UPDATE' && object.metadata.?ownerReferences.orValue([]) == oldObject.metadata.?ownerReferences.orValue([])")
	add("ownershipChanged", "request.operation == 'UPDATE' && !("+v("ownerReferencesSame")+" && object.metadata.?finalizers.orValue([]) == oldObject.metadata.?finalizers.orValue([]))")
	if !c.lease() {
		add("writerChange", c.writerChange())
	}

	// The server's clock, from managedFields (docs/vap.md, "The clock").
	c.clockVariables(add)
	renewWriteVariables(add)

	// Expiry of the stored lease (docs/policy.md, "Expiry and staleness").
	ref := celexpr.Ternary(v("oldRenewTime")+".hasValue()", tv(v("oldRenewTime")),
		celexpr.Ternary(v("oldRenewTimeRaw")+" != '' && "+v("oldRenewWrite")+".hasValue()", tv(v("oldRenewWrite")), c.acquireOrCreation()))
	add("staleAt", celexpr.Ternary("oldObject == null", "timestamp(0)",
		ref+" + duration(string("+v("oldLeaseDurationSeconds")+" > 0 ? "+v("oldLeaseDurationSeconds")+" : "+
			strconv.Itoa(int(leaseobject.DefaultLeaseDuration/time.Second))+") + 's') + "+c.skewDuration()))
	add("stale", "oldObject != null && "+v("now")+".hasValue() && "+tv(v("now"))+" > "+v("staleAt"))
	add("live", v("oldHolderIdentity")+" != '' && !"+v("stale"))

	// The checks, each '' when it passes, else the failure's code.
	// A stored record ahead of the clock was written by a client (before
	// clockRewritten refused that): no record of the server's.
	add("recordFailure", celexpr.Ternary(celexpr.And("request.operation == 'UPDATE'", v("oldRenewWrite")+".hasValue()",
		"!("+v("now")+".hasValue() && "+tv(v("oldRenewWrite"))+" > "+tv(v("now"))+" + "+c.skewDuration()+")",
		celexpr.Ternary(v("newRenewWrite")+".hasValue()", tv(v("newRenewWrite"))+" < "+tv(v("oldRenewWrite")), v("newRenewTime")+".hasValue()")),
		lit(codeRecord), "''"))
	add("unreadableFailure", c.unreadableFailure())
	add("designationFailure", c.designationFailure())
	add("designatedFailure", c.designatedFailure())
	add("fencingFailure", c.fencingFailure())
	add("deleteFailure", c.deleteFailure())
	add("holderFailure", c.holderFailure())
	add("boundsFailure", c.boundsFailure())
	add("timesFailure", c.timesFailure())
	add("failure", c.failure())

	// For messages only (never evaluated on an admitted write).
	add("designatedRelative", relative(v("oldDesignated")))
	add("fixedRelative", relative(celexpr.Quote(r.FixedManager)))
	return out
}

// sharedRenewal is policy's sharedRenewal: a plain renewal of a
// MultiClusterLease, which I2 does not judge (docs/design.md §4).
func (c *vapCEL) sharedRenewal() string {
	plain := []string{"request.operation == 'UPDATE'", "request.?subResource.orValue('') == ''",
		v("oldHolderIdentity") + " != ''", v("oldRenewTime") + ".hasValue()", v("newRenewTime") + ".hasValue()"}
	for _, f := range c.stringFields() {
		plain = append(plain, v(field("old", f))+" == "+v(field("new", f)))
	}
	for _, f := range c.intFields() {
		o, n := v(field("old", f)+"Raw"), v(field("new", f)+"Raw")
		plain = append(plain, o+" == "+n, o+" >= 0", o+" <= "+maxInt32)
	}
	// The designation may change: designationFailure judges that.
	plain = append(plain,
		"object.metadata.?finalizers.orValue([]) == oldObject.metadata.?finalizers.orValue([])",
		"object.metadata.?ownerReferences.orValue([]) == oldObject.metadata.?ownerReferences.orValue([])")
	return celexpr.And(plain...)
}

// clockVariables render the server's clock. On CREATE it is
// creationTimestamp. On UPDATE it is the time of the writer's own
// managedFields entry, which the API server stamps with its clock (whole
// seconds) before admission: the entry that owns a field this write
// changes. The API server takes every changed field from every other
// entry, so no entry a client writes itself can own one, whatever time it
// carries. A write that changes no field it could own (it only removes
// some) is judged at the latest stored time, a lower bound; one that adds
// or re-dates an entry ahead of the clock is refused (clockRewritten), so
// that no judged write stores a time ahead.
func (c *vapCEL) clockVariables(add func(name, expr string)) {
	timeOf := "m.?time.orValue('')"
	update := "request.operation == 'UPDATE'"
	add("storedLatest", celexpr.Ternary("!("+update+")", "timestamp(0)",
		"("+managedFields("oldObject")+".filter(m, "+managedTimeOK(timeOf)+").map(m, timestamp(m.time)) + "+
			celexpr.Ternary(managedTimeOK("oldObject.metadata.?creationTimestamp.orValue('')"), "[timestamp(oldObject.metadata.creationTimestamp)]", "[timestamp(0)]")+
			").max()"))
	// What this write changes, as managedFields name it.
	var spec []string
	for _, f := range c.stringFields() {
		spec = append(spec, celexpr.Ternary(v(field("old", f))+" != "+v(field("new", f)), lit("f:"+f), "''"))
	}
	for _, f := range c.timeFields() {
		spec = append(spec, celexpr.Ternary(v(field("old", f)+"Raw")+" != "+v(field("new", f)+"Raw"), lit("f:"+f), "''"))
	}
	for _, f := range c.intFields() {
		spec = append(spec, celexpr.Ternary(v(field("old", f)+"Raw")+" != "+v(field("new", f)+"Raw"), lit("f:"+f), "''"))
	}
	add("changedSpec", celexpr.Ternary(update, "["+strings.Join(spec, ", ")+"].filter(f, f != '')", "[]"))
	changedKeys := func(field string) string {
		return celexpr.Ternary(update, "object.metadata.?"+field+".orValue({}).filter(k, oldObject.metadata.?"+field+".orValue({})[?k] != optional.of(object.metadata."+field+"[k]))", "[]")
	}
	add("changedLabels", changedKeys("labels"))
	add("changedAnnotations", changedKeys("annotations"))
	add("addedFinalizers", celexpr.Ternary(update, "object.metadata.?finalizers.orValue([]).filter(f, !(f in oldObject.metadata.?finalizers.orValue([])))", "[]"))
	add("changedOwners", celexpr.Ternary(update, "object.metadata.?ownerReferences.orValue([]).filter(r, !(r in oldObject.metadata.?ownerReferences.orValue([]))).map(r, r.?uid.orValue(''))", "[]"))
	owns := func(path ...string) string {
		out := "m.?fieldsV1"
		for _, p := range path {
			out += "[?" + p + "]"
		}
		return out + ".hasValue()"
	}
	writer := celexpr.Or(
		v("changedSpec")+".exists(f, "+owns("'f:spec'", "f")+")",
		v("changedLabels")+".exists(k, "+owns("'f:metadata'", "'f:labels'", "'f:' + k")+")",
		v("changedAnnotations")+".exists(k, "+owns("'f:metadata'", "'f:annotations'", "'f:' + k")+")",
		v("addedFinalizers")+".exists(f, "+owns("'f:metadata'", "'f:finalizers'", "'v:\"' + f + '\"'")+")",
		v("changedOwners")+".exists(u, "+owns("'f:metadata'", "'f:ownerReferences'", "'k:{\"uid\":\"' + u + '\"}'")+")",
	)
	// Built from a guarded ternary and then mapped, so that it type-checks
	// as a list of timestamps.
	add("writerStamps", celexpr.Ternary(update, managedFields("object"), "[]")+
		".filter(m, m.?subresource.orValue('') == '' && "+managedTimeOK(timeOf)+" && "+writer+").map(m, timestamp(m.time))")
	add("now", celexpr.Ternary("request.operation == 'CREATE'",
		celexpr.Ternary(managedTimeOK("object.metadata.?creationTimestamp.orValue('')"), "optional.of(timestamp(object.metadata.creationTimestamp))", "optional.none()"),
		celexpr.Ternary(update,
			celexpr.Ternary(v("writerStamps")+".size() > 0", "optional.of("+v("writerStamps")+".min())", "optional.of("+v("storedLatest")+")"),
			"optional.none()")))
	// Entries this write adds or re-dates, other than by the API server's
	// stamp: none may lie ahead of the clock.
	add("storedStamps", celexpr.Ternary("!("+update+")", "{}",
		managedFields("oldObject")+".filter(m, "+managedTimeOK(timeOf)+").transformMapEntry(i, m, {"+entryKey("m")+": m.time})"))
	// A create is held to the same: the API server keeps the entries a
	// create sends too (its clock there is creationTimestamp).
	add("clockRewritten", celexpr.Ternary("("+update+" || request.operation == 'CREATE') && "+v("now")+".hasValue()", managedFields("object"), "[]")+
		".exists(m, "+managedTimeOK(timeOf)+" && "+v("storedStamps")+"[?"+entryKey("m")+"].orValue('') != m.time && timestamp(m.time) > "+tv(v("now"))+" + "+c.skewDuration()+")")
}

func (c *vapCEL) acquireOrCreation() string {
	creation := "timestamp(oldObject.metadata.creationTimestamp)"
	if !c.lease() {
		return creation
	}
	return celexpr.Ternary(v("oldAcquireTime")+".hasValue()", tv(v("oldAcquireTime")), creation)
}

// boundAnyCaptures renders "the username fits the bind template": exactly,
// also with several captures (each a non-empty run without ':').
func boundAnyCaptures(b *policy.BindView, user string) string {
	m, _ := celexpr.BoundManager(b)
	return strings.ReplaceAll(m, celexpr.User, user)
}

// boundFill renders the lease name or namespace bound to the caller: the
// template's literals and, for its capture, the value the username gives
// the manager template's capture caps[0].
func (c *vapCEL) boundFill(lits []string, caps []int) string {
	capture := "''"
	if len(caps) > 0 {
		capture = strings.ReplaceAll(celexpr.CaptureValues(c.r.Bind)[caps[0]], celexpr.User, v("user"))
	}
	return "(" + celexpr.FillBound(lits, len(caps), capture) + ")"
}

// boundLeaseName renders the lease bound to the caller as a denial names
// it: namespace/name where the template binds the namespace.
func (c *vapCEL) boundLeaseName() string {
	b := c.r.Bind
	name := c.boundFill(b.LeaseLits, b.LeaseCaps)
	if b.NamespaceLits == nil {
		return name
	}
	return c.boundFill(b.NamespaceLits, b.NamespaceCaps) + " + '/' + " + name
}

// Failure codes: each names one check of docs/policy.md.
const (
	codeUnreadable      = "cannot-decide-"
	codeUntyped         = "untyped-"
	codeStatus          = "I8"
	codeManager         = "I1"
	codeUnbound         = "I9-unbound"
	codeOtherLease      = "I9-lease"
	codeOperatorsOnly   = "I3-operators"
	codeRemove          = "I3-remove"
	codeOther           = "I3-other"
	codeTakeover        = "I3-takeover"
	codeFixed           = "-fixed"
	codeNoneYet         = "-annotation-none"
	codeAnnotated       = "-annotation"
	codeAuto            = "-auto"
	codeCreateMax       = "I4-create-max"
	codeTransHeld       = "I4-transitions-held"
	codeHolder          = "I4-holder"
	codeRelease         = "I4-release"
	codeDelete          = "I4-delete"
	codeWriterOwnership = "I11-status-writer"
	codeWriterMetadata  = "I1-status-writer"
	codeTransRelease    = "I4-transitions-release"
	codeCount           = "I4-count"
	codeAcquire         = "I4-acquire"
	codeNoPod           = "I5-no-pod"
	codePod             = "I5-pod"
	codeUsername        = "I5-username"
	codeBounds          = "I10-"
	codeFuture          = "I7-future-"
	codeBackwards       = "I7-backwards"
	codeClearRenewTime  = "I7-clear-renewTime"
	codeClearAcquire    = "I7-clear-acquireTime"
	codeRecord          = "I7-record"
	codeClockRewritten  = "I7-clock"
	codeRecordAhead     = "I7-record-ahead"
	codeDesignatedWrite = "I2"
	codeOwnership       = "I11"
)

// unreadableFailure refuses a written spec value the webhook could not
// read either, unless it is the stored value left as it is.
func (c *vapCEL) unreadableFailure() string {
	out := "''"
	ints := c.intFields()
	for i := len(ints) - 1; i >= 0; i-- {
		f := ints[i]
		n, o := v(field("new", f)+"Raw"), v(field("old", f)+"Raw")
		out = celexpr.Ternary(celexpr.And("object != null", "("+n+" < 0 || "+n+" > "+maxInt32+")", n+" != "+o), lit(codeUnreadable+f), out)
	}
	times := c.timeFields()
	for i := len(times) - 1; i >= 0; i-- {
		f := times[i]
		raw := v(field("new", f) + "Raw")
		changed := raw + " != " + v(field("old", f)+"Raw")
		// A Lease's times are typed by the API server; a custom resource's
		// are stored as written, and must be what metav1.MicroTime reads.
		if !c.lease() {
			out = celexpr.Ternary(celexpr.And(raw+" != ''", v(field("new", f))+".hasValue()", changed, "!"+raw+".matches("+celexpr.Quote(microTimeRE)+")"), lit(codeUnreadable+codeUntyped+f), out)
		}
		out = celexpr.Ternary(celexpr.And(raw+" != ''", "!"+v(field("new", f))+".hasValue()", changed), lit(codeUnreadable+f), out)
	}
	return out
}

// microTimeRE is what metav1.MicroTime reads, as leaseobject.TypedTime
// checks it: exactly six fractional digits after a '.', an upper-case T
// and Z, an offset hour of at most 24 (the API server's date-time check
// has already refused impossible dates and clock times).
const microTimeRE = `^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}(Z|[+-]([01][0-9]|2[0-4]):[0-9]{2})$`

// designationFailure is I3, for a write that changes the designation.
func (c *vapCEL) designationFailure() string {
	switch c.r.Designation {
	case policy.DesignationByAnnotation, policy.DesignationFixed:
		return lit(codeOperatorsOnly)
	}
	old, nw, user := v("oldDesignated"), v("newDesignated"), v("user")
	return celexpr.Ternary(nw+" == ''", celexpr.Ternary(old+" != '' && "+old+" == "+user, "''", lit(codeRemove)),
		celexpr.Ternary(nw+" != "+user, lit(codeOther),
			celexpr.Ternary(old+" != '' && "+old+" != "+user+" && !"+v("stale"), lit(codeTakeover), "''")))
}

// designatedFailure is I2 (or I11 for a write that changes only finalizers
// or owner references): who may write while a designation holds.
func (c *vapCEL) designatedFailure() string {
	code := func(suffix string) string {
		return celexpr.Ternary(v("metadataOnly"), lit(codeOwnership+suffix), lit(codeDesignatedWrite+suffix))
	}
	old, user := v("oldDesignated"), v("user")
	switch c.r.Designation {
	case policy.DesignationFixed:
		return celexpr.Ternary(user+" == "+celexpr.Quote(c.r.FixedManager), "''", code(codeFixed))
	case policy.DesignationByAnnotation:
		return celexpr.Ternary(old+" != '' && "+old+" == "+user, "''", celexpr.Ternary(old+" == ''", code(codeNoneYet), code(codeAnnotated)))
	case policy.DesignationAuto:
		// A DELETE has no clock: a recorded designation holds.
		return celexpr.Ternary(celexpr.Or("oldObject == null", old+" == ''", old+" == "+user, v("stale")), "''", code(codeAuto))
	}
	return "''"
}

// writerChange is policy's statusWriterWrite: what of a MultiClusterLease
// itself an UPDATE by a status writer changes beyond the
// MultiClusterLease controller's own finalizer (empty for nothing), in the
// webhook's order. The API server keeps finalizers in the order written,
// so the other finalizers compare as lists.
func (c *vapCEL) writerChange() string {
	own := celexpr.Quote(leaseobject.ControllerFinalizer)
	others := func(obj string) string {
		return obj + ".metadata.?finalizers.orValue([]).filter(f, f != " + own + ")"
	}
	differs := func(field, zero string) string {
		return "object.metadata.?" + field + ".orValue(" + zero + ") != oldObject.metadata.?" + field + ".orValue(" + zero + ")"
	}
	return celexpr.Ternary("request.operation != 'UPDATE'", "''",
		celexpr.Ternary(others("object")+" != "+others("oldObject"), lit("finalizers"),
			celexpr.Ternary("!"+v("ownerReferencesSame"), lit("ownerReferences"),
				celexpr.Ternary(differs("labels", "{}"), lit("labels"),
					celexpr.Ternary(differs("annotations", "{}"), lit("annotations"),
						celexpr.Ternary(differs("generateName", "''"), lit("generateName"), "''"))))))
}

// deleteFailure is I4 on a DELETE: deleting a live lease releases it, so
// only its holder may (operators are never judged here). A DELETE has no
// server clock: a lease with a holder counts as live (live), so a
// non-holder's delete is refused even once the lease has expired, where
// the webhook admits it (docs/vap.md).
func (c *vapCEL) deleteFailure() string {
	if c.r.HolderBinding == policy.HolderBindingNone {
		return "''"
	}
	return celexpr.Ternary(celexpr.And("request.operation == 'DELETE'", v("live"), "!("+c.holdsLease()+")"), lit(codeDelete), "''")
}

// holdsLease renders "the caller holds the stored lease, as far as the
// holder binding can tell".
func (c *vapCEL) holdsLease() string {
	switch c.r.HolderBinding {
	case policy.HolderBindingPod:
		return celexpr.And(v("pod")+" != ''", holderIsPod(v("oldHolderIdentity")))
	case policy.HolderBindingUsername:
		return v("oldHolderIdentity") + " == " + v("user")
	}
	return "true"
}

func holderIsPod(h string) string {
	return celexpr.Or(h+" == "+v("pod"), h+".startsWith("+v("pod")+" + '_')")
}

// fencingFailure is I4.
func (c *vapCEL) fencingFailure() string {
	oldH, newH := v("oldHolderIdentity"), v("newHolderIdentity")
	createMax := "''"
	transHeld := "''"
	rest := "''"
	if c.lease() {
		oldT, newT := v("oldLeaseTransitions"), v("newLeaseTransitions")
		createMax = celexpr.Ternary(newT+" == "+maxInt32, lit(codeCreateMax), "''")
		transHeld = celexpr.Ternary(newT+" != "+oldT, lit(codeTransHeld), "''")
		rest = celexpr.Ternary(newH+" == ''", celexpr.Ternary(newT+" != "+oldT, lit(codeTransRelease), "''"),
			celexpr.Ternary(newT+" != "+oldT+" + 1", lit(codeCount),
				celexpr.Ternary(celexpr.Or("!"+v("newAcquireTime")+".hasValue()",
					celexpr.And(v("oldAcquireTime")+".hasValue()", tv(v("newAcquireTime"))+" == "+tv(v("oldAcquireTime")))),
					lit(codeAcquire), "''")))
	}
	return celexpr.Ternary("oldObject == null", createMax,
		celexpr.Ternary(oldH+" == "+newH, transHeld,
			celexpr.Ternary(newH+" != '' && "+v("live"), lit(codeHolder),
				celexpr.Ternary(newH+" == '' && "+v("live")+" && !("+c.holdsLease()+")", lit(codeRelease), rest))))
}

// holderFailure is I5.
func (c *vapCEL) holderFailure() string {
	h := v("newHolderIdentity")
	switch c.r.HolderBinding {
	case policy.HolderBindingPod:
		return celexpr.Ternary(h+" == ''", "''", celexpr.Ternary(v("pod")+" == ''", lit(codeNoPod), celexpr.Ternary(holderIsPod(h), "''", lit(codePod))))
	case policy.HolderBindingUsername:
		return celexpr.Ternary(h+" == '' || "+h+" == "+v("user"), "''", lit(codeUsername))
	}
	return "''"
}

// boundsFailure is I10.
func (c *vapCEL) boundsFailure() string {
	limit := strconv.FormatInt(int64(c.r.MaxLeaseDuration/time.Second), 10)
	out := "''"
	for _, f := range []string{"retryPeriodSeconds", "renewDeadlineSeconds", "leaseDurationSeconds"} {
		if c.lease() && f != "leaseDurationSeconds" {
			continue
		}
		out = celexpr.Ternary(v(field("new", f))+" > "+limit, lit(codeBounds+f), out)
	}
	return out
}

// timesFailure is I7 on the times the write declares.
func (c *vapCEL) timesFailure() string {
	future := func(f string) string {
		t := v(field("new", f))
		return celexpr.And(t+".hasValue()", v("now")+".hasValue()", tv(t)+" > "+tv(v("now"))+" + "+c.skewDuration())
	}
	oldR, newR := v("oldRenewTime"), v("newRenewTime")
	held := celexpr.Ternary(celexpr.And("!"+newR+".hasValue()", celexpr.Or(oldR+".hasValue()", v("oldRenewTimeRaw")+" != ''")), lit(codeClearRenewTime), "''")
	if c.lease() {
		held = celexpr.Ternary(celexpr.And("!"+newR+".hasValue()", celexpr.Or(oldR+".hasValue()", v("oldRenewTimeRaw")+" != ''")), lit(codeClearRenewTime),
			celexpr.Ternary(celexpr.And("!"+v("newAcquireTime")+".hasValue()", v("oldAcquireTime")+".hasValue()"), lit(codeClearAcquire), "''"))
	}
	after := celexpr.Ternary("oldObject == null", "''",
		celexpr.Ternary(celexpr.And(newR+".hasValue()", oldR+".hasValue()", tv(newR)+" < "+tv(oldR)), lit(codeBackwards),
			celexpr.Ternary(v("oldHolderIdentity")+" != '' && "+v("newHolderIdentity")+" == "+v("oldHolderIdentity"), held, "''")))
	out := after
	if c.lease() {
		out = celexpr.Ternary(future("acquireTime"), lit(codeFuture+"acquireTime"), out)
	}
	return celexpr.Ternary(future("renewTime"), lit(codeFuture+"renewTime"), out)
}

// first renders the first non-empty of the failure variables.
func first(names ...string) string {
	out := "''"
	for i := len(names) - 1; i >= 0; i-- {
		out = celexpr.Ternary(v(names[i])+" != ''", v(names[i]), out)
	}
	return out
}

// failure walks docs/policy.md's decision, in order, for a caller that is
// not an operator (matchConditions leave operators out).
func (c *vapCEL) failure() string {
	r := c.r
	isDelete := "request.operation == 'DELETE'"
	spec := first("fencingFailure", "holderFailure", "boundsFailure", "timesFailure", "recordFailure")
	out := celexpr.Ternary(isDelete, v("deleteFailure"), celexpr.Ternary(v("metadataOnly"), v("recordFailure"), spec))
	designated := v("designatedFailure") + " != ''"
	if !c.lease() {
		designated = "!" + v("sharedRenewal") + " && " + designated
	}
	out = celexpr.Ternary(designated, v("designatedFailure"), out)
	out = celexpr.Ternary(v("metadataOnly")+" && !"+v("ownershipChanged"), v("recordFailure"), out)
	out = celexpr.Ternary("!("+isDelete+") && "+v("oldDesignated")+" != "+v("newDesignated")+" && "+v("designationFailure")+" != ''", v("designationFailure"), out)
	if r.Bind != nil {
		out = celexpr.Ternary("!"+v("bound"), lit(codeUnbound), celexpr.Ternary("!"+v("boundLease"), lit(codeOtherLease), out))
	}
	// A status writer that is not a manager changes nothing of the object
	// itself but the MultiClusterLease controller's finalizer.
	notManager := lit(codeManager)
	if !c.lease() {
		w := v("writerChange")
		notManager = celexpr.Ternary(celexpr.And(v("metadataOnly"), v("statusWriter")),
			celexpr.Ternary(w+" == 'finalizers' || "+w+" == 'ownerReferences'", lit(codeWriterOwnership),
				celexpr.Ternary(w+" != ''", lit(codeWriterMetadata), v("recordFailure"))),
			notManager)
	}
	out = celexpr.Ternary("!"+v("manager"), notManager, out)
	out = celexpr.Ternary(v("recordAhead"), lit(codeRecordAhead), out)
	out = celexpr.Ternary(v("clockRewritten"), lit(codeClockRewritten), out)
	out = celexpr.Ternary(v("unreadableFailure")+" != ''", v("unreadableFailure"), out)
	if !c.lease() {
		out = celexpr.Ternary("request.?subResource.orValue('') == 'status'", celexpr.Ternary(v("statusWriter"), "''", lit(codeStatus)), out)
	}
	return out
}

// A check's refusal: its code, invariant and the message leaseguard writes.
type refusal struct {
	code string
	// problem and hint are CEL strings. The static message, used when the
	// messageExpression cannot be evaluated, has no request values:
	// staticProblem replaces a problem that has some, or static the whole
	// message.
	problem, hint string
	staticProblem string
	static        string
	reason        metav1.StatusReason
}

// refusals lists every check's refusal, in the order of the procedure.
func (c *vapCEL) refusals() []refusal {
	var out []refusal
	for _, part := range [][]refusal{c.whoRefusals(), c.designationRefusals(), c.specRefusals()} {
		for _, f := range part {
			if f.reason == "" {
				f.reason = metav1.StatusReasonForbidden
			}
			out = append(out, f)
		}
	}
	return out
}

func str(parts ...string) string { return "(" + strings.Join(parts, " + ") + ")" }

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func staleIn() string { return str(lit("stale "), in(v("staleAt"))) }

// whoRefusals: what cannot be read, and who may write at all (I8, I1, I9).
func (c *vapCEL) whoRefusals() []refusal {
	r := c.r
	var out []refusal
	add := func(f refusal) { out = append(out, f) }
	for _, f := range c.timeFields() {
		raw := v(field("new", f) + "Raw")
		add(refusal{code: codeUnreadable + f, reason: metav1.StatusReasonInvalid,
			static:  "leaseguard: cannot decide: request.object: spec." + f + " is not an RFC 3339 time leaseguard reads",
			problem: str(lit("leaseguard: cannot decide: request.object: spec."+f+": \""), clip(raw), lit("\" is not an RFC 3339 time such as 2026-01-02T15:04:05.000000Z"))})
	}
	if !c.lease() {
		for _, f := range c.timeFields() {
			raw := v(field("new", f) + "Raw")
			add(refusal{code: codeUnreadable + codeUntyped + f, reason: metav1.StatusReasonInvalid,
				static: "leaseguard: cannot decide: request.object: spec." + f + " cannot be read by typed clients (metav1.MicroTime): write it as " + leaseobject.MicroTimeLayout,
				problem: str(lit("leaseguard: cannot decide: request.object: spec."+f+" \""), clip(raw),
					lit("\" cannot be read by typed clients (metav1.MicroTime): write it as "+leaseobject.MicroTimeLayout))})
		}
	}
	for _, f := range c.intFields() {
		raw := v(field("new", f) + "Raw")
		add(refusal{code: codeUnreadable + f, reason: metav1.StatusReasonInvalid,
			static:  "leaseguard: cannot decide: request.object: spec." + f + " is not an int32 >= 0",
			problem: str(lit("leaseguard: cannot decide: request.object: spec."+f), celexpr.Ternary(raw+" < 0", lit(" is negative ("), lit(" is out of range (")), "string("+raw+")", lit(")"))})
	}
	add(refusal{code: codeClockRewritten, problem: lit("dates a managedFields entry ahead of the server clock on"), hint: lit("only the API server dates entries")})
	add(refusal{code: codeRecordAhead, problem: lit("re-dates the record of the last renewal, ahead of the server clock, on"),
		hint: str(lit("the API server dates it when renewTime is written: record "), rfc3339(tv(v("newRenewWrite"))), lit(", stored "),
			celexpr.Ternary(v("oldRenewWrite")+".hasValue()", rfc3339(tv(v("oldRenewWrite"))), lit("none")))})
	if !c.lease() {
		add(refusal{code: codeStatus, problem: lit("may not write the status of"), hint: lit("status writers: " + orNone(strings.Join(r.StatusWriters, ", ")))})
	}
	var managers []string
	if r.Bind != nil {
		managers = append(managers, r.Bind.ManagerText)
	}
	if len(r.Managers) > 0 {
		managers = append(managers, strings.Join(r.Managers, ", "))
	}
	if r.Designation == policy.DesignationFixed {
		managers = append(managers, r.FixedManager)
	}
	add(refusal{code: codeManager, problem: lit("is not a manager of"), hint: lit("managers: " + orNone(strings.Join(managers, ", ")))})
	if !c.lease() {
		add(refusal{code: codeWriterOwnership, problem: str(lit("may not change "), v("writerChange"), lit(" of")),
			staticProblem: "may not change finalizers or ownerReferences of", hint: lit(policy.StatusWriterHint)})
		add(refusal{code: codeWriterMetadata, problem: str(lit("may not change "), v("writerChange"), lit(" of")),
			staticProblem: "may not change labels, annotations or generateName of", hint: lit(policy.StatusWriterHint)})
	}
	if r.Bind != nil {
		add(refusal{code: codeUnbound, problem: lit("may not write"), hint: lit("bound to no lease: username does not fit " + r.Bind.ManagerText)})
		if r.Bind.Expressible {
			add(refusal{code: codeOtherLease, problem: lit("may not write"), hint: str(lit("bound lease: "), c.boundLeaseName())})
		}
	}
	return out
}

// designationRefusals: I3, then I2 and I11.
func (c *vapCEL) designationRefusals() []refusal {
	r := c.r
	var out []refusal
	add := func(f refusal) { out = append(out, f) }
	switch r.Designation {
	case policy.DesignationByAnnotation, policy.DesignationFixed:
		add(refusal{code: codeOperatorsOnly, problem: lit("may not change annotation " + leaseobject.DesignationAnnotation + " of"),
			hint: lit("only operators may: " + orNone(strings.Join(r.Operators, ", ")))})
	default:
		add(refusal{code: codeRemove, problem: lit("may not remove annotation " + leaseobject.DesignationAnnotation + " of"),
			hint: str(lit("designated: "), celexpr.Ternary(v("oldDesignated")+" == ''", lit("none"), v("designatedRelative")))})
		add(refusal{code: codeOther, problem: str(lit("may not designate "), clip(v("newDesignated")), lit(" for")), staticProblem: "may not designate another manager for",
			hint: lit("a manager may designate only itself")})
		add(refusal{code: codeTakeover, problem: lit("may not take over the designation of"),
			hint: str(lit("designated: "), v("designatedRelative"), lit(", "), staleIn())})
	}
	problems := map[string]string{codeDesignatedWrite: "is not the designated manager of", codeOwnership: "may not change finalizers or ownerReferences of"}
	for _, inv := range []string{codeDesignatedWrite, codeOwnership} {
		problem := problems[inv]
		switch r.Designation {
		case policy.DesignationFixed:
			add(refusal{code: inv + codeFixed, problem: lit(problem), hint: str(lit("designated: "), v("fixedRelative"))})
		case policy.DesignationByAnnotation:
			noneYet := "may not write"
			if inv == codeOwnership {
				noneYet = problem
			}
			add(refusal{code: inv + codeNoneYet, problem: lit(noneYet),
				hint: lit("no designated manager yet: an operator sets annotation " + leaseobject.DesignationAnnotation)})
			add(refusal{code: inv + codeAnnotated, problem: lit(problem),
				hint: str(lit("designated: "), v("designatedRelative"))})
		case policy.DesignationAuto:
			// A DELETE has no clock to say when the designation goes stale.
			add(refusal{code: inv + codeAuto, problem: lit(problem),
				hint: str(lit("designated: "), v("designatedRelative"), celexpr.Ternary(v("now")+".hasValue()", str(lit(", "), staleIn()), "''"))})
		}
	}
	return out
}

// specRefusals: the lease fields (I4, I5, I10, I7).
func (c *vapCEL) specRefusals() []refusal {
	r := c.r
	var out []refusal
	add := func(f refusal) { out = append(out, f) }
	heldUntil := str(lit("held until "), rfc3339(v("staleAt")), lit(", expires "), in(v("staleAt")))
	old, nw := v("oldHolderIdentity"), v("newHolderIdentity")
	if c.lease() {
		oldT, newT := "string("+v("oldLeaseTransitions")+")", "string("+v("newLeaseTransitions")+")"
		add(refusal{code: codeCreateMax, problem: str(lit("creates with leaseTransitions "), newT), staticProblem: "creates with leaseTransitions " + maxInt32,
			hint: lit("leaves no room to count the next acquisition")})
		add(refusal{code: codeTransHeld, problem: str(lit("changes leaseTransitions ("), oldT, lit(" to "), newT, lit(") without a new holder on")),
			staticProblem: "changes leaseTransitions without a new holder on", hint: lit("leaseTransitions changes only on acquisition")})
		add(refusal{code: codeTransRelease, problem: str(lit("changes leaseTransitions ("), oldT, lit(" to "), newT, lit(") on release of")),
			staticProblem: "changes leaseTransitions on release of", hint: lit("a release keeps leaseTransitions")})
		add(refusal{code: codeCount, problem: lit("changes the holder without counting the transition on"),
			hint: str(lit("leaseTransitions must go from "), oldT, lit(" to "), "string("+v("oldLeaseTransitions")+" + 1)")})
		add(refusal{code: codeAcquire, problem: lit("changes the holder without a new acquireTime on"), hint: lit("set spec.acquireTime to the time of acquisition")})
	}
	add(refusal{code: codeHolder, problem: str(lit("may not change the holder ("), clip(old), lit(" to "), clip(nw), lit(") of")),
		staticProblem: "may not change the holder of", hint: heldUntil})
	add(refusal{code: codeRelease, problem: str(lit("may not release the lease of "), clip(old), lit(" on")),
		staticProblem: "may not release the live lease of another holder on", hint: str(lit("only the holder or an operator may; "), heldUntil)})
	if r.HolderBinding != policy.HolderBindingNone {
		// A DELETE has no clock to say when the lease expires.
		add(refusal{code: codeDelete, problem: str(lit("may not delete the live lease of "), clip(old), lit(" on")),
			staticProblem: "may not delete the live lease of another holder on",
			hint:          str(lit("only the holder or an operator may; held until "), rfc3339(v("staleAt")))})
	}
	switch r.HolderBinding {
	case policy.HolderBindingPod:
		add(refusal{code: codeNoPod, problem: lit("has no pod-bound token and may not write"), hint: lit("holderBinding pod needs the " + leaseobject.PodNameExtra + " extra")})
		add(refusal{code: codePod, problem: str(lit("writes holder "), clip(nw), lit(" of another pod on")), staticProblem: "writes the holder of another pod on",
			hint: str(lit("want "), clip(v("pod")), lit("[_<id>]"))})
	case policy.HolderBindingUsername:
		add(refusal{code: codeUsername, problem: str(lit("writes holder "), clip(nw), lit(" that is not its username on")),
			staticProblem: "writes a holder that is not its username on", hint: lit("holder must be the caller's username")})
	}
	limit := strconv.FormatInt(int64(r.MaxLeaseDuration/time.Second), 10)
	for _, f := range c.intFields() {
		if f == "leaseTransitions" {
			continue
		}
		add(refusal{code: codeBounds + f, problem: str(lit("sets "+f+" "), "string("+v(field("new", f))+")", lit(" on")),
			staticProblem: "sets a longer " + f + " on", hint: lit("at most " + limit + " (maxLeaseDuration)")})
	}
	for _, f := range c.timeFields() {
		article := "a "
		if f == "acquireTime" {
			article = "an "
		}
		add(refusal{code: codeFuture + f, problem: lit("sets " + article + f + " in the future on"),
			hint: str(lit(f+" "), durationText(tv(v(field("new", f)))+" - "+tv(v("now"))), lit(" ahead of the server clock, allowed "+c.skew.String()))})
	}
	add(refusal{code: codeBackwards, problem: lit("moves renewTime backwards on"), hint: str(lit("stored renewTime: "), rfc3339Nano(tv(v("oldRenewTime"))))})
	add(refusal{code: codeClearRenewTime, problem: lit("clears renewTime of held"), hint: lit("a held lease keeps its renewTime")})
	if c.lease() {
		add(refusal{code: codeClearAcquire, problem: lit("clears acquireTime of held"), hint: lit("a held lease keeps its acquireTime")})
	}
	add(refusal{code: codeRecord, problem: lit("rewrites the managedFields time of the last renewal of"),
		hint: str(lit("the API server records it: "), rfc3339(tv(v("oldRenewWrite"))))})
	return out
}

// validations: one per refusal, failing exactly when the failure variable
// names it.
func (c *vapCEL) validations() []admissionregistrationv1.Validation {
	var out []admissionregistrationv1.Validation
	for _, f := range c.refusals() {
		reason := f.reason
		out = append(out, admissionregistrationv1.Validation{
			Expression:        v("failure") + " != " + lit(f.code),
			Message:           c.static(&f),
			MessageExpression: c.messageExpression(&f),
			Reason:            &reason,
		})
	}
	return out
}

// messageExpression is the exact message of refusal f, as the webhook
// words it, or none with static messages.
func (c *vapCEL) messageExpression(f *refusal) string {
	if c.staticMessages {
		return ""
	}
	return celexpr.Ternary(v("failure")+" != "+lit(f.code), "''", c.message(f))
}

// static is the message without request values.
func (c *vapCEL) static(f *refusal) string {
	if f.static != "" {
		return f.static
	}
	problem := f.staticProblem
	if problem == "" {
		problem, _ = strconv.Unquote(f.problem)
	}
	msg := "leaseguard: rule " + c.r.Name + ": the caller " + problem + " this " + c.kind()
	if hint, err := strconv.Unquote(f.hint); err == nil && hint != "" {
		msg += " (" + hint + ")"
	}
	return msg
}

func invariantOf(code string) policy.Invariant {
	if strings.HasPrefix(code, codeUnreadable) {
		return policy.InvariantNone
	}
	i := strings.IndexByte(code, '-')
	if i < 0 {
		return policy.Invariant(code)
	}
	return policy.Invariant(code[:i])
}

// message renders leaseguard's one-line message (docs/policy.md,
// "Messages"): rule, caller, what is wrong, the object and what would be
// allowed, cut to 255 characters. Values that do not print as themselves
// are not shown (clip).
func (c *vapCEL) message(f *refusal) string {
	if strings.HasPrefix(f.code, codeUnreadable) {
		return "[" + f.problem + "].map(m, m.size() > 255 ? m.substring(0, 252) + '...' : m)[0]"
	}
	return celexpr.Refusal(c.r.Name, v("user"), f.problem, lit(c.kind()), f.hint)
}

// clip cuts a value as leaseguard's messages do (celexpr.Clip).
func clip(s string) string { return celexpr.Clip(s) }

// relative abbreviates a username that shares a long prefix with the
// caller's (policy's check.relative): after the last ':' of the common
// prefix, when that lies at 16 or beyond.
func relative(u string) string {
	segs := u + ".split(':')"
	mine := v("user") + ".split(':')"
	shared := "lists.range([" + segs + ".size(), " + mine + ".size()].min() - 1).filter(i, " + segs + ".slice(0, i + 1) == " + mine + ".slice(0, i + 1)).size()"
	return "[" + shared + "].map(k, " + segs + ".slice(0, k).join(':').size() < 16 || k == 0 ? " + clip(u) +
		" : " + clip("('...' + "+segs+".slice(k, "+segs+".size()).join(':'))") + ")[0]"
}

func rfc3339(t string) string     { return celexpr.RFC3339(t) }
func rfc3339Nano(t string) string { return celexpr.RFC3339Nano(t) }

// in renders "in 12s" for a time shortly after the clock, rounded up to
// whole seconds, and "at <date>" for one beyond two days.
func in(t string) string {
	now := tv(v("now"))
	return "[" + t + "].map(t, t > " + now + " + duration('48h') ? 'at ' + " + rfc3339("t") + " : 'in ' + " +
		"[t - " + now + "].map(d, " + goSeconds("(d.getSeconds() + (d > duration(string(d.getSeconds()) + 's') ? 1 : 0))") + ")[0])[0]"
}

// goSeconds renders whole seconds as Go's time.Duration.String does.
func goSeconds(s string) string {
	return "[" + s + "].map(s, s >= 3600 ? '%dh%dm%ds'.format([s / 3600, s % 3600 / 60, s % 60]) : s >= 60 ? '%dm%ds'.format([s / 60, s % 60]) : string(s) + 's')[0]"
}

// durationText renders a duration as the webhook's messages do: to the
// millisecond, whole hours beyond two days.
func durationText(d string) string {
	frac := "(ms % 1000 % 100 == 0 ? string(ms % 1000 / 100) : ms % 1000 % 10 == 0 ? ('0' + string(ms % 1000 / 10)).substring(('0' + string(ms % 1000 / 10)).size() - 2) : ('00' + string(ms % 1000)).substring(('00' + string(ms % 1000)).size() - 3))"
	secs := "(ms / 1000 >= 3600 ? '%dh%dm%d'.format([ms / 1000 / 3600, ms / 1000 % 3600 / 60, ms / 1000 % 60]) : ms / 1000 >= 60 ? '%dm%d'.format([ms / 1000 / 60, ms / 1000 % 60]) : string(ms / 1000))"
	return "[" + d + "].map(d, d > duration('48h') ? string(d.getSeconds() / 3600) + 'h' : [d.getMilliseconds()].map(ms, ms < 1000 ? string(ms) + 'ms' : ms % 1000 == 0 ? " +
		goSeconds("ms / 1000") + " : " + secs + " + '.' + " + frac + " + 's')[0])[0]"
}
