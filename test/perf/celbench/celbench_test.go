// Package celbench measures, with the API server's own CEL machinery, what
// the matchConditions that `leaseguard manifests` renders cost the API server
// per lease write: the conditions of each webhook and of the coalescing
// policy, on a renewal and on a coalesced (no-op) renewal.
//
//	cd test/perf && go test -run '^$' -bench . -benchmem ./celbench
package celbench

import (
	"context"
	"os"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	celplugin "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/utils/ptr"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

// samplePolicy is config/samples/policy.yaml, compiled.
func samplePolicy(b testing.TB) *policy.Policy {
	data, err := os.ReadFile("../../../config/samples/policy.yaml")
	if err != nil {
		b.Fatal(err)
	}
	p, err := policyfile.Parse(data, policy.CompileOptions{OwnNamespace: "leaseguard-system"})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

func rendered(b *testing.B) *manifests.Rendered {
	r, err := manifests.Render(samplePolicy(b), manifests.Defaults())
	if err != nil {
		b.Fatal(err)
	}
	return r
}

func matcher(conds []admissionregistrationv1.MatchCondition) matchconditions.Matcher {
	compiler := celplugin.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	exprs := make([]celplugin.ExpressionAccessor, len(conds))
	for i, c := range conds {
		exprs[i] = &matchconditions.MatchCondition{Name: c.Name, Expression: c.Expression}
	}
	fail := admissionregistrationv1.Fail
	return matchconditions.NewMatcher(compiler.CompileCondition(exprs, celplugin.OptionalVariableDeclarations{HasAuthorizer: true}, environment.StoredExpressions),
		&fail, "webhook", "validating", "bench")
}

// write is the bound Lease of team-a renewed by its pod: renewTime moves,
// or (coalesced) does not while managedFields' time does.
func write(coalesced bool) *admission.VersionedAttributes {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	lease := func(renew time.Time, mf time.Time) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "kcc-leader-team-a", Namespace: "cnrm-system", ResourceVersion: "42",
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "coordination.k8s.io/v1",
					Time: &metav1.Time{Time: mf}, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:holderIdentity":{},"f:leaseDurationSeconds":{},"f:renewTime":{}}}`)}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("cnrm-controller-manager-team-a-0_1f2e"), LeaseDurationSeconds: ptr.To[int32](15),
				AcquireTime: &metav1.MicroTime{Time: t0.Add(-time.Hour)}, RenewTime: &metav1.MicroTime{Time: renew}, LeaseTransitions: ptr.To[int32](3)},
		}
	}
	old := lease(t0, t0)
	renewTo := t0.Add(2 * time.Second)
	if coalesced {
		renewTo = t0
	}
	nw := lease(renewTo, t0.Add(2*time.Second))
	gvk := schema.GroupVersionKind{Group: "coordination.k8s.io", Version: "v1", Kind: "Lease"}
	attrs := admission.NewAttributesRecord(nw, old, gvk, "cnrm-system", "kcc-leader-team-a",
		schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}, "", admission.Update, &metav1.UpdateOptions{}, false,
		&user.DefaultInfo{Name: "system:serviceaccount:cnrm-system:cnrm-controller-manager-team-a", Groups: []string{"system:serviceaccounts"},
			Extra: map[string][]string{leaseobject.PodNameExtra: {"cnrm-controller-manager-team-a-0"}}})
	return &admission.VersionedAttributes{Attributes: attrs, VersionedKind: gvk,
		VersionedObject: admission.NewLazyObject(nw), VersionedOldObject: admission.NewLazyObject(old)}
}

func bench(b *testing.B, conds []admissionregistrationv1.MatchCondition, coalesced, want bool) {
	benchWrites(b, conds, func() *admission.VersionedAttributes { return write(coalesced) }, want)
}

// benchWrites evaluates conds on the writes next makes, one a request.
func benchWrites(b *testing.B, conds []admissionregistrationv1.MatchCondition, next func() *admission.VersionedAttributes, want bool) {
	m := matcher(conds)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		// A fresh request each time: the API server converts the objects for
		// CEL once per request.
		r := m.Match(ctx, next(), nil, nil)
		if r.Error != nil {
			b.Fatal(r.Error)
		}
		if r.Matches != want {
			b.Fatalf("matches = %v, want %v (failed: %s)", r.Matches, want, r.FailedConditionName)
		}
	}
}

// BenchmarkMatchConditions: per lease renewal, each of the API server's
// evaluations of leaseguard's conditions (the conversion of the objects is
// in the first one a request makes).
func BenchmarkMatchConditions(b *testing.B) {
	r := rendered(b)
	validate, renewals := r.Validating.Webhooks[0].MatchConditions, r.Validating.Webhooks[1].MatchConditions
	b.Run("renewal/validate", func(b *testing.B) { bench(b, validate, false, false) })
	b.Run("renewal/renewals", func(b *testing.B) { bench(b, renewals, false, true) })
	b.Run("renewal/coalesce-policy", func(b *testing.B) { bench(b, r.Coalescing.Spec.MatchConditions, false, true) })
	b.Run("coalesced/validate", func(b *testing.B) { bench(b, validate, true, false) })
	b.Run("coalesced/renewals", func(b *testing.B) { bench(b, renewals, true, false) })
	b.Run("baseline/object-conversion-only", func(b *testing.B) {
		bench(b, []admissionregistrationv1.MatchCondition{{Name: "x", Expression: "object.spec.holderIdentity != '' && oldObject.spec.holderIdentity != ''"}}, false, true)
	})
}
