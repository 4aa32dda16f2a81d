package celbench

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

// The terms BenchmarkConditionTerms prices, as the sample policy renders them.
var (
	selected        = `((request.resource.resource == "multiclusterleases" && request.?namespace.orValue('') == "cnrm-system") || (request.resource.resource == "leases" && request.?namespace.orValue('') == "cnrm-system") || (request.resource.resource == "leases" && (request.operation == 'DELETE' ? (oldObject != null && has(oldObject.metadata.name) ? oldObject.metadata.name : request.?name.orValue('')) : (has(object.metadata.name) ? object.metadata.name : request.?name.orValue(''))).startsWith("kcc-leader-")))`
	leaseFieldsKept = `(request.resource.resource == "leases" && object.?spec.?holderIdentity == oldObject.?spec.?holderIdentity && object.?spec.?leaseDurationSeconds == oldObject.?spec.?leaseDurationSeconds && object.?spec.?acquireTime == oldObject.?spec.?acquireTime && object.?spec.?leaseTransitions == oldObject.?spec.?leaseTransitions && object.?spec.?strategy == oldObject.?spec.?strategy && object.?spec.?preferredHolder == oldObject.?spec.?preferredHolder)`
	ownershipKept   = `(object.metadata.?finalizers == oldObject.metadata.?finalizers && object.metadata.?ownerReferences == oldObject.metadata.?ownerReferences && object.metadata.?annotations[?"leaseguard.io/designated-manager"] == oldObject.metadata.?annotations[?"leaseguard.io/designated-manager"])`
	// The rightful renewer of the first rule that selects, found in one
	// search (on a Lease renewal: the MultiClusterLease rule's test, then
	// the Lease rule's renewer).
	leaseRenewer    = `((request.resource.resource == "multiclusterleases" && request.?namespace.orValue('') == "cnrm-system") ? (request.userInfo.username.startsWith("system:serviceaccount:cnrm-system:cnrm-controller-manager-") || request.userInfo.username.matches("^system:serviceaccount:(?s:.*):cnrm-controller-manager-(?s:.*)$")) : ((request.resource.resource == "leases" && request.?namespace.orValue('') == "cnrm-system") ? (((request.userInfo.username.startsWith("system:serviceaccount:cnrm-system:cnrm-controller-manager-") && request.userInfo.username.size() > 58 && !request.userInfo.username.substring(58).contains(':')) && (request.operation == 'DELETE' ? (oldObject != null && has(oldObject.metadata.name) ? oldObject.metadata.name : request.?name.orValue('')) : (has(object.metadata.name) ? object.metadata.name : request.?name.orValue(''))) == "kcc-leader-" + request.userInfo.username.substring(58)) && (oldObject.metadata.?annotations[?"leaseguard.io/designated-manager"].orValue('') == '' || oldObject.metadata.?annotations[?"leaseguard.io/designated-manager"].orValue('') == request.userInfo.username) && (has(request.userInfo.extra) && request.userInfo.extra[?"authentication.kubernetes.io/pod-name"].orValue([''])[0] != '' && (oldObject.?spec.?holderIdentity.orValue('') == request.userInfo.extra[?"authentication.kubernetes.io/pod-name"].orValue([''])[0] || oldObject.?spec.?holderIdentity.orValue('').startsWith(request.userInfo.extra[?"authentication.kubernetes.io/pod-name"].orValue([''])[0] + '_')))) : ((request.resource.resource == "leases" && (request.operation == 'DELETE' ? (oldObject != null && has(oldObject.metadata.name) ? oldObject.metadata.name : request.?name.orValue('')) : (has(object.metadata.name) ? object.metadata.name : request.?name.orValue(''))).startsWith("kcc-leader-")) ? ((request.userInfo.username.matches("^system:serviceaccount:[^:]+:cnrm-controller-manager-[^:]+$") && (request.operation == 'DELETE' ? (oldObject != null && has(oldObject.metadata.name) ? oldObject.metadata.name : request.?name.orValue('')) : (has(object.metadata.name) ? object.metadata.name : request.?name.orValue(''))) == "kcc-leader-" + request.userInfo.username.substring(request.userInfo.username.indexOf(':', 22) + 25, request.userInfo.username.size() - 0) && request.namespace == request.userInfo.username.substring(22, request.userInfo.username.indexOf(':', 22))) && (oldObject.metadata.?annotations[?"leaseguard.io/designated-manager"].orValue('') == '' || oldObject.metadata.?annotations[?"leaseguard.io/designated-manager"].orValue('') == request.userInfo.username) && (has(request.userInfo.extra) && request.userInfo.extra[?"authentication.kubernetes.io/pod-name"].orValue([''])[0] != '' && (oldObject.?spec.?holderIdentity.orValue('') == request.userInfo.extra[?"authentication.kubernetes.io/pod-name"].orValue([''])[0] || oldObject.?spec.?holderIdentity.orValue('').startsWith(request.userInfo.extra[?"authentication.kubernetes.io/pod-name"].orValue([''])[0] + '_')))) : false)))`
	harmlessRenewal = `(request.operation == 'UPDATE' && (object.?spec.?renewTime.hasValue() && dyn(object.spec.renewTime) != null) && (oldObject.?spec.?renewTime.hasValue() && dyn(oldObject.spec.renewTime) != null) && object.?spec.?renewTime != oldObject.?spec.?renewTime && (request.resource.resource == 'leases' || (object.spec.renewTime.matches("^[1-8][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\\.[0-9]{6}(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$") && oldObject.spec.renewTime.matches("^[1-8][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]\\.[0-9]{6}(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"))) && object.metadata.?labels == oldObject.metadata.?labels && object.metadata.?annotations == oldObject.metadata.?annotations && object.metadata.?generateName == oldObject.metadata.?generateName && object.metadata.?managedFields.orValue([]).size() <= 32 && object.metadata.?managedFields.orValue([]).exists(m, m.?subresource.orValue('') == '' && m.?fieldsV1[?'f:spec'][?'f:renewTime'].hasValue() && has(m.time) && timestamp(object.spec.renewTime) <= timestamp(m.time) + duration("3s") && (timestamp(object.spec.renewTime) >= timestamp(oldObject.spec.renewTime) || timestamp(object.spec.renewTime) >= timestamp(m.time) - duration("2s"))) && object.metadata.?managedFields.orValue([]).all(m, (m.?subresource.orValue('') == '' && m.?fieldsV1[?'f:spec'][?'f:renewTime'].hasValue()) || oldObject.metadata.?managedFields.orValue([]).exists(o, o.?manager == m.?manager && o.?operation == m.?operation && o.?subresource == m.?subresource && o.?apiVersion == m.?apiVersion && o.?time == m.?time)))`
	renewTimeSame   = `request.operation == 'UPDATE' && object.?spec.?renewTime == oldObject.?spec.?renewTime`
)

