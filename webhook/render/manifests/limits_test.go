package manifests

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	celplugin "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
	"github.com/leaseguard/leaseguard/webhook/render/celexpr"
)

// A policy whose lists are long: what the API server refuses must never be
// rendered (it would keep routing by the previous configuration while
// leaseguard enforces the new policy: issue 41, item 3), and what is
// rendered instead must send leaseguard at least every write the policy
// selects, the fail-closed webhook at least every write the policy keeps
// from the fail-open one, and coalesce no renewal the policy does not.

// namespaces returns n namespace names.
func namespaces(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return out
}

// appsPolicy has the shape of the issue's: one Lease rule and one
// MultiClusterLease rule over the same long list of namespaces, and a
// later Lease rule over a glob (its namespaces are not listed, so the
// namespaceSelector cannot list the union) when withTeams.
func appsPolicy(n int, withTeams bool) string {
	ns := strings.Join(namespaces("apps", n), ", ")
	src := head + `- name: apps
  resources: [leases]
  namespaces: [` + ns + `]
  managers: ["system:serviceaccount:apps:*"]
  designation: auto
  coalesceRenewals: 4s
- name: apps-mcl
  resources: [multiclusterleases]
  namespaces: [` + ns + `]
  managers: ["system:serviceaccount:apps-mcl:*"]
  designation: auto
`
	if withTeams {
		src += `- name: teams
  resources: [leases]
  namespaces: ["team-*", "apps-00001"]
  managers: ["system:serviceaccount:teams:*"]
  coalesceRenewals: 4s
`
	}
	return src
}

// manyRules has n Lease rules of three namespaces each, each with its own
// managers, the last over every namespace.
func manyRules(n int) string {
	var b strings.Builder
	b.WriteString(head)
	for i := range n {
		fmt.Fprintf(&b, "- name: r%d\n  resources: [leases]\n  namespaces: [%s]\n  managers: [\"system:serviceaccount:r%d:*\"]\n  designation: auto\n  coalesceRenewals: 4s\n",
			i, strings.Join(namespaces(fmt.Sprintf("r%d", i), 3), ", "), i)
	}
	b.WriteString("- name: last\n  resources: [leases]\n  managers: [\"system:serviceaccount:last:*\"]\n")
	return b.String()
}

