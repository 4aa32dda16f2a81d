package celexpr

import (
	"slices"
	"strings"

	"github.com/leaseguard/leaseguard/webhook/decision/policy"
)

// Compact renderings of a rule's selection, for policies whose lists make
// Selects too long for the API server (webhook/render/manifests, limits.go): the
// same selection in fewer code points.

// AnyOf renders "x matches one of gs" as AnyGlob does, with the literal
// entries as one list membership test (x in [...]), which costs each a
// quoted name and a comma instead of a comparison; an empty list matches
// nothing.
func AnyOf(x string, gs []string) string {
	var literals []string
	var parts []string
	for _, g := range gs {
		if strings.Contains(g, "*") {
			parts = append(parts, GlobMatch(x, g))
		} else {
			literals = append(literals, Quote(g))
		}
	}
	switch len(literals) {
	case 0:
	case 1:
		parts = append([]string{x + " == " + literals[0]}, parts...)
	default:
		parts = append([]string{x + " in [" + strings.Join(literals, ", ") + "]"}, parts...)
	}
	return Or(parts...)
}

// NamespaceOf is the namespace of the request, as Selects reads it.
const NamespaceOf = "request.?namespace.orValue('')"

// SelectsCompact renders "the rule selects the request's object" as
// Selects does, with its lists rendered by AnyOf and its namespace test
// given: namespaces is what to test the namespace with ("true" when the
// test is left to the namespaceSelector, or dropped on purpose to select
// more).
func SelectsCompact(r *policy.RuleView, namespaces string) string {
	resources := make([]string, len(r.Resources))
	for i, res := range r.Resources {
		resources[i] = "request.resource.resource == " + Quote(string(res))
	}
	sel := []string{Or(resources...), namespaces}
	if len(r.Names) > 0 {
		sel = append(sel, AnyOf(ObjectName, r.Names))
	}
	return And(sel...)
}

// NamespacesOf renders rule r's namespace test compactly ("true" when it
// names none: every namespace).
func NamespacesOf(r *policy.RuleView) string {
	if len(r.Namespaces) == 0 {
		return "true"
	}
	return AnyOf(NamespaceOf, r.Namespaces)
}

// FirstMatch renders "the first of the conditions that holds has its
// value true": conds[i] ? values[i] : the rest, the policy's first match
// in one pass, and otherwise when none holds ("" when that does not
// matter: the last value is then taken for it). Each condition appears
// once or twice, where Or(And(SelectsFirst(i), value i)...) writes rule
// i's selection again for every later rule: linear in the rules, not
// quadratic; neighbours with the same value share it. Conditions are
// nested in groups of at most firstMatchGroup, each group behind the Or
// of its conditions, so that the nesting stays far below the parser's
// recursion limit (250) for any number of rules.
//
// Terms every value has in common (as And renders them; a value false
// aside) are taken out and tested once: the rules of a policy mostly
// differ in their managers, not in what a write must be.
func FirstMatch(conds, values []string, otherwise string) string {
	if common := commonConjuncts(values); len(common) > 0 && (otherwise == "" || otherwise == "false") {
		rest := make([]string, len(values))
		for i, v := range values {
			rest[i] = v
			if v != "false" {
				rest[i] = And(without(conjuncts(v), common)...)
			}
		}
		return And(append(common, firstMatchOf(conds, rest, otherwise))...)
	}
	return firstMatchOf(conds, values, otherwise)
}

func firstMatchOf(conds, values []string, otherwise string) string {
	n := len(values)
	if otherwise == "" {
		if n == 0 {
			return "false"
		}
		n--
		otherwise = values[n]
	}
	for n > 0 && values[n-1] == otherwise {
		n--
	}
	// Neighbours with the same value: one condition, the Or of theirs.
	var cs, vs []string
	for i := 0; i < n; {
		j := i + 1
		for j < n && values[j] == values[i] {
			j++
		}
		cs, vs = append(cs, Or(conds[i:j]...)), append(vs, values[i])
		i = j
	}
	return firstMatch(cs, vs, otherwise)
}

func firstMatch(conds, values []string, otherwise string) string {
	n := len(values)
	if n <= firstMatchGroup {
		out := otherwise
		for i := n - 1; i >= 0; i-- {
			switch {
			case conds[i] == "true":
				out = values[i]
			case conds[i] == "false", values[i] == out:
			default:
				out = Ternary(conds[i], values[i], out)
			}
		}
		return out
	}
	size := (n + firstMatchGroup - 1) / firstMatchGroup
	var groupConds, groupValues []string
	for lo := 0; lo < n; lo += size {
		hi := min(lo+size, n)
		groupConds = append(groupConds, Or(conds[lo:hi]...))
		// Within a group one of its conditions holds: its last value
		// stands for the rest.
		groupValues = append(groupValues, firstMatch(conds[lo:hi-1], values[lo:hi-1], values[hi-1]))
	}
	return firstMatch(groupConds, groupValues, otherwise)
}

// firstMatchGroup bounds the conditions FirstMatch nests directly: a
// ternary costs the parser two levels of recursion.
const firstMatchGroup = 32

// conjuncts splits what And rendered back into its terms ("(a && b)":
// a, b); anything else is one term.
func conjuncts(p string) []string {
	if len(p) < 2 || p[0] != '(' || p[len(p)-1] != ')' {
		return []string{p}
	}
	inner := p[1 : len(p)-1]
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(inner); i++ {
		switch c := inner[i]; c {
		case '"', '\'':
			j := i + 1
			for j < len(inner) && inner[j] != c {
				if inner[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(inner) {
				return []string{p}
			}
			i = j
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
			if depth < 0 {
				// "(a) || (b)": the parentheses are not one pair.
				return []string{p}
			}
		case '&', '|', '?':
			if depth != 0 || i == 0 || inner[i-1] != ' ' {
				continue
			}
			switch {
			case strings.HasPrefix(inner[i:], "&& "):
				out = append(out, inner[start:i-1])
				start = i + 3
				i += 2
			case strings.HasPrefix(inner[i:], "|| "), strings.HasPrefix(inner[i:], "? "):
				// Not a conjunction at the top.
				return []string{p}
			}
		}
	}
	if depth != 0 {
		return []string{p}
	}
	return append(out, inner[start:])
}

// commonConjuncts returns the terms every value but false has, in the
// first one's order; none for fewer than two such values.
func commonConjuncts(values []string) []string {
	var common []string
	seen := 0
	for _, v := range values {
		if v == "false" {
			continue
		}
		terms := conjuncts(v)
		if seen == 0 {
			common = terms
		} else {
			var kept []string
			for _, c := range common {
				if slices.Contains(terms, c) {
					kept = append(kept, c)
				}
			}
			common = kept
		}
		seen++
		if len(common) == 0 {
			return nil
		}
	}
	if seen < 2 {
		return nil
	}
	return common
}

func without(terms, drop []string) []string {
	var out []string
	for _, t := range terms {
		if !slices.Contains(drop, t) {
			out = append(out, t)
		}
	}
	return out
}
