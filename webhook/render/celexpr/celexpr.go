// Package celexpr renders what a leaseguard rule selects and who it lets
// write as CEL: the building blocks the webhook configurations' match
// conditions (webhook/render/manifests) and the admission policies (webhook/render/vap)
// share, so that both select alike.
package celexpr

import (
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
)

// CEL building blocks. Every expression here is evaluated by the API server
// on every lease write it selects, in matchConditions of leaseguard's
// webhooks and in its admission policies; an evaluation error makes a
// webhook fall back on its failure policy (a Fail webhook then refuses the
// write). So each expression guards every field it reads (has(), the ?
// optional syntax) and never indexes what may be missing.

// Names of the request's parts as CEL sees them in admission.
const (
	User   = "request.userInfo.username"
	Groups = "request.userInfo.groups"
)

// Quote renders a CEL string literal.
func Quote(s string) string { return strconv.Quote(s) }

// And joins conditions; an empty list is true.
func And(parts ...string) string {
	var kept []string
	for _, p := range parts {
		if p != "" && p != "true" {
			kept = append(kept, p)
		}
	}
	switch len(kept) {
	case 0:
		return "true"
	case 1:
		return kept[0]
	}
	return "(" + strings.Join(kept, " && ") + ")"
}

// Or joins conditions; an empty list is false.
func Or(parts ...string) string {
	var kept []string
	for _, p := range parts {
		if p == "true" {
			return "true"
		}
		if p != "" && p != "false" {
			kept = append(kept, p)
		}
	}
	switch len(kept) {
	case 0:
		return "false"
	case 1:
		return kept[0]
	}
	return "(" + strings.Join(kept, " || ") + ")"
}

func Not(p string) string {
	switch p {
	case "true":
		return "false"
	case "false":
		return "true"
	}
	return "!" + p
}

// GlobMatch renders "x matches glob g" (only '*' is special in leaseguard's
// globs).
func GlobMatch(x, g string) string {
	parts := strings.Split(g, "*")
	switch {
	case len(parts) == 1:
		return x + " == " + Quote(g)
	case g == "*":
		return "true"
	case len(parts) == 2 && parts[1] == "":
		return x + ".startsWith(" + Quote(parts[0]) + ")"
	case len(parts) == 2 && parts[0] == "":
		return x + ".endsWith(" + Quote(parts[1]) + ")"
	}
	quoted := make([]string, len(parts))
	for i, p := range parts {
		quoted[i] = regexp.QuoteMeta(p)
	}
	return x + ".matches(" + Quote("^"+strings.Join(quoted, "(?s:.*)")+"$") + ")"
}

// AnyGlob renders "x matches one of gs"; an empty list matches nothing.
func AnyGlob(x string, gs []string) string {
	parts := make([]string, len(gs))
	for i, g := range gs {
		parts[i] = GlobMatch(x, g)
	}
	return Or(parts...)
}

// ObjectName is the name of the object a request writes: the API server
// generates it for a CREATE with generateName before validation, while
// request.name keeps the name of the request (empty then); a DELETE names
// the stored object, which a deletecollection's item reviews carry in
// oldObject while their request.name is empty.
const ObjectName = "(request.operation == 'DELETE' ? (oldObject != null && has(oldObject.metadata.name) ? oldObject.metadata.name : request.?name.orValue('')) : " +
	"(has(object.metadata.name) ? object.metadata.name : request.?name.orValue('')))"

// Selects renders "the rule selects the request's object".
func Selects(r *policy.RuleView) string {
	resources := make([]string, len(r.Resources))
	for i, res := range r.Resources {
		resources[i] = "request.resource.resource == " + Quote(string(res))
	}
	sel := []string{Or(resources...)}
	if len(r.Namespaces) > 0 {
		sel = append(sel, AnyGlob("request.?namespace.orValue('')", r.Namespaces))
	}
	if len(r.Names) > 0 {
		sel = append(sel, AnyGlob(ObjectName, r.Names))
	}
	return And(sel...)
}