func parsePolicy(t *testing.T, src string) *policy.Policy {
	t.Helper()
	p, err := policyfile.Parse([]byte(src), policy.CompileOptions{OwnNamespace: "leaseguard-system"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// renderings are the option sets every check renders with.
func renderings() map[string]Options {
	out := map[string]Options{}
	for _, c := range []Coalescing{CoalesceInAPIServer, CoalesceInWebhook, CoalesceOff} {
		o := Defaults()
		o.Coalescing = c
		out["--coalesce "+string(c)] = o
	}
	o := Defaults()
	o.FailOpen = true
	out["--fail-open"] = o
	return out
}

// apiServerCompiler compiles match conditions as the API server validates
// them (k8s.io/kubernetes' admissionregistration validation): the strict
// stateless compiler, new expressions.
var apiServerCompiler = celplugin.NewCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))

func conditionsOf(r *Rendered) map[string]admissionregistrationv1.MatchCondition {
	out := map[string]admissionregistrationv1.MatchCondition{}
	for _, w := range r.Validating.Webhooks {
		for _, c := range w.MatchConditions {
			out["webhook "+w.Name+" condition "+c.Name] = c
		}
	}
	if r.Mutating != nil {
		for _, w := range r.Mutating.Webhooks {
			for _, c := range w.MatchConditions {
				out["webhook "+w.Name+" condition "+c.Name] = c
			}
		}
	}
	if r.Coalescing != nil {
		for _, c := range r.Coalescing.Spec.MatchConditions {
			out["policy "+r.Coalescing.Name+" condition "+c.Name] = c
		}
	}
	return out
}

func selectors(r *Rendered) map[string]*metav1.LabelSelector {
	out := map[string]*metav1.LabelSelector{}
	for _, w := range r.Validating.Webhooks {
		out["webhook "+w.Name] = w.NamespaceSelector
	}
	if r.Mutating != nil {
		for _, w := range r.Mutating.Webhooks {
			out["webhook "+w.Name] = w.NamespaceSelector
		}
	}
	if r.Coalescing != nil {
		out["policy "+r.Coalescing.Name] = r.Coalescing.Spec.MatchConstraints.NamespaceSelector
	}
	return out
}

// Every condition of every rendering of policies with 400, 1,200 and
// 10,000 namespaces, and with 100 and 1,000 rules, is one the API server
// accepts: within the budget (and so the limit) in code points, compiled
// by the API server's own validation, and every selector within its budget.
// The issue's policy (1,200 namespaces, two rules) is rendered exactly.
func TestRenderingsFitTheAPIServer(t *testing.T) {
	for _, c := range []struct {
		name  string
		src   string
		exact bool // rendered with no note: selects exactly the policy
	}{
		{"400 namespaces", appsPolicy(400, false), true},
		{"1,200 namespaces", appsPolicy(1200, false), true},
		{"10,000 namespaces", appsPolicy(10000, false), true},
		{"400 namespaces and a glob", appsPolicy(400, true), true},
		{"1,200 namespaces and a glob", appsPolicy(1200, true), true},
		{"10,000 namespaces and a glob", appsPolicy(10000, true), false},
		{"100 rules", manyRules(100), true},
		{"1,000 rules", manyRules(1000), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := parsePolicy(t, c.src)
			compiled := map[string]bool{}
			for how, o := range renderings() {
				r, err := Render(p, o)
				if err != nil {
					t.Fatalf("%s: %v", how, err)
				}
				// Where the renewals policy does not fit, it takes nothing
				// and says so: the webhooks still select exactly.
				var selection []string
				for _, n := range r.Notes {
					if !strings.HasPrefix(n, "the renewals policy decides no renewal") {
						selection = append(selection, n)
					}
				}
				if c.exact && len(selection) > 0 {
					t.Errorf("%s: notes on a rendering that fits exactly: %q", how, selection)
				}
				if !c.exact && len(r.Notes) == 0 {
					t.Errorf("%s: a broader rendering with no note", how)
				}
				for _, n := range r.Notes {
					if strings.Contains(n, "\n") {
						t.Errorf("%s: a note of several lines: %q", how, n)
					}
				}
				largest := 0
				for where, mc := range conditionsOf(r) {
					n := utf8.RuneCountInString(mc.Expression)
					largest = max(largest, n)
					if n > ExpressionBudget {
						t.Errorf("%s: %s: %d code points, over the budget %d", how, where, n, ExpressionBudget)
					}
					if compiled[mc.Expression] {
						continue
					}
					compiled[mc.Expression] = true
					if res := apiServerCompiler.CompileCELExpression((*matchconditions.MatchCondition)(&mc), celplugin.OptionalVariableDeclarations{HasAuthorizer: true}, environment.NewExpressions); res.Error != nil {
						t.Errorf("%s: %s: the API server refuses it: %.300v", how, where, res.Error)
					}
				}
				for where, sel := range selectors(r) {
					for _, req := range sel.MatchExpressions {
						if b := selectorBytes(req.Values); b > SelectorValuesBudget {
							t.Errorf("%s: %s: the namespaceSelector lists %d bytes, over the budget %d", how, where, b, SelectorValuesBudget)
						}
					}
				}
				t.Logf("%s: largest condition %d code points, %d notes", how, largest, len(r.Notes))
			}
		})
	}
}

// The exact rendering of the issue's policy at 1,200 namespaces is what
// the API server refused (over 100,000 code points); rendered now, it
// fits exactly.
func TestTheIssuesPolicyDidNotFit(t *testing.T) {
	p := parsePolicy(t, appsPolicy(1200, false))
	g := &generator{o: Defaults(), rules: views(p), skew: p.ClockSkew}
	largest := 0
	for _, mc := range conditionsOf(&Rendered{Validating: g.validating()}) {
		largest = max(largest, utf8.RuneCountInString(mc.Expression))
	}
	if largest <= MaxExpressionCodePoints {
		t.Fatalf("the exact rendering's largest condition has %d code points: the test no longer shows the issue", largest)
	}
	if err := checkLimits(&Rendered{Validating: g.validating()}); err == nil || !strings.Contains(err.Error(), "over the 90000") {
		t.Errorf("checkLimits: %v", err)
	}
}

