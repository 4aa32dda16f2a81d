package vap

import (
	"fmt"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/pattern"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/render/celexpr"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

// Options place the ValidatingAdmissionPolicies that enforce a policy
// inside the API server (`leaseguard vap`, docs/vap.md).
type Options struct {
	// Prefix names the objects: <prefix>-<rule>-<resource>.
	Prefix string
	// Namespace is leaseguard's namespace, never selected, as by the
	// webhook configurations, so that both modes judge the same writes.
	Namespace string
	// Coalescing adds the MutatingAdmissionPolicy that coalesces early
	// renewals (the one `leaseguard manifests` renders) for the rules that
	// ask for it; without it, coalesceRenewals is reported as not done.
	Coalescing bool
	// StaticMessages gives each refusal its rule's fixed message (the
	// validation's message) and no messageExpression. The API server
	// evaluates every messageExpression on every write it sends to a
	// policy, admitted or not, in an activation of its own that computes
	// the policy's variables again: static messages cost about 40 % less
	// CEL per write (docs/vap.md, "What it costs"). Verdicts are the same.
	StaticMessages bool
}

// Defaults are those of config/vap.
func Defaults() Options {
	return Options{Prefix: "leaseguard", Namespace: manifests.Defaults().Namespace}
}

// Support says how much of a policy feature the policies enforce.
type Support string

// Levels of support.
const (
	// Partial: enforced, with a difference the Limit names.
	Partial Support = "partial"
	// Unsupported: not enforced at all.
	Unsupported Support = "unsupported"
)

// Limit is something a rule asks for that ValidatingAdmissionPolicies do
// not do, or do differently from leaseguard's webhook.
type Limit struct {
	Rule string
	// Invariant is the docs/design.md §4 invariant concerned; empty for a
	// feature that is no invariant (designation stamping, coalescing).
	Invariant policy.Invariant
	// Field is the policy field that asks for it.
	Field   string
	Support Support
	// What says, in one line, what happens instead.
	What string
}

func (l Limit) String() string {
	inv := ""
	if l.Invariant != policy.InvariantNone {
		inv = string(l.Invariant) + ", "
	}
	return fmt.Sprintf("rule %s: %s (%s%s): %s", l.Rule, l.Support, inv, l.Field, l.What)
}

// Rendered is a policy rendered as ValidatingAdmissionPolicies: one
// policy and one binding per rule and resource, and the limits.
type Rendered struct {
	Policies []*admissionregistrationv1.ValidatingAdmissionPolicy
	Bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	// Coalescing and its binding are set when VAPOptions.Coalescing is and
	// a rule coalesces renewals.
	Coalescing        *admissionregistrationv1.MutatingAdmissionPolicy
	CoalescingBinding *admissionregistrationv1.MutatingAdmissionPolicyBinding
	// Limits name, per rule and invariant, what the policies do not enforce
	// as the webhook does. Empty when they enforce the whole policy.
	Limits []Limit
	// Notes say where a selection is broader than the policy (as
	// Rendered.Notes).
	Notes []string
}

// Render renders the ValidatingAdmissionPolicies enforcing p: for each
// rule and each of its resources, a policy whose matchConditions select
// what the rule selects (first rule first, never the control plane, never
// an operator, never a write that changes nothing) and whose CEL follows
// the decision procedure of docs/policy.md, and a binding whose
// validationActions are the rule's enforcement (Deny, Warn or Audit).
// What CEL cannot decide is listed in Limits, never dropped silently.
func Render(p *policy.Policy, o Options) (*Rendered, error) {
	if p == nil || len(p.Rules) == 0 {
		return nil, fmt.Errorf("rendering needs a policy with at least one rule")
	}
	if o.Prefix == "" || o.Namespace == "" {
		return nil, fmt.Errorf("rendering needs a name prefix and leaseguard's namespace")
	}
	rules := make([]policy.RuleView, len(p.Rules))
	for i, r := range p.Rules {
		rules[i] = r.View()
	}
	g := &generator{prefix: o.Prefix, namespace: o.Namespace, rules: rules}
	out := &Rendered{}
	for i := range rules {
		for _, res := range rules[i].Resources {
			pol, binding := g.vap(i, res, p.ClockSkew, o.StaticMessages)
			if err := checkLimits(rules[i].Name, pol); err != nil {
				return nil, err
			}
			out.Policies = append(out.Policies, pol)
			out.Bindings = append(out.Bindings, binding)
		}
		out.Limits = append(out.Limits, limits(&rules[i], o)...)
	}
	if o.Coalescing {
		// The same policy `leaseguard manifests` renders by default.
		out.Coalescing, out.CoalescingBinding, out.Notes = manifests.CoalescingPolicy(p, o.Prefix, o.Namespace)
	}
	return out, nil
}

// limits lists what the policies of rule r do not enforce as the webhook
// does (docs/vap.md has the table and the reasons).
func limits(r *policy.RuleView, o Options) []Limit {
	var out []Limit
	add := func(inv policy.Invariant, field string, s Support, what string) {
		out = append(out, Limit{Rule: r.Name, Invariant: inv, Field: field, Support: s, What: what})
	}
	if r.Designation == policy.DesignationAuto {
		add(policy.InvariantNone, "designation: auto", Unsupported,
			"nothing stamps the designation (that is leaseguard's mutating webhook): it is recorded only when a manager sets the annotation itself, and while none is recorded every manager writes")
		add(policy.InvariantDesignatedWriter, "designation: auto", Partial,
			"a DELETE carries no server clock: another manager's delete is refused while a designation is recorded, even once it is stale")
	}
	if r.HolderBinding != policy.HolderBindingNone {
		add(policy.InvariantFencing, "holderBinding", Partial,
			"a DELETE carries no server clock: a delete of a lease with a holder by anyone but its holder is refused even once the lease has expired (its holder or an operator deletes it)")
	}
	if r.Designation != policy.DesignationNone && slices.Contains(r.Resources, leaseobject.MultiClusterLeases) && !o.Coalescing {
		// With the MutatingAdmissionPolicy (--coalesce) they are
		// acknowledged in the API server, as by the webhook.
		add(policy.InvariantDesignatedWriter, "designation", Partial,
			"renewals of a shared MultiClusterLease by managers that are not designated are admitted and stored, not acknowledged without storing: that needs the server's clock in a mutating step, the MutatingAdmissionPolicy of `leaseguard vap --coalesce` (Kubernetes 1.36 and later)")
	}
	if r.MinRenewInterval > 0 || r.AutoRenewInterval {
		add(policy.InvariantRenewalRate, "minRenewInterval", Unsupported,
			"not enforced: it needs the server's clock to the millisecond and an HTTP 429 with Retry-After, and admission policies see whole seconds and answer 403 or 422 only")
	}
	if r.BackOffLosers {
		add(policy.InvariantDesignatedWriter, "backOffLosers", Partial,
			"losing candidates are refused with 403, not 429 with a Retry-After: client-go then retries every retry period")
	}
	if r.CoalesceInterval > 0 && !o.Coalescing {
		add(policy.InvariantNone, "coalesceRenewals", Unsupported,
			"early renewals are stored: coalescing is a MutatingAdmissionPolicy, rendered by `leaseguard manifests` or `leaseguard vap --coalesce`")
	}
	if r.Bind != nil && !r.Bind.Expressible {
		add(policy.InvariantBound, "bind", Unsupported,
			fmt.Sprintf("template %q has %s, which CEL cannot compare with the lease: a manager fitting it may write any lease the rule selects", r.Bind.ManagerText, pattern.InexpressibleBind))
	}
	return out
}

// generator renders one policy and binding per rule and resource.
type generator struct {
	prefix, namespace string
	rules             []policy.RuleView
}

func (g *generator) vap(i int, res leaseobject.Resource, skew time.Duration, staticMessages bool) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	r := &g.rules[i]
	c := &vapCEL{r: r, res: res, skew: skew, staticMessages: staticMessages}
	name := g.prefix + "-" + r.Name + "-" + string(res)
	fail := admissionregistrationv1.Fail
	equivalent := admissionregistrationv1.Equivalent
	var rules []admissionregistrationv1.NamedRuleWithOperations
	ops := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete}
	for _, rule := range manifests.ResourceRules([]leaseobject.Resource{res}, ops, true) {
		rules = append(rules, admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: rule})
	}
	conds := append(manifests.ControlPlaneConditions(),
		admissionregistrationv1.MatchCondition{Name: "selected-by-rule", Expression: g.selectsFirst(i)},
		admissionregistrationv1.MatchCondition{Name: "changes-something", Expression: celexpr.Not(noopInOnePass())},
	)
	if len(r.Operators) > 0 {
		// Operators may do any write (docs/policy.md, step 1).
		conds = append(conds, admissionregistrationv1.MatchCondition{Name: "not-an-operator", Expression: celexpr.Not(callerMatches(r.Operators))})
	}
	labels := map[string]string{"app.kubernetes.io/name": "leaseguard", "leaseguard.io/rule": r.Name}
	pol := &admissionregistrationv1.ValidatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: manifests.NamespaceSelector(g.namespace, []policy.RuleView{*r}),
				ResourceRules:     rules,
				MatchPolicy:       &equivalent,
			},
			MatchConditions: conds,
			Variables:       c.variables(),
			Validations:     c.validations(),
		},
	}
	action := admissionregistrationv1.Deny
	switch r.Enforcement {
	case policy.EnforceWarn:
		action = admissionregistrationv1.Warn
	case policy.EnforceAudit:
		action = admissionregistrationv1.Audit
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{action},
		},
	}
	return pol, binding
}

