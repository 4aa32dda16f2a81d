// Package manifests renders a policy into the admission configuration that
// enforces it: the validating and mutating webhook configurations, which
// send the API server's lease writes to leaseguard only where a rule
// selects them, and the MutatingAdmissionPolicy that coalesces early
// renewals inside the API server. `leaseguard manifests` prints them;
// config/webhook is generated with it; `leaseguard dev` and the tests
// install them.
//
// Where a rule's selection cannot be said in CEL, the rendering falls back
// on the broader match and says so in Rendered.Notes.
package manifests

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/webhook/admission"
	"github.com/leaseguard/leaseguard/webhook/celexpr"
	"github.com/leaseguard/leaseguard/webhook/policy"
)

// Coalescing says what coalesces early renewals for the rules that ask for
// it (coalesceRenewals).
type Coalescing string

// The ways to coalesce.
const (
	// CoalesceInAPIServer renders a MutatingAdmissionPolicy: CEL in the API
	// server, no webhook call (admissionregistration.k8s.io/v1, Kubernetes
	// 1.36 and later). The default.
	CoalesceInAPIServer Coalescing = "policy"
	// CoalesceInWebhook sends early renewals to leaseguard's mutating webhook.
	CoalesceInWebhook Coalescing = "webhook"
	// CoalesceOff renders nothing for coalescing.
	CoalesceOff Coalescing = "off"
)

// Options place the rendered configuration.
type Options struct {
	// Namespace is leaseguard's own namespace: never intercepted, and where
	// its Service lives.
	Namespace string
	// ServiceName is the webhook Service; URL, when set, is used instead (a
	// webhook server outside the cluster, as in `leaseguard dev`).
	ServiceName string
	URL         string
	CABundle    []byte
	// Prefix names the objects: <prefix>-validating-webhook-configuration,
	// <prefix>-mutating-webhook-configuration, <prefix>-coalesce-renewals.
	Prefix string
	// TimeoutSeconds of both webhooks; 2 when zero (lease clients renew with
	// short timeouts).
	TimeoutSeconds int32
	// FailOpen, when set, gives every webhook failurePolicy Ignore: no
	// fail-closed half (docs/security.md explains what that gives up).
	FailOpen   bool
	Coalescing Coalescing
}

// Defaults are those of config/default.
func Defaults() Options {
	return Options{Namespace: "leaseguard-system", ServiceName: "leaseguard-webhook-service", Prefix: "leaseguard", Coalescing: CoalesceInAPIServer}
}

// Rendered is the configuration for one policy.
type Rendered struct {
	Validating *admissionregistrationv1.ValidatingWebhookConfiguration
	// Mutating is nil when no rule needs the mutating webhook.
	Mutating *admissionregistrationv1.MutatingWebhookConfiguration
	// Coalescing and its binding are nil when no rule coalesces in the API
	// server.
	Coalescing        *admissionregistrationv1.MutatingAdmissionPolicy
	CoalescingBinding *admissionregistrationv1.MutatingAdmissionPolicyBinding
	// Notes say where the rendering is broader than the policy, and why.
	Notes []string
}

// The annotations of the validating webhook configuration that record the
// install's choices, so that leaseguard, re-rendering the configuration for
// a new policy (package configsync), renders what the install chose.
const (
	CoalesceAnnotation = "leaseguard.io/coalesce"
	FailOpenAnnotation = "leaseguard.io/fail-open"
)

func (g *generator) renderedWith() map[string]string {
	a := map[string]string{CoalesceAnnotation: string(g.o.Coalescing)}
	if g.o.FailOpen {
		a[FailOpenAnnotation] = "true"
	}
	return a
}