// route is which of a rendering's objects the API server calls for one
// write: the fail-closed and fail-open validating webhooks, the mutating
// webhook, the coalescing policy.
type route struct{ closed, open, mutating, coalesced bool }

// evaluator evaluates a rendering's selectors and conditions as the API
// server does (the control-plane conditions are left out: no sample is the
// control plane's).
type evaluator struct {
	t     *testing.T
	progs map[string]cel.Program
}

// program prepares expr in the API server's environment without the
// parser's limits: the exact renderings compared with are longer.
func (e *evaluator) program(expr string) cel.Program {
	e.t.Helper()
	if p, ok := e.progs[expr]; ok {
		return p
	}
	env, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Env(environment.NewExpressions)
	if err != nil {
		e.t.Fatal(err)
	}
	env, err = env.Extend(cel.Variable("request", cel.DynType), cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType),
		cel.ParserExpressionSizeLimit(-1), cel.ParserRecursionLimit(-1))
	if err != nil {
		e.t.Fatal(err)
	}
	// Parsed, not checked: the checker takes minutes on the exact
	// renderings of many rules; evaluation is the same (the API server's
	// own compilation is TestRenderingsFitTheAPIServer's).
	ast, iss := env.Parse(expr)
	if iss.Err() != nil {
		e.t.Fatalf("%.300v", iss.Err())
	}
	prg, err := env.Program(ast)
	if err != nil {
		e.t.Fatal(err)
	}
	e.progs[expr] = prg
	return prg
}

// holds evaluates one condition; an evaluation error is reported as the
// failure policy makes it (a Fail webhook is called and refuses).
func (e *evaluator) holds(sel *metav1.LabelSelector, conds []admissionregistrationv1.MatchCondition, fail bool, s *write) bool {
	e.t.Helper()
	ls, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		e.t.Fatal(err)
	}
	if !ls.Matches(labels.Set{"kubernetes.io/metadata.name": s.namespace}) {
		return false
	}
	for _, c := range conds {
		if c.Name == "not-a-node" || c.Name == "not-the-control-plane" {
			continue
		}
		v, details, err := e.program(c.Expression).Eval(map[string]any{"request": s.request(), "object": s.obj, "oldObject": s.old})
		if err != nil {
			e.t.Logf("%s: %s: evaluation error %v", s, c.Name, err)
			return fail
		}
		if cost := details.ActualCost(); cost != nil && *cost > uint64(PerCallCostLimit) {
			e.t.Errorf("%s: %s costs %d, over the API server's per-call limit %d", s, c.Name, *cost, PerCallCostLimit)
		}
		if v.Value() != true {
			return false
		}
	}
	return true
}

func (e *evaluator) route(r *Rendered, s *write) route {
	var out route
	for _, w := range r.Validating.Webhooks {
		if !slicesContainsResource(w.Rules, s.resource) {
			continue
		}
		h := e.holds(w.NamespaceSelector, w.MatchConditions, *w.FailurePolicy == admissionregistrationv1.Fail, s)
		switch {
		case !h:
		case *w.FailurePolicy == admissionregistrationv1.Fail:
			out.closed = true
		default:
			out.open = true
		}
	}
	if r.Mutating != nil && s.op != "DELETE" {
		for _, w := range r.Mutating.Webhooks {
			if slicesContainsResource(w.Rules, s.resource) && e.holds(w.NamespaceSelector, w.MatchConditions, false, s) {
				out.mutating = true
			}
		}
	}
	if m := r.Coalescing; m != nil && s.op == "UPDATE" {
		out.coalesced = e.holds(m.Spec.MatchConstraints.NamespaceSelector, m.Spec.MatchConditions, false, s)
	}
	return out
}

func slicesContainsResource(rules []admissionregistrationv1.RuleWithOperations, resource string) bool {
	for _, r := range rules {
		for _, res := range r.Resources {
			if res == resource {
				return true
			}
		}
	}
	return false
}

// write is one sample lease write.
type write struct {
	what, op, resource, namespace, user string
	old, obj                            map[string]any
}

