package policy

import (
	"fmt"
	"strings"
)

// glob is a pattern in which '*' matches any run of characters (including
// none and including ':' and '/'); every other character matches itself.
// Matching never allocates.
type glob string

// validateGlob rejects characters reserved for future syntax, so that a
// pattern written for another glob dialect fails loudly instead of matching
// nothing.
func validateGlob(pattern string) error {
	if pattern == "" {
		return fmt.Errorf("empty pattern")
	}
	if i := strings.IndexAny(pattern, "?[]{}\\"); i >= 0 {
		return fmt.Errorf("character %q is not supported in patterns (only '*' is special)", pattern[i])
	}
	return nil
}

func (g glob) match(s string) bool {
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

// globs is a list of patterns; an empty list matches anything when used as
// a selector (see matchesOrEmpty) and nothing when used as a principal list.
type globs []glob

func (gs globs) match(s string) bool {
	for _, g := range gs {
		if g.match(s) {
			return true
		}
	}
	return false
}

func (gs globs) matchesOrEmpty(s string) bool { return len(gs) == 0 || gs.match(s) }

// selectsAny reports whether the list selects every string: it is empty or
// holds "*".
func (gs globs) selectsAny() bool {
	for _, g := range gs {
		if g == "*" {
			return true
		}
	}
	return len(gs) == 0
}

// matchCaller reports whether any pattern matches the caller's username or one
// of its groups: operators and status writers may be named either way.
func (gs globs) matchCaller(c *Caller) bool {
	for _, g := range gs {
		if g.match(c.Username) {
			return true
		}
		for _, group := range c.Groups {
			if g.match(group) {
				return true
			}
		}
	}
	return false
}

func (gs globs) String() string {
	var b strings.Builder
	for i, g := range gs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(g))
	}
	return b.String()
}