// RenderedWith returns the coalescing mode and failure mode a validating
// webhook configuration was rendered with, from its annotations.
func RenderedWith(annotations map[string]string) (Coalescing, bool, error) {
	c := Coalescing(annotations[CoalesceAnnotation])
	switch c {
	case CoalesceInAPIServer, CoalesceInWebhook, CoalesceOff:
	case "":
		return "", false, fmt.Errorf("annotation %s is missing: not rendered by this version of leaseguard manifests", CoalesceAnnotation)
	default:
		return "", false, fmt.Errorf("annotation %s is %q: want %q, %q or %q", CoalesceAnnotation, c, CoalesceInAPIServer, CoalesceInWebhook, CoalesceOff)
	}
	switch annotations[FailOpenAnnotation] {
	case "", "false":
		return c, false, nil
	case "true":
		return c, true, nil
	default:
		return "", false, fmt.Errorf("annotation %s is %q: want \"true\" or none", FailOpenAnnotation, annotations[FailOpenAnnotation])
	}
}

// Names of the webhooks, as the API server reports them in denials
// (admission webhook "validate.leases.leaseguard.io" denied the request).
const (
	ValidateWebhook  = "validate.leases.leaseguard.io"
	RenewalsWebhook  = "renewals.leases.leaseguard.io"
	DesignateWebhook = "designate.leases.leaseguard.io"
)

// Render renders the configuration enforcing p.
func Render(p *policy.Policy, o Options) (*Rendered, error) {
	if o.Namespace == "" || (o.ServiceName == "" && o.URL == "") || o.Prefix == "" {
		return nil, fmt.Errorf("rendering needs leaseguard's namespace, its Service name or a URL, and a name prefix")
	}
	if o.TimeoutSeconds == 0 {
		o.TimeoutSeconds = 2
	}
	if o.Coalescing == "" {
		o.Coalescing = CoalesceInAPIServer
	}
	g := &generator{o: o, rules: views(p), skew: p.ClockSkew}
	out := &Rendered{Validating: g.validating()}
	out.Mutating = g.mutating()
	out.Coalescing, out.CoalescingBinding = g.coalescingPolicy()
	out.Notes = g.notes
	return out, nil
}

type generator struct {
	o     Options
	rules []policy.RuleView
	skew  time.Duration
	notes []string
}

func (g *generator) note(format string, args ...any) {
	n := fmt.Sprintf(format, args...)
	for _, have := range g.notes {
		if have == n {
			return
		}
	}
	g.notes = append(g.notes, n)
}

// NamespaceSelector never selects the control plane's namespaces nor
// leaseguard's own (namespace), and, when every rule names its namespaces,
// only those (docs/design.md §5). The webhook configurations and the
// admission policies select with it alike.
func NamespaceSelector(namespace string, rules []policy.RuleView) *metav1.LabelSelector {
	neverIntercepted := append(append([]string(nil), policy.NeverIntercepted...), namespace)
	exprs := []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: neverIntercepted,
	}}
	literal := map[string]bool{}
	for _, r := range rules {
		if len(r.Namespaces) == 0 {
			return &metav1.LabelSelector{MatchExpressions: exprs}
		}
		for _, ns := range r.Namespaces {
			if strings.Contains(ns, "*") {
				return &metav1.LabelSelector{MatchExpressions: exprs}
			}
			literal[ns] = true
		}
	}
	names := make([]string, 0, len(literal))
	for ns := range literal {
		names = append(names, ns)
	}
	sort.Strings(names)
	exprs = append(exprs, metav1.LabelSelectorRequirement{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: names})
	return &metav1.LabelSelector{MatchExpressions: exprs}
}

// ControlPlaneConditions are the conditions that keep node heartbeats and the control
// plane's own elections away from leaseguard (docs/design.md §5).
func ControlPlaneConditions() []admissionregistrationv1.MatchCondition {
	return []admissionregistrationv1.MatchCondition{
		{Name: "not-a-node", Expression: "!request.userInfo.username.startsWith('system:node:') && !(has(request.userInfo.groups) && 'system:nodes' in request.userInfo.groups)"},
		{Name: "not-the-control-plane", Expression: "!(request.userInfo.username in ['system:kube-controller-manager', 'system:kube-scheduler', 'system:apiserver']) && !request.userInfo.username.startsWith('system:serviceaccount:kube-system:')"},
	}
}