// selectsFirst renders "rule i is the first rule to select the object" as
// celexpr.SelectsFirst does while that fits the API server's limits
// (manifests.ExpressionBudget); past them, the same selection written
// compactly: lists as `in` tests, and the rule's own namespaces left to
// the policy's namespaceSelector where it lists them. An admission policy
// decides what it selects by itself, so its selection is never broadened:
// what still does not fit is Render's error.
func (g *generator) selectsFirst(i int) string {
	exact := celexpr.SelectsFirst(g.rules, i)
	if len([]rune(exact)) <= manifests.ExpressionBudget {
		return exact
	}
	r := &g.rules[i]
	own := celexpr.NamespacesOf(r)
	if manifests.SelectorListsNamespaces([]policy.RuleView{*r}) {
		own = "true"
	}
	parts := []string{celexpr.SelectsCompact(r, own)}
	for j := 0; j < i; j++ {
		if sharesResource(r, &g.rules[j]) {
			parts = append(parts, celexpr.Not(celexpr.SelectsCompact(&g.rules[j], celexpr.NamespacesOf(&g.rules[j]))))
		}
	}
	return celexpr.And(parts...)
}

func sharesResource(a, b *policy.RuleView) bool {
	for _, x := range a.Resources {
		if slices.Contains(b.Resources, x) {
			return true
		}
	}
	return false
}

