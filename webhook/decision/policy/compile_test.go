package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const header = "apiVersion: leaseguard.io/v1alpha1\nkind: LeasePolicy\n"

// withRules prepends a valid header to a rules section.
func withRules(rules string) string { return header + "rules:\n" + rules }

// withClockSkew sets clockSkew in a policy built by withRules or oneRule.
func withClockSkew(skew, src string) string {
	return header + "clockSkew: " + skew + "\n" + strings.TrimPrefix(src, header)
}

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
		// A fixed interval is at most MaxRenewInterval of the assumed client
		// timings and the clockSkew: min(renewDeadline + retryPeriod - 2s -
		// clockSkew, leaseDuration - 2s - clockSkew), 8s for client-go's
		// 15s/10s/2s with the default 2s clockSkew (10s with clockSkew 0s).
		{"minRenewInterval of 15s", oneRule(mgr, "minRenewInterval: 15s"),
			[]wantErr{{"rules[0].minRenewInterval", field.ErrorTypeInvalid, "clients with leaseDuration 15s, renewDeadline 10s, retryPeriod 2s would lose their lease", "15s"}}},
		{"minRenewInterval of 8.5s", oneRule(mgr, "minRenewInterval: 8.5s"),
			[]wantErr{{"rules[0].minRenewInterval", field.ErrorTypeInvalid, "use at most 8s", "8.5s"}}},
		{"minRenewInterval of 8s and 1ns", oneRule(mgr, "minRenewInterval: 8.000000001s"),
			[]wantErr{{"rules[0].minRenewInterval", field.ErrorTypeInvalid, "use at most 8s", "8.000000001s"}}},
		// 10s, the most client-go's defaults survive with clockSkew 0s, is too
		// long once a client clock may run 2s ahead.
		{"minRenewInterval of 10s with the default clockSkew", oneRule(mgr, "minRenewInterval: 10s"),
			[]wantErr{{"rules[0].minRenewInterval", field.ErrorTypeInvalid, "misses the renew deadline (with clockSkew 2s); use at most 8s", "10s"}}},
		{"minRenewInterval of 1m", oneRule(mgr, "minRenewInterval: 1m"),
			[]wantErr{{"rules[0].minRenewInterval", field.ErrorTypeInvalid, `use at most 8s or "auto", or, if the clients renew with longer timings, declare them in assumedClient`, "1m0s"}}},
		{"minRenewInterval of 10.5s with clockSkew 0s", withClockSkew("0s", oneRule(mgr, "minRenewInterval: 10.5s")),
			[]wantErr{{"rules[0].minRenewInterval", field.ErrorTypeInvalid, "misses the renew deadline (with clockSkew 0s); use at most 10s", "10.5s"}}},
		{"minRenewInterval of 7.5s with clockSkew 3s", withClockSkew("3s", oneRule(mgr, "minRenewInterval: 7.5s")),
			[]wantErr{{"rules[0].minRenewInterval", field.ErrorTypeInvalid, "misses the renew deadline (with clockSkew 3s); use at most 7s", "7.5s"}}},
		{"minRenewInterval above custom timings", oneRule(mgr, "minRenewInterval: 42s", "assumedClient: {leaseDuration: 60s, renewDeadline: 40s, retryPeriod: 5s}"),
			[]wantErr{{"rules[0].minRenewInterval", field.ErrorTypeInvalid, "clients with leaseDuration 1m0s, renewDeadline 40s, retryPeriod 5s would lose their lease", "42s"}}},
		{"minRenewInterval above custom timings: maximum", oneRule(mgr, "minRenewInterval: 42s", "assumedClient: {leaseDuration: 60s, renewDeadline: 40s, retryPeriod: 5s}"),
			[]wantErr{{"rules[0].minRenewInterval", field.ErrorTypeInvalid, "use at most 41s", "42s"}}},
		// leaseDuration - 2s - clockSkew is the tighter bound here (9s < 12s +
		// 5s - 2s - 2s).
		{"minRenewInterval above the lease-duration bound", oneRule(mgr, "minRenewInterval: 9.5s", "assumedClient: {leaseDuration: 13s, renewDeadline: 12s, retryPeriod: 5s}"),
			[]wantErr{{"rules[0].minRenewInterval", field.ErrorTypeInvalid, "use at most 9s", "9.5s"}}},
		{"minRenewInterval above partly declared timings", oneRule(mgr, "minRenewInterval: 10.5s", "assumedClient: {renewDeadline: 12s}"),
			[]wantErr{{"rules[0].minRenewInterval", field.ErrorTypeInvalid, "clients with leaseDuration 15s, renewDeadline 12s, retryPeriod 2s would lose their lease: a renewal held back that long misses the renew deadline (with clockSkew 2s); use at most 10s", "10.5s"}}},
		// Timings that leave no positive maximum once the skew is taken off
		// are reported on assumedClient, whatever the interval; a fixed
		// interval is then not judged against them.
		{"assumedClient leaves no room with the default clockSkew", oneRule(mgr, "minRenewInterval: 1s", "assumedClient: {leaseDuration: 5s, renewDeadline: 2s, retryPeriod: 1s}"),
			[]wantErr{{"rules[0].assumedClient", field.ErrorTypeInvalid, "leaves no room for rate limiting with clockSkew 2s", "5s/2s/1s"}}},
		{"assumedClient leaves no room, auto", oneRule(mgr, "minRenewInterval: auto", "assumedClient: {leaseDuration: 5s, renewDeadline: 2s, retryPeriod: 1s}"),
			[]wantErr{{"rules[0].assumedClient", field.ErrorTypeInvalid, "leaves no room for rate limiting with clockSkew 2s", "5s/2s/1s"}}},
		{"assumedClient leaves no room, long interval not judged", oneRule(mgr, "minRenewInterval: 1m", "assumedClient: {leaseDuration: 5s, renewDeadline: 2s, retryPeriod: 1s}"),
			[]wantErr{{"rules[0].assumedClient", field.ErrorTypeInvalid, "leaves no room for rate limiting", "5s/2s/1s"}}},
		// A maximum of exactly 0 (2s + 1s - 2s - 1s) leaves no room either.
		{"assumedClient leaves a zero maximum", withClockSkew("1s", oneRule(mgr, "minRenewInterval: auto", "assumedClient: {leaseDuration: 5s, renewDeadline: 2s, retryPeriod: 1s}")),
			[]wantErr{{"rules[0].assumedClient", field.ErrorTypeInvalid, "leaves no room for rate limiting with clockSkew 1s", "5s/2s/1s"}}},
		// An invalid clockSkew is reported once; the rules are judged with
		// the default 2s, so its consequences are not reported as well.
		{"invalid clockSkew: rules judged with 2s", withClockSkew("5m", oneRule(mgr, "minRenewInterval: 8s")),
			[]wantErr{{"clockSkew", field.ErrorTypeInvalid, "between 0s and 1m", "5m0s"}}},
		{"invalid clockSkew: auto and assumedClient judged with 2s", withClockSkew("2m", oneRule(mgr, "minRenewInterval: auto", "assumedClient: {leaseDuration: 30s, renewDeadline: 20s, retryPeriod: 4s}")),
			[]wantErr{{"clockSkew", field.ErrorTypeInvalid, "between 0s and 1m", "2m0s"}}},
		{"negative clockSkew and an interval too long with 2s", withClockSkew("-1s", oneRule(mgr, "minRenewInterval: 10s")),
			[]wantErr{
				{"clockSkew", field.ErrorTypeInvalid, "between 0s and 1m", "-1s"},
				{"rules[0].minRenewInterval", field.ErrorTypeInvalid, "(with clockSkew 2s); use at most 8s", "10s"},
			}},
		{"assumedClient leaseDuration 0s", oneRule(mgr, "assumedClient: {leaseDuration: 0s}"),
			[]wantErr{{"rules[0].assumedClient.leaseDuration", field.ErrorTypeInvalid, "must be positive", "0s"}}},
		{"assumedClient negative renewDeadline", oneRule(mgr, "assumedClient: {renewDeadline: -10s}"),
			[]wantErr{{"rules[0].assumedClient.renewDeadline", field.ErrorTypeInvalid, "must be positive", "-10s"}}},
		// Each non-positive field is reported; the ordering is not judged
		// on top of them.
		{"assumedClient every field non-positive", oneRule(mgr, "assumedClient: {leaseDuration: -1s, renewDeadline: 0s, retryPeriod: -2s}"),
			[]wantErr{
				{"rules[0].assumedClient.leaseDuration", field.ErrorTypeInvalid, "must be positive", "-1s"},
				{"rules[0].assumedClient.renewDeadline", field.ErrorTypeInvalid, "must be positive", "0s"},
				{"rules[0].assumedClient.retryPeriod", field.ErrorTypeInvalid, "must be positive", "-2s"},
			}},
		// With invalid timings there is no maximum to check a fixed
		// interval against: only the timings are reported.
		{"assumedClient non-positive with a long interval", oneRule(mgr, "minRenewInterval: 1m", "assumedClient: {retryPeriod: 0s}"),
			[]wantErr{{"rules[0].assumedClient.retryPeriod", field.ErrorTypeInvalid, "must be positive", "0s"}}},
		{"assumedClient renewDeadline equal to the default leaseDuration", oneRule(mgr, "assumedClient: {renewDeadline: 15s}"),
			[]wantErr{{"rules[0].assumedClient", field.ErrorTypeInvalid, "want retryPeriod < renewDeadline < leaseDuration", "15s/15s/2s"}}},
		{"assumedClient retryPeriod equal to the default renewDeadline", oneRule(mgr, "assumedClient: {retryPeriod: 10s}"),
			[]wantErr{{"rules[0].assumedClient", field.ErrorTypeInvalid, "want retryPeriod < renewDeadline < leaseDuration", "15s/10s/10s"}}},
		{"assumedClient leaseDuration below the default renewDeadline", oneRule(mgr, "assumedClient: {leaseDuration: 8s}"),
			[]wantErr{{"rules[0].assumedClient", field.ErrorTypeInvalid, "as client-go's leader election requires", "8s/10s/2s"}}},
		{"assumedClient reversed", oneRule(mgr, "assumedClient: {leaseDuration: 10s, renewDeadline: 20s, retryPeriod: 30s}"),
			[]wantErr{{"rules[0].assumedClient", field.ErrorTypeInvalid, "want retryPeriod < renewDeadline < leaseDuration", "10s/20s/30s"}}},
		{"assumedClient bad ordering with a long interval", oneRule(mgr, "minRenewInterval: 1m", "assumedClient: {leaseDuration: 10s, renewDeadline: 20s}"),
			[]wantErr{{"rules[0].assumedClient", field.ErrorTypeInvalid, "want retryPeriod < renewDeadline < leaseDuration", "10s/20s/2s"}}},
		{"assumedClient bad ordering with a negative interval", oneRule(mgr, "minRenewInterval: -1s", "assumedClient: {leaseDuration: 10s, renewDeadline: 20s}"),
			[]wantErr{
				{"rules[0].assumedClient", field.ErrorTypeInvalid, "want retryPeriod < renewDeadline < leaseDuration", "10s/20s/2s"},
				{"rules[0].minRenewInterval", field.ErrorTypeInvalid, "must not be negative", "-1s"},
			}},
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
  assumedClient: {retryPeriod: 0s}
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
		{"rules[0].assumedClient.retryPeriod", field.ErrorTypeInvalid, "must be positive", "0s"},
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
		{"sample", readSample(t), []string{"kcc-mcl", "kcc-namespace-leases", "kcc-manager-namespace-leases"}},
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
		{"minRenewInterval 8s (the default maximum), auto, 0s", withRules(
			"- {name: a, resources: [leases], namespaces: [a], managers: [u], minRenewInterval: 8s}\n" +
				"- {name: b, resources: [leases], namespaces: [b], managers: [u], minRenewInterval: auto}\n" +
				"- {name: c, resources: [leases], namespaces: [c], managers: [u], minRenewInterval: 0s}\n"), []string{"a", "b", "c"}},
		// Without a clock-skew allowance client-go's defaults survive 10s.
		{"minRenewInterval 10s with clockSkew 0s", withClockSkew("0s", oneRule(`managers: [u]`, "minRenewInterval: 10s")), []string{"r"}},
		{"minRenewInterval 7s with clockSkew 3s", withClockSkew("3s", oneRule(`managers: [u]`, "minRenewInterval: 7s")), []string{"r"}},
		{"minRenewInterval within custom timings", withRules(
			"- {name: a, resources: [leases], namespaces: [a], managers: [u], minRenewInterval: 30s, assumedClient: {leaseDuration: 60s, renewDeadline: 40s, retryPeriod: 5s}}\n" +
				"- {name: b, resources: [leases], namespaces: [b], managers: [u], minRenewInterval: 41s, assumedClient: {leaseDuration: 60s, renewDeadline: 40s, retryPeriod: 5s}}\n" +
				"- {name: c, resources: [leases], namespaces: [c], managers: [u], minRenewInterval: 9s, assumedClient: {leaseDuration: 13s, renewDeadline: 12s, retryPeriod: 5s}}\n" +
				"- {name: d, resources: [leases], namespaces: [d], managers: [u], minRenewInterval: 10s, assumedClient: {renewDeadline: 12s}}\n" +
				"- {name: e, resources: [leases], namespaces: [e], managers: [u], minRenewInterval: 8s, assumedClient: {leaseDuration: 30s}}\n"),
			[]string{"a", "b", "c", "d", "e"}},
		{"minRenewInterval within custom timings, clockSkew 0s", withClockSkew("0s", withRules(
			"- {name: a, resources: [leases], namespaces: [a], managers: [u], minRenewInterval: 43s, assumedClient: {leaseDuration: 60s, renewDeadline: 40s, retryPeriod: 5s}}\n"+
				"- {name: b, resources: [leases], namespaces: [b], managers: [u], minRenewInterval: 11s, assumedClient: {leaseDuration: 13s, renewDeadline: 12s, retryPeriod: 5s}}\n"+
				"- {name: c, resources: [leases], namespaces: [c], managers: [u], minRenewInterval: 12s, assumedClient: {renewDeadline: 12s}}\n"+
				"- {name: d, resources: [leases], namespaces: [d], managers: [u], minRenewInterval: 10s, assumedClient: {leaseDuration: 30s}}\n")),
			[]string{"a", "b", "c", "d"}},
		// The smallest positive maximum: 2s + 1s - 2s - 0s = 1s.
		{"assumedClient leaving 1s with clockSkew 0s", withClockSkew("0s", oneRule(`managers: [u]`, "minRenewInterval: 1s", "assumedClient: {leaseDuration: 5s, renewDeadline: 2s, retryPeriod: 1s}")), []string{"r"}},
		{"assumedClient without a fixed interval", withRules(
			"- {name: a, resources: [leases], namespaces: [a], managers: [u], assumedClient: {leaseDuration: 60s, renewDeadline: 40s, retryPeriod: 5s}}\n" +
				"- {name: b, resources: [leases], namespaces: [b], managers: [u], minRenewInterval: auto, assumedClient: {retryPeriod: 1s}}\n" +
				"- {name: c, resources: [leases], namespaces: [c], managers: [u], assumedClient: {}}\n"), []string{"a", "b", "c"}},
		{"clockSkew lower bound", withClockSkew("0s", oneRule(`managers: [u]`)), []string{"r"}},
		// A 1m skew leaves client-go's default timings no room (see
		// "assumedClient leaves no room" above): the rule declares clients
		// slow enough for it.
		{"clockSkew upper bound", withClockSkew("1m", oneRule(`managers: [u]`, "minRenewInterval: 1m", "assumedClient: {leaseDuration: 5m, renewDeadline: 3m, retryPeriod: 30s}")), []string{"r"}},
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
	if len(p.Rules) != 3 {
		t.Fatalf("%d rules, want 3", len(p.Rules))
	}
	mcl, leases, dedicated := p.Rules[0], p.Rules[1], p.Rules[2]
	if dedicated.Name != "kcc-manager-namespace-leases" || dedicated.bind == nil || dedicated.bind.Namespace() == nil || !dedicated.bind.Expressible() ||
		dedicated.holderBinding != HolderBindingPod {
		t.Errorf("kcc-manager-namespace-leases compiled to %+v", dedicated)
	}
	if mcl.Name != "kcc-mcl" || !mcl.resources[resourceIndex(leaseobject.MultiClusterLeases)] || mcl.resources[resourceIndex(leaseobject.Leases)] ||
		mcl.designation != DesignationAuto || !mcl.autoRenew || mcl.maxRenewInterval != 5*time.Second ||
		mcl.coalesceInterval != 7*time.Second || !mcl.backOffLosers || mcl.maxLeaseDuration != time.Minute ||
		mcl.enforcement != EnforceDeny || mcl.holderBinding != HolderBindingNone || mcl.bind != nil {
		t.Errorf("kcc-mcl compiled to %+v", mcl)
	}
	if leases.Name != "kcc-namespace-leases" || !leases.resources[resourceIndex(leaseobject.Leases)] || leases.resources[resourceIndex(leaseobject.MultiClusterLeases)] ||
		leases.designation != DesignationNone || !leases.autoRenew || leases.coalesceInterval != 7*time.Second || leases.enforcement != EnforceWarn ||
		leases.holderBinding != HolderBindingPod || leases.bind == nil {
		t.Errorf("kcc-namespace-leases compiled to %+v", leases)
	}
	if got := p.Select(leaseobject.MultiClusterLeases, "cnrm-system", "anything"); got != mcl {
		t.Errorf("Select(MCL, cnrm-system) = %v, want kcc-mcl", got)
	}
	if got := p.Select(leaseobject.Leases, "cnrm-system", "kcc-leader-a"); got != leases {
		t.Errorf("Select(Lease, cnrm-system) = %v, want kcc-namespace-leases", got)
	}
	for _, sel := range []struct {
		res     leaseobject.Resource
		ns, obj string
	}{{leaseobject.Leases, "other", "x"}, {leaseobject.MultiClusterLeases, "other", "x"}, {leaseobject.Resource("pods"), "cnrm-system", "x"}} {
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

// TestCompileFixedInterval checks the compiled interval of a fixed
// minRenewInterval at the bounds.
func TestCompileFixedInterval(t *testing.T) {
	for _, c := range []struct {
		extra []string
		want  time.Duration
	}{
		{[]string{"minRenewInterval: 8s"}, 8 * time.Second},
		{[]string{"minRenewInterval: 0s"}, 0},
		{[]string{"minRenewInterval: 41s", "assumedClient: {leaseDuration: 60s, renewDeadline: 40s, retryPeriod: 5s}"}, 41 * time.Second},
		{[]string{"minRenewInterval: 30s", "assumedClient: {leaseDuration: 1m, renewDeadline: 40s, retryPeriod: 5s}"}, 30 * time.Second},
	} {
		p := mustCompile(t, oneRule(append([]string{`managers: [u]`}, c.extra...)...))
		if r := p.Rules[0]; r.minRenewInterval != c.want || r.autoRenew {
			t.Errorf("%v: minRenewInterval %v (auto %v), want %v", c.extra, r.minRenewInterval, r.autoRenew, c.want)
		}
	}
}

// TestCompileIntervalAboveMaximumDetail checks the whole explanation of a
// fixed interval too long for the assumed clients, with the default clockSkew
// (10s, the most client-go's defaults survive without skew, is now too long)
// and without one.
func TestCompileIntervalAboveMaximumDetail(t *testing.T) {
	for _, c := range []struct {
		src, value, want string
	}{
		{oneRule(`managers: [u]`, "minRenewInterval: 10s"), "10s",
			`clients with leaseDuration 15s, renewDeadline 10s, retryPeriod 2s would lose their lease: ` +
				`a renewal held back that long misses the renew deadline (with clockSkew 2s); use at most 8s or "auto", ` +
				`or, if the clients renew with longer timings, declare them in assumedClient`},
		{withClockSkew("0s", oneRule(`managers: [u]`, "minRenewInterval: 10.5s")), "10.5s",
			`clients with leaseDuration 15s, renewDeadline 10s, retryPeriod 2s would lose their lease: ` +
				`a renewal held back that long misses the renew deadline (with clockSkew 0s); use at most 10s or "auto", ` +
				`or, if the clients renew with longer timings, declare them in assumedClient`},
	} {
		_, errs := compileYAML(t, c.src)
		if len(errs) != 1 {
			t.Fatalf("%s: got %d errors, want 1: %v", c.value, len(errs), errs.ToAggregate())
		}
		if errs[0].Detail != c.want {
			t.Errorf("%s: Detail =\n  %q\nwant\n  %q", c.value, errs[0].Detail, c.want)
		}
		if got := errs[0].Error(); !strings.HasPrefix(got, `rules[0].minRenewInterval: Invalid value: "`+c.value+`": clients with leaseDuration 15s`) {
			t.Errorf("Error() = %q", got)
		}
	}
}

func TestAutoRenewInterval(t *testing.T) {
	for _, c := range []struct {
		spec leaseobject.Spec
		want time.Duration
	}{
		// Half of two thirds of the lease duration, 15s when absent.
		{leaseobject.Spec{}, 5 * time.Second},
		{leaseobject.Spec{LeaseDuration: -time.Second}, 5 * time.Second},
		{leaseobject.Spec{LeaseDuration: 15 * time.Second}, 5 * time.Second},
		{leaseobject.Spec{LeaseDuration: 30 * time.Second}, 10 * time.Second},
		{leaseobject.Spec{LeaseDuration: 60 * time.Second}, 20 * time.Second},
		{leaseobject.Spec{LeaseDuration: 10 * time.Second}, 10 * time.Second / 3},
		// Half of a declared renew deadline (MultiClusterLease
		// renewDeadlineSeconds), whatever the lease duration.
		{leaseobject.Spec{RenewDeadline: 8 * time.Second}, 4 * time.Second},
		{leaseobject.Spec{LeaseDuration: 15 * time.Second, RenewDeadline: 8 * time.Second}, 4 * time.Second},
		{leaseobject.Spec{LeaseDuration: 30 * time.Second, RenewDeadline: 8 * time.Second}, 4 * time.Second},
		{leaseobject.Spec{LeaseDuration: 30 * time.Second, RenewDeadline: 20 * time.Second, RetryPeriod: 4 * time.Second}, 10 * time.Second},
		{leaseobject.Spec{LeaseDuration: 30 * time.Second, RenewDeadline: -time.Second}, 10 * time.Second},
	} {
		if got := AutoRenewInterval(&c.spec); got != c.want {
			t.Errorf("AutoRenewInterval(%+v) = %v, want %v", c.spec, got, c.want)
		}
	}
}

func TestEffectiveRenewDeadline(t *testing.T) {
	for _, c := range []struct {
		spec leaseobject.Spec
		want time.Duration
	}{
		{leaseobject.Spec{}, 10 * time.Second},
		{leaseobject.Spec{LeaseDuration: 15 * time.Second}, 10 * time.Second},
		{leaseobject.Spec{LeaseDuration: 30 * time.Second}, 20 * time.Second},
		{leaseobject.Spec{LeaseDuration: 30 * time.Second, RenewDeadline: 8 * time.Second}, 8 * time.Second},
		{leaseobject.Spec{RenewDeadline: 8 * time.Second}, 8 * time.Second},
	} {
		if got := c.spec.EffectiveRenewDeadline(); got != c.want {
			t.Errorf("EffectiveRenewDeadline of %+v = %v, want %v", c.spec, got, c.want)
		}
	}
}

func TestMaxRenewInterval(t *testing.T) {
	want := ClientTimings{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	if DefaultClientTimings != want {
		t.Errorf("DefaultClientTimings = %+v, want client-go's %+v", DefaultClientTimings, want)
	}
	custom := ClientTimings{LeaseDuration: 60 * time.Second, RenewDeadline: 40 * time.Second, RetryPeriod: 5 * time.Second}
	leaseBound := ClientTimings{LeaseDuration: 13 * time.Second, RenewDeadline: 12 * time.Second, RetryPeriod: 5 * time.Second}
	for _, c := range []struct {
		timings ClientTimings
		skew    time.Duration
		want    time.Duration
	}{
		{DefaultClientTimings, 0, 10 * time.Second},
		// renewDeadline + retryPeriod - 2s - skew
		{custom, 0, 43 * time.Second},
		{ClientTimings{LeaseDuration: 137 * time.Second, RenewDeadline: 107 * time.Second, RetryPeriod: 26 * time.Second}, 0, 131 * time.Second},
		// leaseDuration - 2s - skew
		{leaseBound, 0, 11 * time.Second},
		// both bounds equal
		{ClientTimings{LeaseDuration: 12 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}, 0, 10 * time.Second},
		// A client clock ahead by the skew allowance makes the stored
		// renewTime look that much younger: both bounds shrink by the skew.
		{DefaultClientTimings, 2 * time.Second, 8 * time.Second},
		{DefaultClientTimings, 3 * time.Second, 7 * time.Second},
		{custom, 2 * time.Second, 41 * time.Second},
		{leaseBound, 2 * time.Second, 9 * time.Second},
		{leaseBound, 500 * time.Millisecond, 10500 * time.Millisecond},
		// No room left: zero or negative.
		{DefaultClientTimings, 10 * time.Second, 0},
		{DefaultClientTimings, time.Minute, -50 * time.Second},
	} {
		if got := c.timings.MaxRenewInterval(c.skew); got != c.want {
			t.Errorf("%+v.MaxRenewInterval(%v) = %v, want %v", c.timings, c.skew, got, c.want)
		}
	}
}

// TestRuleAutoRenewInterval: an auto interval is what the object declares,
// capped by the most the rule's assumed clients survive with its clockSkew.
func TestRuleAutoRenewInterval(t *testing.T) {
	const slow = "assumedClient: {leaseDuration: 60s, renewDeadline: 40s, retryPeriod: 5s}"
	for _, c := range []struct {
		name string
		src  string
		spec leaseobject.Spec
		want time.Duration
	}{
		{"15s lease, defaults", oneRule(`managers: [u]`, "minRenewInterval: auto"), leaseobject.Spec{LeaseDuration: 15 * sec}, 5 * sec},
		{"no lease duration, defaults", oneRule(`managers: [u]`, "minRenewInterval: auto"), leaseobject.Spec{}, 5 * sec},
		// min(10s, 8s): client-go's defaults with a 2s clockSkew.
		{"30s lease, defaults", oneRule(`managers: [u]`, "minRenewInterval: auto"), leaseobject.Spec{LeaseDuration: 30 * sec}, 8 * sec},
		{"renewDeadline 20s declared, defaults", oneRule(`managers: [u]`, "minRenewInterval: auto"), leaseobject.Spec{LeaseDuration: 30 * sec, RenewDeadline: 20 * sec}, 8 * sec},
		{"renewDeadline 8s declared, defaults", oneRule(`managers: [u]`, "minRenewInterval: auto"), leaseobject.Spec{LeaseDuration: 30 * sec, RenewDeadline: 8 * sec}, 4 * sec},
		// min(10s, 10s) with clockSkew 0s.
		{"30s lease, clockSkew 0s", withClockSkew("0s", oneRule(`managers: [u]`, "minRenewInterval: auto")), leaseobject.Spec{LeaseDuration: 30 * sec}, 10 * sec},
		{"60s lease, clockSkew 0s", withClockSkew("0s", oneRule(`managers: [u]`, "minRenewInterval: auto")), leaseobject.Spec{LeaseDuration: 60 * sec}, 10 * sec},
		// min(10s, 41s) and min(20s, 41s) for slower clients.
		{"30s lease, slow clients", oneRule(`managers: [u]`, "minRenewInterval: auto", slow), leaseobject.Spec{LeaseDuration: 30 * sec}, 10 * sec},
		{"60s lease, slow clients", oneRule(`managers: [u]`, "minRenewInterval: auto", slow), leaseobject.Spec{LeaseDuration: 60 * sec}, 20 * sec},
		{"5m lease, slow clients", oneRule(`managers: [u]`, "minRenewInterval: auto", slow), leaseobject.Spec{LeaseDuration: 5 * time.Minute}, 41 * sec},
	} {
		p := mustCompile(t, c.src)
		if got := p.Rules[0].renewInterval(&leaseobject.Object{Spec: c.spec}); got != c.want {
			t.Errorf("%s: renewInterval(%+v) = %v, want %v", c.name, c.spec, got, c.want)
		}
	}
}

// A rule that does not rate-limit is not judged against its clients'
// timings, however tight they are.
func TestTightTimingsWithoutRateLimitAreValid(t *testing.T) {
	for _, iv := range []string{"minRenewInterval: 0s", ""} {
		spec := oneRule("managers: [alice]", iv, "assumedClient: {leaseDuration: 5s, renewDeadline: 2s, retryPeriod: 1s}")
		if _, errs := compileYAML(t, spec); len(errs) > 0 {
			t.Errorf("%q: %v", iv, errs)
		}
	}
}
