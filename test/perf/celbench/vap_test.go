package celbench

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	celplugin "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/leaseguard/leaseguard/webhook/render/vap"
)

// vapFor renders `leaseguard vap` for the sample policy and returns the
// policy of the bound Leases' rule.
func vapFor(b *testing.B, rule string, o vap.Options) *admissionregistrationv1.ValidatingAdmissionPolicy {
	r, err := vap.Render(samplePolicy(b), o)
	if err != nil {
		b.Fatal(err)
	}
	for _, pol := range r.Policies {
		if pol.Name == "leaseguard-"+rule+"-leases" {
			return pol
		}
	}
	b.Fatalf("no policy for rule %s", rule)
	return nil
}

// compileVAP compiles a policy as the API server's validating admission
// policy plugin does (validating.compilePolicy).
func compileVAP(b *testing.B, pol *admissionregistrationv1.ValidatingAdmissionPolicy) validating.Validator {
	optionalVars := celplugin.OptionalVariableDeclarations{HasAuthorizer: true}
	messageVars := celplugin.OptionalVariableDeclarations{}
	compiler, err := celplugin.NewCompositedCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	if err != nil {
		b.Fatal(err)
	}
	vars := make([]celplugin.NamedExpressionAccessor, len(pol.Spec.Variables))
	for i, v := range pol.Spec.Variables {
		vars[i] = &validating.Variable{Name: v.Name, Expression: v.Expression}
	}
	compiler.CompileAndStoreVariables(vars, optionalVars, environment.StoredExpressions)
	conds := make([]celplugin.ExpressionAccessor, len(pol.Spec.MatchConditions))
	for i := range pol.Spec.MatchConditions {
		conds[i] = (*matchconditions.MatchCondition)(&pol.Spec.MatchConditions[i])
	}
	matcher := matchconditions.NewMatcher(compiler.CompileCondition(conds, optionalVars, environment.StoredExpressions), pol.Spec.FailurePolicy, "policy", "validate", pol.Name)
	validations := make([]celplugin.ExpressionAccessor, len(pol.Spec.Validations))
	messages := make([]celplugin.ExpressionAccessor, len(pol.Spec.Validations))
	for i, v := range pol.Spec.Validations {
		validations[i] = &validating.ValidationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	return validating.NewValidator(compiler.CompileCondition(validations, optionalVars, environment.StoredExpressions), matcher,
		compiler.CompileCondition(nil, optionalVars, environment.StoredExpressions),
		compiler.CompileCondition(messages, messageVars, environment.StoredExpressions), pol.Spec.FailurePolicy, nil)
}

// BenchmarkVAP: what the generated ValidatingAdmissionPolicy of the bound
// Leases' rule costs the API server per renewal (its match conditions, its
// variables, validations and messages), as `leaseguard vap` renders it and
// with --static-messages.
func BenchmarkVAP(b *testing.B) {
	gvr := schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
	run := func(b *testing.B, pol *admissionregistrationv1.ValidatingAdmissionPolicy) {
		v := compileVAP(b, pol)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			res := v.Validate(ctx, gvr, write(false), nil, nil, celconfig.RuntimeCELCostBudget, nil)
			for _, d := range res.Decisions {
				if d.Action != validating.ActionAdmit {
					b.Fatalf("decision %+v, want admitted", d)
				}
			}
		}
	}
	b.Run("as-rendered", func(b *testing.B) { run(b, vapFor(b, "kcc-namespace-leases", vap.Defaults())) })
	static := vap.Defaults()
	static.StaticMessages = true
	b.Run("static-messages", func(b *testing.B) { run(b, vapFor(b, "kcc-namespace-leases", static)) })
	// What the server's clock alone costs: the rendered variables, and one
	// validation that needs only the clock (now, from the writer's own
	// managedFields stamp; no entry re-dated ahead of it; the stored
	// renewal's record not moved back).
	clock := vapFor(b, "kcc-namespace-leases", static)
	clock.Spec.Validations = []admissionregistrationv1.Validation{{
		Expression: "variables.now.hasValue() && !variables.clockRewritten && variables.recordFailure == ''", Message: "clock"}}
	b.Run("clock-only", func(b *testing.B) { run(b, clock) })
	// The floor: benchapi's hand-written policy of three identity checks
	// (docs/performance.md, setup vap), on this write.
	hand := vapFor(b, "kcc-namespace-leases", static)
	hand.Spec.Variables = nil
	hand.Spec.Validations = []admissionregistrationv1.Validation{
		{Expression: "object.metadata.name.startsWith('kcc-leader-') && request.userInfo.username == 'system:serviceaccount:cnrm-system:cnrm-controller-manager-' + object.metadata.name.substring(11)", Message: "name"},
		{Expression: "!has(object.spec.holderIdentity) || object.spec.holderIdentity == '' || (has(request.userInfo.extra) && request.userInfo.extra[?'authentication.kubernetes.io/pod-name'].orValue([''])[0] != '' && object.spec.holderIdentity.startsWith(request.userInfo.extra[?'authentication.kubernetes.io/pod-name'].orValue([''])[0]))", Message: "holder"},
		{Expression: "oldObject == null || !has(oldObject.spec.renewTime) || !has(object.spec.renewTime) || timestamp(object.spec.renewTime) >= timestamp(oldObject.spec.renewTime)", Message: "time"},
	}
	b.Run("hand-written-three-checks", func(b *testing.B) { run(b, hand) })
}
