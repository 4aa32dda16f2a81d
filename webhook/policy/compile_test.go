package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

const header = "apiVersion: leaseguard.io/v1alpha1\nkind: LeasePolicy\n"

// withRules prepends a valid header to a rules section.
func withRules(rules string) string { return header + "rules:\n" + rules }

// oneRule is a valid rule with extra lines appended (each indented by two
// spaces, as rule fields).
func oneRule(extra ...string) string {
	s := "- name: r\n  resources: [leases]\n"
	for _, e := range extra {
		s += "  " + e + "\n"
	}
	return withRules(s)
}

type wantErr struct {
	field  string
	typ    field.ErrorType
	detail string // substring of Detail
	value  string // substring of fmt.Sprint(BadValue), if set
}

func checkErr(t *testing.T, got *field.Error, w wantErr) {
	t.Helper()
	if got.Field != w.field {
		t.Errorf("Field = %q, want %q (error: %v)", got.Field, w.field, got)
	}
	if got.Type != w.typ {
		t.Errorf("Type = %q, want %q (error: %v)", got.Type, w.typ, got)
	}
	if !strings.Contains(got.Detail, w.detail) {
		t.Errorf("Detail = %q, want it to contain %q", got.Detail, w.detail)
	}
	if w.value != "" && !strings.Contains(fmt.Sprint(got.BadValue), w.value) {
		t.Errorf("BadValue = %v, want it to contain %q", got.BadValue, w.value)
	}
}