// SelectsFirst renders "rule i is the first rule to select the object": the
// policy's first match, as the decision core selects.
func SelectsFirst(rules []policy.RuleView, i int) string {
	parts := []string{Selects(&rules[i])}
	for j := 0; j < i; j++ {
		if shareResource(&rules[i], &rules[j]) {
			parts = append(parts, Not(Selects(&rules[j])))
		}
	}
	return And(parts...)
}

func shareResource(a, b *policy.RuleView) bool {
	for _, x := range a.Resources {
		for _, y := range b.Resources {
			if x == y {
				return true
			}
		}
	}
	return false
}

// IsManager renders "the caller counts as a manager under the rule", and
// reports whether it is exact; a bind template with several captures cannot
// be matched in CEL, and is then left out (the webhook judges it).
func IsManager(r *policy.RuleView) (string, bool) {
	m, _ := isManagerUnbound(r)
	if r.Bind != nil {
		b, _ := BoundManager(r.Bind)
		m = Or(m, b)
	}
	return m, true
}

// isManagerUnbound renders "the caller is a manager by the rule's managers
// or its fixed designation", leaving out its bind template.
func isManagerUnbound(r *policy.RuleView) (string, bool) {
	parts := []string{AnyGlob(User, r.Managers)}
	if r.Designation == policy.DesignationFixed {
		parts = append(parts, User+" == "+Quote(r.FixedManager))
	}
	return Or(parts...), true
}

// BoundManager renders "the username fits the bind template's manager":
// each capture a non-empty run without ':'. With one capture, between the
// two literals; with several, as a regular expression (which, like
// policy's matching, finds a split if there is one).
func BoundManager(b *policy.BindView) (string, bool) {
	if b.ManagerCaps != 1 {
		parts := make([]string, len(b.ManagerLits))
		for i, l := range b.ManagerLits {
			parts[i] = regexp.QuoteMeta(l)
		}
		return User + ".matches(" + Quote("^"+strings.Join(parts, "[^:]+")+"$") + ")", true
	}
	pre, post := b.ManagerLits[0], b.ManagerLits[1]
	parts := []string{User + ".startsWith(" + Quote(pre) + ")"}
	if post != "" {
		parts = append(parts, User+".endsWith("+Quote(post)+")")
	}
	parts = append(parts, User+".size() > "+strconv.Itoa(len(pre)+len(post)), "!"+Capture(b)+".contains(':')")
	return And(parts...), true
}

// Capture renders the value the username's one capture takes.
func Capture(b *policy.BindView) string {
	pre, post := b.ManagerLits[0], b.ManagerLits[1]
	if post == "" {
		return User + ".substring(" + strconv.Itoa(len(pre)) + ")"
	}
	return User + ".substring(" + strconv.Itoa(len(pre)) + ", " + User + ".size() - " + strconv.Itoa(len(post)) + ")"
}

// BoundLease renders "the object is the lease bound to the caller": its
// name, and its namespace where the template binds one. It reports false
// where CEL cannot say which lease that is (policy's bind.expressible).
func BoundLease(b *policy.BindView) (string, bool) {
	if !b.Expressible {
		return "", false
	}
	m, _ := BoundManager(b)
	values := CaptureValues(b)
	fill := func(lits []string, caps []int) string {
		capture := "''"
		if len(caps) > 0 {
			capture = values[caps[0]]
		}
		return FillBound(lits, len(caps), capture)
	}
	parts := []string{m, ObjectName + " == " + fill(b.LeaseLits, b.LeaseCaps)}
	if b.NamespaceLits != nil {
		parts = append(parts, "request.namespace == "+fill(b.NamespaceLits, b.NamespaceCaps))
	}
	return And(parts...), true
}