func (s *write) String() string {
	return fmt.Sprintf("%s %s of %s in %s by %s", s.what, s.op, s.resource, s.namespace, s.user)
}

func (s *write) request() map[string]any {
	group, version := "coordination.k8s.io", "v1"
	if s.resource == "multiclusterleases" {
		group, version = "multicluster.core.cnrm.cloud.google.com", "v1alpha1"
	}
	return map[string]any{"operation": s.op, "namespace": s.namespace, "name": "leader",
		"resource": map[string]any{"group": group, "version": version, "resource": s.resource},
		"userInfo": map[string]any{"username": s.user}}
}

// writes are a create, a delete, a holder change, a plain renewal
// (early: 2 s) and a renewal ahead of the clock, by each user, of each
// resource, in each namespace.
func writes(nss, users []string) []*write {
	stored := time.Date(2026, 12, 4, 16, 36, 30, 123456000, time.UTC)
	lease := func(resource, ns string, renew time.Time, stamp time.Time, holder string) map[string]any {
		apiVersion := "coordination.k8s.io/v1"
		if resource == "multiclusterleases" {
			apiVersion = "multicluster.core.cnrm.cloud.google.com/v1alpha1"
		}
		return map[string]any{
			"metadata": map[string]any{"name": "leader", "namespace": ns, "managedFields": []any{
				map[string]any{"manager": "manager", "operation": "Update", "apiVersion": apiVersion, "time": stamp.Truncate(time.Second).Format(time.RFC3339),
					"fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:spec": map[string]any{"f:holderIdentity": map[string]any{}, "f:renewTime": map[string]any{}}}},
			}},
			"spec": map[string]any{"holderIdentity": holder, "renewTime": renew.Format("2006-01-02T15:04:05.000000Z07:00"), "leaseDurationSeconds": int64(15)},
		}
	}
	now := stored.Add(2 * time.Second)
	var out []*write
	for _, res := range []string{"leases", "multiclusterleases"} {
		for _, ns := range nss {
			for _, u := range users {
				add := func(what, op string, old, obj map[string]any) {
					out = append(out, &write{what: what, op: op, resource: res, namespace: ns, user: u, old: old, obj: obj})
				}
				add("create", "CREATE", nil, lease(res, ns, stored, stored, "a"))
				add("delete", "DELETE", lease(res, ns, stored, stored, "a"), nil)
				add("holder change", "UPDATE", lease(res, ns, stored, stored, "a"), lease(res, ns, now, now, "b"))
				add("renewal", "UPDATE", lease(res, ns, stored, stored, "a"), lease(res, ns, now, now, "a"))
				add("renewal ahead", "UPDATE", lease(res, ns, stored, stored, "a"), lease(res, ns, now.Add(time.Hour), now, "a"))
			}
		}
	}
	return out
}

// exactRendering is the rendering leaseguard used to write whatever its
// size: the reference a broader one is compared with.
func exactRendering(p *policy.Policy, o Options) *Rendered {
	rules := views(p)
	union, unionExact := namespaceUnion(rules)
	g := &generator{o: o, rules: rules, skew: p.ClockSkew, union: union, unionExact: unionExact}
	out := &Rendered{Validating: g.validating(), Mutating: g.mutating()}
	out.Coalescing, out.CoalescingBinding = g.coalescingPolicy()
	// Its conditions test every namespace: the selectors need only list
	// the rules' namespaces, however many.
	sel := exactSelector(Defaults().Namespace, rules)
	for i := range out.Validating.Webhooks {
		out.Validating.Webhooks[i].NamespaceSelector = sel
	}
	if out.Mutating != nil {
		out.Mutating.Webhooks[0].NamespaceSelector = sel
	}
	if out.Coalescing != nil {
		out.Coalescing.Spec.MatchConstraints.NamespaceSelector = sel
	}
	return out
}

func exactSelector(namespace string, rules []policy.RuleView) *metav1.LabelSelector {
	names, _ := namespaceUnion(rules)
	sel := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn,
		Values: append(append([]string(nil), policy.NeverIntercepted...), namespace)}}}
	if names != nil {
		sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: names})
	}
	return sel
}