func TestCompileErrors(t *testing.T) {
	const mgr = `managers: ["user:mgr-*"]`
	bindRule := func(manager, lease string) string {
		return oneRule(`bind: {manager: "` + manager + `", lease: "` + lease + `"}`)
	}
	cases := []struct {
		name string
		src  string
		want []wantErr
	}{
		{"wrong apiVersion", "apiVersion: leaseguard.io/v1\nkind: LeasePolicy\nrules:\n- {name: r, resources: [leases], managers: [u]}\n",
			[]wantErr{{"apiVersion", field.ErrorTypeNotSupported, `supported values: "leaseguard.io/v1alpha1"`, "leaseguard.io/v1"}}},
		{"missing apiVersion", "kind: LeasePolicy\nrules:\n- {name: r, resources: [leases], managers: [u]}\n",
			[]wantErr{{"apiVersion", field.ErrorTypeNotSupported, `"leaseguard.io/v1alpha1"`, ""}}},
		{"wrong kind", "apiVersion: leaseguard.io/v1alpha1\nkind: Policy\nrules:\n- {name: r, resources: [leases], managers: [u]}\n",
			[]wantErr{{"kind", field.ErrorTypeNotSupported, `supported values: "LeasePolicy"`, "Policy"}}},
		{"no rules key", header,
			[]wantErr{{"rules", field.ErrorTypeRequired, "at least one rule", ""}}},
		{"empty rules", header + "rules: []\n",
			[]wantErr{{"rules", field.ErrorTypeRequired, "at least one rule", ""}}},
		{"negative clockSkew", header + "clockSkew: -1s\nrules:\n- {name: r, resources: [leases], managers: [u]}\n",
			[]wantErr{{"clockSkew", field.ErrorTypeInvalid, "between 0s and 1m", "-1s"}}},
		{"clockSkew over a minute", header + "clockSkew: 61s\nrules:\n- {name: r, resources: [leases], managers: [u]}\n",
			[]wantErr{{"clockSkew", field.ErrorTypeInvalid, "between 0s and 1m", "1m1s"}}},
		{"duplicate rule names", withRules(
			"- {name: r, resources: [leases], namespaces: [a], managers: [u]}\n" +
				"- {name: r, resources: [leases], namespaces: [b], managers: [u]}\n"),
			[]wantErr{{"rules[1].name", field.ErrorTypeDuplicate, "", "r (also rules[0])"}}},
		{"three rules with one name", withRules(
			"- {name: r, resources: [leases], namespaces: [a], managers: [u]}\n" +
				"- {name: s, resources: [leases], namespaces: [b], managers: [u]}\n" +
				"- {name: r, resources: [leases], namespaces: [c], managers: [u]}\n" +
				"- {name: r, resources: [leases], namespaces: [d], managers: [u]}\n"),
			[]wantErr{
				{"rules[2].name", field.ErrorTypeDuplicate, "", "r (also rules[0])"},
				{"rules[3].name", field.ErrorTypeDuplicate, "", "r (also rules[0])"},
			}},
		{"missing name", withRules("- {resources: [leases], managers: [u]}\n"),
			[]wantErr{{"rules[0].name", field.ErrorTypeRequired, "named in messages", ""}}},
		{"invalid name", withRules("- {name: Bad_Name, resources: [leases], managers: [u]}\n"),
			[]wantErr{{"rules[0].name", field.ErrorTypeInvalid, "RFC 1123", "Bad_Name"}}},
		{"glob with ?", oneRule(`managers: ["foo?"]`),
			[]wantErr{{"rules[0].managers[0]", field.ErrorTypeInvalid, `character '?' is not supported in patterns (only '*' is special)`, "foo?"}}},
		{"glob with brackets", oneRule(mgr, `names: ["[a]"]`),
			[]wantErr{{"rules[0].names[0]", field.ErrorTypeInvalid, `character '[' is not supported`, "[a]"}}},
		// An invalid namespace glob is one problem; "[a]" is not a namespace
		// leaseguard is never called for, so no "matches nothing" error.
		{"invalid namespace glob alone", oneRule(mgr, `namespaces: ["[a]"]`),
			[]wantErr{{"rules[0].namespaces[0]", field.ErrorTypeInvalid, `character '[' is not supported`, "[a]"}}},
		{"glob with closing bracket", oneRule(mgr, `statusWriters: ["x]"]`),
			[]wantErr{{"rules[0].statusWriters[0]", field.ErrorTypeInvalid, `character ']' is not supported`, "x]"}}},
		{"glob with braces", oneRule(mgr, `names: ["a{b}"]`),
			[]wantErr{{"rules[0].names[0]", field.ErrorTypeInvalid, `character '{' is not supported`, "a{b}"}}},
		{"glob with backslash", oneRule(mgr, `operators: ["ok", "a\\b"]`),
			[]wantErr{{"rules[0].operators[1]", field.ErrorTypeInvalid, `character '\\' is not supported`, `a\b`}}},
		{"empty glob in names", oneRule(mgr, `names: ["x", ""]`),
			[]wantErr{{"rules[0].names[1]", field.ErrorTypeInvalid, "empty pattern", ""}}},
		{"empty glob in managers", oneRule(`managers: [""]`),
			[]wantErr{{"rules[0].managers[0]", field.ErrorTypeInvalid, "empty pattern", ""}}},
		{"bind capture unused in lease", bindRule("user:{ns}-{x}", "l-{ns}"),
			[]wantErr{{"rules[0].bind", field.ErrorTypeInvalid, `capture {x} of manager "user:{ns}-{x}" is unused in lease "l-{ns}"`, ""}}},
		{"bind lease uses unknown capture", bindRule("user:{ns}", "l-{ns}-{zz}"),
			[]wantErr{{"rules[0].bind", field.ErrorTypeInvalid, `lease "l-{ns}-{zz}" uses {zz}, which manager "user:{ns}" does not capture`, ""}}},
		{"bind manager without capture", bindRule("user:fixed", "l"),
			[]wantErr{{"rules[0].bind", field.ErrorTypeInvalid, `manager "user:fixed" has no capture such as {ns}`, ""}}},
		{"bind unmatched open brace", bindRule("user:{ns", "l-{ns}"),
			[]wantErr{{"rules[0].bind", field.ErrorTypeInvalid, `manager "user:{ns": unmatched '{'`, ""}}},
		{"bind unmatched close brace", bindRule("user:{ns}", "l-ns}"),
			[]wantErr{{"rules[0].bind", field.ErrorTypeInvalid, `lease "l-ns}": unmatched '}'`, ""}}},
		{"bind star", bindRule("user:*-{ns}", "l-{ns}"),
			[]wantErr{{"rules[0].bind", field.ErrorTypeInvalid, "'*' is not allowed in a bind template", ""}}},
		{"bind adjacent captures", bindRule("user:{a}{b}", "l-{a}-{b}"),
			[]wantErr{{"rules[0].bind", field.ErrorTypeInvalid, "captures must be separated by literal text", ""}}},
		{"bind duplicate capture", bindRule("user:{a}-{a}", "l-{a}"),
			[]wantErr{{"rules[0].bind", field.ErrorTypeInvalid, "capture {a} appears twice", ""}}},
		{"bind five captures", bindRule("u:{a}-{b}-{c}-{d}-{e}", "l-{a}-{b}-{c}-{d}-{e}"),
			[]wantErr{{"rules[0].bind", field.ErrorTypeInvalid, "at most 4 captures are supported", ""}}},
		{"bind empty capture name", bindRule("user:{}", "l"),
			[]wantErr{{"rules[0].bind", field.ErrorTypeInvalid, `capture "{}" must be a plain name`, ""}}},
		{"negative minRenewInterval", oneRule(mgr, "minRenewInterval: -5s"),
			[]wantErr{{"rules[0].minRenewInterval", field.ErrorTypeInvalid, "must not be negative", "-5s"}}},
		{"minRenewInterval of 15s", oneRule(mgr, "minRenewInterval: 15s"),
			[]wantErr{{"rules[0].minRenewInterval", field.ErrorTypeInvalid, "must be below the lease duration (15s", "15s"}}},
		{"minRenewInterval of 1m", oneRule(mgr, "minRenewInterval: 1m"),
			[]wantErr{{"rules[0].minRenewInterval", field.ErrorTypeInvalid, `use a shorter interval or "auto"`, "1m0s"}}},
		{"unknown resource", withRules("- {name: r, resources: [leases, pods], managers: [u]}\n"),
			[]wantErr{{"rules[0].resources[1]", field.ErrorTypeNotSupported, `supported values: "leases", "multiclusterleases"`, "pods"}}},
		{"no resources", withRules("- {name: r, managers: [u]}\n"),
			[]wantErr{{"rules[0].resources", field.ErrorTypeRequired, "leases and/or multiclusterleases", ""}}},
		{"unknown enforcement", oneRule(mgr, "enforcement: block"),
			[]wantErr{{"rules[0].enforcement", field.ErrorTypeNotSupported, `supported values: "deny", "warn", "audit"`, "block"}}},
		{"unknown holderBinding", oneRule(mgr, "holderBinding: node"),
			[]wantErr{{"rules[0].holderBinding", field.ErrorTypeNotSupported, `supported values: "none", "pod", "username"`, "node"}}},
		{"designation with star", oneRule(mgr, `designation: "user:*"`),
			[]wantErr{{"rules[0].designation", field.ErrorTypeInvalid, `must be "auto", "annotation" or one username (no patterns)`, "user:*"}}},
		{"designation with capture", oneRule(mgr, `designation: "user:{ns}"`),
			[]wantErr{{"rules[0].designation", field.ErrorTypeInvalid, "(no patterns)", "user:{ns}"}}},
		{"no managers, bind or fixed designation", oneRule("designation: auto", `operators: ["user:op"]`),
			[]wantErr{{"rules[0].managers", field.ErrorTypeRequired, "matches nothing: a rule without managers, bind or a fixed designation lets only operators write", ""}}},
		{"designation annotation without managers", oneRule("designation: annotation"),
			[]wantErr{{"rules[0].managers", field.ErrorTypeRequired, "matches nothing", ""}}},
		{"only never-intercepted namespaces", oneRule(mgr, "namespaces: [kube-system, kube-node-lease, leaseguard-system]"),
			[]wantErr{{"rules[0].namespaces", field.ErrorTypeInvalid, "matches nothing: leaseguard is never called for kube-system, kube-node-lease, leaseguard-system", ""}}},
		{"only leaseguard's own namespace", oneRule(mgr, "namespaces: [leaseguard-system]"),
			[]wantErr{{"rules[0].namespaces", field.ErrorTypeInvalid, "matches nothing: leaseguard is never called for", ""}}},
		{"shadowed by a rule without selectors", withRules(
			"- {name: a, resources: [leases], managers: [u]}\n" +
				"- {name: b, resources: [leases], namespaces: [team], names: [x], managers: [v]}\n"),
			[]wantErr{{"rules[1]", field.ErrorTypeInvalid, `matches nothing: rule "a" (rules[0]) comes first and selects every object this rule selects`, "b"}}},
		{"shadowed by star selectors", withRules(
			"- {name: a, resources: [leases, multiclusterleases], namespaces: ['*'], names: ['*'], managers: [u]}\n" +
				"- {name: b, resources: [multiclusterleases], namespaces: [team], names: [x], managers: [v]}\n"),
			[]wantErr{{"rules[1]", field.ErrorTypeInvalid, `rule "a" (rules[0]) comes first`, ""}}},
		// names: ['*'] selects every name, as an absent names list does.
		{"shadowed by star names, later rule without names", withRules(
			"- {name: a, resources: [leases], namespaces: [team], names: ['*'], managers: [u]}\n" +
				"- {name: b, resources: [leases], namespaces: [team], managers: [v]}\n"),
			[]wantErr{{"rules[1]", field.ErrorTypeInvalid, `rule "a" (rules[0]) comes first`, ""}}},
		{"shadowed by a glob matching its literal namespaces", withRules(
			"- {name: a, resources: [leases], namespaces: ['team-*'], managers: [u]}\n" +
				"- {name: b, resources: [leases], namespaces: [team-a, team-b], managers: [v]}\n"),
			[]wantErr{{"rules[1]", field.ErrorTypeInvalid, `rule "a" (rules[0]) comes first`, ""}}},
		{"shadowed by the same selectors", withRules(
			"- {name: a, resources: [leases], namespaces: [x], names: ['kcc-*'], managers: [u]}\n" +
				"- {name: b, resources: [leases], namespaces: [y]}\n" +
				"- {name: c, resources: [leases], namespaces: [x], names: ['kcc-*'], managers: [v]}\n"),
			[]wantErr{
				{"rules[1].managers", field.ErrorTypeRequired, "matches nothing", ""},
				{"rules[2]", field.ErrorTypeInvalid, `rule "a" (rules[0]) comes first`, ""},
			}},
		// docs/policy.md: a rule "matches nothing" when an earlier rule
		// selects every object it selects; "team-*" selects every namespace
		// "team-a*" does.
		{"shadowed by a broader glob", withRules(
			"- {name: a, resources: [leases], namespaces: ['team-*'], managers: [u]}\n" +
				"- {name: b, resources: [leases], namespaces: ['team-a*'], managers: [v]}\n"),
			[]wantErr{{"rules[1]", field.ErrorTypeInvalid, `rule "a" (rules[0]) comes first`, ""}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, errs := compileYAML(t, c.src)
			if p != nil {
				t.Errorf("Compile returned a non-nil policy, want nil and errors")
			}
			if len(errs) != len(c.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(c.want), errs.ToAggregate())
			}
			for i := range c.want {
				checkErr(t, errs[i], c.want[i])
			}
		})
	}
}

