package manifests

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
)

func render(t *testing.T, src string, o Options) *Rendered {
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

const head = "apiVersion: leaseguard.io/v1alpha1\nkind: LeasePolicy\nrules:\n"

func condition(conds []admissionregistrationv1.MatchCondition, name string) string {
	for _, c := range conds {
		if c.Name == name {
			return c.Expression
		}
	}
	return ""
}

// Identity changes go to the fail-closed webhook; every other change to the
// fail-open one, which leaves identity changes that are UPDATEs to the
// former.
func TestFailureSplit(t *testing.T) {
	r := render(t, head+`- name: r
  resources: [leases]
  namespaces: [team-a, team-b]
  managers: ["svc:*"]
  holderBinding: pod
`, Defaults())
	hooks := r.Validating.Webhooks
	if len(hooks) != 2 || hooks[0].Name != ValidateWebhook || *hooks[0].FailurePolicy != admissionregistrationv1.Fail ||
		hooks[1].Name != RenewalsWebhook || *hooks[1].FailurePolicy != admissionregistrationv1.Ignore {
		t.Fatalf("webhooks %+v", hooks)
	}
	if *hooks[0].ClientConfig.Service.Path != "/validate-leases" || *hooks[1].ClientConfig.Service.Path != "/validate-renewals" {
		t.Errorf("paths %s, %s", *hooks[0].ClientConfig.Service.Path, *hooks[1].ClientConfig.Service.Path)
	}
	closed := condition(hooks[0].MatchConditions, "selected-fail-closed")
	for _, want := range []string{`request.?namespace`, `"team-a"`, "!(request.operation == 'UPDATE'", "object.?spec.?holderIdentity == oldObject.?spec.?holderIdentity",
		"object.metadata.?finalizers == oldObject.metadata.?finalizers", `object.metadata.?annotations[?"leaseguard.io/designated-manager"]`,
		// Renewals by anyone but the rightful renewer: a manager, from the
		// holder's pod.
		`!(request.userInfo.username.startsWith("svc:")`, `authentication.kubernetes.io/pod-name`} {
		if !strings.Contains(closed, want) {
			t.Errorf("fail-closed condition lacks %s:\n%s", want, closed)
		}
	}
	// Callers first; then a no-op of the object itself goes nowhere, and
	// any other write that changes an identity or is not a renewal
	// harmless unchecked (harmlessRenewal: forward, readable, not ahead of
	// the API server's stamp, nothing else re-dated) never takes the
	// fail-open path. renewTime decides nothing about identity.
	callers, rest, ok := strings.Cut(closed, " || (((request.operation == 'UPDATE' && object.?spec.?renewTime == oldObject.?spec.?renewTime")
	_, afterNoop, ok2 := strings.Cut(rest, "&& request.?subResource.orValue('') == '') ? false : (")
	identity, harmless, ok3 := strings.Cut(afterNoop, " || !(request.operation == 'UPDATE' && (object.?spec.?renewTime.hasValue()")
	if !ok || !ok2 || !ok3 || !strings.Contains(callers, `!(request.userInfo.username.startsWith("svc:")`) || strings.Contains(identity, "renewTime") || !strings.Contains(harmless, `timestamp(object.spec.renewTime) <= timestamp(m.time) + duration("3s")`) ||
		!strings.Contains(harmless, `timestamp(object.spec.renewTime) >= timestamp(m.time) - duration("2s")`) {
		t.Errorf("fail-closed condition: callers, then no-ops to neither webhook, then identity changes and writes that are not harmless renewals (clockSkew 2s + 1s):\n%s", closed)
	}
	open := condition(hooks[1].MatchConditions, "selected-and-changed")
	if !strings.Contains(open, "(request.operation == 'UPDATE' && object.?spec.?renewTime == oldObject.?spec.?renewTime && object.?spec == oldObject.?spec") {
		t.Errorf("the fail-open condition does not compare renewTime first:\n%s", open)
	}
	if got := hooks[1].Rules[0].Operations; len(got) != 1 || got[0] != admissionregistrationv1.Update {
		t.Errorf("the renewals webhook takes %v, want only UPDATE", got)
	}
	nsSel := hooks[0].NamespaceSelector.MatchExpressions
	if len(nsSel) != 2 || nsSel[1].Operator != "In" || strings.Join(nsSel[1].Values, ",") != "team-a,team-b" {
		t.Errorf("namespaceSelector %+v, want the rule's namespaces", nsSel)
	}
	if r.Mutating != nil || r.Coalescing != nil {
		t.Errorf("no rule stamps or coalesces, yet a mutating webhook or policy is rendered")
	}
	openOnly := render(t, head+"- name: r\n  resources: [leases]\n  managers: [a]\n", Options{Namespace: "ns", ServiceName: "s", Prefix: "p", FailOpen: true})
	if len(openOnly.Validating.Webhooks) != 1 || *openOnly.Validating.Webhooks[0].FailurePolicy != admissionregistrationv1.Ignore {
		t.Errorf("--fail-open: %+v", openOnly.Validating.Webhooks)
	}
	if len(openOnly.Validating.Webhooks[0].NamespaceSelector.MatchExpressions) != 1 {
		t.Errorf("a rule for every namespace must not narrow the namespaceSelector")
	}
}

// Rules are matched first to last, as the core selects.
func TestLaterRulesExcludeEarlierOnes(t *testing.T) {
	r := render(t, head+`- name: first
  resources: [leases]
  namespaces: [team-*]
  names: [special]
  managers: [a]
- name: second
  resources: [leases]
  namespaces: [team-*]
  managers: [b]
  coalesceRenewals: auto
`, Defaults())
	early := condition(r.Coalescing.Spec.MatchConditions, "early-renewal")
	if !strings.Contains(early, `!(request.resource.resource == "leases" && request.?namespace.orValue('').startsWith("team-") && `) {
		t.Errorf("the second rule's coalescing does not exclude what the first selects:\n%s", early)
	}
}

// A bind template with several captures cannot be matched in CEL: said in
// the notes, and no coalescing for that rule.
func TestUnexpressibleBindTemplatesAreNoted(t *testing.T) {
	r := render(t, head+`- name: multi
  resources: [leases]
  bind:
    manager: "system:serviceaccount:{ns}:manager-{team}"
    lease: "{ns}-{team}"
  coalesceRenewals: auto
`, Defaults())
	if r.Coalescing != nil {
		t.Errorf("a coalescing policy was rendered for a rule CEL cannot match")
	}
	notes := strings.Join(r.Notes, "\n")
	for _, want := range []string{"rule multi: renewals are not coalesced"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q lack %q", notes, want)
		}
	}
}

