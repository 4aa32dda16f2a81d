package manifests

import (
	"strconv"
	"time"
	"unicode/utf8"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/render/celexpr"
)

// The renewals policy: the plain renewals that the fail-open `renewals`
// webhook used to take, decided inside the API server by a
// ValidatingAdmissionPolicy (docs/design.md §5, "The hot path in the API
// server"). Its failurePolicy is Fail, and it runs in process: there is no
// outage for it to fail open on, so a renewal it takes is judged in full
// whether leaseguard is up, down or hung.
//
// It takes a write only where CEL decides it exactly as policy.Decide does,
// on the API server's clock as the stamp of the managedFields entry that
// owns renewTime (whole seconds, never later than the clock):
//
//   - the write is on the fail-open route (selected, not a no-op, the
//     rightful renewer's harmless renewal: validating());
//   - under a rule that denies (a warn or audit rule's answer is a warning
//     or an audit annotation in leaseguard's words, which the webhook
//     gives);
//   - not by an operator (admitted whatever it writes);
//   - renewTime and acquireTime no later than the stamp + the skew (Decide
//     refuses past the clock + the skew: within the second between, only
//     the clock to the millisecond can tell);
//   - the stamp no earlier than any stored record of a renewal write (I7's
//     record check refuses a write that moves it backwards);
//   - a Lease stamped at least its minimum renewal interval after the
//     stored renewal (I6; earlier, only the webhook can answer 429 with
//     Retry-After), renewed by the recorded designated manager under
//     designation by annotation (the route's rightful renewer, too); a
//     MultiClusterLease renewal with
//     a holder, in the one form typed clients read (policy's sharedRenewal,
//     never rate limited).
//
// Of what it takes, Decide refuses only a lease whose durations exceed the
// rule's maxLeaseDuration (I10) and a renewTime moved backwards (I7): the
// policy refuses those, with the webhook's message. Everything else on the
// route (within a second of a bound, early Lease renewals, warn and audit
// rules) goes to the `renewals` webhook as before.

// renewalsPolicyName is the object's name: <prefix>-renewals.
func (g *generator) renewalsPolicyName() string { return g.o.Prefix + "-renewals" }

// decidesInProcess reports whether rule i's renewals may be decided by the
// renewals policy at all.
func (g *generator) decidesInProcess(i int) bool {
	r := &g.rules[i]
	_, exact := celexpr.SharedRenewer(r)
	return r.Enforcement == policy.EnforceDeny && exact
}

// inProcess renders "the renewals policy decides this write", for a write
// on the fail-open route; "false" where it is not rendered. What holds for
// every rule is said once (common); each rule adds only what is its own,
// so that the selection, the largest part, is said once more and no more:
// one search for the first rule that selects (firstRuleDecides), not each
// rule's selection with every earlier rule's excluded, which grows with
// the square of the rules.
func (g *generator) inProcess() string {
	if !g.rendersRenewalsPolicy() {
		return "false"
	}
	return celexpr.And(g.commonDecidable(), g.firstRuleDecides(false))
}

// firstRuleDecides renders, for the first rule that selects the write, what
// it needs for the renewals policy to decide the write: its decidable
// bounds (ruleDecidable), and with renewer its rightful renewer; "false"
// for a rule whose renewals it never decides, or where no rule selects.
func (g *generator) firstRuleDecides(renewer bool) string {
	conds, values := make([]string, len(g.rules)), make([]string, len(g.rules))
	for i := range g.rules {
		conds[i], values[i] = celexpr.Selects(&g.rules[i]), "false"
		if g.decidesInProcess(i) {
			values[i] = g.ruleDecidable(i)
			if renewer {
				who, _ := celexpr.SharedRenewer(&g.rules[i])
				values[i] = celexpr.And(who, values[i])
			}
		}
	}
	return celexpr.FirstMatch(conds, values, "false")
}

// rendersRenewalsPolicy: where the MutatingAdmissionPolicy is rendered
// (the cluster has admission policies in v1, Kubernetes 1.36 and later),
// in the fail-closed rendering, at the exact selection (past it the
// route's selection is broader than the rules, and which rule, so which
// bounds, a lease has cannot be said), unless saying it would not fit
// (validating()).
func (g *generator) rendersRenewalsPolicy() bool {
	if g.o.Coalescing != CoalesceInAPIServer || g.o.FailOpen || g.level != levelExact || g.renewalsTooLarge {
		return false
	}
	for i := range g.rules {
		if g.decidesInProcess(i) {
			return true
		}
	}
	return false
}

