package vap_test

import (
	"fmt"
	"os"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	celplugin "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
	"github.com/leaseguard/leaseguard/webhook/render/vap"
)

// The policies the repository ships or tests with.
var shippedPolicies = []string{
	"../../../config/samples/policy.yaml",
	"../../../config/manager/policy.yaml",
	"../../../config/e2e-policy/policy.yaml",
	"../../../test/multicluster/testdata/policy.yaml",
}

// expression is one generated CEL expression and where it stands.
type expression struct {
	where, text string
	accessor    celplugin.ExpressionAccessor
}

// Every CEL expression leaseguard generates — the webhooks' match
// conditions in every coalescing mode, the coalescing policy's conditions
// and variables, and the ValidatingAdmissionPolicies' variables,
// conditions, validations and messages, with and without static messages —
// compiles in the API server's own CEL environment for new expressions (the
// stricter one it checks objects it is given with), for every policy the
// repository ships. (The API server does not refuse admission expressions
// by estimated cost: it cuts them at run time, a budget per call. What they
// cost per renewal is measured by this package's benchmarks, make
// bench-cel.)
func TestEveryGeneratedExpressionCompiles(t *testing.T) {
	envSet := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
	total := 0
	for _, path := range shippedPolicies {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		p, err := policyfile.Parse(data, policy.CompileOptions{OwnNamespace: "leaseguard-system"})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, c := range []manifests.Coalescing{manifests.CoalesceInAPIServer, manifests.CoalesceInWebhook, manifests.CoalesceOff} {
			o := manifests.Defaults()
			o.Coalescing = c
			r, err := manifests.Render(p, o)
			if err != nil {
				t.Fatalf("%s, --coalesce %s: %v", path, c, err)
			}
			for _, w := range r.Validating.Webhooks {
				total += compilePolicy(t, envSet, fmt.Sprintf("%s --coalesce %s: webhook %s", path, c, w.Name), nil, w.MatchConditions, nil)
			}
			if r.Mutating != nil {
				for _, w := range r.Mutating.Webhooks {
					total += compilePolicy(t, envSet, fmt.Sprintf("%s --coalesce %s: webhook %s", path, c, w.Name), nil, w.MatchConditions, nil)
				}
			}
			if m := r.Coalescing; m != nil {
				total += compilePolicy(t, envSet, fmt.Sprintf("%s --coalesce %s: %s", path, c, m.Name), m.Spec.Variables, m.Spec.MatchConditions, nil)
			}
		}
		for _, static := range []bool{false, true} {
			vo := vap.Defaults()
			vo.StaticMessages = static
			r, err := vap.Render(p, vo)
			if err != nil {
				t.Fatalf("%s, vap: %v", path, err)
			}
			for _, pol := range r.Policies {
				total += compilePolicy(t, envSet, fmt.Sprintf("%s vap (static messages %v): %s", path, static, pol.Name),
					pol.Spec.Variables, pol.Spec.MatchConditions, pol.Spec.Validations)
			}
		}
	}
	if total < 100 {
		t.Errorf("compiled %d expressions: the renderings were not what this test expects", total)
	}
	t.Logf("%d generated expressions compiled", total)
}

func conditions(where string, mcs []admissionregistrationv1.MatchCondition) []expression {
	out := make([]expression, len(mcs))
	for i := range mcs {
		out[i] = expression{where: where + " condition " + mcs[i].Name, text: mcs[i].Expression, accessor: (*matchconditions.MatchCondition)(&mcs[i])}
	}
	return out
}

// compileAll compiles each expression and fails the test on an error.
func compileAll(t *testing.T, c celplugin.Compiler, exprs []expression, opts celplugin.OptionalVariableDeclarations) int {
	t.Helper()
	for _, e := range exprs {
		if res := c.CompileCELExpression(e.accessor, opts, environment.NewExpressions); res.Error != nil {
			t.Errorf("%s: %v\n%s", e.where, res.Error, e.text)
		}
	}
	return len(exprs)
}

// compilePolicy compiles a policy's variables (in order, each seeing those
// before it), then its conditions, validations and messages in their scope,
// as the API server's policy plugins do.
func compilePolicy(t *testing.T, envSet *environment.EnvSet, where string, vars []admissionregistrationv1.Variable,
	mcs []admissionregistrationv1.MatchCondition, validations []admissionregistrationv1.Validation) int {
	t.Helper()
	compiler, err := celplugin.NewCompositedCompiler(envSet)
	if err != nil {
		t.Fatal(err)
	}
	opts := celplugin.OptionalVariableDeclarations{HasAuthorizer: true}
	n := 0
	for _, v := range vars {
		res := compiler.CompileAndStoreVariable(&validating.Variable{Name: v.Name, Expression: v.Expression}, opts, environment.NewExpressions)
		if res.Error != nil {
			t.Errorf("%s: variable %s: %v\n%s", where, v.Name, res.Error, v.Expression)
		}
		n++
	}
	exprs := conditions(where, mcs)
	for _, v := range validations {
		exprs = append(exprs, expression{where: where + " validation", text: v.Expression,
			accessor: &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}})
		if v.MessageExpression != "" {
			exprs = append(exprs, expression{where: where + " messageExpression", text: v.MessageExpression,
				accessor: &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}})
		}
	}
	n += compileAll(t, compiler, exprs, opts)
	return n
}
