package celexpr

import (
	"reflect"
	"testing"
)

// conjuncts splits only what And rendered, at its top level: never inside
// parentheses, lists or string literals, never an Or, a ternary or a
// negation.
func TestConjuncts(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{And("a == 1", "b.startsWith(\"x && y\")", Or("c", "d")), []string{"a == 1", "b.startsWith(\"x && y\")", "(c || d)"}},
		{Or("a", "b"), []string{"(a || b)"}},
		{"(a) || (b)", []string{"(a) || (b)"}},
		{Not(And("a", "b")), []string{"!(a && b)"}},
		{Ternary("a", "b", "c"), []string{"(a ? b : c)"}},
		{And("request.?namespace.orValue('') in [\"a)\", 'b&& ']", "x[?\"k\"].hasValue()"), []string{"request.?namespace.orValue('') in [\"a)\", 'b&& ']", "x[?\"k\"].hasValue()"}},
		{"(\"unterminated && x)", []string{"(\"unterminated && x)"}},
		{"true", []string{"true"}},
	} {
		if got := conjuncts(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("conjuncts(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// FirstMatch takes the terms every value shares out, once, and leaves a
// value false as it is.
func TestFirstMatchSharesCommonTerms(t *testing.T) {
	got := FirstMatch([]string{"c0", "c1", "c2"}, []string{And("m0", "shared"), "false", And("shared", "m2")}, "false")
	want := "(shared && (c0 ? m0 : (c1 ? false : (c2 ? m2 : false))))"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// Where none selects does not matter: the last value stands for it,
	// and neighbours with the same value share it.
	got = FirstMatch([]string{"c0", "c1", "c2", "c3"}, []string{"v", "v", "w", "x"}, "")
	want = "((c0 || c1) ? v : (c2 ? w : x))"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
