package manifests

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/render/celexpr"
)

// What the API server accepts, and what the rendering allows itself.
//
// A policy leaseguard enforces must be one the API server can route: a
// configuration it refuses leaves the previous one routing (docs/design.md
// §5, "Limits"), so a write the new policy guards could be stored without
// ever reaching leaseguard. Render therefore checks every expression it
// renders against these limits and, where the exact selection does not
// fit, renders a broader one that leaseguard decides in full, saying so in
// Rendered.Notes. The routing is never narrower than the policy.
const (
	// MaxExpressionCodePoints is the longest CEL expression the API server
	// compiles: cel-go's parser default (ExpressionSizeCodePointLimit),
	// which the API server keeps. A longer match condition is refused
	// with "expression code point size exceeds limit".
	MaxExpressionCodePoints = 100_000
	// MaxExpressionNesting is cel-go's parser recursion limit (its
	// default, kept by the API server): "expression recursion limit
	// exceeded: 250".
	MaxExpressionNesting = 250
	// PerCallCostLimit is the runtime cost at which the API server stops
	// one expression's evaluation (an error: a Fail webhook then refuses
	// the write, an Ignore one is skipped); MatchConditionsCostBudget the
	// cost all of one webhook's match conditions may spend on a write.
	// The API server does not refuse a configuration for its estimated
	// cost: these bound evaluation, and leaseguard's tests check its
	// expressions' estimates against them.
	PerCallCostLimit          = celconfig.PerCallLimit
	MatchConditionsCostBudget = celconfig.RuntimeCELCostBudgetMatchConditions

	// ExpressionBudget is the longest expression Render writes: the limit
	// less a tenth, kept so that the fixed parts of the conditions may grow
	// (they do, with each hardening) without tipping a policy that fitted
	// over the limit when leaseguard is upgraded.
	ExpressionBudget = MaxExpressionCodePoints * 9 / 10
	// SelectorValuesBudget bounds the namespace names one namespaceSelector
	// lists (bytes, quotes and separators included). Selector values have no
	// count limit, but each configuration object is stored whole in etcd
	// (1.5 MiB a request by default) and holds up to two selectors and two
	// conditions: past this, the selector excludes only the never
	// intercepted namespaces and the conditions select the rest.
	SelectorValuesBudget = 256 << 10
)

// maxWide bounds the rules levelWide leaves to leaseguard.
const maxWide = 64

// budget is ExpressionBudget; tests lower it to reach the broader
// renderings with policies whose exact rendering they can evaluate.
var budget = ExpressionBudget

// Rendering levels, tried in order until one fits (Render).
type level int

const (
	// levelExact renders as leaseguard always has: each rule's lists in
	// full, the first-rule test written out for every rule.
	levelExact level = iota
	// levelCompact selects exactly the same in fewer code points: lists as
	// `in` tests, the first rule found in one pass (celexpr.FirstMatch),
	// and a namespace test the namespaceSelector already makes dropped.
	levelCompact
	// levelWide is levelCompact with the namespace tests of the rules
	// whose lists are largest (generator.wide) left to leaseguard: the
	// webhooks receive those rules' writes in every namespace the
	// namespaceSelector admits.
	levelWide
	// levelBroad selects nothing in CEL: every write of the guarded
	// resources in the namespaces the namespaceSelector admits goes to the
	// fail-closed webhook, renewals included, and the mutating webhook,
	// and nothing is coalesced in the API server. It always fits.
	levelBroad
)

// Render renders the configuration enforcing p, within the API server's
// limits: each object exactly when it fits, else broader, with notes
// saying where and why. An error says what still does not fit (a
// rendering leaseguard cannot stand by is never returned).
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
	rules := views(p)
	union, unionExact := namespaceUnion(rules)
	out := &Rendered{}
	for _, obj := range []object{objValidating, objMutating, objCoalescing} {
		base := func(lv level, why error) *generator {
			return &generator{o: o, rules: rules, skew: p.ClockSkew, level: lv, why: why, union: union, unionExact: unionExact, object: obj}
		}
		got, err := fit(base, obj)
		if err != nil {
			return nil, err
		}
		switch obj {
		case objValidating:
			out.Validating = got.Validating
			out.Renewals, out.RenewalsBinding = got.Renewals, got.RenewalsBinding
		case objMutating:
			out.Mutating = got.Mutating
		case objCoalescing:
			out.Coalescing, out.CoalescingBinding = got.Coalescing, got.CoalescingBinding
		}
		for _, n := range got.Notes {
			if !slices.Contains(out.Notes, n) {
				out.Notes = append(out.Notes, n)
				if slices.Contains(got.Limits, n) {
					out.Limits = append(out.Limits, n)
				}
			}
		}
	}
	return out, nil
}