// checkLimits returns an error naming the rule, the policy and the limit
// when an expression of pol is one the API server would refuse.
func checkLimits(rule string, pol *admissionregistrationv1.ValidatingAdmissionPolicy) error {
	var exprs []manifests.Expression
	for _, c := range pol.Spec.MatchConditions {
		exprs = append(exprs, manifests.Expression{Where: "condition " + c.Name, Text: c.Expression})
	}
	for _, v := range pol.Spec.Variables {
		exprs = append(exprs, manifests.Expression{Where: "variable " + v.Name, Text: v.Expression})
	}
	for k, v := range pol.Spec.Validations {
		exprs = append(exprs, manifests.Expression{Where: fmt.Sprintf("validation %d", k), Text: v.Expression})
		if v.MessageExpression != "" {
			exprs = append(exprs, manifests.Expression{Where: fmt.Sprintf("validation %d messageExpression", k), Text: v.MessageExpression})
		}
	}
	if err := manifests.CheckExpressions(exprs); err != nil {
		return fmt.Errorf("rule %s: validatingadmissionpolicy %s does not fit the API server's limits: %w", rule, pol.Name, err)
	}
	return nil
}

// noopInOnePass is noop() with managedFields compared entry by entry in
// order, in one pass: an admission policy evaluates it on every write it
// selects, and a pairwise comparison would cost the square of the entries,
// which a client can make many.
func noopInOnePass() string {
	same := func(path string) string { return "object." + path + " == oldObject." + path }
	mf := func(obj string) string { return obj + ".metadata.?managedFields.orValue([])" }
	return celexpr.And(
		"request.operation == 'UPDATE'",
		// Status too: a status writer's manager name is the client's to
		// choose, and a write through the status subresource changes
		// nothing else.
		same("?spec"), same("?status"),
		same("metadata.?labels"), same("metadata.?annotations"),
		same("metadata.?finalizers"), same("metadata.?ownerReferences"),
		mf("object")+".size() == "+mf("oldObject")+".size()",
		mf("object")+".all(i, m, "+mf("oldObject")+"[i].?manager == m.?manager && "+mf("oldObject")+"[i].?operation == m.?operation && "+
			mf("oldObject")+"[i].?subresource == m.?subresource && "+mf("oldObject")+"[i].?apiVersion == m.?apiVersion && "+
			mf("oldObject")+"[i].?fieldsV1 == m.?fieldsV1)",
	)
}

// callerMatches renders "the username or a group matches one of gs", as
// operators and status writers are matched.
func callerMatches(gs []string) string { return celexpr.CallerMatches(gs) }

// Header is the comment on a file `leaseguard vap <args>` writes, args
// being the flags that choose what is rendered (--config ...).
func Header(args string) string {
	return strings.Join([]string{
		"Generated by `leaseguard vap " + args + "`: do not edit.",
		"ValidatingAdmissionPolicies that enforce the policy inside the API server, without",
		"leaseguard's webhook (docs/vap.md). Regenerate them whenever the policy changes.",
		"For every rule they read the server's clock, in whole seconds, from managedFields;",
		"refuse with 403 (422 for unreadable values) where the webhook answers 429 (400); and",
		"add no warning about a stored field they cannot read. LIMIT lines name the rest.",
	}, "\n")
}

// Args are the flags of `leaseguard vap` that choose what o renders,
// after --config path, for the header of a rendering.
func Args(path string, o Options) string {
	args := "--config " + path
	if o.Coalescing {
		args += " --coalesce"
	}
	if o.StaticMessages {
		args += " --static-messages"
	}
	return args
}

// YAML renders the policies as one multi-document YAML file, with a header
// and, as comments, the limits and notes.
func (r *Rendered) YAML(header string) ([]byte, error) {
	var comments []string
	for _, l := range r.Limits {
		comments = append(comments, "LIMIT: "+l.String())
	}
	for _, n := range r.Notes {
		comments = append(comments, "NOTE: "+n)
	}
	var objs []any
	if r.Coalescing != nil {
		objs = append(objs, r.Coalescing, r.CoalescingBinding)
	}
	for i := range r.Policies {
		objs = append(objs, r.Policies[i], r.Bindings[i])
	}
	return manifests.WriteYAML(header, comments, objs)
}
