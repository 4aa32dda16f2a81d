package manifests

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/leaseguard/leaseguard/webhook/policy"
)

// CEL building blocks. Every expression here is evaluated by the API server
// on every lease write it selects, in matchConditions of leaseguard's
// webhooks and in its admission policies; an evaluation error makes a
// webhook fall back on its failure policy (a Fail webhook then refuses the
// write). So each expression guards every field it reads (has(), the ?
// optional syntax) and never indexes what may be missing.

// Names of the request's parts as CEL sees them in admission.
const (
	celUser   = "request.userInfo.username"
	celGroups = "request.userInfo.groups"
)

// quote renders a CEL string literal.
func quote(s string) string { return strconv.Quote(s) }

// and joins conditions; an empty list is true.
func and(parts ...string) string {
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

// or joins conditions; an empty list is false.
func or(parts ...string) string {
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

func not(p string) string {
	switch p {
	case "true":
		return "false"
	case "false":
		return "true"
	}
	return "!" + p
}

// globMatch renders "x matches glob g" (only '*' is special in leaseguard's
// globs).
func globMatch(x, g string) string {
	parts := strings.Split(g, "*")
	switch {
	case len(parts) == 1:
		return x + " == " + quote(g)
	case g == "*":
		return "true"
	case len(parts) == 2 && parts[1] == "":
		return x + ".startsWith(" + quote(parts[0]) + ")"
	case len(parts) == 2 && parts[0] == "":
		return x + ".endsWith(" + quote(parts[1]) + ")"
	}
	quoted := make([]string, len(parts))
	for i, p := range parts {
		quoted[i] = regexp.QuoteMeta(p)
	}
	return x + ".matches(" + quote("^"+strings.Join(quoted, "(?s:.*)")+"$") + ")"
}

// anyGlob renders "x matches one of gs"; an empty list matches nothing.
func anyGlob(x string, gs []string) string {
	parts := make([]string, len(gs))
	for i, g := range gs {
		parts[i] = globMatch(x, g)
	}
	return or(parts...)
}

// objectName is the name of the object a request writes: the API server
// generates it for a CREATE with generateName before validation, while
// request.name keeps the name of the request (empty then).
const objectName = "(request.operation != 'DELETE' && has(object.metadata.name) ? object.metadata.name : request.?name.orValue(''))"

// selects renders "the rule selects the request's object".
func selects(r *policy.RuleView) string {
	resources := make([]string, len(r.Resources))
	for i, res := range r.Resources {
		resources[i] = "request.resource.resource == " + quote(string(res))
	}
	sel := []string{or(resources...)}
	if len(r.Namespaces) > 0 {
		sel = append(sel, anyGlob("request.?namespace.orValue('')", r.Namespaces))
	}
	if len(r.Names) > 0 {
		sel = append(sel, anyGlob(objectName, r.Names))
	}
	return and(sel...)
}

// selectsFirst renders "rule i is the first rule to select the object": the
// policy's first match, as the decision core selects.
func selectsFirst(rules []policy.RuleView, i int) string {
	parts := []string{selects(&rules[i])}
	for j := 0; j < i; j++ {
		if shareResource(&rules[i], &rules[j]) {
			parts = append(parts, not(selects(&rules[j])))
		}
	}
	return and(parts...)
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

// isManager renders "the caller counts as a manager under the rule", and
// reports whether it is exact; a bind template with several captures cannot
// be matched in CEL, and is then left out (the webhook judges it).
func isManager(r *policy.RuleView) (string, bool) {
	parts := []string{anyGlob(celUser, r.Managers)}
	if r.Designation == policy.DesignationFixed {
		parts = append(parts, celUser+" == "+quote(r.FixedManager))
	}
	exact := true
	if r.Bind != nil {
		m, ok := boundManager(r.Bind)
		if ok {
			parts = append(parts, m)
		} else {
			exact = false
		}
	}
	return or(parts...), exact
}

// boundManager renders "the username fits the bind template's manager" for a
// template with one capture: a non-empty run without ':' between the two
// literals.
func boundManager(b *policy.BindView) (string, bool) {
	if b.ManagerCaps != 1 {
		return "", false
	}
	pre, post := b.ManagerLits[0], b.ManagerLits[1]
	parts := []string{celUser + ".startsWith(" + quote(pre) + ")"}
	if post != "" {
		parts = append(parts, celUser+".endsWith("+quote(post)+")")
	}
	parts = append(parts, celUser+".size() > "+strconv.Itoa(len(pre)+len(post)), "!"+capture(b)+".contains(':')")
	return and(parts...), true
}

// capture renders the value the username's one capture takes.
func capture(b *policy.BindView) string {
	pre, post := b.ManagerLits[0], b.ManagerLits[1]
	if post == "" {
		return celUser + ".substring(" + strconv.Itoa(len(pre)) + ")"
	}
	return celUser + ".substring(" + strconv.Itoa(len(pre)) + ", " + celUser + ".size() - " + strconv.Itoa(len(post)) + ")"
}

// boundLease renders "the object is the lease bound to the caller", for a
// template with one capture.
func boundLease(b *policy.BindView) (string, bool) {
	m, ok := boundManager(b)
	if !ok {
		return "", false
	}
	var parts []string
	for i, lit := range b.LeaseLits {
		if lit != "" {
			parts = append(parts, quote(lit))
		}
		if i < len(b.LeaseCaps) {
			parts = append(parts, capture(b))
		}
	}
	return and(m, objectName+" == "+strings.Join(parts, " + ")), true
}

// Field access with optionals: a missing field reads as absent, never as
// an error.
func spec(obj, field string) string { return obj + ".?spec.?" + field }

func annotation(obj, key string) string {
	return obj + ".metadata.?annotations[?" + quote(key) + "]"
}

// podName is the pod a bound service-account token was issued to.
const podName = "request.userInfo.extra[?" + `"authentication.kubernetes.io/pod-name"` + "].orValue([''])[0]"

// holderIsCallersPod renders I5's pod binding for the holder expression h.
func holderIsCallersPod(h string) string {
	return and("has(request.userInfo.extra)", podName+" != ''",
		or(h+" == "+podName, h+".startsWith("+podName+" + '_')"))
}

// leaseFields are the spec fields of each kind other than renewTime.
func leaseFields(res policy.Resource) []string {
	if res == policy.Leases {
		return []string{"holderIdentity", "leaseDurationSeconds", "acquireTime", "leaseTransitions", "strategy", "preferredHolder"}
	}
	return []string{"holderIdentity", "leaseDurationSeconds", "renewDeadlineSeconds", "retryPeriodSeconds"}
}

// ownership renders "finalizers, owner references and the designation are
// as stored".
func ownershipUnchanged() string {
	return and(
		"object.metadata.?finalizers == oldObject.metadata.?finalizers",
		"object.metadata.?ownerReferences == oldObject.metadata.?ownerReferences",
		annotation("object", policy.DesignationAnnotation)+" == "+annotation("oldObject", policy.DesignationAnnotation),
	)
}

// identityChange renders policy.IdentityChange: anything but an UPDATE of
// the object itself that keeps the holder, every lease field but renewTime,
// the designation, the finalizers and the owner references.
func identityChange(resources []policy.Resource) string {
	kept := make([]string, len(resources))
	for i, res := range resources {
		parts := []string{"request.resource.resource == " + quote(string(res))}
		for _, f := range leaseFields(res) {
			parts = append(parts, spec("object", f)+" == "+spec("oldObject", f))
		}
		kept[i] = and(parts...)
	}
	return not(and("request.operation == 'UPDATE'", "request.?subResource.orValue('') == ''", or(kept...), ownershipUnchanged()))
}

// onlyRenewTimeMoves renders "an UPDATE of the object itself by which only
// renewTime changes, with a holder".
func onlyRenewTimeMoves(res policy.Resource) string {
	parts := []string{
		"request.operation == 'UPDATE'",
		"request.?subResource.orValue('') == ''",
		"request.resource.resource == " + quote(string(res)),
		spec("oldObject", "holderIdentity") + ".orValue('') != ''",
		spec("oldObject", "renewTime") + ".hasValue()", spec("object", "renewTime") + ".hasValue()",
	}
	for _, f := range leaseFields(res) {
		parts = append(parts, spec("object", f)+" == "+spec("oldObject", f))
	}
	return and(append(parts, ownershipUnchanged())...)
}

// rightfulRenewer renders policy.Rule.rightfulRenewer: the caller is a
// manager the rule lets renew the stored lease. exact is false where CEL
// cannot say it (a bind template with several captures).
func rightfulRenewer(r *policy.RuleView) (string, bool) {
	return renewer(r, false)
}

// sharedRenewer renders the caller policy.FailClosed leaves to the
// fail-open webhook: the rightful renewer of a Lease, and any manager that
// may renew a MultiClusterLease with its stored holder (policy.Rule.sharesRenewal),
// whoever is designated.
func sharedRenewer(r *policy.RuleView) (string, bool) {
	return renewer(r, true)
}

func renewer(r *policy.RuleView, shared bool) (string, bool) {
	manager, exact := isManager(r)
	if r.Bind != nil {
		// A bound manager renews only its own lease (I9).
		if bl, ok := boundLease(r.Bind); ok {
			manager = bl
		}
	}
	parts := []string{manager}
	designated := annotation("oldObject", policy.DesignationAnnotation) + ".orValue('')"
	designation := []string{or(designated+" == ''", designated+" == "+celUser)}
	if r.Designation == policy.DesignationFixed {
		designation = append(designation, celUser+" == "+quote(r.FixedManager))
	}
	switch {
	case shared && len(r.Resources) == 1 && r.Resources[0] == policy.MultiClusterLeases:
		// Whoever is designated.
	case shared && contains(r.Resources, policy.MultiClusterLeases):
		parts = append(parts, or("request.resource.resource == "+quote(string(policy.MultiClusterLeases)), and(designation...)))
	default:
		parts = append(parts, designation...)
	}
	holder := spec("oldObject", "holderIdentity") + ".orValue('')"
	switch r.HolderBinding {
	case policy.HolderBindingPod:
		parts = append(parts, holderIsCallersPod(holder))
	case policy.HolderBindingUsername:
		parts = append(parts, holder+" == "+celUser)
	}
	return and(parts...), exact
}
