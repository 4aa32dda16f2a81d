package celbench

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
)

// The acknowledged renewal is the hot path of namespace mode: a manager that
// is not the designated writer renews the shared MultiClusterLease every
// 2 s, and the MutatingAdmissionPolicy answers it without storing it. Every
// configuration whose rules match the write evaluates its conditions on it:
// the policy on the renewal as sent, the webhooks on the write the policy
// made a no-op.
const (
	kccManager = "system:serviceaccount:cnrm-system:cnrm-controller-manager-"
	mclStamp   = "2026-11-30T12:00:00Z"
)

// mcl is the shared MultiClusterLease as the API server hands it to CEL:
// designated to team-a, renewed at renew, its spec entry in managedFields
// stamped at stamp, the controller's status entry beside it.
func mcl(renew, stamp string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "multicluster.core.cnrm.cloud.google.com/v1alpha1", "kind": "MultiClusterLease",
		"metadata": map[string]any{
			"name": "kcc-leader", "namespace": "cnrm-system", "resourceVersion": "42", "generation": int64(7),
			"uid":         "6f1c1b5e-0a39-4c55-9a2e-4e0f0c2b7d11",
			"annotations": map[string]any{leaseobject.DesignationAnnotation: kccManager + "team-a"},
			"managedFields": []any{
				map[string]any{"manager": "manager", "operation": "Update", "apiVersion": "multicluster.core.cnrm.cloud.google.com/v1alpha1",
					"time": stamp, "fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:spec": map[string]any{
						"f:holderIdentity": map[string]any{}, "f:leaseDurationSeconds": map[string]any{}, "f:renewDeadlineSeconds": map[string]any{},
						"f:retryPeriodSeconds": map[string]any{}, "f:renewTime": map[string]any{}, "f:acquireTime": map[string]any{}, "f:leaseTransitions": map[string]any{}}}},
				map[string]any{"manager": "multiclusterlease-controller", "operation": "Update", "apiVersion": "multicluster.core.cnrm.cloud.google.com/v1alpha1",
					"time": mclStamp, "fieldsType": "FieldsV1", "subresource": "status", "fieldsV1": map[string]any{"f:status": map[string]any{
						"f:globalHolderIdentity": map[string]any{}, "f:observedGeneration": map[string]any{}, "f:globalRenewTime": map[string]any{}}}},
			},
		},
		"spec": map[string]any{"holderIdentity": "cluster-a", "leaseDurationSeconds": int64(15), "renewDeadlineSeconds": int64(10),
			"retryPeriodSeconds": int64(2), "acquireTime": "2026-11-30T11:00:00.000000Z", "renewTime": renew, "leaseTransitions": int64(3)},
		"status": map[string]any{"globalHolderIdentity": "cluster-a", "observedGeneration": int64(7), "globalRenewTime": "2026-11-30T12:00:00.000000Z"},
	}}
}

// acknowledgedRenewal is team-b's renewal of the lease team-a writes: as
// sent (what the MutatingAdmissionPolicy sees: renewTime 2 s on, its entry
// re-stamped), or as the policy left it (renewTime set back; the webhooks
// see it so, the validating ones with the API server's stamps restored).
func acknowledgedRenewal(asSent bool) *admission.VersionedAttributes {
	old := mcl("2026-11-30T12:00:00.000000Z", mclStamp)
	nw := mcl("2026-11-30T12:00:00.000000Z", mclStamp)
	if asSent {
		nw = mcl("2026-11-30T12:00:02.000000Z", "2026-11-30T12:00:02Z")
	}
	gvk := schema.GroupVersionKind{Group: "multicluster.core.cnrm.cloud.google.com", Version: "v1alpha1", Kind: "MultiClusterLease"}
	attrs := admission.NewAttributesRecord(nw, old, gvk, "cnrm-system", "kcc-leader",
		schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: "multiclusterleases"}, "", admission.Update, &metav1.UpdateOptions{}, false,
		&user.DefaultInfo{Name: kccManager + "team-b", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:cnrm-system", "system:authenticated"},
			Extra: map[string][]string{leaseobject.PodNameExtra: {"cnrm-controller-manager-team-b-0"}}})
	return &admission.VersionedAttributes{Attributes: attrs, VersionedKind: gvk,
		VersionedObject: admission.NewLazyObject(nw), VersionedOldObject: admission.NewLazyObject(old)}
}

func benchAck(b *testing.B, conds []admissionregistrationv1.MatchCondition, asSent, want bool) {
	benchWrites(b, conds, func() *admission.VersionedAttributes { return acknowledgedRenewal(asSent) }, want)
}

// BenchmarkAcknowledgedRenewal: each configuration's conditions on one
// acknowledged renewal of the shared MultiClusterLease, in the order the
// API server evaluates them. The policy must match (it acknowledges); no
// webhook may.
func BenchmarkAcknowledgedRenewal(b *testing.B) {
	r := rendered(b)
	b.Run("coalesce-policy", func(b *testing.B) { benchAck(b, r.Coalescing.Spec.MatchConditions, true, true) })
	b.Run("mutating-webhook", func(b *testing.B) { benchAck(b, r.Mutating.Webhooks[0].MatchConditions, false, false) })
	b.Run("validate", func(b *testing.B) { benchAck(b, r.Validating.Webhooks[0].MatchConditions, false, false) })
	b.Run("renewals", func(b *testing.B) { benchAck(b, r.Validating.Webhooks[1].MatchConditions, false, false) })
	b.Run("baseline/object-conversion-only", func(b *testing.B) {
		benchAck(b, []admissionregistrationv1.MatchCondition{{Name: "x", Expression: "object.spec.holderIdentity != '' && oldObject.spec.holderIdentity != ''"}}, false, true)
	})
}