// object is one of the objects Render renders, each fitted on its own: a
// coalescing policy too large for its condition costs no routing.
type object int

const (
	objValidating object = iota
	objMutating
	objCoalescing
)

// fit renders obj at the first level at which it fits.
func fit(base func(level, error) *generator, obj object) (*Rendered, error) {
	try := func(g *generator) (*Rendered, error) {
		out := &Rendered{}
		switch obj {
		case objValidating:
			out.Validating = g.validating()
			out.Renewals, out.RenewalsBinding = g.renewalsPolicy()
		case objMutating:
			out.Mutating = g.mutating()
		case objCoalescing:
			out.Coalescing, out.CoalescingBinding = g.coalescingPolicy()
		}
		g.levelNotes()
		out.Notes, out.Limits = g.notes, g.limits
		return out, checkLimits(out)
	}
	if g := base(levelExact, nil); !g.exactCannotFit() {
		if out, err := try(g); err == nil {
			return out, nil
		}
	}
	out, err := try(base(levelCompact, nil))
	if err == nil {
		return out, nil
	}
	// The exact selection does not fit, however written: err says where.
	why := err
	// Widen the rules with the longest namespace tests first, as few as
	// fit: 1, 2, 4, ... of them, then the fewest between the last two.
	order := widenable(base(levelWide, why))
	// A wide rule's renewals are trusted only where no later rule could
	// select them, which writes the later rules' selections once more for
	// each: past a few dozen wide rules nothing is gained over levelBroad
	// but the time to render it.
	order = order[:min(len(order), maxWide)]
	widened := func(k int) *generator {
		g := base(levelWide, why)
		g.wide = make([]bool, len(g.rules))
		for _, i := range order[:k] {
			g.wide[i] = true
		}
		return g
	}
	var best *Rendered
	lo, hi := 0, 0
	for k := 1; len(order) > 0; k *= 2 {
		k = min(k, len(order))
		if out, err := try(widened(k)); err == nil {
			best, hi = out, k
			break
		}
		lo = k
		if k == len(order) {
			break
		}
	}
	for best != nil && hi-lo > 1 {
		mid := (lo + hi) / 2
		if out, err := try(widened(mid)); err == nil {
			best, hi = out, mid
		} else {
			lo = mid
		}
	}
	if best != nil {
		return best, nil
	}
	out, err = try(base(levelBroad, why))
	if err != nil {
		// Not reached: the broad rendering's conditions do not grow with
		// the policy's lists. Said rather than rendered.
		return nil, fmt.Errorf("the policy cannot be routed within the API server's limits: %w", err)
	}
	return out, nil
}

// exactCannotFit reports whether g's object, rendered at levelExact,
// surely exceeds ExpressionBudget: it writes each rule's selection again
// for every later rule that shares a resource with it, in one condition,
// which for many rules is more than is worth rendering to measure.
func (g *generator) exactCannotFit() bool {
	terms := func(i int) bool {
		r := &g.rules[i]
		exactBind := r.Bind == nil || r.Bind.Expressible
		switch g.object {
		case objValidating:
			return !g.o.FailOpen && len(g.rules) > 1
		case objMutating:
			return r.Designation == policy.DesignationAuto || (g.o.Coalescing == CoalesceInWebhook && r.CoalesceInterval > 0 && exactBind)
		default:
			return g.o.Coalescing == CoalesceInAPIServer && r.CoalesceInterval > 0 && exactBind
		}
	}
	size := make([]int, len(g.rules))
	for i := range g.rules {
		size[i] = len(celexpr.Selects(&g.rules[i]))
	}
	total := 0
	for i := range g.rules {
		if !terms(i) {
			continue
		}
		total += size[i]
		for j := 0; j < i; j++ {
			if sharesResource(&g.rules[i], &g.rules[j]) {
				total += size[j]
			}
		}
		if total > budget {
			return true
		}
	}
	return false
}