// stampEntry renders "the managedFields entry m that owns renewTime (the
// API server's stamp of this write, ownsRenewTime) satisfies cond", cond
// reading the stamp as timestamp(m.time).
func stampEntry(cond string) string {
	return "object.metadata.?managedFields.orValue([]).exists(m, " + ownsRenewTime("m") + " && has(m.time) && " + cond + ")"
}

// recordedBy renders "every stored entry that records a renewal write is
// no later than notAfter" (I7's record check; for a rate-limited Lease,
// with the stored renewTime, I6's reference).
func recordedBy(notAfter string) string {
	return "oldObject.metadata.?managedFields.orValue([]).all(o, !(" + ownsRenewTime("o") + " && has(o.time)) || timestamp(o.time) <= " + notAfter + ")"
}

// commonDecidable is what every rule's renewals must meet to be decided
// in process: Decide's "now" lies within a second after the stamp, so each
// clock comparison is made to hold at every such now; a MultiClusterLease
// has a holder (a shared renewal: I2 and I6 do not apply) and every field
// in the form leaseguard reads.
func (g *generator) commonDecidable() string {
	skew := "duration(" + celexpr.Quote(g.skew.String()) + ")"
	clock := stampEntry(celexpr.And(
		"timestamp(object.spec.renewTime) <= timestamp(m.time) + "+skew,
		celexpr.Or("!"+celexpr.TimeSet("object", "acquireTime"), "timestamp(object.spec.acquireTime) <= timestamp(m.time) + "+skew),
		recordedBy("timestamp(m.time)"),
	))
	var kinds []string
	for _, res := range resourcesOf(g.rules) {
		switch res {
		case leaseobject.Leases:
			kinds = append(kinds, "request.resource.resource == 'leases'")
		case leaseobject.MultiClusterLeases:
			re := celexpr.Quote(RenewTimeLayout)
			mcl := []string{
				"request.resource.resource == 'multiclusterleases'",
				celexpr.Spec("oldObject", "holderIdentity") + ".orValue('') != ''",
				// acquireTime is no lease field of IdentityChange's for a
				// MultiClusterLease: one the write changes is left to the
				// webhook (and the clock check below never reads a time
				// CEL's timestamp() may fail on).
				celexpr.Spec("object", "acquireTime") + " == " + celexpr.Spec("oldObject", "acquireTime"),
				celexpr.Or("!has(oldObject.spec.acquireTime)", "string(oldObject.spec.acquireTime).matches("+re+")"),
			}
			for _, f := range []string{"leaseDurationSeconds", "renewDeadlineSeconds", "retryPeriodSeconds"} {
				mcl = append(mcl, "int("+celexpr.Spec("oldObject", f)+".orValue(0)) >= 0", "int("+celexpr.Spec("oldObject", f)+".orValue(0)) <= 2147483647")
			}
			kinds = append(kinds, celexpr.And(mcl...))
		}
	}
	return celexpr.And(celexpr.Or(kinds...), clock)
}

// ruleDecidable is rule i's own part: not an operator's write; for a
// Lease, stamped at least the rule's interval after the stored renewal,
// and under designation by annotation, by the recorded designated manager
// (the fail-open route also takes a renewal while none is recorded, which
// Decide refuses: I2).
func (g *generator) ruleDecidable(i int) string {
	r := &g.rules[i]
	var parts []string
	if len(r.Operators) > 0 {
		parts = append(parts, celexpr.Not(celexpr.CallerMatches(r.Operators)))
	}
	if contains(r.Resources, leaseobject.Leases) {
		var lease []string
		if interval := leaseInterval(r); interval != "" {
			due := "(timestamp(m.time) - " + interval + ")"
			lease = append(lease, stampEntry(celexpr.And("timestamp(oldObject.spec.renewTime) <= "+due, recordedBy(due))))
		}
		if r.Designation == policy.DesignationByAnnotation {
			lease = append(lease, celexpr.Annotation("oldObject", leaseobject.DesignationAnnotation)+".orValue('') == "+celexpr.User)
		}
		if len(lease) > 0 {
			parts = append(parts, celexpr.Or("request.resource.resource != 'leases'", celexpr.And(lease...)))
		}
	}
	return celexpr.And(parts...)
}

