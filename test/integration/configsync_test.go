package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/webhook/configsync"
	"github.com/leaseguard/leaseguard/webhook/manifests"
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
	err = renew()
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