// ResourceRules are the admission rules for the given resources and
// operations; status adds MultiClusterLeases' status subresource.
func ResourceRules(resources []policy.Resource, ops []admissionregistrationv1.OperationType, status bool) []admissionregistrationv1.RuleWithOperations {
	scope := admissionregistrationv1.NamespacedScope
	var out []admissionregistrationv1.RuleWithOperations
	for _, res := range resources {
		rule := admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{Scope: &scope}}
		switch res {
		case policy.Leases:
			rule.APIGroups, rule.APIVersions, rule.Resources = []string{"coordination.k8s.io"}, []string{"v1"}, []string{"leases"}
		case policy.MultiClusterLeases:
			rule.APIGroups, rule.APIVersions = []string{mclv1alpha1.Group}, []string{mclv1alpha1.Version}
			rule.Resources = []string{"multiclusterleases"}
			if status {
				rule.Resources = append(rule.Resources, "multiclusterleases/status")
			}
		}
		out = append(out, rule)
	}
	return out
}

func resourcesOf(rules []policy.RuleView) []policy.Resource {
	var out []policy.Resource
	for _, res := range []policy.Resource{policy.Leases, policy.MultiClusterLeases} {
		for _, r := range rules {
			if contains(r.Resources, res) {
				out = append(out, res)
				break
			}
		}
	}
	return out
}

func contains(rs []policy.Resource, res policy.Resource) bool {
	for _, r := range rs {
		if r == res {
			return true
		}
	}
	return false
}

func (g *generator) clientConfig(path string) admissionregistrationv1.WebhookClientConfig {
	if g.o.URL != "" {
		url := strings.TrimSuffix(g.o.URL, "/") + path
		return admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: g.o.CABundle}
	}
	port := int32(443)
	return admissionregistrationv1.WebhookClientConfig{
		Service:  &admissionregistrationv1.ServiceReference{Namespace: g.o.Namespace, Name: g.o.ServiceName, Path: &path, Port: &port},
		CABundle: g.o.CABundle,
	}
}

// selected renders "a rule selects the object".
func (g *generator) selected() string {
	parts := make([]string, len(g.rules))
	for i := range g.rules {
		parts[i] = celexpr.Selects(&g.rules[i])
	}
	return celexpr.Or(parts...)
}

// noop renders "an UPDATE that changes nothing leaseguard guards": the same
// spec, status, labels, annotations, finalizers and owner references, and
// managedFields that differ at most in their times. The API server stores
// nothing for such a write (it reverts managedFields times that alone
// changed), so there is nothing to validate; it is what a coalesced
// renewal becomes.
func noop() string {
	same := func(path string) string { return "object." + path + " == oldObject." + path }
	return celexpr.And(
		"request.operation == 'UPDATE'",
		same("?spec"),
		// A status write under the status writer's field-manager name
		// changes nothing else (docs/security.md).
		same("?status"),
		same("metadata.?labels"), same("metadata.?annotations"),
		same("metadata.?finalizers"), same("metadata.?ownerReferences"),
		managedFieldsSameButTime(),
	)
}

// maxComparedManagedFields bounds the managedFields entries the match
// conditions compare pairwise. Past it a write counts as changed and goes to
// leaseguard: a comparison of thousands of entries (Apply entries are not
// capped) would exceed the API server's CEL cost limit, and an error in a
// fail-open webhook's condition skips the webhook. Leases carry a handful.
const maxComparedManagedFields = 32

// managedFieldsSameButTime renders "the managedFields entries are the same
// but for their times", which the API server then reverts.
func managedFieldsSameButTime() string {
	return celexpr.And(
		"object.metadata.?managedFields.orValue([]).size() <= "+strconv.Itoa(maxComparedManagedFields),
		"object.metadata.?managedFields.orValue([]).size() == oldObject.metadata.?managedFields.orValue([]).size()",
		"object.metadata.?managedFields.orValue([]).all(m, oldObject.metadata.?managedFields.orValue([]).exists(o, "+
			"o.?manager == m.?manager && o.?operation == m.?operation && o.?subresource == m.?subresource && "+
			"o.?apiVersion == m.?apiVersion && o.?fieldsV1 == m.?fieldsV1))",
	)
}