// limitNote is a note that the policy does not fit the API server's
// limits.
func (g *generator) limitNote(format string, args ...any) {
	n := len(g.notes)
	g.note(format, args...)
	if len(g.notes) > n {
		g.limits = append(g.limits, g.notes[n])
	}
}

// levelNotes says where g's object selects more (or, for coalescing,
// less) than the policy, and why.
func (g *generator) levelNotes() {
	if g.object == objValidating && !g.unionExact && len(g.union) > 0 {
		g.limitNote("the namespaceSelectors list no namespaces: the %d the rules name take %d bytes, more than the %d one selector may list (SelectorValuesBudget): "+
			"the match conditions select them", len(g.union), selectorBytes(g.union), SelectorValuesBudget)
	}
	var wide []string
	renewalsClosed := false
	for i, w := range g.wide {
		if w {
			wide = append(wide, g.rules[i].Name)
			renewalsClosed = renewalsClosed || g.wideRenewals(i)
		}
	}
	if len(wide) > 0 {
		which := "rule " + wide[0]
		if len(wide) > 1 {
			which = fmt.Sprintf("rules %s (%d)", listed(wide), len(wide))
		}
		switch g.object {
		case objValidating:
			closed := ""
			if renewalsClosed {
				closed = "; a renewal a later rule could also select goes to the fail-closed webhook (refused while leaseguard is down)"
			}
			g.limitNote("%s: the namespaces do not fit the API server's match conditions (%v): the validating webhooks receive the writes from every namespace the namespaceSelector admits, "+
				"and leaseguard decides them by the policy%s", which, g.why, closed)
		case objMutating:
			g.limitNote("%s: the namespaces do not fit the API server's match conditions (%v): the mutating webhook receives the writes from every namespace the namespaceSelector admits, "+
				"and leaseguard decides them by the policy", which, g.why)
		case objCoalescing:
			g.limitNote("%s: renewals are not coalesced in the API server: they do not fit the coalescing policy's condition (%v)", which, g.why)
		}
	}
	if g.level != levelBroad {
		return
	}
	switch g.object {
	case objValidating:
		g.limitNote("the policy's selection does not fit the validating webhooks' match conditions (%v): every write of the guarded resources in the namespaces the namespaceSelector admits "+
			"goes to leaseguard's fail-closed webhook, renewals included (refused while leaseguard is down)", g.why)
	case objMutating:
		g.limitNote("the policy's selection does not fit the mutating webhook's match conditions (%v): it receives every create and update of the guarded resources in the namespaces the namespaceSelector admits", g.why)
	case objCoalescing:
		g.limitNote("nothing is coalesced in the API server: the coalescing policy's condition does not fit (%v)", g.why)
	}
}

// wideRenewals reports whether wide rule i's renewals may go to the
// fail-closed webhook: where a later rule it shares a resource with could
// also select them, rightfulRenewers cannot tell whose they are.
func (g *generator) wideRenewals(i int) bool {
	return !g.o.FailOpen && len(g.rules) > 1 && len(g.laterSharing(i)) > 0
}

// listed names at most ten names.
func listed(names []string) string {
	if len(names) <= 10 {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:10], ", ") + ", ..."
}

// namespaceUnion returns the namespaces every rule names, sorted, and
// whether the namespaceSelector lists exactly those: every rule names its
// namespaces without a glob, and they fit SelectorValuesBudget.
func namespaceUnion(rules []policy.RuleView) ([]string, bool) {
	set := map[string]bool{}
	for _, r := range rules {
		if len(r.Namespaces) == 0 {
			return nil, false
		}
		for _, ns := range r.Namespaces {
			if strings.Contains(ns, "*") {
				return nil, false
			}
			set[ns] = true
		}
	}
	names := make([]string, 0, len(set))
	for ns := range set {
		names = append(names, ns)
	}
	sort.Strings(names)
	return names, selectorBytes(names) <= SelectorValuesBudget
}

// SelectorListsNamespaces reports whether NamespaceSelector(_, rules)
// admits exactly the namespaces the rules name (each rule names them, none
// a glob, within SelectorValuesBudget): the rules' own namespace tests may
// then be left to it.
func SelectorListsNamespaces(rules []policy.RuleView) bool {
	_, exact := namespaceUnion(rules)
	return exact
}