// A rendering broader than the policy routes at least what the exact one
// does, never less: every write the exact rendering sends to leaseguard
// reaches it, every write it sends to the fail-closed webhook goes there,
// every write it sends to the mutating webhook goes there; and the API
// server coalesces no renewal the exact rendering does not. What moves
// from the fail-open webhook to the fail-closed one is counted, and only
// where a note says so. The budget is lowered to a tenth, so that the
// exact renderings compared with stay within what cel-go can evaluate
// (the parser's node count) while every broader level is reached.
func TestBroaderRenderingsRouteAtLeastThePolicy(t *testing.T) {
	defer func(b int) { budget = b }(budget)
	budget = ExpressionBudget / 10
	apps := []string{"system:serviceaccount:apps:m", "system:serviceaccount:apps-mcl:m", "system:serviceaccount:teams:m", "stranger"}
	for _, c := range []struct {
		name  string
		src   string
		nss   []string
		users []string
		moves bool // plain renewals may move to the fail-closed webhook
	}{
		// The namespaceSelector lists them: the rules' namespace tests are
		// its, exactly.
		{"1,000 namespaces", appsPolicy(1000, false), []string{"apps-00000", "apps-00500", "apps-00999", "team-x", "elsewhere"}, apps, false},
		// A glob: the selector cannot list them; the long lists are left
		// to leaseguard.
		{"1,000 namespaces and a glob", appsPolicy(1000, true), []string{"apps-00000", "apps-00001", "apps-00999", "team-x", "elsewhere"}, apps, true},
		{"40 rules", manyRules(40), []string{"r0-00000", "r0-00002", "r37-00001", "r39-00002", "elsewhere"},
			[]string{"system:serviceaccount:r0:m", "system:serviceaccount:r37:m", "system:serviceaccount:last:m", "stranger"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := parsePolicy(t, c.src)
			e := &evaluator{t: t, progs: map[string]cel.Program{}}
			for _, coalesce := range []Coalescing{CoalesceInAPIServer, CoalesceInWebhook} {
				o := Defaults()
				o.Coalescing = coalesce
				r, err := Render(p, o)
				if err != nil {
					t.Fatal(err)
				}
				exact := exactRendering(p, o)
				moved, reached, coalesced := 0, 0, 0
				for _, s := range writes(c.nss, c.users) {
					want, got := e.route(exact, s), e.route(r, s)
					if got.closed && got.open {
						t.Errorf("--coalesce %s: %s: both validating webhooks take it", coalesce, s)
					}
					if (want.closed || want.open) && !(got.closed || got.open) {
						t.Errorf("--coalesce %s: %s: the policy sends it to leaseguard, the rendering does not", coalesce, s)
					}
					if want.closed && !got.closed {
						t.Errorf("--coalesce %s: %s: the policy sends it to the fail-closed webhook, the rendering to the fail-open one", coalesce, s)
					}
					if want.mutating && !got.mutating {
						t.Errorf("--coalesce %s: %s: the policy sends it to the mutating webhook, the rendering does not", coalesce, s)
					}
					if got.coalesced && !want.coalesced {
						t.Errorf("--coalesce %s: %s: coalesced by the rendering, not by the policy", coalesce, s)
					}
					if want.open && got.closed {
						moved++
					}
					if want.closed || want.open {
						reached++
					}
					if want.coalesced {
						coalesced++
					}
				}
				if reached == 0 || (coalesce == CoalesceInAPIServer && coalesced == 0) {
					t.Fatalf("--coalesce %s: the samples reach no webhook (%d) or coalesce nothing (%d): they prove nothing", coalesce, reached, coalesced)
				}
				said := false
				for _, n := range r.Notes {
					said = said || strings.Contains(n, "fail-closed webhook")
				}
				if moved > 0 && (!c.moves || !said) {
					t.Errorf("--coalesce %s: %d plain renewals moved to the fail-closed webhook (notes: %q)", coalesce, moved, r.Notes)
				}
				t.Logf("--coalesce %s: %d writes reach leaseguard by the policy; %d move from the fail-open to the fail-closed webhook; notes %q", coalesce, reached, moved, r.Notes)
			}
		})
	}
}

