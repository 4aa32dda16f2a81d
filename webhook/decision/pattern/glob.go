// Package pattern holds the two pattern languages of a leaseguard policy:
// globs, which select namespaces, names and callers, and bind templates,
// whose named captures tie a manager's username to the one lease (and
// namespace) it may write. Matching never allocates; the decision core
// (webhook/decision/policy) compiles a rule's patterns here and the
// renderers read them back through the rule's view.
package pattern

import (
	"fmt"
	"strings"
)

// Glob is a pattern in which '*' matches any run of characters (including
// none and including ':' and '/'); every other character matches itself.
// Matching never allocates.
type Glob string

// ValidateGlob rejects characters reserved for future syntax, so that a
// pattern written for another glob dialect fails loudly instead of matching
// nothing.
func ValidateGlob(pattern string) error {
	if pattern == "" {
		return fmt.Errorf("empty pattern")
	}
	if i := strings.IndexAny(pattern, "?[]{}\\"); i >= 0 {
		return fmt.Errorf("character %q is not supported in patterns (only '*' is special)", pattern[i])
	}
	return nil
}

func (g Glob) Match(s string) bool {
	p := string(g)
	// Iterative matching with one backtrack point: the last '*' seen.
	var px, sx int
	star, next := -1, 0
	for px < len(p) || sx < len(s) {
		if px < len(p) {
			if p[px] == '*' {
				star, next = px, sx+1
				px++
				continue
			}
			if sx < len(s) && p[px] == s[sx] {
				px++
				sx++
				continue
			}
		}
		if star >= 0 && next <= len(s) {
			px, sx = star+1, next
			next++
			continue
		}
		return false
	}
	return true
}

// Globs is a list of patterns; an empty list matches anything when used as
// a selector (see MatchesOrEmpty) and nothing when used as a principal list.
type Globs []Glob

func (gs Globs) Match(s string) bool {
	for _, g := range gs {
		if g.Match(s) {
			return true
		}
	}
	return false
}

// MatchesOrEmpty is Match for a selector: an empty list selects anything.
func (gs Globs) MatchesOrEmpty(s string) bool { return len(gs) == 0 || gs.Match(s) }

// SelectsAny reports whether the list selects every string: it is empty or
// holds "*".
func (gs Globs) SelectsAny() bool {
	for _, g := range gs {
		if g == "*" {
			return true
		}
	}
	return len(gs) == 0
}

// MatchAny reports whether any pattern matches the username or one of the
// groups: operators and status writers may be named either way.
func (gs Globs) MatchAny(username string, groups []string) bool {
	for _, g := range gs {
		if g.Match(username) {
			return true
		}
		for _, group := range groups {
			if g.Match(group) {
				return true
			}
		}
	}
	return false
}

func (gs Globs) String() string {
	var b strings.Builder
	for i, g := range gs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(g))
	}
	return b.String()
}

// Strings returns the patterns as written.
func (gs Globs) Strings() []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = string(g)
	}
	return out
}

// Covers reports whether selector a selects everything b selects (an empty
// selector selects everything), judged conservatively (a "no" may be
// wrong, a "yes" never is): a is empty or has "*", or each pattern of b is
// covered by one of a. The policy compiler refuses a rule that an earlier
// one shadows by it.
func (a Globs) Covers(b Globs) bool {
	if len(a) == 0 {
		return true
	}
	for _, g := range a {
		if g == "*" {
			return true
		}
	}
	if len(b) == 0 {
		return false
	}
	for _, pb := range b {
		found := false
		for _, pa := range a {
			if pa.Covers(pb) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Covers reports whether every string pb matches is matched by pa: equal
// patterns, a literal pb that pa matches, or pa a prefix followed by one
// trailing '*' and pb starting with that prefix.
func (pa Glob) Covers(pb Glob) bool {
	switch {
	case pa == pb:
		return true
	case !strings.Contains(string(pb), "*"):
		return pa.Match(string(pb))
	}
	prefix, ok := strings.CutSuffix(string(pa), "*")
	return ok && !strings.Contains(prefix, "*") && strings.HasPrefix(string(pb), prefix)
}