// TestCompileReportsAllProblems: every problem of the file is listed at once.
func TestCompileReportsAllProblems(t *testing.T) {
	src := `apiVersion: leaseguard.io/v1alpha1
kind: Policy
clockSkew: 5m
rules:
- name: dup
  resources: [leases, pods]
  namespaces: [a]
  managers: ["foo?"]
  minRenewInterval: -5s
- name: dup
  resources: [leases]
  namespaces: [b]
  managers: ["user:x"]
  enforcement: block
  holderBinding: node
- name: lonely
  resources: [multiclusterleases]
  namespaces: [kube-system]
  designation: auto
  bind: {manager: "user:{a}", lease: "l"}
`
	p, errs := compileYAML(t, src)
	if p != nil {
		t.Errorf("Compile returned a non-nil policy, want nil and errors")
	}
	want := []wantErr{
		{"kind", field.ErrorTypeNotSupported, "LeasePolicy", "Policy"},
		{"clockSkew", field.ErrorTypeInvalid, "between 0s and 1m", "5m0s"},
		{"rules[0].resources[1]", field.ErrorTypeNotSupported, "multiclusterleases", "pods"},
		{"rules[0].managers[0]", field.ErrorTypeInvalid, "'?'", "foo?"},
		{"rules[0].minRenewInterval", field.ErrorTypeInvalid, "must not be negative", "-5s"},
		{"rules[1].holderBinding", field.ErrorTypeNotSupported, `"pod"`, "node"},
		{"rules[1].enforcement", field.ErrorTypeNotSupported, `"warn"`, "block"},
		{"rules[1].name", field.ErrorTypeDuplicate, "", "dup (also rules[0])"},
		{"rules[2].namespaces", field.ErrorTypeInvalid, "matches nothing", "kube-system"},
		{"rules[2].bind", field.ErrorTypeInvalid, `capture {a} of manager "user:{a}" is unused`, ""},
	}
	if len(errs) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(want), errs.ToAggregate())
	}
	for i := range want {
		checkErr(t, errs[i], want[i])
	}
}

