package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/webhook/render/configsync"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

// The webhook configurations follow the policy file without anyone
// regenerating them (docs/design.md §5): a manager the policy revokes is
// routed to the fail-closed webhook, so that even with leaseguard down its
// renewals are refused; before, the API server kept routing them by the old
// policy's CEL to the fail-open webhook only.
func TestWebhookConfigurationsFollowThePolicy(t *testing.T) {
	ctx := context.Background()
	const ns = "it-follow"
	createNamespace(t, ns)
	original, err := os.ReadFile(policyPath)
	if err != nil {
		t.Fatal(err)
	}
	withRule := func(manager string) []byte {
		return []byte(strings.Replace(string(original), "- name: catch-all", `- name: follow
  resources: [leases]
  namespaces: [`+ns+`]
  managers: ["system:serviceaccount:`+ns+`:`+manager+`"]
- name: catch-all`, 1))
	}
	// use writes data as the policy and waits until the validating
	// configuration says it was rendered from it.
	use := func(data []byte) {
		t.Helper()
		if err := os.WriteFile(policyPath, data, 0o600); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		want := hex.EncodeToString(sum[:])
		waitFor(t, "the validating configuration to be rendered from the new policy", func() bool {
			v, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "leaseguard-validating-webhook-configuration", metav1.GetOptions{})
			return err == nil && v.Annotations[configsync.PolicyAnnotation] == want
		})
	}
	defer use(original)

	use(withRule("manager-old"))
	old := as(t, "system:serviceaccount:"+ns+":manager-old", "").CoordinationV1().Leases(ns)
	lease, err := old.Create(ctx, newLease(ns, "follow", "old"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the rule's manager creates its lease: %v", err)
	}
	renew := func() error {
		l, err := admin.CoordinationV1().Leases(ns).Get(ctx, lease.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.RenewTime = &now
		_, err = old.Update(ctx, l, metav1.UpdateOptions{})
		return err
	}
	if err := renew(); err != nil {
		t.Fatalf("the rule's manager renews: %v", err)
	}

	// Revoke it. Its renewal must be refused by the fail-closed webhook,
	// the one whose refusal holds while leaseguard is down.
	use(withRule("manager-new"))
	// The API server reads webhook configurations through an informer: the
	// stored configuration may route its next write a moment later, so
	// the renewal is tried until the new routing refuses it (a refusal by
	// the fail-open webhook changes nothing to retry over).
	deadline := time.Now().Add(20 * time.Second)
	for err = renew(); !deniedByFailClosed(err) && time.Now().Before(deadline); err = renew() {
		time.Sleep(200 * time.Millisecond)
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `admission webhook "`+manifests.ValidateWebhook+`" denied`) {
		t.Fatalf("a revoked manager's renewal after the configuration followed: %v\nwant it denied by %s (fail-closed), not by the fail-open %s", err, manifests.ValidateWebhook, manifests.RenewalsWebhook)
	}
	fams, err := guard.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g := controlplane.Gauge(fams, "leaseguard_admission_configuration_in_sync"); g != 1 {
		t.Errorf("leaseguard_admission_configuration_in_sync = %v, want 1", g)
	}
	if n := controlplane.Counter(fams, "leaseguard_admission_configuration_updates_total", nil); n < 2 {
		t.Errorf("leaseguard_admission_configuration_updates_total = %v, want at least the two policy changes", n)
	}

	// An edit by hand of a configuration rendered from the policy in force
	// is repaired at the next resync.
	v, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "leaseguard-validating-webhook-configuration", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rendered := v.Webhooks[0].MatchConditions
	v.Webhooks[0].MatchConditions = v.Webhooks[0].MatchConditions[:1]
	if _, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the edited configuration to be repaired", func() bool {
		v, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "leaseguard-validating-webhook-configuration", metav1.GetOptions{})
		return err == nil && len(v.Webhooks[0].MatchConditions) == len(rendered)
	})
}

const validatingName = "leaseguard-validating-webhook-configuration"

// editValidating applies edit to leaseguard's validating configuration as
// someone with update on it would (kubectl edit), retrying on conflicts
// with leaseguard's own writes.
func editValidating(t *testing.T, edit func(*admissionregistrationv1.ValidatingWebhookConfiguration)) {
	t.Helper()
	ctx := context.Background()
	api := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		v, err := api.Get(ctx, validatingName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(v)
		_, err = api.Update(ctx, v, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// weakenFailClosed defeats the fail-closed webhook: failurePolicy Ignore and
// a condition that matches nothing, so identity changes go unchecked even
// while leaseguard is up.
func weakenFailClosed(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
	for i := range v.Webhooks {
		if v.Webhooks[i].Name == manifests.ValidateWebhook {
			v.Webhooks[i].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
			v.Webhooks[i].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "nothing", Expression: "false"}}
		}
	}
}

// failClosedAsRendered says whether the fail-closed webhook is leaseguard's
// rendering again (failurePolicy Fail, its own conditions), sealed.
func failClosedAsRendered(t *testing.T) bool {
	t.Helper()
	v, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), validatingName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v.Annotations[configsync.PolicyAnnotation] == "" || v.Annotations[configsync.RenderingAnnotation] == "" {
		return false
	}
	for _, w := range v.Webhooks {
		if w.Name == manifests.ValidateWebhook {
			return w.FailurePolicy != nil && *w.FailurePolicy == admissionregistrationv1.Fail &&
				len(w.MatchConditions) > 0 && w.MatchConditions[0].Name != "nothing"
		}
	}
	return false
}