// CaptureValues renders the values the username gives the bind template's
// captures, for a template CEL can tie to one lease (BindView.Expressible):
// one capture between the two literals; or two, the first ending at the
// ':' that starts the literal after it (no capture contains one). They
// hold only where the username fits the template (BoundManager).
func CaptureValues(b *policy.BindView) []string {
	if b.ManagerCaps == 1 {
		return []string{Capture(b)}
	}
	pre, mid, post := b.ManagerLits[0], b.ManagerLits[1], b.ManagerLits[2]
	end := User + ".indexOf(':', " + strconv.Itoa(len(pre)) + ")"
	return []string{
		User + ".substring(" + strconv.Itoa(len(pre)) + ", " + end + ")",
		User + ".substring(" + end + " + " + strconv.Itoa(len(mid)) + ", " + User + ".size() - " + strconv.Itoa(len(post)) + ")",
	}
}

// FillBound renders a lease or namespace template of a bind with one
// capture, filled with capture (an expression).
func FillBound(lits []string, caps int, capture string) string {
	var parts []string
	for i, lit := range lits {
		if lit != "" {
			parts = append(parts, Quote(lit))
		}
		if i < caps {
			parts = append(parts, capture)
		}
	}
	if len(parts) == 0 {
		return "''"
	}
	return strings.Join(parts, " + ")
}

// Field access with optionals: a missing field reads as absent, never as
// an error.
func Spec(obj, field string) string { return obj + ".?spec.?" + field }

// TimeSet renders "obj's spec.field holds a time": present and not null. A
// Lease's times are MicroTimes, which client-go writes as null when zero
// (its coordinated elector renews a lease the API server's election
// controller handed over without an acquireTime), and the API server
// stores and hands CEL that null: present, so has() and the optional
// field's hasValue() are true, and timestamp() of it fails the policy.
func TimeSet(obj, field string) string {
	return "(" + Spec(obj, field) + ".hasValue() && dyn(" + obj + ".spec." + field + ") != null)"
}

func Annotation(obj, key string) string {
	return obj + ".metadata.?annotations[?" + Quote(key) + "]"
}

// PodName is the pod a bound service-account token was issued to.
const PodName = "request.userInfo.extra[?" + `"authentication.kubernetes.io/pod-name"` + "].orValue([''])[0]"

// HolderIsCallersPod renders I5's pod binding for the holder expression h.
func HolderIsCallersPod(h string) string {
	return And("has(request.userInfo.extra)", PodName+" != ''",
		Or(h+" == "+PodName, h+".startsWith("+PodName+" + '_')"))
}

// LeaseFields are the spec fields of each kind other than renewTime that
// goIdentityChange compares. A MultiClusterLease's include a Lease's
// (acquireTime, leaseTransitions, strategy, preferredHolder): leaseguard
// reads them wherever a CRD keeps them, so a write that changes one is an
// identity change here too, never a renewal riding the fail-open route.
func LeaseFields(res leaseobject.Resource) []string {
	if res == leaseobject.Leases {
		return []string{"holderIdentity", "leaseDurationSeconds", "acquireTime", "leaseTransitions", "strategy", "preferredHolder"}
	}
	return []string{"holderIdentity", "leaseDurationSeconds", "renewDeadlineSeconds", "retryPeriodSeconds", "acquireTime", "leaseTransitions", "strategy", "preferredHolder"}
}

// ownership renders "finalizers, owner references and the designation are
// as stored".
func OwnershipUnchanged() string {
	return And(
		"object.metadata.?finalizers == oldObject.metadata.?finalizers",
		"object.metadata.?ownerReferences == oldObject.metadata.?ownerReferences",
		Annotation("object", leaseobject.DesignationAnnotation)+" == "+Annotation("oldObject", leaseobject.DesignationAnnotation),
	)
}