func TestCompileValid(t *testing.T) {
	cases := []struct {
		name  string
		src   string
		rules []string
	}{
		{"sample", readSample(t), []string{"kcc-mcl", "kcc-namespace-leases"}},
		{"one interceptable namespace among never-intercepted ones", oneRule(`managers: [u]`, "namespaces: [kube-system, team-a]"), []string{"r"}},
		{"namespace glob over kube-*", oneRule(`managers: [u]`, `namespaces: ["kube-*"]`), []string{"r"}},
		{"broader rule after a narrower one", withRules(
			"- {name: a, resources: [leases], namespaces: [x], managers: [u]}\n" +
				"- {name: b, resources: [leases], managers: [u]}\n"), []string{"a", "b"}},
		{"same selectors, other resource", withRules(
			"- {name: a, resources: [leases], managers: [u]}\n" +
				"- {name: b, resources: [multiclusterleases], managers: [u]}\n"), []string{"a", "b"}},
		{"names narrow the earlier rule", withRules(
			"- {name: a, resources: [leases], namespaces: [x], names: ['special-*'], managers: [u]}\n" +
				"- {name: b, resources: [leases], namespaces: [x], managers: [u]}\n"), []string{"a", "b"}},
		{"earlier rule has more resources but fewer namespaces", withRules(
			"- {name: a, resources: [leases, multiclusterleases], namespaces: [x], managers: [u]}\n" +
				"- {name: b, resources: [leases], namespaces: [x, y], managers: [u]}\n"), []string{"a", "b"}},
		{"fixed designation without managers", oneRule(`designation: "system:serviceaccount:ns:writer"`), []string{"r"}},
		{"bind without managers", oneRule(`bind: {manager: "system:serviceaccount:{ns}:{sa}", lease: "{sa}.{ns}"}`), []string{"r"}},
		{"bind with four captures", oneRule(`bind: {manager: "u:{a}-{b}-{c}-{d}", lease: "{d}-{c}-{b}-{a}"}`), []string{"r"}},
		{"minRenewInterval 14s, auto, 0s", withRules(
			"- {name: a, resources: [leases], namespaces: [a], managers: [u], minRenewInterval: 14s}\n" +
				"- {name: b, resources: [leases], namespaces: [b], managers: [u], minRenewInterval: auto}\n" +
				"- {name: c, resources: [leases], namespaces: [c], managers: [u], minRenewInterval: 0s}\n"), []string{"a", "b", "c"}},
		{"clockSkew bounds", header + "clockSkew: 1m\nrules:\n- {name: r, resources: [leases], managers: [u]}\n", []string{"r"}},
		{"every enforcement and holder binding", withRules(
			"- {name: a, resources: [leases], namespaces: [a], managers: [u], enforcement: deny, holderBinding: none}\n" +
				"- {name: b, resources: [leases], namespaces: [b], managers: [u], enforcement: warn, holderBinding: pod}\n" +
				"- {name: c, resources: [leases], namespaces: [c], managers: [u], enforcement: audit, holderBinding: username}\n"), []string{"a", "b", "c"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, errs := compileYAML(t, c.src)
			if len(errs) != 0 {
				t.Fatalf("unexpected errors: %v", errs.ToAggregate())
			}
			if p == nil {
				t.Fatalf("nil policy")
			}
			var names []string
			for _, r := range p.Rules {
				names = append(names, r.Name)
			}
			if strings.Join(names, ",") != strings.Join(c.rules, ",") {
				t.Errorf("rules %v, want %v", names, c.rules)
			}
		})
	}
}