// syncMetric reads one of the configuration sync's metrics (-1 when
// unreadable).
func syncMetric(t *testing.T, name string) float64 {
	t.Helper()
	fams, err := guard.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(name, "_total") {
		return controlplane.Counter(fams, name, nil)
	}
	return controlplane.Gauge(fams, name)
}

// intruderCreates is an identity change by someone who is no manager of
// rule fixed-leases: only the fail-closed webhook refuses it.
func intruderCreates(t *testing.T) error {
	t.Helper()
	name := fmt.Sprintf("drift-%d", time.Now().UnixNano())
	_, err := as(t, "system:serviceaccount:"+fixedNS+":intruder", "").CoordinationV1().Leases(fixedNS).
		Create(context.Background(), newLease(fixedNS, name, "intruder_1"), metav1.CreateOptions{})
	return err
}

func deniedByFailClosed(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), `admission webhook "`+manifests.ValidateWebhook+`" denied`)
}

// An edit that also drops or changes leaseguard.io/policy-sha256 (kubectl
// edit or replace, a GitOps tool re-applying a static rendering, a typo)
// is drift all the same: the seal (leaseguard.io/rendering-sha256) no
// longer matches. Before, such an edit was never repaired and
// leaseguard_admission_configuration_in_sync stayed 1.
func TestAnEditedConfigurationIsRepairedWhateverItsPolicyAnnotationSays(t *testing.T) {
	createNamespace(t, fixedNS)
	if err := intruderCreates(t); !deniedByFailClosed(err) {
		t.Fatalf("before any edit, the intruder's create: %v; want it denied by %s", err, manifests.ValidateWebhook)
	}

	// The annotation dropped: repaired at the next resync (2 s here).
	repairs := syncMetric(t, "leaseguard_admission_configuration_repairs_total")
	editValidating(t, func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
		weakenFailClosed(v)
		delete(v.Annotations, configsync.PolicyAnnotation)
	})
	waitFor(t, "the edit that dropped the policy annotation to be repaired", func() bool { return failClosedAsRendered(t) })
	// The API server's informer may route by the edit a moment longer
	// than it is stored (each try creates a lease of its own name).
	waitFor(t, "after the repair, the intruder's create denied by "+manifests.ValidateWebhook, func() bool { return deniedByFailClosed(intruderCreates(t)) })
	// The sync records its repair once the whole configuration is synced
	// (the mutating configuration and the policies after the validating
	// one): a moment after the repair shows.
	waitFor(t, fmt.Sprintf("leaseguard_admission_configuration_repairs_total to count the repair (more than %v)", repairs), func() bool {
		return syncMetric(t, "leaseguard_admission_configuration_repairs_total") > repairs
	})

	// The annotation naming another policy: reported (in_sync 0) for a
	// resync, in case a replica holding that policy repairs it first, then
	// repaired.
	editValidating(t, func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
		weakenFailClosed(v)
		v.Annotations[configsync.PolicyAnnotation] = strings.Repeat("0", 64)
	})
	waitFor(t, "leaseguard_admission_configuration_in_sync 0", func() bool {
		return syncMetric(t, "leaseguard_admission_configuration_in_sync") == 0
	})
	waitFor(t, "the edit naming another policy to be repaired", func() bool { return failClosedAsRendered(t) })
	waitFor(t, "leaseguard_admission_configuration_in_sync 1", func() bool {
		return syncMetric(t, "leaseguard_admission_configuration_in_sync") == 1
	})
	waitFor(t, "after the second repair, the intruder's create denied by "+manifests.ValidateWebhook, func() bool { return deniedByFailClosed(intruderCreates(t)) })
}

// An operator's emergency bypass is an explicit switch: the annotation
// leaseguard.io/bypass keeps their edit (not repaired, however many
// resyncs pass), is reported (leaseguard_admission_configuration_bypassed
// 1), and once removed the rendering comes back.
func TestABypassIsHonouredReportedAndLifted(t *testing.T) {
	createNamespace(t, fixedNS)
	lift := func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
		delete(v.Annotations, configsync.BypassAnnotation)
	}
	defer func() {
		editValidating(t, lift)
		waitFor(t, "the rendering back after the test", func() bool { return failClosedAsRendered(t) })
	}()

	editValidating(t, func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
		weakenFailClosed(v)
		v.Annotations[configsync.BypassAnnotation] = "INC-1234: leaseguard unreachable, identity changes let through"
	})
	waitFor(t, "leaseguard_admission_configuration_bypassed 1", func() bool {
		return syncMetric(t, "leaseguard_admission_configuration_bypassed") == 1
	})
	// Three resyncs: the edit stays, and does what the operator meant.
	time.Sleep(6 * time.Second)
	if failClosedAsRendered(t) {
		t.Fatal("the bypassed configuration was repaired: the operator's edit was undone")
	}
	waitFor(t, "the intruder's create to pass unchecked while bypassed", func() bool { return intruderCreates(t) == nil })
	if g := syncMetric(t, "leaseguard_admission_configuration_bypassed"); g != 1 {
		t.Errorf("leaseguard_admission_configuration_bypassed = %v while bypassed, want 1", g)
	}

	editValidating(t, lift)
	waitFor(t, "the rendering back once the bypass is lifted", func() bool { return failClosedAsRendered(t) })
	waitFor(t, "bypassed 0 and in_sync 1", func() bool {
		return syncMetric(t, "leaseguard_admission_configuration_bypassed") == 0 && syncMetric(t, "leaseguard_admission_configuration_in_sync") == 1
	})
	waitFor(t, "the intruder's create denied again", func() bool { return deniedByFailClosed(intruderCreates(t)) })
}