// noopFirstRenewTime renders noop with renewTime compared first: on the hot
// path, a renewal, CEL stops there.
func noopFirstRenewTime() string {
	same := func(path string) string { return "object." + path + " == oldObject." + path }
	return celexpr.And("request.operation == 'UPDATE'", same("?spec.?renewTime"), same("?spec"), same("?status"),
		same("metadata.?labels"), same("metadata.?annotations"),
		same("metadata.?finalizers"), same("metadata.?ownerReferences"), managedFieldsSameButTime())
}

func (g *generator) validating() *admissionregistrationv1.ValidatingWebhookConfiguration {
	none := admissionregistrationv1.SideEffectClassNone
	equivalent := admissionregistrationv1.Equivalent
	fail, ignore := admissionregistrationv1.Fail, admissionregistrationv1.Ignore
	resources := resourcesOf(g.rules)
	selected := g.selected()
	// All of a webhook's matchConditions are evaluated on every write they
	// could match; within one expression CEL stops at the first false term.
	// So each webhook's decision is one expression whose cheap, selective
	// terms come first.
	entry := func(name, path string, fp *admissionregistrationv1.FailurePolicyType, ops []admissionregistrationv1.OperationType, status bool, decides admissionregistrationv1.MatchCondition) admissionregistrationv1.ValidatingWebhook {
		return admissionregistrationv1.ValidatingWebhook{
			Name:                    name,
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig:            g.clientConfig(path),
			Rules:                   ResourceRules(resources, ops, status),
			SideEffects:             &none,
			MatchPolicy:             &equivalent,
			TimeoutSeconds:          &g.o.TimeoutSeconds,
			FailurePolicy:           fp,
			NamespaceSelector:       NamespaceSelector(g.o.Namespace, g.rules),
			MatchConditions:         append(ControlPlaneConditions(), decides),
		}
	}
	all := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete}
	updates := []admissionregistrationv1.OperationType{admissionregistrationv1.Update}
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: g.o.Prefix + "-validating-webhook-configuration", Labels: map[string]string{"app.kubernetes.io/name": "leaseguard"},
			Annotations: g.renderedWith()},
	}
	if g.o.FailOpen {
		cfg.Webhooks = []admissionregistrationv1.ValidatingWebhook{entry(ValidateWebhook, admission.ValidatePath, &ignore, all, true,
			admissionregistrationv1.MatchCondition{Name: "selected-and-changed", Expression: celexpr.And(selected, celexpr.Not(noop()))})}
		return cfg
	}
	// Identity changes (creates, deletes, status, holder, lease fields,
	// designation, finalizers, owner references), any write by someone
	// other than the rule's rightful renewer, and any renewal ahead of the
	// server clock are never admitted without leaseguard (policy.FailClosed).
	closed := celexpr.Or(celexpr.IdentityChange(resources), celexpr.Not(g.rightfulRenewers()), renewTimeAhead(g.skew))
	cfg.Webhooks = []admissionregistrationv1.ValidatingWebhook{
		entry(ValidateWebhook, admission.ValidatePath, &fail, all, true, admissionregistrationv1.MatchCondition{
			Name: "selected-fail-closed", Expression: celexpr.And(selected, closed),
		}),
		// Every other UPDATE that changes something (the holders' renewals,
		// free metadata) keeps flowing while leaseguard is down, so no
		// leadership is lost to an outage. Each write goes to exactly one
		// of the two, so that it is decided and counted once and its
		// refusal always names the same webhook; a handler still decides
		// whatever it receives (after a policy change, before the
		// configuration follows, the routing may be the old policy's).
		entry(RenewalsWebhook, admission.RenewalsPath, &ignore, updates, false, admissionregistrationv1.MatchCondition{
			Name: "selected-and-changed", Expression: celexpr.And(selected, celexpr.Not(noopFirstRenewTime()), celexpr.Not(closed)),
		}),
	}
	return cfg
}