// selectorBytes is what a selector's values take in JSON.
func selectorBytes(names []string) int {
	n := 0
	for _, ns := range names {
		n += len(ns) + 3
	}
	return n
}

// widenable lists the rules whose selection can be left broader (for the
// coalescing policy: not coalesced), the longest namespace test first.
func widenable(g *generator) []int {
	var out []int
	size := make([]int, len(g.rules))
	for i := range g.rules {
		r := &g.rules[i]
		if g.object == objCoalescing {
			if r.CoalesceInterval <= 0 {
				continue
			}
		} else if len(r.Namespaces) == 0 {
			continue
		}
		size[i] = len(celexpr.NamespacesOf(r))
		out = append(out, i)
	}
	sort.SliceStable(out, func(a, b int) bool { return size[out[a]] > size[out[b]] })
	return out
}

// sel renders "rule i selects the object" at g's level (past levelExact):
// the namespace test left out where the namespaceSelector makes it (the
// rule names every namespace the selector admits) and, for a wide rule, on
// purpose, which selects more than the rule.
func (g *generator) sel(i int) string {
	if g.sels == nil {
		g.sels = make([]string, len(g.rules))
	}
	if g.sels[i] == "" {
		g.sels[i] = g.renderSel(i)
	}
	return g.sels[i]
}

func (g *generator) renderSel(i int) string {
	r := &g.rules[i]
	if g.level == levelBroad {
		return celexpr.SelectsCompact(&policy.RuleView{Resources: r.Resources}, "true")
	}
	ns := celexpr.NamespacesOf(r)
	if (g.wide != nil && g.wide[i]) || g.namesEveryNamespace(i) {
		ns = "true"
	}
	return celexpr.SelectsCompact(r, ns)
}

// namesEveryNamespace reports whether rule i names every namespace the
// namespaceSelectors admit, which then test its namespaces exactly.
func (g *generator) namesEveryNamespace(i int) bool {
	if !g.unionExact {
		return false
	}
	if g.covers == nil {
		g.covers = map[int]bool{}
	}
	if c, ok := g.covers[i]; ok {
		return c
	}
	distinct := map[string]bool{}
	for _, ns := range g.rules[i].Namespaces {
		distinct[ns] = true
	}
	g.covers[i] = len(distinct) == len(g.union)
	return g.covers[i]
}

func (g *generator) isWide(i int) bool {
	return g.level == levelBroad || (g.wide != nil && g.wide[i])
}

// laterSharing lists the rules after i that share a resource with it:
// those whose writes rule i's broader selection may take for its own.
func (g *generator) laterSharing(i int) []int {
	var out []int
	for j := i + 1; j < len(g.rules); j++ {
		if sharesResource(&g.rules[i], &g.rules[j]) {
			out = append(out, j)
		}
	}
	return out
}

func sharesResource(a, b *policy.RuleView) bool {
	for _, x := range a.Resources {
		if contains(b.Resources, x) {
			return true
		}
	}
	return false
}

// firstRuleOver renders "the first rule to select the object has its
// value true" so that it holds at least wherever it holds by the policy
// (for routing that leaseguard decides in full: more is safe, less is
// not). The exact rules are searched in order, the policy's first match
// among them; a wide rule, whose selection CEL does not know, adds its own
// value wherever its broader selection holds.
func (g *generator) firstRuleOver(values []string) string {
	var conds, exact []string
	var wide []string
	for i := range g.rules {
		if g.isWide(i) {
			wide = append(wide, celexpr.And(g.sel(i), values[i]))
			continue
		}
		conds = append(conds, g.sel(i))
		exact = append(exact, values[i])
	}
	// Where no rule selects, the value does not matter: routing a write
	// the policy does not select is immaterial (leaseguard admits it, as
	// the API server does without it).
	return orUnique(append([]string{celexpr.FirstMatch(conds, exact, "")}, wide...))
}