// BenchmarkConditionTerms prices, on the renewal of BenchmarkMatchConditions,
// each term of the condition the sample policy's validating webhooks render,
// one at a time beside the two control-plane conditions (whose cost includes
// building the activation): where the ~100 µs per webhook go. The terms are
// pieces of the rendered expressions (of their Lease branches: the
// MultiClusterLease branches stop at their resource test), and the benchmark
// fails when a piece is no longer in them, so that it cannot go on pricing a
// condition leaseguard no longer renders.
func BenchmarkConditionTerms(b *testing.B) {
	checkTermsRendered(b)
	validate := rendered(b).Validating.Webhooks[0].MatchConditions
	controlPlane := validate[:2]
	term := func(name, expr string, want bool) {
		b.Run(name, func(b *testing.B) {
			bench(b, append(append([]admissionregistrationv1.MatchCondition{}, controlPlane...),
				admissionregistrationv1.MatchCondition{Name: name, Expression: expr}), false, want)
		})
	}
	b.Run("control-plane-conditions-only", func(b *testing.B) { bench(b, controlPlane, false, true) })
	term("selected", selected, true)
	term("identity-change", "!(request.operation == 'UPDATE' && request.?subResource.orValue('') == '' && "+leaseFieldsKept+" && "+ownershipKept+")", false)
	term("not-rightful-renewer", "!"+leaseRenewer, false)
	term("not-harmless-renewal", "!"+harmlessRenewal, false)
	term("renew-time-same", renewTimeSame, false)
}

// checkTermsRendered fails when a term is no longer part of the rendered
// conditions.
func checkTermsRendered(tb testing.TB) {
	r, err := manifests.Render(samplePolicy(tb), manifests.Defaults())
	if err != nil {
		tb.Fatal(err)
	}
	validate, renewals := r.Validating.Webhooks[0].MatchConditions, r.Validating.Webhooks[1].MatchConditions
	for _, piece := range []string{selected, leaseFieldsKept, ownershipKept, leaseRenewer, harmlessRenewal} {
		for _, in := range []string{validate[len(validate)-1].Expression, renewals[len(renewals)-1].Expression} {
			if !strings.Contains(in, piece) {
				tb.Fatalf("%s\nis no longer in the rendered condition: update it from\n%s", piece, in)
			}
		}
	}
	if !strings.Contains(renewals[len(renewals)-1].Expression, renewTimeSame) {
		tb.Fatalf("%s\nis no longer in the renewals webhook's condition", renewTimeSame)
	}
}

// TestConditionTermsAreRendered keeps BenchmarkConditionTerms honest in
// make test, where benchmarks do not run.
func TestConditionTermsAreRendered(t *testing.T) { checkTermsRendered(t) }