// The mutating webhook is called only where a designation may need
// stamping: never for the designated manager's own writes.
func TestMutatingWebhookOnlyForDesignation(t *testing.T) {
	r := render(t, head+`- name: auto
  resources: [multiclusterleases]
  namespaces: [cnrm-system]
  managers: ["m-*"]
  designation: auto
- name: plain
  resources: [leases]
  namespaces: [other]
  managers: ["m-*"]
`, Defaults())
	if r.Mutating == nil {
		t.Fatal("no mutating webhook for designation: auto")
	}
	w := r.Mutating.Webhooks[0]
	if len(w.Rules) != 1 || w.Rules[0].Resources[0] != "multiclusterleases" {
		t.Errorf("mutating rules %+v, want only the auto rule's resources", w.Rules)
	}
	cond := condition(w.MatchConditions, "may-need-designation")
	if !strings.Contains(cond, `!= request.userInfo.username`) || strings.Contains(cond, `"other"`) {
		t.Errorf("may-need-designation: %s", cond)
	}
	url := render(t, head+"- name: r\n  resources: [leases]\n  managers: [a]\n  designation: auto\n",
		Options{Namespace: "ns", URL: "https://127.0.0.1:9443/", Prefix: "p", Coalescing: CoalesceOff})
	if got := *url.Mutating.Webhooks[0].ClientConfig.URL; got != "https://127.0.0.1:9443/mutate-leases" {
		t.Errorf("URL %s", got)
	}
}

func TestRenderNeedsAPlace(t *testing.T) {
	p, err := policyfile.Parse([]byte(head+"- name: r\n  resources: [leases]\n  managers: [a]\n"), policy.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Render(p, Options{}); err == nil {
		t.Error("rendering without a namespace, service or prefix succeeded")
	}
}