// IdentityChange renders goIdentityChange: anything but an UPDATE of
// the object itself that keeps the holder, every lease field but renewTime,
// the designation, the finalizers and the owner references.
func IdentityChange(resources []leaseobject.Resource) string {
	kept := make([]string, len(resources))
	for i, res := range resources {
		parts := []string{"request.resource.resource == " + Quote(string(res))}
		for _, f := range LeaseFields(res) {
			parts = append(parts, Spec("object", f)+" == "+Spec("oldObject", f))
		}
		kept[i] = And(parts...)
	}
	return Not(And("request.operation == 'UPDATE'", "request.?subResource.orValue('') == ''", Or(kept...), OwnershipUnchanged()))
}

// OnlyRenewTimeMoves renders "an UPDATE of the object itself by which only
// renewTime changes, with a holder".
func OnlyRenewTimeMoves(res leaseobject.Resource) string {
	parts := []string{
		"request.operation == 'UPDATE'",
		"request.?subResource.orValue('') == ''",
		"request.resource.resource == " + Quote(string(res)),
		Spec("oldObject", "holderIdentity") + ".orValue('') != ''",
		TimeSet("oldObject", "renewTime"), TimeSet("object", "renewTime"),
	}
	for _, f := range LeaseFields(res) {
		parts = append(parts, Spec("object", f)+" == "+Spec("oldObject", f))
	}
	return And(append(parts, OwnershipUnchanged())...)
}

// RightfulRenewer renders policy.Rule.RightfulRenewer: the caller is a
// manager the rule lets renew the stored lease. exact is false where CEL
// cannot say it (a bind template with several captures).
func RightfulRenewer(r *policy.RuleView) (string, bool) {
	return renewer(r, false)
}

// SharedRenewer renders the caller goFailClosed leaves to the
// fail-open webhook: the rightful renewer of a Lease, and any manager that
// may renew a MultiClusterLease with its stored holder (policy.Rule.SharesRenewal),
// whoever is designated.
func SharedRenewer(r *policy.RuleView) (string, bool) {
	return renewer(r, true)
}

func renewer(r *policy.RuleView, shared bool) (string, bool) {
	manager, exact := IsManager(r)
	if r.Bind != nil {
		// A bound manager renews only its own lease (I9). Where CEL
		// cannot say which that is, the renewer is not exact.
		bl, ok := BoundLease(r.Bind)
		if ok {
			manager = bl
		} else {
			manager, _ = isManagerUnbound(r)
			exact = false
		}
	}
	parts := []string{manager}
	designated := Annotation("oldObject", leaseobject.DesignationAnnotation) + ".orValue('')"
	designation := []string{Or(designated+" == ''", designated+" == "+User)}
	switch r.Designation {
	case policy.DesignationFixed:
		designation = append(designation, User+" == "+Quote(r.FixedManager))
	case policy.DesignationByAnnotation:
		// Until an operator records the designated manager, nobody renews
		// (Decide refuses every spec write, I2).
		designation = []string{designated + " == " + User}
	}
	switch {
	case shared && len(r.Resources) == 1 && r.Resources[0] == leaseobject.MultiClusterLeases:
		// Whoever is designated.
	case shared && slices.Contains(r.Resources, leaseobject.MultiClusterLeases):
		parts = append(parts, Or("request.resource.resource == "+Quote(string(leaseobject.MultiClusterLeases)), And(designation...)))
	default:
		parts = append(parts, designation...)
	}
	holder := Spec("oldObject", "holderIdentity") + ".orValue('')"
	switch r.HolderBinding {
	case policy.HolderBindingPod:
		parts = append(parts, HolderIsCallersPod(holder))
	case policy.HolderBindingUsername:
		parts = append(parts, holder+" == "+User)
	}
	return And(parts...), exact
}

// Ternary renders "cond ? yes : no".
func Ternary(cond, yes, no string) string { return "(" + cond + " ? " + yes + " : " + no + ")" }

// CallerMatches renders "the caller's username or one of its groups fits
// one of the globs gs": how operators are named.
func CallerMatches(gs []string) string {
	return Or(AnyGlob(User, gs), "(has("+Groups+") && "+Groups+".exists(g, "+AnyGlob("g", gs)+"))")
}
