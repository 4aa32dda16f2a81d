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
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/pattern"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/render/celexpr"
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
	// Renewals and its binding, the ValidatingAdmissionPolicy that decides
	// plain renewals inside the API server (renewals.go), are nil where
	// they are not rendered (clusters without admission policies in v1,
	// the fail-open rendering, broader selections).
	Renewals        *admissionregistrationv1.ValidatingAdmissionPolicy
	RenewalsBinding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	// Notes say where the rendering is broader than the policy, and why.
	Notes []string
	// Limits are the notes of Notes that say where the policy does not fit
	// the API server's limits (limits.go), and what is rendered instead.
	Limits []string
}

// The annotations of the validating webhook configuration that record the
// install's choices, so that leaseguard, re-rendering the configuration for
// a new policy (package configsync), renders what the install chose.
const (
	CoalesceAnnotation = "leaseguard.io/coalesce"
	FailOpenAnnotation = "leaseguard.io/fail-open"
)

// BypassAnnotation on the validating configuration stops every replica
// from writing leaseguard's admission configuration, so that an operator's
// emergency edit stays; its value says why. It is reported while it is
// there (leaseguard_admission_configuration_bypassed, the alert
// LeaseguardAdmissionConfigurationBypassed, kubectl leaseguard top);
// removing it restores the rendering at the next resync (package
// configsync). It is defined here, with the configuration it marks, so
// that what reads it (top) need not link what writes the configuration.
const BypassAnnotation = "leaseguard.io/bypass"

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

// Paths the webhooks are called on: the configurations name them, and
// leaseguard serve serves its handlers there (webhook/serve/server).
const (
	ValidatePath = "/validate-leases"
	// RenewalsPath is the fail-open webhook's, which the API server calls
	// for every UPDATE that changes something; its handler decides those
	// the fail-closed webhook does not (goFailClosed): the rightful
	// renewers' renewals, metadata writes, and status writers' status
	// writes (goStatusWriterStatusWrite).
	RenewalsPath = "/validate-renewals"
	MutatePath   = "/mutate-leases"
)

// Render is in limits.go: it renders at the first level that fits.

