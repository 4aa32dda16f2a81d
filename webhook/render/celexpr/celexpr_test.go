package celexpr

import "testing"

func TestGlobsBecomeCEL(t *testing.T) {
	for glob, want := range map[string]string{
		"kube-system":    `x == "kube-system"`,
		"*":              "true",
		"team-*":         `x.startsWith("team-")`,
		"*-leader":       `x.endsWith("-leader")`,
		"a*b*c.d":        `x.matches("^a(?s:.*)b(?s:.*)c\\.d$")`,
		`quote"back\sl`:  `x == "quote\"back\\sl"`,
		"ümlaut-*":       `x.startsWith("ümlaut-")`,
		"new\nline-*":    `x.startsWith("new\nline-")`,
		"(paren)*[set]":  `x.matches("^\\(paren\\)(?s:.*)\\[set\\]$")`,
		"dot.star.*.end": `x.matches("^dot\\.star\\.(?s:.*)\\.end$")`,
	} {
		if got := GlobMatch("x", glob); got != want {
			t.Errorf("GlobMatch(%q) = %s, want %s", glob, got, want)
		}
	}
}