// TestCompileSample checks what the sample compiles to.
func TestCompileSample(t *testing.T) {
	p := mustCompile(t, readSample(t))
	if p.ClockSkew != 2*time.Second {
		t.Errorf("ClockSkew = %v, want 2s", p.ClockSkew)
	}
	if len(p.Rules) != 2 {
		t.Fatalf("%d rules, want 2", len(p.Rules))
	}
	mcl, leases := p.Rules[0], p.Rules[1]
	if mcl.Name != "kcc-mcl" || !mcl.resources[resourceIndex(MultiClusterLeases)] || mcl.resources[resourceIndex(Leases)] ||
		mcl.designation != DesignationAuto || mcl.minRenewInterval != 5*time.Second || mcl.autoRenew ||
		mcl.enforcement != EnforceDeny || mcl.holderBinding != HolderBindingNone || mcl.bind != nil {
		t.Errorf("kcc-mcl compiled to %+v", mcl)
	}
	if leases.Name != "kcc-namespace-leases" || !leases.resources[resourceIndex(Leases)] || leases.resources[resourceIndex(MultiClusterLeases)] ||
		leases.designation != DesignationNone || !leases.autoRenew || leases.enforcement != EnforceWarn ||
		leases.holderBinding != HolderBindingPod || leases.bind == nil {
		t.Errorf("kcc-namespace-leases compiled to %+v", leases)
	}
	if got := p.Select(MultiClusterLeases, "cnrm-system", "anything"); got != mcl {
		t.Errorf("Select(MCL, cnrm-system) = %v, want kcc-mcl", got)
	}
	if got := p.Select(Leases, "cnrm-system", "kcc-leader-a"); got != leases {
		t.Errorf("Select(Lease, cnrm-system) = %v, want kcc-namespace-leases", got)
	}
	for _, sel := range []struct {
		res     Resource
		ns, obj string
	}{{Leases, "other", "x"}, {MultiClusterLeases, "other", "x"}, {Resource("pods"), "cnrm-system", "x"}} {
		if got := p.Select(sel.res, sel.ns, sel.obj); got != nil {
			t.Errorf("Select(%s, %s, %s) = %s, want none", sel.res, sel.ns, sel.obj, got.Name)
		}
	}
}

