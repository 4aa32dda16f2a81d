package pattern

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseTemplate(t *testing.T) {
	for _, c := range []struct {
		text   string
		lits   []string
		caps   []string
		errSub string
	}{
		{text: "system:serviceaccount:cnrm-system:cnrm-controller-manager-{ns}",
			lits: []string{"system:serviceaccount:cnrm-system:cnrm-controller-manager-", ""}, caps: []string{"ns"}},
		{text: "kcc-leader-{ns}", lits: []string{"kcc-leader-", ""}, caps: []string{"ns"}},
		{text: "{ns}", lits: []string{"", ""}, caps: []string{"ns"}},
		{text: "system:serviceaccount:{ns}:{sa}", lits: []string{"system:serviceaccount:", ":", ""}, caps: []string{"ns", "sa"}},
		{text: "{sa}.{ns}-lease", lits: []string{"", ".", "-lease"}, caps: []string{"sa", "ns"}},
		{text: "plain", lits: []string{"plain"}, caps: nil},
		{text: "u:{a}-{b}-{c}-{d}", lits: []string{"u:", "-", "-", "-", ""}, caps: []string{"a", "b", "c", "d"}},
		{text: "u:{ns", errSub: "unmatched '{'"},
		{text: "u:ns}", errSub: "unmatched '}'"},
		{text: "u:}{ns}", errSub: "unmatched '}'"},
		{text: "u:{}", errSub: "must be a plain name"},
		{text: "u:{a{b}", errSub: "must be a plain name"},
		{text: "u:{a*}", errSub: "must be a plain name"},
		{text: "u:{a}{b}", errSub: "captures must be separated by literal text"},
		{text: "u:{a}-{a}", errSub: "capture {a} appears twice"},
		{text: "u:{a}-{b}-{c}-{d}-{e}", errSub: "at most 4 captures"},
		{text: "u:*-{a}", errSub: "'*' is not allowed"},
	} {
		tp, err := ParseTemplate(c.text)
		if c.errSub != "" {
			if err == nil || !strings.Contains(err.Error(), c.errSub) {
				t.Errorf("ParseTemplate(%q) error = %v, want one containing %q", c.text, err, c.errSub)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseTemplate(%q) = %v", c.text, err)
			continue
		}
		if tp.text != c.text || !reflect.DeepEqual(tp.lits, c.lits) || !reflect.DeepEqual(tp.caps, c.caps) {
			t.Errorf("ParseTemplate(%q) = text %q lits %q caps %q, want lits %q caps %q", c.text, tp.text, tp.lits, tp.caps, c.lits, c.caps)
		}
	}
}

func TestTemplateMatch(t *testing.T) {
	const kcc = "system:serviceaccount:cnrm-system:cnrm-controller-manager-{ns}"
	const kccUser = "system:serviceaccount:cnrm-system:cnrm-controller-manager-"
	for _, c := range []struct {
		tmpl, s string
		want    []string // nil: no match
	}{
		{kcc, kccUser + "team-a", []string{"team-a"}},
		{kcc, kccUser + "a", []string{"a"}},
		{kcc, kccUser + "a.b-c", []string{"a.b-c"}},
		{kcc, kccUser, nil},         // empty capture
		{kcc, kccUser + "a:b", nil}, // ':' in the capture
		{kcc, kccUser + ":", nil},   // only ':'
		{kcc, kccUser[:len(kccUser)-1], nil},
		{kcc, "system:serviceaccount:other:cnrm-controller-manager-a", nil},
		{kcc, "x" + kccUser + "a", nil},
		{kcc, "", nil},
		{"system:serviceaccount:{ns}:{sa}", "system:serviceaccount:team:ctrl", []string{"team", "ctrl"}},
		{"system:serviceaccount:{ns}:{sa}", "system:serviceaccount::ctrl", nil},
		{"system:serviceaccount:{ns}:{sa}", "system:serviceaccount:team:", nil},
		{"system:serviceaccount:{ns}:{sa}", "system:serviceaccount:team:a:b", nil},
		{"system:serviceaccount:{ns}:{sa}", "system:serviceaccount:team", nil},
		{"u-{a}.{b}-x", "u-p.q-x", []string{"p", "q"}},
		{"u-{a}.{b}-x", "u-p.q.r-x", []string{"p", "q.r"}}, // the first capture is the shortest
		{"u-{a}.{b}-x", "u-p.q-x-x", []string{"p", "q-x"}},
		{"u-{a}.{b}-x", "u-p.q", nil},
		{"u-{a}.{b}-x", "u-.q-x", nil},
		{"u-{a}.{b}-x", "u-p.-x", nil},
		{"u-{a}.{b}-x", "u-p:1.q-x", nil},
		{"{a}", "anything-without-colon", []string{"anything-without-colon"}},
		{"{a}", "has:colon", nil},
		{"{a}", "", nil},
		{"{a}-end", "x-end", []string{"x"}},
		{"{a}-end", "-end", nil},
		{"{a}-end", "x-end-end", []string{"x-end"}},
		{"u:{a}-{b}-{c}-{d}", "u:1-2-3-4", []string{"1", "2", "3", "4"}},
		{"u:{a}-{b}-{c}-{d}", "u:1-2-3-4-5", []string{"1", "2", "3", "4-5"}},
		{"u:{a}-{b}-{c}-{d}", "u:1-2-3", nil},
		{"plain", "plain", []string{}},
		{"plain", "plainer", nil},
		{"plain", "plai", nil},
	} {
		tp, err := ParseTemplate(c.tmpl)
		if err != nil {
			t.Fatalf("ParseTemplate(%q): %v", c.tmpl, err)
		}
		vals, ok := tp.Match(c.s)
		if c.want == nil {
			if ok {
				t.Errorf("template %q matches %q with %q, want no match", c.tmpl, c.s, vals)
			}
			continue
		}
		if !ok {
			t.Errorf("template %q does not match %q, want captures %q", c.tmpl, c.s, c.want)
			continue
		}
		var want Captures
		copy(want[:], c.want)
		if vals != want {
			t.Errorf("template %q on %q captured %q, want %q", c.tmpl, c.s, vals, want)
		}
	}
}

// TestTemplateMatchRepeatedSeparator: docs/policy.md says "a capture matches a
// non-empty run without ':'", and bind.go "the shortest one that lets the next
// literal follow". In "u--x-y" against "u-{a}-{b}", the shortest non-empty
// run for {a} followed by "-" is "-x", leaving "y" for {b}; the username is a
// valid instance of the template and must match.
func TestTemplateMatchRepeatedSeparator(t *testing.T) {
	for _, c := range []struct{ tmpl, s string }{
		{"u-{a}-{b}", "u--x-y"},       // only assignment: a="-x", b="y"
		{"u-{a}-{b}-{c}", "u-x--y-z"}, // e.g. a="x", b="-y", c="z"
	} {
		tp, err := ParseTemplate(c.tmpl)
		if err != nil {
			t.Fatalf("ParseTemplate(%q): %v", c.tmpl, err)
		}
		vals, ok := tp.Match(c.s)
		if !ok {
			t.Errorf("template %q does not match %q, which is an instance of it", c.tmpl, c.s)
			continue
		}
		// The captures must rebuild the string and obey the capture rule.
		var sb strings.Builder
		for i, lit := range tp.lits {
			sb.WriteString(lit)
			if i < len(tp.caps) {
				if vals[i] == "" || strings.Contains(vals[i], ":") {
					t.Errorf("template %q on %q: capture {%s} = %q", c.tmpl, c.s, tp.caps[i], vals[i])
				}
				sb.WriteString(vals[i])
			}
		}
		if sb.String() != c.s {
			t.Errorf("template %q on %q: captures %q rebuild %q", c.tmpl, c.s, vals, sb.String())
		}
	}
}

func TestCompileBind(t *testing.T) {
	for _, c := range []struct {
		manager, lease string
		leaseCap       []int
		errSub         string
	}{
		{"system:serviceaccount:cnrm-system:cnrm-controller-manager-{ns}", "kcc-leader-{ns}", []int{0}, ""},
		{"system:serviceaccount:{ns}:{sa}", "{sa}.{ns}", []int{1, 0}, ""},
		{"u:{a}-{b}-{c}-{d}", "{d}{a}x{c}{b}", nil, "captures must be separated"},
		{"u:{a}-{b}-{c}-{d}", "{d}.{a}.{c}.{b}", []int{3, 0, 2, 1}, ""},
		{"u:{ns}-{x}", "l-{ns}", nil, "capture {x} of manager \"u:{ns}-{x}\" is unused in lease \"l-{ns}\""},
		{"u:{ns}", "l-{ns}-{zz}", nil, "uses {zz}, which manager \"u:{ns}\" does not capture"},
		{"u:fixed", "l", nil, "has no capture such as {ns}"},
		{"u:{ns", "l-{ns}", nil, "manager \"u:{ns\": unmatched '{'"},
		{"u:{ns}", "l-{ns", nil, "lease \"l-{ns\": unmatched '{'"},
		{"u:{ns}", "l-*-{ns}", nil, "'*' is not allowed"},
	} {
		b, err := CompileBind(c.manager, c.lease, "")
		if c.errSub != "" {
			if err == nil || !strings.Contains(err.Error(), c.errSub) {
				t.Errorf("CompileBind(%q, %q) error = %v, want one containing %q", c.manager, c.lease, err, c.errSub)
			}
			if b != nil {
				t.Errorf("CompileBind(%q, %q) returned a bind with an error", c.manager, c.lease)
			}
			continue
		}
		if err != nil {
			t.Errorf("CompileBind(%q, %q) = %v", c.manager, c.lease, err)
			continue
		}
		if !reflect.DeepEqual(b.leaseCap, c.leaseCap) {
			t.Errorf("CompileBind(%q, %q).leaseCap = %v, want %v", c.manager, c.lease, b.leaseCap, c.leaseCap)
		}
	}
}

func TestBindLease(t *testing.T) {
	type check struct {
		lease string
		want  bool
	}
	for _, c := range []struct {
		manager, lease string
		user           string
		bound          string // leaseName
		checks         []check
	}{
		{"system:serviceaccount:cnrm-system:cnrm-controller-manager-{ns}", "kcc-leader-{ns}",
			"system:serviceaccount:cnrm-system:cnrm-controller-manager-team-a", "kcc-leader-team-a",
			[]check{{"kcc-leader-team-a", true}, {"kcc-leader-team-b", false}, {"kcc-leader-team-ab", false},
				{"kcc-leader-team", false}, {"xkcc-leader-team-a", false}, {"kcc-leader-", false}, {"", false}}},
		{"system:serviceaccount:{ns}:{sa}", "{sa}.{ns}",
			"system:serviceaccount:team:ctrl", "ctrl.team",
			[]check{{"ctrl.team", true}, {"team.ctrl", false}, {"ctrl.team2", false}, {"ctrl.", false}, {".team", false}}},
		{"u:{a}-{b}", "lease-{b}-{a}-end",
			"u:x-y", "lease-y-x-end",
			[]check{{"lease-y-x-end", true}, {"lease-x-y-end", false}, {"lease-y-x-", false}, {"lease-y-x-endx", false}}},
		{"u:{id}", "{id}",
			"u:abc", "abc",
			[]check{{"abc", true}, {"ab", false}, {"abcd", false}}},
	} {
		b, err := CompileBind(c.manager, c.lease, "")
		if err != nil {
			t.Fatalf("CompileBind(%q, %q): %v", c.manager, c.lease, err)
		}
		vals, ok := b.manager.Match(c.user)
		if !ok {
			t.Fatalf("manager %q does not match %q", c.manager, c.user)
		}
		if got := b.BoundLease(&vals); got != c.bound {
			t.Errorf("BoundLease for %q = %q, want %q", c.user, got, c.bound)
		}
		for _, ch := range c.checks {
			if got := b.BoundTo("any", ch.lease, &vals); got != ch.want {
				t.Errorf("bind %q/%q, user %q: BoundTo(%q) = %v, want %v", c.manager, c.lease, c.user, ch.lease, got, ch.want)
			}
		}
	}
}

// Config Connector's dedicated manager namespaces: with a
// ConfigConnectorContext's managerNamespace, a namespace's manager runs as
// system:serviceaccount:<managerNamespace>:cnrm-controller-manager-<ns>,
// and its lease lives in that namespace. A namespace template binds both.
func TestBindNamespace(t *testing.T) {
	for _, c := range []struct {
		manager, lease, namespace string
		errSub                    string
	}{
		{"system:serviceaccount:{mns}:cnrm-controller-manager-{ns}", "kcc-leader-{ns}", "{mns}", ""},
		{"system:serviceaccount:{ns}:controller", "controller-leader", "{ns}", ""},
		{"system:serviceaccount:{mns}:cnrm-controller-manager-{ns}", "kcc-leader-{ns}", "", "capture {mns} of manager \"system:serviceaccount:{mns}:cnrm-controller-manager-{ns}\" is unused in lease \"kcc-leader-{ns}\", so"},
		{"system:serviceaccount:{mns}:m-{ns}-{x}", "l-{ns}", "{mns}", "capture {x} of manager \"system:serviceaccount:{mns}:m-{ns}-{x}\" is unused in lease \"l-{ns}\" or namespace \"{mns}\""},
		{"u:{ns}", "l-{ns}", "{other}", "namespace \"{other}\" uses {other}, which manager \"u:{ns}\" does not capture"},
		{"u:{ns}", "l-{ns}", "ns-{ns", "namespace \"ns-{ns\": unmatched '{'"},
	} {
		_, err := CompileBind(c.manager, c.lease, c.namespace)
		if c.errSub == "" && err != nil {
			t.Errorf("CompileBind(%q, %q, %q) = %v", c.manager, c.lease, c.namespace, err)
		}
		if c.errSub != "" && (err == nil || !strings.Contains(err.Error(), c.errSub)) {
			t.Errorf("CompileBind(%q, %q, %q) error = %v, want one containing %q", c.manager, c.lease, c.namespace, err, c.errSub)
		}
	}
	b, err := CompileBind("system:serviceaccount:{mns}:cnrm-controller-manager-{ns}", "kcc-leader-{ns}", "{mns}")
	if err != nil {
		t.Fatal(err)
	}
	vals, ok := b.manager.Match("system:serviceaccount:kcc-team-a:cnrm-controller-manager-team-a")
	if !ok {
		t.Fatal("the manager template does not match")
	}
	if got, want := b.BoundLease(&vals), "kcc-team-a/kcc-leader-team-a"; got != want {
		t.Errorf("BoundLease = %q, want %q", got, want)
	}
	for _, ch := range []struct {
		namespace, name string
		want            bool
	}{
		{"kcc-team-a", "kcc-leader-team-a", true},
		{"cnrm-system", "kcc-leader-team-a", false},
		{"kcc-team-b", "kcc-leader-team-a", false},
		{"kcc-team-a", "kcc-leader-team-b", false},
		{"kcc-team-a-x", "kcc-leader-team-a", false},
	} {
		if got := b.BoundTo(ch.namespace, ch.name, &vals); got != ch.want {
			t.Errorf("BoundTo(%q, %q) = %v, want %v", ch.namespace, ch.name, got, ch.want)
		}
	}
}

func TestBindMatchDoesNotAllocate(t *testing.T) {
	b, err := CompileBind("system:serviceaccount:{mns}:cnrm-controller-manager-{ns}", "kcc-leader-{ns}", "{mns}")
	if err != nil {
		t.Fatal(err)
	}
	var ok bool
	allocs := testing.AllocsPerRun(100, func() {
		vals, matched := b.manager.Match("system:serviceaccount:kcc-managers:cnrm-controller-manager-team")
		ok = matched && b.BoundTo("kcc-managers", "kcc-leader-team", &vals)
	})
	if !ok {
		t.Fatalf("bind does not match")
	}
	if allocs != 0 {
		t.Errorf("template and lease matching allocate %v times per run, want 0", allocs)
	}
}