// renewTimeAhead renders policy.RenewTimeAhead: the write moves renewTime
// more than the clock skew ahead of the API server's clock, which is the
// time the API server just stamped on the writer's managedFields entry (an
// entry whose time this write changed; a client may add entries dated
// ahead, never behind the stamp, so the earliest of them is the stamp).
// Such a renewal, harmless only if checked (leaseguard refuses it; stored,
// it would keep the lease until that time), goes to the fail-closed
// webhook, so that nothing a down or busy leaseguard lets through can lock
// a lease. A write with no re-stamped entry (a second write by the same
// manager within one second: Config Connector's managers share one field
// manager) is judged by the latest stored entry, which is of this second;
// one among more managedFields entries than are compared goes to the
// fail-closed webhook.
func renewTimeAhead(skew time.Duration) string {
	mf := "object.metadata.?managedFields.orValue([])"
	renewTime := "timestamp(object.spec.renewTime)"
	allowed := "duration(" + celexpr.Quote((skew + time.Second).String()) + ")"
	// An entry this write re-stamped: none stored like it, time included.
	stamped := "!oldObject.metadata.?managedFields.orValue([]).exists(o, " +
		"o.?manager == m.?manager && o.?operation == m.?operation && o.?subresource == m.?subresource && o.?apiVersion == m.?apiVersion && o.?time == m.?time)"
	aheadOf := "has(m.time) && " + renewTime + " > timestamp(m.time) + " + allowed
	// "renewTime > the earliest re-stamped time + allowed" is "ahead of
	// some re-stamped entry"; with none re-stamped, "renewTime > the latest
	// time + allowed" is "ahead of every dated entry, and there is one" —
	// which, when one is re-stamped, implies the first. Written so, with
	// the comparison before the search of the stored entries, a rightful
	// renewal (never ahead of its own stamp) costs two passes that stop at
	// its stamp and no search at all: this runs on every selected write, in
	// both validating webhooks' conditions.
	return celexpr.And("request.operation == 'UPDATE'", celexpr.Spec("object", "renewTime")+".hasValue()",
		celexpr.Spec("object", "renewTime")+" != "+celexpr.Spec("oldObject", "renewTime"),
		celexpr.Or(mf+".size() > "+strconv.Itoa(maxComparedManagedFields),
			mf+".exists(m, "+aheadOf+" && "+stamped+")",
			celexpr.And(mf+".exists(m, has(m.time))", mf+".all(m, !has(m.time) || "+renewTime+" > timestamp(m.time) + "+allowed+")")))
}

// rightfulRenewers renders "the caller is the rightful renewer of the stored
// lease under the rule that selects it" (policy.FailClosed). A rule whose
// renewer CEL cannot say counts every caller as one, and says so.
func (g *generator) rightfulRenewers() string {
	parts := make([]string, len(g.rules))
	for i := range g.rules {
		renewer, exact := celexpr.SharedRenewer(&g.rules[i])
		if !exact {
			g.note("rule %s: plain renewals by anyone fail open while leaseguard is down: its bind template %q has several captures, which CEL cannot match", g.rules[i].Name, g.rules[i].Bind.ManagerText)
			renewer = "true"
		}
		if len(g.rules) == 1 {
			// The condition has checked that the one rule selects.
			return renewer
		}
		parts[i] = celexpr.And(celexpr.SelectsFirst(g.rules, i), renewer)
	}
	return celexpr.Or(parts...)
}