// leaseInterval renders rule r's minimum renewal interval of a Lease as a
// CEL duration, "" for none. minRenewInterval: auto derives it from the
// stored lease (half its renew deadline, two thirds of its duration),
// capped by what the rule's clients survive; the cap is left out, which
// makes the interval longer, never shorter: a renewal it calls early goes
// to the webhook, which knows the cap.
func leaseInterval(r *policy.RuleView) string {
	if r.AutoRenewInterval {
		seconds := "int(oldObject.spec.?leaseDurationSeconds.orValue(0))"
		seconds = celexpr.Ternary(seconds+" > 0", seconds, strconv.Itoa(int(leaseobject.DefaultLeaseDuration/time.Second)))
		// policy.AutoRenewInterval: (l * 2 / 3) / 2 in nanoseconds.
		return "duration(string(" + seconds + " * 2000000000 / 3 / 2) + 'ns')"
	}
	if r.MinRenewInterval <= 0 {
		return ""
	}
	return "duration(" + celexpr.Quote(r.MinRenewInterval.String()) + ")"
}

// renewalsRule is the variable naming the first rule that selects the
// lease, by its index (-1: none); each rule's validations hold unless it is
// that rule, as only it decides in Decide.
func (g *generator) renewalsRule() admissionregistrationv1.Variable {
	expr := "-1"
	for i := len(g.rules) - 1; i >= 0; i-- {
		expr = celexpr.Ternary(celexpr.Selects(&g.rules[i]), strconv.Itoa(i), expr)
	}
	return admissionregistrationv1.Variable{Name: "rule", Expression: expr}
}

// renewalsValidations are the checks of the writes the policy takes that
// Decide may refuse, each rule's in Decide's order, so that its first
// failing check alone answers: I10, then I7 (renewTime moved backwards).
func (g *generator) renewalsValidations() []admissionregistrationv1.Validation {
	var out []admissionregistrationv1.Validation
	forbidden := metav1.StatusReasonForbidden
	kind := "(request.resource.resource == 'leases' ? 'lease' : 'multiclusterlease')"
	for i := range g.rules {
		if !g.decidesInProcess(i) {
			continue
		}
		r := &g.rules[i]
		other := "variables.rule != " + strconv.Itoa(i)
		limit := strconv.FormatInt(int64(r.MaxLeaseDuration/time.Second), 10)
		var within []string
		for _, f := range []string{"leaseDurationSeconds", "renewDeadlineSeconds", "retryPeriodSeconds"} {
			value := "int(" + celexpr.Spec("object", f) + ".orValue(0))"
			ok := "(" + value + " <= " + limit + ")"
			out = append(out, admissionregistrationv1.Validation{
				Expression: celexpr.Or(append(append([]string{other}, negated(within)...), ok)...),
				MessageExpression: celexpr.Refusal(r.Name, celexpr.User, "'sets "+f+" ' + string("+value+") + ' on'", kind,
					celexpr.Quote("at most "+limit+" (maxLeaseDuration)")),
				Message: "leaseguard: rule " + r.Name + ": the caller sets a longer " + f + " on this lease (at most " + limit + " (maxLeaseDuration))",
				Reason:  &forbidden,
			})
			within = append(within, ok)
		}
		out = append(out, admissionregistrationv1.Validation{
			Expression: celexpr.Or(append([]string{other}, append(negated(within), "timestamp(object.spec.renewTime) >= timestamp(oldObject.spec.renewTime)")...)...),
			MessageExpression: celexpr.Refusal(r.Name, celexpr.User, "'moves renewTime backwards on'", kind,
				"'stored renewTime: ' + "+celexpr.RFC3339Nano("timestamp(oldObject.spec.renewTime)")),
			Message: "leaseguard: rule " + r.Name + ": the caller moves renewTime backwards on this lease",
			Reason:  &forbidden,
		})
	}
	return out
}

