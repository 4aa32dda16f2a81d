package vap

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"

	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
)

const head = "apiVersion: leaseguard.io/v1alpha1\nkind: LeasePolicy\nrules:\n"

func renderVAP(t *testing.T, src string, o Options) *Rendered {
	t.Helper()
	p, err := policyfile.Parse([]byte(src), policy.CompileOptions{OwnNamespace: o.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Render(p, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func sampleVAP(t *testing.T, o Options) *Rendered {
	t.Helper()
	data, err := os.ReadFile("../../../config/samples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return renderVAP(t, string(data), o)
}

func limitStrings(ls []Limit) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Rule+" "+string(l.Support)+" "+string(l.Invariant)+" "+l.Field)
	}
	return out
}

// One policy and one binding per rule and resource, refusing writes
// (Deny), warning (Warn) or recording them (Audit) as the rule's
// enforcement says, never failing open, never called for the control
// plane, operators or leaseguard's own namespace.
func TestVAPShape(t *testing.T) {
	r := renderVAP(t, head+`- name: two-kinds
  resources: [leases, multiclusterleases]
  namespaces: [team-a]
  managers: ["svc:*"]
  operators: ["ops"]
- name: warned
  resources: [leases]
  namespaces: [team-w]
  managers: ["svc:*"]
  enforcement: warn
- name: audited
  resources: [leases]
  managers: ["svc:*"]
  enforcement: audit
`, Defaults())
	var names []string
	actions := map[string]admissionregistrationv1.ValidationAction{}
	for i, p := range r.Policies {
		names = append(names, p.Name)
		b := r.Bindings[i]
		if b.Spec.PolicyName != p.Name || len(b.Spec.ValidationActions) != 1 {
			t.Fatalf("binding %s: %+v", b.Name, b.Spec)
		}
		actions[p.Name] = b.Spec.ValidationActions[0]
		if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("%s: failurePolicy %v, want Fail", p.Name, p.Spec.FailurePolicy)
		}
		var conds strings.Builder
		for _, c := range p.Spec.MatchConditions {
			conds.WriteString(c.Expression + "\n")
		}
		for _, who := range []string{"system:node:", "system:kube-controller-manager", "system:serviceaccount:kube-system:", "oldObject.?spec"} {
			if !strings.Contains(conds.String(), who) {
				t.Errorf("%s: matchConditions do not mention %s", p.Name, who)
			}
		}
		sel := p.Spec.MatchConstraints.NamespaceSelector.MatchExpressions
		if len(sel) == 0 || !slices.Contains(sel[0].Values, "kube-system") || !slices.Contains(sel[0].Values, "leaseguard-system") {
			t.Errorf("%s: namespaceSelector %+v", p.Name, sel)
		}
	}
	want := []string{"leaseguard-two-kinds-leases", "leaseguard-two-kinds-multiclusterleases", "leaseguard-warned-leases", "leaseguard-audited-leases"}
	if !slices.Equal(names, want) {
		t.Fatalf("policies %v, want %v", names, want)
	}
	if actions["leaseguard-two-kinds-leases"] != admissionregistrationv1.Deny || actions["leaseguard-warned-leases"] != admissionregistrationv1.Warn ||
		actions["leaseguard-audited-leases"] != admissionregistrationv1.Audit {
		t.Errorf("validationActions %v", actions)
	}
	if c := condition(r.Policies[0].Spec.MatchConditions, "not-an-operator"); !strings.Contains(c, `g == "ops"`) {
		t.Errorf("operators are not left out by group: %q", c)
	}
	if condition(r.Policies[2].Spec.MatchConditions, "not-an-operator") != "" {
		t.Errorf("a rule without operators has a not-an-operator condition")
	}
	mcl := r.Policies[1]
	if len(mcl.Spec.MatchConstraints.ResourceRules) != 1 || !slices.Contains(mcl.Spec.MatchConstraints.ResourceRules[0].Resources, "multiclusterleases/status") {
		t.Errorf("the MultiClusterLease policy does not take the status subresource: %+v", mcl.Spec.MatchConstraints.ResourceRules)
	}
	if len(r.Limits) != 0 {
		t.Errorf("limits %v for rules the policies enforce whole", limitStrings(r.Limits))
	}
}

// What the policies do not enforce is listed for each rule, never dropped.
func TestVAPLimitsOfTheSample(t *testing.T) {
	r := sampleVAP(t, Defaults())
	want := []string{
		"kcc-mcl unsupported  designation: auto",
		"kcc-mcl partial I2 designation: auto",
		"kcc-mcl partial I2 designation",
		"kcc-mcl unsupported I6 minRenewInterval",
		"kcc-mcl partial I2 backOffLosers",
		"kcc-mcl unsupported  coalesceRenewals",
		"kcc-namespace-leases partial I4 holderBinding",
		"kcc-namespace-leases unsupported I6 minRenewInterval",
		"kcc-namespace-leases unsupported  coalesceRenewals",
		// Config Connector's dedicated manager namespaces: the lease is
		// bound by name and namespace, exactly (no limit on bind).
		"kcc-manager-namespace-leases partial I4 holderBinding",
		"kcc-manager-namespace-leases unsupported I6 minRenewInterval",
		"kcc-manager-namespace-leases unsupported  coalesceRenewals",
	}
	if got := limitStrings(r.Limits); !slices.Equal(got, want) {
		t.Fatalf("limits\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r.Coalescing != nil {
		t.Errorf("a coalescing policy was rendered without VAPOptions.Coalescing")
	}
	o := Defaults()
	o.Coalescing = true
	with := sampleVAP(t, o)
	// The MutatingAdmissionPolicy coalesces, and acknowledges the other
	// managers' shared renewals (the limit on designation goes too).
	if with.Coalescing == nil || with.CoalescingBinding == nil || len(with.Limits) != len(want)-4 {
		t.Errorf("with coalescing: policy %v, limits %v", with.Coalescing != nil, limitStrings(with.Limits))
	}
	for _, l := range with.Limits {
		if l.Field == "coalesceRenewals" || l.Field == "designation" {
			t.Errorf("the MutatingAdmissionPolicy does it, yet it is listed as a limit: %s", l)
		}
	}
}

// A bind template with several captures: its managers are recognised
// (exactly, by a regular expression), but which lease each may write is
// not checked, and the limit says so.
func TestVAPBindWithSeveralCaptures(t *testing.T) {
	r := renderVAP(t, head+`- name: multi
  resources: [leases]
  bind:
    manager: "system:serviceaccount:{ns}:manager-{team}"
    lease: "{ns}-{team}"
`, Defaults())
	if got := limitStrings(r.Limits); !slices.Equal(got, []string{"multi unsupported I9 bind"}) {
		t.Fatalf("limits %v", got)
	}
	if !strings.Contains(variable(r.Policies[0], "bound"), `.matches("^system:serviceaccount:[^:]+:manager-[^:]+$")`) {
		t.Errorf("bound: %s", variable(r.Policies[0], "bound"))
	}
	if variable(r.Policies[0], "boundLease") != "true" {
		t.Errorf("boundLease: %s", variable(r.Policies[0], "boundLease"))
	}
}

// The benchmark's policy: one bind rule, nothing the policies cannot do
// but judge a DELETE by the clock.
func TestVAPOneBindRule(t *testing.T) {
	r := renderVAP(t, head+`- name: bound
  resources: [leases]
  namespaces: [bench]
  bind:
    manager: "system:serviceaccount:bench:elector-{id}"
    lease: "leader-{id}"
  holderBinding: pod
`, Defaults())
	if len(r.Policies) != 1 || len(r.Bindings) != 1 || !slices.Equal(limitStrings(r.Limits), []string{"bound partial I4 holderBinding"}) || r.Coalescing != nil {
		t.Fatalf("policies %d, bindings %d, limits %v", len(r.Policies), len(r.Bindings), limitStrings(r.Limits))
	}
	if got := variable(r.Policies[0], "boundLease"); !strings.Contains(got, `"leader-" + variables.user.substring(36)`) {
		t.Errorf("boundLease: %s", got)
	}
}

var codeLiteral = regexp.MustCompile(`"((?:I[0-9]+|cannot-decide)[A-Za-z0-9-]*)"`)

// Every refusal the failure variable can name has exactly one validation,
// with a one-line static message under 256 bytes, and every validation's
// code can be named: the procedure and its messages cannot drift apart.
func TestVAPEveryFailureHasOneValidation(t *testing.T) {
	o := Defaults()
	sources := []string{head + `- name: auto
  resources: [leases, multiclusterleases]
  namespaces: [t]
  managers: ["m-*"]
  designation: auto
  statusWriters: [ctrl]
  holderBinding: pod
- name: annot
  resources: [leases]
  namespaces: [a]
  managers: ["m-*"]
  designation: annotation
  holderBinding: username
- name: fixed
  resources: [multiclusterleases]
  namespaces: [f]
  designation: svc:fixed
  bind:
    manager: "m-{x}"
    lease: "l-{x}"
`}
	for _, src := range sources {
		r := renderVAP(t, src, o)
		for _, p := range r.Policies {
			named := map[string]bool{}
			for _, v := range p.Spec.Variables {
				if strings.HasSuffix(v.Name, "Failure") || v.Name == "failure" {
					for _, m := range codeLiteral.FindAllStringSubmatch(v.Expression, -1) {
						named[m[1]] = true
					}
				}
			}
			validated := map[string]int{}
			for _, val := range p.Spec.Validations {
				m := codeLiteral.FindStringSubmatch(val.Expression)
				if m == nil {
					t.Fatalf("%s: validation %q names no code", p.Name, val.Expression)
				}
				validated[m[1]]++
				inv := invariantOf(m[1])
				if inv != policy.InvariantNone && !regexp.MustCompile(`^I([1-9]|1[01])$`).MatchString(string(inv)) {
					t.Errorf("%s: code %s names no invariant of docs/design.md §4", p.Name, m[1])
				}
				if val.Message == "" || len(val.Message) > policy.MaxMessageLength || strings.ContainsAny(val.Message, "\n\r") {
					t.Errorf("%s: static message %q", p.Name, val.Message)
				}
				if !strings.HasPrefix(val.Message, "leaseguard: ") {
					t.Errorf("%s: static message %q does not say leaseguard", p.Name, val.Message)
				}
			}
			for code := range named {
				if validated[code] != 1 {
					t.Errorf("%s: failure %s has %d validations", p.Name, code, validated[code])
				}
			}
			for code := range validated {
				if !named[code] {
					t.Errorf("%s: validation for %s, which the procedure never names", p.Name, code)
				}
			}
		}
	}
}

// The YAML carries the limits as comments and reads back strictly as the
// API types.
func TestVAPYAML(t *testing.T) {
	o := Defaults()
	o.Coalescing = true
	r := sampleVAP(t, o)
	data, err := r.YAML(Header("--config config/samples/policy.yaml --coalesce"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	if !strings.HasPrefix(text, "# Generated by `leaseguard vap --config config/samples/policy.yaml --coalesce`: do not edit.") ||
		!strings.Contains(text, "# LIMIT: rule kcc-mcl: unsupported (I6, minRenewInterval): ") {
		t.Errorf("header or limits missing:\n%s", text[:min(len(text), 800)])
	}
	docs := strings.Split(text, "\n---\n")[1:]
	if len(docs) != 2+2*len(r.Policies) {
		t.Fatalf("%d documents, want %d", len(docs), 2+2*len(r.Policies))
	}
	var vap admissionregistrationv1.ValidatingAdmissionPolicy
	if err := yaml.UnmarshalStrict([]byte(docs[2]), &vap); err != nil || vap.Name != r.Policies[0].Name || len(vap.Spec.Validations) != len(r.Policies[0].Spec.Validations) {
		t.Errorf("the first policy does not read back: %v", err)
	}
}

func TestRenderVAPNeedsAPolicyAndAPlace(t *testing.T) {
	if _, err := Render(nil, Defaults()); err == nil {
		t.Error("rendering no policy succeeded")
	}
	p, err := policyfile.Parse([]byte(head+"- name: r\n  resources: [leases]\n  managers: [a]\n"), policy.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Render(p, Options{}); err == nil {
		t.Error("rendering without a prefix or namespace succeeded")
	}
}

func variable(p *admissionregistrationv1.ValidatingAdmissionPolicy, name string) string {
	for _, v := range p.Spec.Variables {
		if v.Name == name {
			return v.Expression
		}
	}
	return ""
}

// Static messages change the messages only: the same policies, variables
// and validation expressions, each validation keeping its fixed message and
// losing its messageExpression.
func TestVAPStaticMessagesChangeOnlyTheMessages(t *testing.T) {
	exact := sampleVAP(t, Defaults())
	o := Defaults()
	o.StaticMessages = true
	static := sampleVAP(t, o)
	if len(static.Policies) != len(exact.Policies) || len(static.Policies) == 0 {
		t.Fatalf("%d policies with static messages, %d without", len(static.Policies), len(exact.Policies))
	}
	for i, p := range static.Policies {
		want := exact.Policies[i].DeepCopy()
		withExpression := 0
		for j := range want.Spec.Validations {
			if want.Spec.Validations[j].MessageExpression != "" {
				withExpression++
			}
			want.Spec.Validations[j].MessageExpression = ""
		}
		if withExpression == 0 {
			t.Errorf("%s: the exact rendering has no messageExpression to drop", want.Name)
		}
		if !equality.Semantic.DeepEqual(p, want) {
			t.Errorf("%s: static messages changed more than the messageExpressions", p.Name)
		}
		for _, val := range p.Spec.Validations {
			if val.Message == "" {
				t.Errorf("%s: a validation without a message: %s", p.Name, val.Expression)
			}
		}
	}
	if got := Args("policy.yaml", o); got != "--config policy.yaml --static-messages" {
		t.Errorf("header args %q", got)
	}
}

func condition(conds []admissionregistrationv1.MatchCondition, name string) string {
	for _, c := range conds {
		if c.Name == name {
			return c.Expression
		}
	}
	return ""
}