// mutating renders the mutating webhook: for the rules with designation:
// auto, the writes that may need the designation stamped (everything but
// the designated manager's own writes), and early renewals when coalescing
// runs in the webhook.
func (g *generator) mutating() *admissionregistrationv1.MutatingWebhookConfiguration {
	var parts []string
	var rules []policy.RuleView
	for i := range g.rules {
		r := &g.rules[i]
		var why []string
		manager, _ := celexpr.IsManager(r)
		designated := celexpr.Annotation("oldObject", policy.DesignationAnnotation) + ".orValue('')"
		switch {
		case r.Designation == policy.DesignationAuto:
			// The stamp (policy.Designate), and the acknowledgement of
			// the other managers' MultiClusterLease renewals
			// (policy.Acknowledge).
			why = append(why, celexpr.And(manager, celexpr.Or("request.operation == 'CREATE'", designated+" != "+celexpr.User)))
		case contains(r.Resources, policy.MultiClusterLeases) && r.Designation == policy.DesignationFixed:
			why = append(why, celexpr.And("request.resource.resource == "+celexpr.Quote(string(policy.MultiClusterLeases)), "request.operation == 'UPDATE'",
				manager, celexpr.User+" != "+celexpr.Quote(r.FixedManager)))
		case contains(r.Resources, policy.MultiClusterLeases) && r.Designation == policy.DesignationByAnnotation:
			why = append(why, celexpr.And("request.resource.resource == "+celexpr.Quote(string(policy.MultiClusterLeases)), "request.operation == 'UPDATE'",
				manager, designated+" != ''", designated+" != "+celexpr.User))
		}
		if r.CoalesceInterval > 0 && g.o.Coalescing == CoalesceInWebhook {
			if c, ok := g.earlyRenewal(i); ok {
				why = append(why, c)
			}
		}
		if len(why) > 0 {
			parts = append(parts, celexpr.And(celexpr.SelectsFirst(g.rules, i), celexpr.Or(why...)))
			rules = append(rules, *r)
		}
	}
	if len(parts) == 0 {
		return nil
	}
	none := admissionregistrationv1.SideEffectClassNone
	equivalent := admissionregistrationv1.Equivalent
	ignore := admissionregistrationv1.Ignore
	never := admissionregistrationv1.NeverReinvocationPolicy
	ops := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: g.o.Prefix + "-mutating-webhook-configuration", Labels: map[string]string{"app.kubernetes.io/name": "leaseguard"}},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    DesignateWebhook,
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig:            g.clientConfig(admission.MutatePath),
			Rules:                   ResourceRules(resourcesOf(rules), ops, false),
			SideEffects:             &none,
			MatchPolicy:             &equivalent,
			TimeoutSeconds:          &g.o.TimeoutSeconds,
			// A stamp that does not happen leaves the designation absent;
			// validation still decides the write.
			FailurePolicy:      &ignore,
			ReinvocationPolicy: &never,
			NamespaceSelector:  NamespaceSelector(g.o.Namespace, rules),
			MatchConditions: append(ControlPlaneConditions(), admissionregistrationv1.MatchCondition{
				Name: "may-need-designation", Expression: celexpr.Or(parts...),
			}),
		}},
	}
}

// earlyRenewal renders policy.Coalesce for rule i: a plain renewal by its
// rightful renewer that advances renewTime by less than the rule's interval.
// It reports false where CEL cannot say it exactly.
func (g *generator) earlyRenewal(i int) (string, bool) {
	r := &g.rules[i]
	renewer, exact := celexpr.RightfulRenewer(r)
	if !exact {
		g.note("rule %s: renewals are not coalesced: its bind template %q has several captures, which CEL cannot match", r.Name, r.Bind.ManagerText)
		return "", false
	}
	moves := make([]string, len(r.Resources))
	for j, res := range r.Resources {
		moves[j] = celexpr.OnlyRenewTimeMoves(res)
	}
	// Cheap and selective first: a renewal that is due (advance at least the
	// interval) stops at the advance.
	// (cel.bind is not in the API server's CEL environment: the advance is
	// written out twice.)
	advance := "(timestamp(object.spec.renewTime) - timestamp(oldObject.spec.renewTime))"
	interval := "duration(" + celexpr.Quote(durationString(r.CoalesceInterval)) + ")"
	early := celexpr.And(advance+" < "+interval, advance+" >= duration('0s')")
	return celexpr.And(celexpr.SelectsFirst(g.rules, i), "request.operation == 'UPDATE'",
		celexpr.Spec("oldObject", "renewTime")+".hasValue()", celexpr.Spec("object", "renewTime")+".hasValue()", early,
		celexpr.Or(moves...), renewer, outlives(interval)), true
}