// firstRuleUnder renders "the first rule to select the object has its
// value true" so that it holds only where it holds by the policy (for
// what must never be wider: the rightful renewer the fail-open webhook
// trusts, the renewals the API server coalesces without leaseguard). The
// first rule whose selection (broader for a wide rule) holds decides: a
// wide rule's value counts only where no later rule it shares a resource
// with selects (wideValue), or not at all. otherwise is the value where
// no rule selects ("": immaterial).
func (g *generator) firstRuleUnder(values []string, wideValue bool, otherwise string) string {
	conds := make([]string, len(g.rules))
	vals := make([]string, len(g.rules))
	for i := range g.rules {
		conds[i], vals[i] = g.sel(i), values[i]
		if g.isWide(i) {
			if !wideValue {
				vals[i] = "false"
				continue
			}
			var later []string
			for _, j := range g.laterSharing(i) {
				later = append(later, g.sel(j))
			}
			vals[i] = celexpr.And(values[i], celexpr.Not(celexpr.Or(later...)))
		}
	}
	return celexpr.FirstMatch(conds, vals, otherwise)
}

// earlyRenewalAlone is earlyRenewal(i) without its first-rule test (the
// caller searches the rules once): rendered for rule i alone, selecting
// every object of its resources.
func (g *generator) earlyRenewalAlone(i int) (string, bool) {
	r := g.rules[i]
	r.Namespaces, r.Names = nil, nil
	alone := &generator{o: g.o, rules: []policy.RuleView{r}, skew: g.skew}
	c, ok := alone.earlyRenewal(0)
	for _, n := range alone.notes {
		g.note("%s", n)
	}
	return c, ok
}

// checkLimits returns what in a rendering the API server would refuse, or
// the rendering allows itself no more of: the first expression over
// ExpressionBudget or that the API server's parser refuses, by object,
// webhook and condition.
func checkLimits(r *Rendered) error {
	var exprs []Expression
	add := func(where string, mcs []admissionregistrationv1.MatchCondition) {
		for _, c := range mcs {
			exprs = append(exprs, Expression{Where: where + ", condition " + c.Name, Text: c.Expression})
		}
	}
	if r.Validating != nil {
		for _, w := range r.Validating.Webhooks {
			add("webhook "+w.Name, w.MatchConditions)
		}
	}
	if r.Mutating != nil {
		for _, w := range r.Mutating.Webhooks {
			add("webhook "+w.Name, w.MatchConditions)
		}
	}
	if r.Coalescing != nil {
		add("mutatingadmissionpolicy "+r.Coalescing.Name, r.Coalescing.Spec.MatchConditions)
	}
	if r.Renewals != nil {
		add("validatingadmissionpolicy "+r.Renewals.Name, r.Renewals.Spec.MatchConditions)
		for i, v := range r.Renewals.Spec.Validations {
			exprs = append(exprs, Expression{Where: "validatingadmissionpolicy " + r.Renewals.Name + ", validation " + strconv.Itoa(i), Text: v.Expression})
			if v.MessageExpression != "" {
				exprs = append(exprs, Expression{Where: "validatingadmissionpolicy " + r.Renewals.Name + ", message of validation " + strconv.Itoa(i), Text: v.MessageExpression})
			}
		}
	}
	return CheckExpressions(exprs)
}

// Expression is one rendered CEL expression and where it stands.
type Expression struct{ Where, Text string }

// CheckExpressions returns an error for the first expression over
// ExpressionBudget code points or that the API server's CEL parser
// refuses (its size and nesting limits), naming it.
func CheckExpressions(exprs []Expression) error {
	for _, e := range exprs {
		if n := utf8.RuneCountInString(e.Text); n > budget {
			return fmt.Errorf("%s: %d code points, over the %d leaseguard allows itself (the API server refuses more than %d)", e.Where, n, budget, MaxExpressionCodePoints)
		}
	}
	env, err := parserEnv()
	if err != nil {
		return err
	}
	for _, e := range exprs {
		if _, iss := env.Parse(e.Text); iss.Err() != nil {
			return fmt.Errorf("%s: the API server's CEL parser refuses it: %s", e.Where, strings.Join(strings.Fields(iss.Err().Error()), " "))
		}
	}
	return nil
}

var parserEnv = sync.OnceValues(func() (*cel.Env, error) {
	env, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Env(environment.NewExpressions)
	if err != nil {
		return nil, fmt.Errorf("the API server's CEL environment: %w", err)
	}
	return env, nil
})

// orUnique is celexpr.Or of the distinct parts: broader selections are
// often the same (at levelBroad, one per resource).
func orUnique(parts []string) string {
	var kept []string
	for _, p := range parts {
		if !slices.Contains(kept, p) {
			kept = append(kept, p)
		}
	}
	return celexpr.Or(kept...)
}
