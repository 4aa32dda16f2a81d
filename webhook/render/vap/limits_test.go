package vap_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
	"github.com/leaseguard/leaseguard/webhook/render/vap"
)

// bigPolicy has a Lease rule over n namespaces and, when later, a Lease rule
// after it over a glob, whose selection must exclude the first rule's.
func bigPolicy(n int, later bool) string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("apps-%05d", i)
	}
	src := `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
rules:
- name: apps
  resources: [leases]
  namespaces: [` + strings.Join(names, ", ") + `]
  managers: ["system:serviceaccount:apps:*"]
`
	if later {
		src += `- name: teams
  resources: [leases]
  namespaces: ["team-*", "apps-00001"]
  managers: ["system:serviceaccount:teams:*"]
`
	}
	return src
}

// The admission policies are held to the API server's limits as the
// webhook configurations are, but never broadened (they decide what they
// select): a rule's own namespaces are left to its namespaceSelector, the
// lists are written compactly, and what still does not fit is an error
// naming the rule and the limit.
func TestAdmissionPoliciesFitTheAPIServerOrSayWhy(t *testing.T) {
	envSet := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	for _, c := range []struct {
		name    string
		src     string
		refused string // the error, when it does not fit
	}{
		{"1,200 namespaces", bigPolicy(1200, false), ""},
		{"1,200 namespaces and a later rule", bigPolicy(1200, true), ""},
		{"10,000 namespaces", bigPolicy(10000, false), ""},
		{"10,000 namespaces and a later rule", bigPolicy(10000, true), "rule teams: validatingadmissionpolicy leaseguard-teams-leases does not fit the API server's limits: condition selected-by-rule:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := policyfile.Parse([]byte(c.src), policy.CompileOptions{OwnNamespace: "leaseguard-system"})
			if err != nil {
				t.Fatal(err)
			}
			r, err := vap.Render(p, vap.Defaults())
			if c.refused != "" {
				if err == nil || !strings.Contains(err.Error(), c.refused) || !strings.Contains(err.Error(), "100000") || strings.Contains(err.Error(), "\n") {
					t.Fatalf("Render: %v\nwant one line containing %q and the limit", err, c.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, pol := range r.Policies {
				for _, mc := range pol.Spec.MatchConditions {
					if n := utf8.RuneCountInString(mc.Expression); n > manifests.ExpressionBudget {
						t.Errorf("%s condition %s: %d code points", pol.Name, mc.Name, n)
					}
				}
				compilePolicy(t, envSet, pol.Name, pol.Spec.Variables, pol.Spec.MatchConditions, pol.Spec.Validations)
			}
		})
	}
}