// renewalsCondition is the policy's match condition: a write on the
// fail-open route that it decides (inProcess), its cheapest and most
// selective term first: a renewal admission made a no-op (N−1 of N on a
// shared MultiClusterLease) stops at renewTime. The route is said rule by
// rule, the selection once: given that rule i selects the lease first, the
// route's rightful renewer is rule i's, and a write that moves renewTime is
// no no-op.
func (g *generator) renewalsCondition() string {
	if !g.rendersRenewalsPolicy() {
		return "false"
	}
	resources := resourcesOf(g.rules)
	return celexpr.And(celexpr.Spec("object", "renewTime")+" != "+celexpr.Spec("oldObject", "renewTime"),
		celexpr.Not(celexpr.IdentityChange(resources)), harmlessRenewal(resources, g.skew), g.commonDecidable(), g.firstRuleDecides(true))
}

// renewalsFit reports whether the renewals policy and the renewals
// webhook's condition that leaves it out (webhookCondition) fit the size
// leaseguard allows itself (limits.go). The selection is said once more in
// each; where that does not fit, the renewals stay on the webhook rather
// than the webhooks' routing going broader for this policy's sake.
func (g *generator) renewalsFit(webhookCondition string) bool {
	exprs := []string{webhookCondition, g.renewalsCondition(), g.renewalsRule().Expression}
	for _, v := range g.renewalsValidations() {
		exprs = append(exprs, v.Expression, v.MessageExpression)
	}
	for _, e := range exprs {
		if utf8.RuneCountInString(e) > budget {
			return false
		}
	}
	return true
}

// renewalsPolicy renders the policy and its binding wherever the
// MutatingAdmissionPolicy may be (nil on clusters without admission
// policies in v1). Where no renewal is decided in process (a policy with
// warn and audit rules only, the fail-open rendering, the broader
// selections, a selection too large to say once more) it is rendered all
// the same, taking nothing: the objects an install creates stay the same
// whatever policy it later loads, so that configuration sync, which never
// creates one, can always follow the policy (webhook/render/configsync).
func (g *generator) renewalsPolicy() (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	if g.o.Coalescing != CoalesceInAPIServer {
		return nil, nil
	}
	var resources []leaseobject.Resource
	for i := range g.rules {
		if g.decidesInProcess(i) {
			for _, res := range g.rules[i].Resources {
				if !contains(resources, res) {
					resources = append(resources, res)
				}
			}
		}
	}
	condition := g.renewalsCondition()
	validations := g.renewalsValidations()
	variables := []admissionregistrationv1.Variable{g.renewalsRule()}
	if !g.rendersRenewalsPolicy() {
		// Takes nothing. The API server wants a validation and a resource
		// rule all the same.
		condition, variables = "false", nil
		resources = resourcesOf(g.rules)
		validations = []admissionregistrationv1.Validation{{Expression: "true", Message: "leaseguard: this policy decides no renewal under the policy loaded"}}
	}
	fail := admissionregistrationv1.Fail
	equivalent := admissionregistrationv1.Equivalent
	var rules []admissionregistrationv1.NamedRuleWithOperations
	for _, rule := range ResourceRules(resources, []admissionregistrationv1.OperationType{admissionregistrationv1.Update}, false) {
		rules = append(rules, admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: rule})
	}
	name := g.renewalsPolicyName()
	labels := map[string]string{"app.kubernetes.io/name": "leaseguard"}
	pol := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			// In process, never down: an evaluation error refuses the
			// write (every read is guarded, and the condition has checked
			// what the validations read).
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: NamespaceSelector(g.o.Namespace, g.rules),
				ResourceRules:     rules,
				MatchPolicy:       &equivalent,
			},
			// One expression, its cheapest and most selective term first:
			// a renewal admission made a no-op (N−1 of N on a shared
			// MultiClusterLease) stops at renewTime.
			MatchConditions: append(ControlPlaneConditions(), admissionregistrationv1.MatchCondition{
				Name:       "renewal-decided-in-process",
				Expression: condition,
			}),
			Variables:   variables,
			Validations: validations,
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	return pol, binding
}

func negated(parts []string) []string {
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = celexpr.Not(p)
	}
	return out
}