// outlives renders policy.Coalesce's server-clock check: the stored lease
// outlives the coalescing interval. The clock is the latest managedFields
// time of the object being written, which the API server has just stamped
// for this write (whole seconds, so a second is added); without one it is
// the stored renewTime, and the check passes as before. Last, as it costs
// the most: a renewal that is not early never gets here.
func outlives(interval string) string {
	now := "(object.metadata.?managedFields.orValue([]).filter(m, has(m.time)).map(m, timestamp(m.time)) + [timestamp(oldObject.spec.renewTime)]).max()"
	lease := "duration(string(oldObject.spec.?leaseDurationSeconds.orValue(" + strconv.Itoa(int(policy.DefaultLeaseDuration/time.Second)) + ")) + 's')"
	return "timestamp(oldObject.spec.renewTime) + " + lease + " > " + now + " + " + interval + " + duration('1s')"
}

func durationString(d time.Duration) string { return d.String() }

// CoalescingPolicy is the MutatingAdmissionPolicy that coalesces p's early
// renewals in the API server, as Render renders it with CoalesceInAPIServer
// for objects named by prefix, and the notes on what it leaves out. Both
// are nil when no rule coalesces.
func CoalescingPolicy(p *policy.Policy, prefix, namespace string) (*admissionregistrationv1.MutatingAdmissionPolicy, *admissionregistrationv1.MutatingAdmissionPolicyBinding, []string) {
	g := &generator{o: Options{Namespace: namespace, Prefix: prefix, Coalescing: CoalesceInAPIServer}, rules: views(p), skew: p.ClockSkew}
	pol, binding := g.coalescingPolicy()
	return pol, binding, g.notes
}

func views(p *policy.Policy) []policy.RuleView {
	rules := make([]policy.RuleView, len(p.Rules))
	for i, r := range p.Rules {
		rules[i] = r.View()
	}
	return rules
}

// coalescingPolicy renders the MutatingAdmissionPolicy that sets an early
// renewal's renewTime back to the stored one: the write then changes
// nothing and the API server stores nothing, sends no watch event, and
// answers the client with success (docs/rate-limiting.md).
func (g *generator) coalescingPolicy() (*admissionregistrationv1.MutatingAdmissionPolicy, *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
	if g.o.Coalescing != CoalesceInAPIServer {
		return nil, nil
	}
	var parts []string
	var rules []policy.RuleView
	for i := range g.rules {
		if g.rules[i].CoalesceInterval <= 0 {
			continue
		}
		if c, ok := g.earlyRenewal(i); ok {
			parts = append(parts, c)
			rules = append(rules, g.rules[i])
		}
	}
	if len(parts) == 0 {
		return nil, nil
	}
	ignore := admissionregistrationv1.Ignore
	never := admissionregistrationv1.NeverReinvocationPolicy
	equivalent := admissionregistrationv1.Equivalent
	name := g.o.Prefix + "-coalesce-renewals"
	var resourceRules []admissionregistrationv1.NamedRuleWithOperations
	for _, rule := range resourceRulesFor(resourcesOf(rules)) {
		resourceRules = append(resourceRules, admissionregistrationv1.NamedRuleWithOperations{RuleWithOperations: rule})
	}
	pol := &admissionregistrationv1.MutatingAdmissionPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingAdmissionPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/name": "leaseguard"}},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: NamespaceSelector(g.o.Namespace, rules),
				ResourceRules:     resourceRules,
				MatchPolicy:       &equivalent,
			},
			MatchConditions: append(ControlPlaneConditions(), admissionregistrationv1.MatchCondition{Name: "early-renewal", Expression: celexpr.Or(parts...)}),
			// A renewal the policy cannot judge is stored, as without it.
			FailurePolicy:      &ignore,
			ReinvocationPolicy: never,
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType: admissionregistrationv1.PatchTypeJSONPatch,
				JSONPatch: &admissionregistrationv1.JSONPatch{
					Expression: "[JSONPatch{op: 'replace', path: '/spec/renewTime', value: oldObject.spec.renewTime}]",
				},
			}},
		},
	}
	binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingAdmissionPolicyBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/name": "leaseguard"}},
		Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: name},
	}
	return pol, binding
}

func resourceRulesFor(resources []policy.Resource) []admissionregistrationv1.RuleWithOperations {
	return ResourceRules(resources, []admissionregistrationv1.OperationType{admissionregistrationv1.Update}, false)
}
