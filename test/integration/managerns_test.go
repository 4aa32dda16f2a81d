package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Config Connector's dedicated manager namespaces: with a
// ConfigConnectorContext's spec.managerNamespace, the manager of namespace
// <ns> runs as system:serviceaccount:<managerNamespace>:cnrm-controller-manager-<ns>
// and keeps its lease in that namespace. The rule dedicated-manager-leases
// binds each manager to kcc-leader-<ns> in its own namespace. Its pod's
// plain renewals are decided in the API server (no webhook call: the
// generated conditions name the bound manager from the lease's name and
// namespace), and every other manager's write is refused by leaseguard.
func TestDedicatedManagerNamespacesBindByNameAndNamespace(t *testing.T) {
	ctx := context.Background()
	const nsA, nsB = "it-mns-a", "it-mns-b"
	createNamespace(t, nsA)
	createNamespace(t, nsB)
	sa := func(ns, team string) string {
		return "system:serviceaccount:" + ns + ":cnrm-controller-manager-" + team
	}
	pod := func(team string) string { return "cnrm-controller-manager-" + team + "-0" }
	leasesA := as(t, sa(nsA, "team-a"), pod("team-a")).CoordinationV1()

	now := metav1.NewMicroTime(time.Now())
	lease := func(ns string) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kcc-leader-team-a"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(pod("team-a") + "_1"), LeaseDurationSeconds: ptr.To[int32](15),
				AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To[int32](0)},
		}
	}
	created, err := leasesA.Leases(nsA).Create(ctx, lease(nsA), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the bound manager's create of its lease in its namespace: %v", err)
	}
	t.Cleanup(func() { deleteLease(t, nsA, "kcc-leader-team-a") })

	before := scrapeAPIServer(t)
	stored := created
	const renewals = 3
	for i := range renewals {
		time.Sleep(100 * time.Millisecond)
		renewed := stored.DeepCopy()
		renewed.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		got, err := leasesA.Leases(nsA).Update(ctx, renewed, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("renewal %d by the bound manager: %v", i, err)
		}
		if got.ResourceVersion == stored.ResourceVersion {
			t.Fatalf("renewal %d was not stored", i)
		}
		stored = got
	}
	if calls := scrapeAPIServer(t).webhookCalls - before.webhookCalls; calls != 0 {
		t.Errorf("%v webhook calls for %d plain renewals by the bound manager, want 0 (decided in the API server)", calls, renewals)
	}

	for _, c := range []struct {
		name, user, pod, ns, want string
	}{
		{"its lease name in another manager namespace", sa(nsA, "team-a"), pod("team-a"), nsB,
			"leaseguard: rule dedicated-manager-leases: " + sa(nsA, "team-a") + " may not write lease " + nsB + "/kcc-leader-team-a (bound lease: " + nsA + "/kcc-leader-team-a)"},
		{"another namespace's manager in the same manager namespace", sa(nsA, "team-b"), pod("team-b"), nsA,
			"leaseguard: rule dedicated-manager-leases: " + sa(nsA, "team-b") + " may not write lease " + nsA + "/kcc-leader-team-a (bound lease: " + nsA + "/kcc-leader-team-b)"},
		{"the same manager name in another manager namespace", sa(nsB, "team-a"), pod("team-a"), nsA,
			"leaseguard: rule dedicated-manager-leases: " + sa(nsB, "team-a") + " may not write lease " + nsA + "/kcc-leader-team-a (bound lease: " + nsB + "/kcc-leader-team-a)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			leases := as(t, c.user, c.pod).CoordinationV1().Leases(c.ns)
			var err error
			if c.ns == nsA {
				renewed := stored.DeepCopy()
				renewed.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
				_, err = leases.Update(ctx, renewed, metav1.UpdateOptions{})
			} else {
				_, err = leases.Create(ctx, lease(c.ns), metav1.CreateOptions{})
			}
			if !apierrors.IsForbidden(err) {
				t.Fatalf("want HTTP 403, got %v", err)
			}
			if got := refusal(err); got != c.want {
				t.Errorf("refusal\n got %s\nwant %s", got, c.want)
			}
			after, err := admin.CoordinationV1().Leases(nsA).Get(ctx, "kcc-leader-team-a", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if after.ResourceVersion != stored.ResourceVersion {
				t.Errorf("the refused write was stored: resourceVersion %s, was %s", after.ResourceVersion, stored.ResourceVersion)
			}
		})
	}
	if _, err := admin.CoordinationV1().Leases(nsB).Get(ctx, "kcc-leader-team-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a refused create left a lease in %s: %v", nsB, err)
	}
}

// refusal is what leaseguard said in the refusal err: the message after the
// API server's "admission webhook ... denied the request: ".
func refusal(err error) string {
	if err == nil {
		return ""
	}
	for _, hook := range []string{"validate", "renewals"} {
		if rest, ok := strings.CutPrefix(err.Error(), `admission webhook "`+hook+`.leases.leaseguard.io" denied the request: `); ok {
			return rest
		}
	}
	return "not leaseguard's refusal: " + err.Error()
}
