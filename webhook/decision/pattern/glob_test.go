package pattern

import (
	"strings"
	"testing"
)

func TestValidateGlob(t *testing.T) {
	for _, c := range []struct {
		pattern string
		errSub  string // "" = valid
	}{
		{"*", ""},
		{"a", ""},
		{"system:serviceaccount:cnrm-system:cnrm-controller-manager-*", ""},
		{"a/b:c*d*", ""},
		{"**", ""},
		{"", "empty pattern"},
		{"foo?", `character '?' is not supported`},
		{"[a]", `character '[' is not supported`},
		{"a]", `character ']' is not supported`},
		{"{ns}", `character '{' is not supported`},
		{"ns}", `character '}' is not supported`},
		{`a\*`, `character '\\' is not supported`},
		{"*?[", `character '?' is not supported`}, // the first reserved character is named
	} {
		err := ValidateGlob(c.pattern)
		switch {
		case c.errSub == "" && err != nil:
			t.Errorf("ValidateGlob(%q) = %v, want nil", c.pattern, err)
		case c.errSub != "" && err == nil:
			t.Errorf("ValidateGlob(%q) = nil, want an error containing %q", c.pattern, c.errSub)
		case c.errSub != "" && !strings.Contains(err.Error(), c.errSub):
			t.Errorf("ValidateGlob(%q) = %v, want it to contain %q", c.pattern, err, c.errSub)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	const sa = "system:serviceaccount:cnrm-system:cnrm-controller-manager-"
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		// literals
		{"a", "a", true},
		{"a", "", false},
		{"a", "b", false},
		{"a", "aa", false},
		{"abc", "ab", false},
		{"ab", "abc", false},
		{"kube-system", "kube-system", true},
		{"kube-system", "Kube-system", false},
		// a lone star
		{"*", "", true},
		{"*", "x", true},
		{"*", "system:serviceaccount:ns/with/slash", true},
		{"**", "", true},
		{"**", "abc", true},
		// star at the end, start, middle
		{"a*", "a", true},
		{"a*", "abc", true},
		{"a*", "", false},
		{"a*", "ba", false},
		{"*a", "a", true},
		{"*a", "bca", true},
		{"*a", "ab", false},
		{"*a", "", false},
		{"a*c", "ac", true},
		{"a*c", "abbc", true},
		{"a*c", "acb", false},
		{"a*c", "abcbc", true},
		{"a*c", "abcbd", false},
		{"a**b", "ab", true},
		{"a**b", "axxb", true},
		// several stars and backtracking
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "abc", true},
		{"a*b*c", "abbc", true},
		{"a*b*c", "aXbYbZ", false},
		{"a*b*c", "acb", false},
		{"a*b*c", "aXcYb", false},
		{"*a*", "xxaxx", true},
		{"*a*", "xxx", false},
		{"ab*ba", "aba", false},
		{"ab*ba", "abba", true},
		{"ab*ba", "ababa", true},
		{"*ab", "aab", true},
		{"*aab", "aaab", true},
		{"*aab", "aaba", false},
		{"*a*a*a*a*b", strings.Repeat("a", 40), false},
		{"*a*a*a*a*b", strings.Repeat("a", 40) + "b", true},
		{"a*a", "a", false},
		{"a*a", "aa", true},
		// ':' and '/' are ordinary characters, and '*' crosses them
		{sa + "*", sa + "team-a", true},
		{sa + "*", sa, true},
		{sa + "*", "system:serviceaccount:other:cnrm-controller-manager-a", false},
		{"system:*:cnrm-system:*", "system:serviceaccount:cnrm-system:x", true},
		{"system:*:cnrm-system:*", "system:serviceaccount:other:x", false},
		{"system:serviceaccount:*", "system:serviceaccount:a:b:c", true},
		{"*:*", "nocolon", false},
		{"*:*", ":", true},
		{"a/*/c", "a/b/x/c", true},
		{"a/*/c", "a/c", false},
		{"a/*/c", "a//c", true},
		// non-ASCII
		{"é*", "éa", true},
		{"*é", "aé", true},
		{"é", "e", false},
	} {
		if got := Glob(c.pattern).Match(c.s); got != c.want {
			t.Errorf("Glob(%q).Match(%q) = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}

func TestGlobs(t *testing.T) {
	gs := Globs{"user:a", "team-*", "ops"}
	for _, c := range []struct {
		s    string
		want bool
	}{{"user:a", true}, {"team-x", true}, {"ops", true}, {"user:b", false}, {"", false}} {
		if got := gs.Match(c.s); got != c.want {
			t.Errorf("Globs.Match(%q) = %v, want %v", c.s, got, c.want)
		}
		if got := gs.MatchesOrEmpty(c.s); got != c.want {
			t.Errorf("Globs.MatchesOrEmpty(%q) = %v, want %v", c.s, got, c.want)
		}
	}
	var empty Globs
	if empty.Match("x") {
		t.Errorf("empty Globs match as a principal list")
	}
	if !empty.MatchesOrEmpty("x") || !empty.MatchesOrEmpty("") {
		t.Errorf("empty Globs do not select everything as a selector")
	}

	for _, c := range []struct {
		username string
		groups   []string
		want     bool
	}{
		{"user:a", nil, true},
		{"user:z", []string{"system:authenticated", "ops"}, true},
		{"user:z", []string{"team-1"}, true},
		{"user:z", []string{"system:authenticated"}, false},
		{"user:z", nil, false},
		{"", nil, false},
	} {
		if got := gs.MatchAny(c.username, c.groups); got != c.want {
			t.Errorf("Globs.MatchAny(%q, %q) = %v, want %v", c.username, c.groups, got, c.want)
		}
	}
	if got := gs.String(); got != "user:a, team-*, ops" {
		t.Errorf("Globs.String() = %q", got)
	}
	if got := empty.String(); got != "" {
		t.Errorf("empty Globs.String() = %q, want empty", got)
	}
}

func TestGlobMatchDoesNotAllocate(t *testing.T) {
	gs := Globs{"system:*:cnrm-system:*", "a*b*c"}
	username, groups := "system:serviceaccount:other:x", []string{"g1", "aXbYbZc"}
	var ok bool
	allocs := testing.AllocsPerRun(100, func() { ok = gs.MatchAny(username, groups) })
	if !ok {
		t.Fatalf("MatchAny = false, want true")
	}
	if allocs != 0 {
		t.Errorf("Glob matching allocates %v times per run, want 0", allocs)
	}
}

// Covers is what the policy compiler refuses a shadowed rule by: a "yes"
// must never be wrong (a rule refused that still selects something), a
// "no" may be.
func TestGlobsCovers(t *testing.T) {
	for _, c := range []struct {
		a, b Globs
		want bool
	}{
		{nil, Globs{"team-a"}, true},
		{Globs{"*"}, nil, true},
		{Globs{"team-a"}, nil, false},
		{Globs{"team-a"}, Globs{"team-a"}, true},
		{Globs{"team-*"}, Globs{"team-a", "team-b*"}, true},
		{Globs{"team-*"}, Globs{"team-a", "other"}, false},
		{Globs{"team-a", "team-b"}, Globs{"team-b"}, true},
		{Globs{"*-a"}, Globs{"team-a"}, true},
		// Conservative: *-a covers x*-a, but only a trailing '*' is
		// compared as a prefix.
		{Globs{"*-a"}, Globs{"x*-a"}, false},
		{Globs{"team-*"}, Globs{"team*"}, false},
	} {
		if got := c.a.Covers(c.b); got != c.want {
			t.Errorf("%q.Covers(%q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