func TestCompileDefaults(t *testing.T) {
	p := mustCompile(t, oneRule(`managers: [u]`))
	if p.ClockSkew != DefaultClockSkew {
		t.Errorf("default ClockSkew = %v, want %v", p.ClockSkew, DefaultClockSkew)
	}
	r := p.Rules[0]
	if r.enforcement != EnforceDeny || r.holderBinding != HolderBindingNone || r.designation != DesignationNone ||
		r.minRenewInterval != 0 || r.autoRenew {
		t.Errorf("defaults compiled to %+v", r)
	}
	p = mustCompile(t, header+"clockSkew: 0s\nrules:\n- {name: r, resources: [leases], managers: [u], designation: \"  user:x  \"}\n")
	if p.ClockSkew != 0 {
		t.Errorf("clockSkew 0s compiled to %v", p.ClockSkew)
	}
	if r := p.Rules[0]; r.designation != DesignationFixed || r.fixedManager != "user:x" {
		t.Errorf("fixed designation compiled to mode %d, manager %q", r.designation, r.fixedManager)
	}
}

func TestAutoRenewInterval(t *testing.T) {
	for _, c := range []struct{ dur, want time.Duration }{
		{0, 5 * time.Second},
		{-time.Second, 5 * time.Second},
		{15 * time.Second, 5 * time.Second},
		{30 * time.Second, 10 * time.Second},
		{10 * time.Second, 10 * time.Second / 3},
	} {
		if got := AutoRenewInterval(&Spec{LeaseDuration: c.dur}); got != c.want {
			t.Errorf("AutoRenewInterval(%v) = %v, want %v", c.dur, got, c.want)
		}
	}
}