// FirstMatch is the policy's first match, whatever the number of rules
// and however they group.
func TestFirstMatchIsTheFirstRule(t *testing.T) {
	e := &evaluator{t: t, progs: map[string]cel.Program{}}
	for _, n := range []int{1, 2, 31, 32, 33, 100, 1025} {
		conds := make([]string, n)
		values := make([]string, n)
		for i := range n {
			conds[i] = fmt.Sprintf("request.namespace == 'n%d'", i%50) // later rules repeat earlier ones' namespaces
			values[i] = fmt.Sprintf("request.name == 'v%d'", i%3)
		}
		expr := celexpr.FirstMatch(conds, values, "false")
		for _, ns := range []int{0, 1, 31, 32, 49, 50} {
			first := -1
			for i := range n {
				if i%50 == ns {
					first = i
					break
				}
			}
			for v := range 3 {
				want := first >= 0 && first%3 == v
				out, _, err := e.program(expr).Eval(map[string]any{"request": map[string]any{"namespace": fmt.Sprintf("n%d", ns), "name": fmt.Sprintf("v%d", v)}})
				if err != nil {
					t.Fatalf("%d rules: %v", n, err)
				}
				if out.Value() != want {
					t.Errorf("%d rules, namespace n%d, name v%d: %v, want %v", n, ns, v, out.Value(), want)
				}
			}
		}
		if err := CheckExpressions([]Expression{{Where: fmt.Sprint(n, " rules"), Text: expr}}); err != nil && n <= 100 {
			t.Errorf("%v", err)
		}
	}
}

// A policy that fits is rendered as it always was: the shipped policies'
// renderings are the exact level's, with no note about limits.
func TestPoliciesThatFitRenderAsBefore(t *testing.T) {
	for _, path := range []string{"../../../config/samples/policy.yaml", "../../../config/manager/policy.yaml", "../../../config/e2e-policy/policy.yaml",
		"../../../test/multicluster/testdata/policy.yaml", "../../../charts/leaseguard/files/policy.yaml"} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		p := parsePolicy(t, string(data))
		for how, o := range renderings() {
			r, err := Render(p, o)
			if err != nil {
				t.Fatal(err)
			}
			o.TimeoutSeconds = 2
			g := &generator{o: o, rules: views(p), skew: p.ClockSkew}
			v, m := g.validating(), g.mutating()
			c, _ := g.coalescingPolicy()
			if !reflect.DeepEqual(v, r.Validating) || !reflect.DeepEqual(m, r.Mutating) || !reflect.DeepEqual(c, r.Coalescing) || len(r.Limits) > 0 {
				t.Errorf("%s, %s: not the exact rendering (limits: %q)", path, how, r.Limits)
			}
		}
	}
}

// A policy that fit before the fail-open route was said as what it
// carries still fits as it did: the route must not grow with the rules'
// selection. A one-rule MultiClusterLease policy with status writers and
// 110 lease names rendered exactly, its renewals policy taking the plain
// renewals; when the route repeated every rule's selection for the status
// writers' writes it no longer did (a review found it: the renewals policy
// took nothing from 85 names on, and from 115 the whole rendering fell to
// a broader level where status writers' status writes lose the fail-open
// route).
func TestTheFailOpenRouteDoesNotRepeatTheSelection(t *testing.T) {
	names := make([]string, 110)
	for i := range names {
		names[i] = fmt.Sprintf("%q", fmt.Sprintf("kcc-leader-%03d", i))
	}
	p := parsePolicy(t, `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
rules:
- name: kcc-mcl
  resources: [multiclusterleases]
  namespaces: [cnrm-system]
  names: [`+strings.Join(names, ", ")+`]
  managers: ["system:serviceaccount:cnrm-system:cnrm-controller-manager-*"]
  designation: auto
  statusWriters: ["system:serviceaccount:multiclusterlease-system:default"]
  enforcement: deny
`)
	r, err := Render(p, Defaults())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Limits) > 0 || len(r.Notes) > 0 {
		t.Errorf("110 names no longer render exactly, the renewals policy taking the plain renewals: %q", r.Notes)
	}
	open := condition(r.Validating.Webhooks[1].MatchConditions, "selected-and-changed")
	if !strings.Contains(open, "request.?subResource.orValue('') == 'status'") {
		t.Errorf("the fail-open route no longer carries the status writers' status writes")
	}
}