type generator struct {
	o     Options
	rules []policy.RuleView
	skew  time.Duration
	notes []string

	// How the selection is written (limits.go): the level; at levelWide,
	// the rules whose namespace test is left to leaseguard; why the exact
	// selection did not fit; the namespaces the namespaceSelectors list,
	// when they list exactly those (unionExact); which rules name them all.
	object     object
	level      level
	wide       []bool
	why        error
	union      []string
	unionExact bool
	covers     map[int]bool
	sels       []string
	limits     []string
	// renewalsTooLarge says the renewals policy takes nothing, as saying
	// what it takes would not fit (renewalsFit).
	renewalsTooLarge bool
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
// leaseguard's own (namespace), and, when every rule names its namespaces
// and they fit SelectorValuesBudget, only those (docs/design.md §5). The
// webhook configurations and the admission policies select with it alike.
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
	if selectorBytes(names) > SelectorValuesBudget {
		// Broader: the match conditions select the rules' namespaces.
		return &metav1.LabelSelector{MatchExpressions: exprs}
	}
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
func ResourceRules(resources []leaseobject.Resource, ops []admissionregistrationv1.OperationType, status bool) []admissionregistrationv1.RuleWithOperations {
	scope := admissionregistrationv1.NamespacedScope
	var out []admissionregistrationv1.RuleWithOperations
	for _, res := range resources {
		rule := admissionregistrationv1.RuleWithOperations{Operations: ops, Rule: admissionregistrationv1.Rule{Scope: &scope}}
		switch res {
		case leaseobject.Leases:
			rule.APIGroups, rule.APIVersions, rule.Resources = []string{"coordination.k8s.io"}, []string{"v1"}, []string{"leases"}
		case leaseobject.MultiClusterLeases:
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

func resourcesOf(rules []policy.RuleView) []leaseobject.Resource {
	var out []leaseobject.Resource
	for _, res := range []leaseobject.Resource{leaseobject.Leases, leaseobject.MultiClusterLeases} {
		for _, r := range rules {
			if contains(r.Resources, res) {
				out = append(out, res)
				break
			}
		}
	}
	return out
}

func contains(rs []leaseobject.Resource, res leaseobject.Resource) bool {
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

// selected renders "a rule selects the object" (past levelExact, at least
// where one does: limits.go).
func (g *generator) selected() string {
	parts := make([]string, len(g.rules))
	for i := range g.rules {
		if g.level == levelExact {
			parts[i] = celexpr.Selects(&g.rules[i])
		} else {
			parts[i] = g.sel(i)
		}
	}
	if g.level != levelExact {
		return orUnique(parts)
	}
	return celexpr.Or(parts...)
}

// noop renders "an UPDATE that changes nothing the API server would store":
// the same spec, status, labels, annotations, generateName, finalizers and
// owner references, and managedFields that differ at most in their times.
// The API server stores nothing for such a write (it reverts managedFields
// times that alone changed), so there is nothing to decide; it is what a
// coalesced renewal becomes. It must be exact: a write that changes
// anything else (generateName was once missing here) is stored with
// whatever managedFields times it carries, so it must reach leaseguard
// (docs/security.md, "Writes no webhook sees").
func noop() string {
	same := func(path string) string { return "object." + path + " == oldObject." + path }
	return celexpr.And(
		"request.operation == 'UPDATE'",
		same("?spec"),
		// A status write under the status writer's field-manager name
		// changes nothing else (docs/security.md).
		same("?status"),
		same("metadata.?labels"), same("metadata.?annotations"), same("metadata.?generateName"),
		same("metadata.?finalizers"), same("metadata.?ownerReferences"),
		managedFieldsUnchanged(),
	)
}

// maxComparedManagedFields bounds the managedFields entries the match
// conditions compare pairwise. Past it a write counts as changed and goes to
// leaseguard: a comparison of thousands of entries (Apply entries are not
// capped) would exceed the API server's CEL cost limit, and an error in a
// fail-open webhook's condition skips the webhook. Leases carry a handful.
const maxComparedManagedFields = 32

// managedFieldsUnchanged renders "the managedFields entries are as
// stored, times included": one native comparison of the two lists.
//
// Times are compared too. The validating webhooks' conditions run after
// the API server's IgnoreManagedFieldsTimestampsTransformer, which reverts
// the times of a write that changes nothing else (the writer's re-stamped
// entry) just before validating admission: a write the API server will
// not store arrives with managedFields exactly as stored, and one that
// arrives with a time changed is stored with it. The proof once compared
// the entries without their times, and trusted CEL's equality to be the
// API server's; it is not. The transformer reverts times only where the
// lists match pair by pair, in order, and where the objects are deeply
// equal, where CEL's equality is looser (15 == 15.0). A write that
// re-dated entries out of their order, or that wrote
// "leaseDurationSeconds": 15.0 beside its planted times, was stored with
// those times and reached no webhook (seventh attack round,
// docs/security.md).
func managedFieldsUnchanged() string {
	return "object.metadata.?managedFields == oldObject.metadata.?managedFields"
}

// noopFirstRenewTime renders noop with renewTime compared first: on the hot
// path, a renewal, CEL stops there.
func noopFirstRenewTime() string {
	same := func(path string) string { return "object." + path + " == oldObject." + path }
	return celexpr.And("request.operation == 'UPDATE'", same("?spec.?renewTime"), same("?spec"), same("?status"),
		same("metadata.?labels"), same("metadata.?annotations"), same("metadata.?generateName"),
		same("metadata.?finalizers"), same("metadata.?ownerReferences"), managedFieldsUnchanged())
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
		cfg.Webhooks = []admissionregistrationv1.ValidatingWebhook{entry(ValidateWebhook, ValidatePath, &ignore, all, true,
			admissionregistrationv1.MatchCondition{Name: "selected-and-changed", Expression: celexpr.And(selected, celexpr.Not(noop()))})}
		return cfg
	}
	// Identity changes (creates, deletes, status, holder, lease fields,
	// designation, finalizers, owner references), any write by someone
	// other than the rule's rightful renewer, and any other write that
	// changes something but is not a renewal harmless unchecked (metadata,
	// managedFields, a renewTime moved back, cleared, unreadable or ahead
	// of the server clock) are never admitted without leaseguard
	// (goFailClosed). A write admission made a no-op (a coalesced or
	// acknowledged renewal) is stored by nobody and goes to neither.
	//
	// Said in the order that prices an acknowledged renewal, most of the
	// writes, cheapest: the caller (a manager of the shared lease), then
	// the no-op proof, and only a write that is no no-op of the object
	// itself is asked whether it changes an identity or is harmless.
	// Equal to "identity change, or not the rightful renewer, or neither
	// a no-op nor harmless": a no-op of the object itself (not of a
	// subresource) changes no identity.
	closed := celexpr.Or(celexpr.Not(g.rightfulRenewers()),
		celexpr.Ternary(celexpr.And(noopFirstRenewTime(), "request.?subResource.orValue('') == ''"), "false",
			celexpr.Or(celexpr.IdentityChange(resources), celexpr.Not(harmlessRenewal(resources, g.skew)))))
	// A status writer's status write is admitted whatever it writes (I8):
	// it flows while leaseguard is down, or every manager's lock, polling
	// the status its controller can no longer write, loses its leadership
	// (goStatusWriterStatusWrite).
	statusWrites := g.statusWriterStatusWrites()
	if statusWrites != "false" {
		closed = celexpr.And(celexpr.Not(statusWrites), closed)
	}
	cfg.Webhooks = []admissionregistrationv1.ValidatingWebhook{
		entry(ValidateWebhook, ValidatePath, &fail, all, true, admissionregistrationv1.MatchCondition{
			Name: "selected-fail-closed", Expression: celexpr.And(selected, closed),
		}),
		// Every other UPDATE that changes something (the holders' renewals,
		// free metadata) keeps flowing while leaseguard is down, so no
		// leadership is lost to an outage. Each write goes to exactly one
		// of the two, so that it is decided and counted once and its
		// refusal always names the same webhook; a handler still decides
		// whatever it receives (after a policy change, before the
		// configuration follows, the routing may be the old policy's).
		// What the renewals policy decides in the API server does not
		// come here (renewals.go).
		entry(RenewalsWebhook, RenewalsPath, &ignore, updates, statusWrites != "false", admissionregistrationv1.MatchCondition{
			Name: "selected-and-changed", Expression: g.renewalsWebhookCondition(selected, closed),
		}),
	}
	return cfg
}

// renewalsWebhookCondition renders the renewals webhook's condition: the
// fail-open route but what the renewals policy decides, where both fit
// (renewalsFit); else the whole route, and the policy takes nothing.
//
// The route is what changes something and is not fail-closed: a harmless
// renewal (which moves renewTime, so it is never a no-op) or a status
// writer's status write that changes something. Said so, an acknowledged
// renewal (most of the writes) stops at harmlessRenewal's fourth term,
// renewTime kept, instead of being proved a no-op in full once more here
// after the fail-closed webhook's condition has (a third of the webhooks'
// conditions' CPU per acknowledged renewal, docs/multicluster.md).
func (g *generator) renewalsWebhookCondition(selected, closed string) string {
	changing := harmlessRenewal(resourcesOf(g.rules), g.skew)
	if g.statusWriterStatusWrites() != "false" {
		// Any status write that changes something: one by someone other
		// than a status writer is an identity change (a subresource), so
		// closed already keeps it off this route. Said so, the route does
		// not repeat every rule's selection (statusWriterStatusWrites), which
		// made it a third larger and pushed policies near the API server's
		// limits to a broader rendering (limits.go).
		changing = celexpr.Or(changing, celexpr.And("request.?subResource.orValue('') == 'status'", celexpr.Not(noopFirstRenewTime())))
	}
	route := celexpr.And(selected, changing, celexpr.Not(closed))
	if !g.rendersRenewalsPolicy() {
		return route
	}
	inProcess := g.inProcess()
	if g.statusWriterStatusWrites() != "false" {
		// The route carries status writes too, which the renewals policy
		// (bound to the objects themselves) never sees.
		inProcess = celexpr.And("request.?subResource.orValue('') == ''", inProcess)
	}
	narrowed := celexpr.And(route, celexpr.Not(inProcess))
	if !g.renewalsFit(narrowed) {
		g.renewalsTooLarge = true
		g.note("the renewals policy decides no renewal: the selection, said once more, does not fit the API server's limits; plain renewals go to the fail-open webhook")
		return route
	}
	return narrowed
}

// RenewTimeLayout is the one form of a MultiClusterLease renewTime that
// the fail-open route carries: what metav1.MicroTime writes and typed
// clients read (I7). Anything else the CRD's date-time lets through (no
// fraction, nine digits, a lower-case 't', an offset of 24 hours, a year
// before 1000 or after 8999) goes to
// the fail-closed webhook, which refuses it unless it is the stored value.
// Hours, minutes and seconds are bounded so that CEL's timestamp() never
// fails on what the regular expression admits.
const RenewTimeLayout = `^[1-8][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\.[0-9]{6}(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`

// ownsRenewTime renders "managedFields entry m is the main resource's
// entry that owns spec.renewTime". When a write changes renewTime the API
// server takes the field from every other entry and gives it to the
// writer's, which it stamps with its own clock (whole seconds) before
// admission: whatever entries and times a client sends, after such a
// write this is the API server's entry, dated now.
func ownsRenewTime(m string) string {
	return m + ".?subresource.orValue('') == '' && " + m + ".?fieldsV1[?'f:spec'][?'f:renewTime'].hasValue()"
}

// harmlessRenewal renders goHarmlessRenewal: what the fail-open
// webhook may carry, since while leaseguard is down it is stored
// unchecked. Only a renewal that moves renewTime to no further ahead than
// the clock skew of the API server's clock (further, it would hold the
// lease until then), and backwards only to within the skew behind it (or
// the lease would read as expired and anyone could take it), in a form
// typed clients read, and that changes no metadata and re-dates no
// managedFields entry but the API server's own stamp. Forwards, a renewal
// may be late by any amount: a client composes renewTime before its
// request waits in client-side throttling and a busy API server's queues,
// seconds under load, and such a renewal leaves the lease no older than
// stored. Backwards is bounded by the clock, not by the stored renewTime,
// so that repeated writes cannot walk it back, while two managers'
// renewals that reach the API server in the other order than they were
// composed (milliseconds apart) still flow.
// The clock is the stamp of the entry that
// owns renewTime (ownsRenewTime), never a time a client can write:
// anything else (a write with no such entry, or more entries than are
// compared) is not harmless. Every term stops at its first false, so a
// rightful renewal is priced by its few entries.
func harmlessRenewal(resources []leaseobject.Resource, skew time.Duration) string {
	mf := "object.metadata.?managedFields.orValue([])"
	same := func(path string) string { return "object." + path + " == oldObject." + path }
	allowed := "duration(" + celexpr.Quote((skew + time.Second).String()) + ")"
	// The stamp is the API server's clock cut to the second, never later
	// than it: a renewTime within the skew behind the clock is within it
	// behind the stamp too.
	behind := "duration(" + celexpr.Quote(skew.String()) + ")"
	readable := "true"
	if slices.Contains(resources, leaseobject.MultiClusterLeases) {
		re := celexpr.Quote(RenewTimeLayout)
		readable = "object.spec.renewTime.matches(" + re + ") && oldObject.spec.renewTime.matches(" + re + ")"
		if slices.Contains(resources, leaseobject.Leases) {
			// A Lease's renewTime is a MicroTime: the API server writes it so.
			readable = celexpr.Or("request.resource.resource == 'leases'", "("+readable+")")
		}
	}
	return celexpr.And(
		"request.operation == 'UPDATE'",
		celexpr.TimeSet("object", "renewTime"), celexpr.TimeSet("oldObject", "renewTime"),
		celexpr.Spec("object", "renewTime")+" != "+celexpr.Spec("oldObject", "renewTime"),
		readable,
		same("metadata.?labels"), same("metadata.?annotations"), same("metadata.?generateName"),
		mf+".size() <= "+strconv.Itoa(maxComparedManagedFields),
		mf+".exists(m, "+ownsRenewTime("m")+" && has(m.time) && timestamp(object.spec.renewTime) <= timestamp(m.time) + "+allowed+
			" && (timestamp(object.spec.renewTime) >= timestamp(oldObject.spec.renewTime) || timestamp(object.spec.renewTime) >= timestamp(m.time) - "+behind+"))",
		mf+".all(m, ("+ownsRenewTime("m")+") || oldObject.metadata.?managedFields.orValue([]).exists(o, "+
			"o.?manager == m.?manager && o.?operation == m.?operation && o.?subresource == m.?subresource && o.?apiVersion == m.?apiVersion && o.?time == m.?time))",
	)
}

// rightfulRenewers renders "the caller is the rightful renewer of the stored
// lease under the rule that selects it" (goFailClosed). A rule whose
// renewer CEL cannot say counts every caller as one, and says so.
//
// Past levelExact (limits.go) it holds only where it holds by the policy,
// never more: the fail-open webhook trusts it. At levelBroad it is false.
func (g *generator) rightfulRenewers() string {
	if g.level == levelBroad {
		return "false"
	}
	parts := make([]string, len(g.rules))
	for i := range g.rules {
		renewer, exact := celexpr.SharedRenewer(&g.rules[i])
		if !exact {
			g.note("rule %s: plain renewals by anyone fail open while leaseguard is down: CEL cannot tell which lease its bind template %q binds a caller to (%s)", g.rules[i].Name, g.rules[i].Bind.ManagerText, pattern.InexpressibleBind)
			renewer = "true"
		}
		if len(g.rules) == 1 {
			// The condition has checked that the one rule selects (and
			// routing a write the policy does not select is immaterial:
			// leaseguard admits it, as the API server does without it).
			return renewer
		}
		parts[i] = renewer
	}
	if g.level == levelExact {
		// The first rule to select decides, found in one search
		// (celexpr.FirstMatch): each rule's selection once, not once more
		// for every later rule, so the condition grows linearly in the
		// rules (Or(And(SelectsFirst(i), renewer i)...) grew with their
		// square: 48,402 code points for 21 rules). False where no rule
		// selects, as before.
		conds := make([]string, len(g.rules))
		for i := range g.rules {
			conds[i] = celexpr.Selects(&g.rules[i])
		}
		return celexpr.FirstMatch(conds, parts, "false")
	}
	return g.firstRuleUnder(parts, true, "")
}

// statusWriterStatusWrites renders goStatusWriterStatusWrite: an
// UPDATE of a MultiClusterLease's status by a status writer of the first
// rule that selects it. Only at levelExact, where the selection is exact;
// elsewhere false, and such writes stay on the fail-closed route. False too
// where no rule names a status writer.
func (g *generator) statusWriterStatusWrites() string {
	if g.level != levelExact {
		return "false"
	}
	conds, writers := make([]string, len(g.rules)), make([]string, len(g.rules))
	named := false
	for i := range g.rules {
		conds[i] = celexpr.Selects(&g.rules[i])
		writers[i] = "false"
		if contains(g.rules[i].Resources, leaseobject.MultiClusterLeases) && len(g.rules[i].StatusWriters) > 0 {
			writers[i] = celexpr.CallerMatches(g.rules[i].StatusWriters)
			named = true
		}
	}
	if !named {
		return "false"
	}
	return celexpr.And("request.operation == 'UPDATE'", "request.?subResource.orValue('') == 'status'",
		"request.resource.resource == "+celexpr.Quote(string(leaseobject.MultiClusterLeases)), celexpr.FirstMatch(conds, writers, "false"))
}

// mutating renders the mutating webhook: for the rules with designation:
// auto, the writes that may need the designation stamped (everything but
// the designated manager's own writes), and early renewals when coalescing
// runs in the webhook.
func (g *generator) mutating() *admissionregistrationv1.MutatingWebhookConfiguration {
	specMoves := celexpr.Or("request.operation != 'UPDATE'", "object.?spec != oldObject.?spec")
	var parts []string
	var rules []policy.RuleView
	values, earlyParts := make([]string, len(g.rules)), make([]string, len(g.rules))
	for i := range g.rules {
		r := &g.rules[i]
		var why []string
		manager, _ := celexpr.IsManager(r)
		designated := celexpr.Annotation("oldObject", leaseobject.DesignationAnnotation) + ".orValue('')"
		switch {
		case r.Designation == policy.DesignationAuto:
			// The stamp (policy.Designate), and the acknowledgement of
			// the other managers' MultiClusterLease renewals
			// (policy.Acknowledge).
			why = append(why, celexpr.And(manager, celexpr.Or("request.operation == 'CREATE'", designated+" != "+celexpr.User)))
		case contains(r.Resources, leaseobject.MultiClusterLeases) && r.Designation == policy.DesignationFixed:
			why = append(why, celexpr.And("request.resource.resource == "+celexpr.Quote(string(leaseobject.MultiClusterLeases)), "request.operation == 'UPDATE'",
				manager, celexpr.User+" != "+celexpr.Quote(r.FixedManager)))
		case contains(r.Resources, leaseobject.MultiClusterLeases) && r.Designation == policy.DesignationByAnnotation:
			why = append(why, celexpr.And("request.resource.resource == "+celexpr.Quote(string(leaseobject.MultiClusterLeases)), "request.operation == 'UPDATE'",
				manager, designated+" != ''", designated+" != "+celexpr.User))
		}
		designation := len(why)
		if r.CoalesceInterval > 0 && g.o.Coalescing == CoalesceInWebhook {
			early := g.earlyRenewal
			if g.level != levelExact {
				early = g.earlyRenewalAlone
			}
			if c, ok := early(i); ok {
				why = append(why, c)
			}
		}
		values[i], earlyParts[i] = "false", "false"
		if len(why) > 0 {
			if g.level == levelExact {
				parts = append(parts, celexpr.And(celexpr.SelectsFirst(g.rules, i), celexpr.Or(why...)))
			} else {
				parts = append(parts, "")
			}
			rules = append(rules, *r)
			values[i], earlyParts[i] = celexpr.Or(why[:designation]...), celexpr.Or(why[designation:]...)
			if g.level == levelBroad {
				values[i], earlyParts[i] = "true", "false"
			}
		}
	}
	if len(parts) == 0 {
		return nil
	}
	condition := celexpr.Or(parts...)
	if g.level != levelExact {
		// Past levelExact (limits.go): wherever the policy needs it, and
		// maybe more, which the mutating webhook decides in full.
		// The first rule's stamp or early renewal is the first rule's
		// stamp or the first rule's early renewal: two searches, each
		// with its common terms taken out (celexpr.FirstMatch).
		condition = celexpr.Or(g.firstRuleOver(values), g.firstRuleOver(earlyParts))
	}
	if g.acknowledgesInAPIServer() {
		// The MutatingAdmissionPolicy runs first: a renewal it
		// acknowledged changes nothing, and for a write that changes
		// nothing the webhook has nothing to stamp or answer (Designate,
		// Acknowledge and Coalesce all need the spec to move; an early
		// renewal moves renewTime). So "the spec moves" comes first: on
		// an acknowledged renewal, most of the writes, CEL stops at one
		// comparison of the spec instead of the selection, the caller and
		// the designation before it (make bench-cel,
		// BenchmarkAcknowledgedRenewal), and where a full no-op proof
		// (status, metadata, managedFields entry by entry) once priced it
		// a second time (docs/multicluster.md).
		condition = celexpr.And(specMoves, condition)
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
			ClientConfig:            g.clientConfig(MutatePath),
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
				Name: "may-need-designation", Expression: condition,
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
		g.note("rule %s: renewals are not coalesced: CEL cannot tell which lease its bind template %q binds a caller to (%s)", r.Name, r.Bind.ManagerText, pattern.InexpressibleBind)
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
	// A renewal that moves renewTime: only then is the entry that owns it
	// the API server's stamp of this write (outlives).
	early := celexpr.And(advance+" < "+interval, advance+" > duration('0s')")
	return celexpr.And(celexpr.SelectsFirst(g.rules, i), "request.operation == 'UPDATE'",
		celexpr.TimeSet("oldObject", "renewTime"), celexpr.TimeSet("object", "renewTime"), early,
		celexpr.Or(moves...), renewer, outlives(interval)), true
}

// outlives renders policy.Coalesce's server-clock check: the stored lease
// outlives the coalescing interval. The clock is the stamp of the entry
// that owns renewTime, which the API server has just given this write (an
// early renewal moves renewTime; whole seconds, so a second is added):
// never the latest of all entries, which a client can date as it likes
// (a planted entry dated 2100 once turned coalescing off for good). With
// no such entry nothing is coalesced: the renewal is stored, as without
// the policy. Last, as it costs the most: a renewal that is not early
// never gets here.
func outlives(interval string) string {
	lease := "duration(string(oldObject.spec.?leaseDurationSeconds.orValue(" + strconv.Itoa(int(leaseobject.DefaultLeaseDuration/time.Second)) + ")) + 's')"
	return "object.metadata.?managedFields.orValue([]).exists(m, " + ownsRenewTime("m") + " && has(m.time) && " +
		"timestamp(oldObject.spec.renewTime) + " + lease + " > timestamp(m.time) + " + interval + " + duration('1s'))"
}

func durationString(d time.Duration) string { return d.String() }

// CoalescingPolicy is the MutatingAdmissionPolicy that coalesces p's early
// renewals and acknowledges the other managers' renewals of a shared
// MultiClusterLease in the API server, as Render renders it with
// CoalesceInAPIServer for objects named by prefix, and the notes on what
// it leaves out. Both are nil when no rule coalesces or designates a
// writer of MultiClusterLeases.
func CoalescingPolicy(p *policy.Policy, prefix, namespace string) (*admissionregistrationv1.MutatingAdmissionPolicy, *admissionregistrationv1.MutatingAdmissionPolicyBinding, []string) {
	o := Options{Namespace: namespace, Prefix: prefix, Coalescing: CoalesceInAPIServer}
	rules := views(p)
	union, unionExact := namespaceUnion(rules)
	// Within the API server's limits, as Render fits it (limits.go): the
	// broader renderings coalesce less, never more, and always fit.
	out, err := fit(func(lv level, why error) *generator {
		return &generator{o: o, rules: rules, skew: p.ClockSkew, level: lv, why: why, union: union, unionExact: unionExact, object: objCoalescing}
	}, objCoalescing)
	if err != nil {
		return nil, nil, []string{"nothing is coalesced: " + err.Error()}
	}
	return out.Coalescing, out.CoalescingBinding, out.Notes
}

func views(p *policy.Policy) []policy.RuleView {
	rules := make([]policy.RuleView, len(p.Rules))
	for i, r := range p.Rules {
		rules[i] = r.View()
	}
	return rules
}

// coalescingPolicy renders the MutatingAdmissionPolicy that sets an early
// renewal's renewTime back to the stored one (policy.Coalesce), and another
// manager's renewal of a shared MultiClusterLease (policy.Acknowledge,
// acknowledgement): the write then changes nothing and the API server
// stores nothing, sends no watch event, calls no webhook, and answers the
// client with success (docs/rate-limiting.md, docs/design.md §5). The
// JSONPatch copies oldObject's renewTime as written (a date-time the API
// server hands CEL as the stored string at run time: ".120000Z" stays
// ".120000Z"), so that the object is byte for byte the stored one.
func (g *generator) coalescingPolicy() (*admissionregistrationv1.MutatingAdmissionPolicy, *admissionregistrationv1.MutatingAdmissionPolicyBinding) {
	if g.o.Coalescing != CoalesceInAPIServer {
		return nil, nil
	}
	if g.level == levelBroad {
		return nil, nil
	}
	var parts []string
	var rules []policy.RuleView
	values := make([]string, len(g.rules))
	acknowledging := false
	for i := range g.rules {
		values[i] = "false"
		if g.acknowledgesInAPIServer() && g.level == levelExact && !g.isWide(i) {
			// Past levelExact (limits.go) the mutating webhook
			// acknowledges: the broader selections cannot say which
			// rule, so which writer, a lease has.
			if c, ok := g.acknowledgement(i); ok {
				parts = append(parts, c)
				rules = append(rules, g.rules[i])
				acknowledging = true
			}
		}
		if g.rules[i].CoalesceInterval <= 0 || g.isWide(i) {
			continue
		}
		if g.level != levelExact {
			if c, ok := g.earlyRenewalAlone(i); ok {
				parts = append(parts, c)
				rules = append(rules, g.rules[i])
				values[i] = c
			}
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
	condition := celexpr.Or(parts...)
	if g.level != levelExact {
		// Past levelExact (limits.go): only where the policy coalesces,
		// never more, as nothing decides these renewals but this policy.
		condition = g.firstRuleUnder(values, false, "false")
	}
	conditionName := "early-renewal"
	if acknowledging {
		conditionName = "early-or-acknowledged-renewal"
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
			MatchConditions: append(ControlPlaneConditions(), admissionregistrationv1.MatchCondition{Name: conditionName, Expression: condition}),
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

func resourceRulesFor(resources []leaseobject.Resource) []admissionregistrationv1.RuleWithOperations {
	return ResourceRules(resources, []admissionregistrationv1.OperationType{admissionregistrationv1.Update}, false)
}
