package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
)

// outageTeam's manager holds the bound Lease and the shared lease of the
// outage specs, which no other spec touches.
const (
	outageTeam = "team-d"
	outageMCL  = "outage"
)

// The split of docs/security.md: while leaseguard cannot answer, the
// rightful holder's plain renewals pass (failurePolicy Ignore) and every
// identity change is refused (failurePolicy Fail), so no leadership is lost
// and nothing is stolen.
var _ = Describe("when leaseguard is down or hung", Ordered, func() {
	ctx := context.Background()
	var held *coordinationv1.Lease

	BeforeAll(func() {
		if !env.local {
			Skip("stopping the webhook is done on the local control plane here; on kind the fault tests (test/cluster/faults) stop its Pods")
		}
		now := metav1.NewMicroTime(time.Now())
		lease := boundLease(outageTeam, pod(outageTeam)+"_1")
		lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
		var err error
		held, err = leasesAs(outageTeam).CoordinationV1().Leases(e2eNS).Create(ctx, lease, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		mcl := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": mclv1alpha1.Group + "/" + mclv1alpha1.Version,
			"kind":       mclv1alpha1.Kind,
			"metadata":   map[string]any{"name": outageMCL, "namespace": e2eNS},
			"spec":       map[string]any{"holderIdentity": "cluster-e2e", "renewTime": micro(time.Now()), "leaseDurationSeconds": int64(15)},
		}}
		created, err := mcls(manager(outageTeam)).Create(ctx, mcl, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(created.GetAnnotations()[designation]).To(Equal(manager(outageTeam)))
	})

	for _, fault := range []string{"down", "hung"} {
		It("lets the holder renew and refuses every other write while leaseguard is "+fault, func() {
			stop := stopLeaseguard(fault)
			defer stop()
			leases := func(team string) coordinationclient.LeaseInterface {
				return leasesAs(team).CoordinationV1().Leases(e2eNS)
			}
			failed := "failed calling webhook \"validate.leases.leaseguard.io\""

			By("the holder's plain renewal of its Lease passes")
			current, err := leases(outageTeam).Get(ctx, held.Name, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			renewed := current.DeepCopy()
			renewed.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
			current, err = leases(outageTeam).Update(ctx, renewed, metav1.UpdateOptions{})
			Expect(err).NotTo(HaveOccurred(), "a renewal by the holder must pass while leaseguard is %s", fault)

			By("the holder's renewal far into the future is refused: stored unchecked, it would keep the Lease for ever")
			ahead := current.DeepCopy()
			ahead.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)))
			_, err = leases(outageTeam).Update(ctx, ahead, metav1.UpdateOptions{})
			Expect(err).To(MatchError(ContainSubstring(failed)))
			expectUnchanged(ctx, current)

			By("another manager's takeover of the live Lease is refused, the Lease unchanged")
			stolen := current.DeepCopy()
			stolen.Spec.HolderIdentity = ptr.To(pod("team-b") + "_1")
			stolen.Spec.LeaseTransitions = ptr.To(ptr.Deref(current.Spec.LeaseTransitions, 0) + 1)
			stolen.Spec.AcquireTime = ptr.To(metav1.NewMicroTime(time.Now()))
			_, err = leases("team-b").Update(ctx, stolen, metav1.UpdateOptions{})
			Expect(err).To(MatchError(ContainSubstring(failed)))
			Expect(apierrors.IsInternalError(err)).To(BeTrue(), "HTTP 500 from the API server: %v", err)
			expectUnchanged(ctx, current)

			By("another manager's plain renewal of the Lease is refused too")
			bumped := current.DeepCopy()
			bumped.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
			_, err = leases("team-b").Update(ctx, bumped, metav1.UpdateOptions{})
			Expect(err).To(MatchError(ContainSubstring(failed)))
			expectUnchanged(ctx, current)

			By("the holder itself may not release, delete, or create while nobody can check it")
			released := current.DeepCopy()
			released.Spec.HolderIdentity = ptr.To("")
			_, err = leases(outageTeam).Update(ctx, released, metav1.UpdateOptions{})
			Expect(err).To(MatchError(ContainSubstring(failed)))
			Expect(leases(outageTeam).Delete(ctx, held.Name, metav1.DeleteOptions{})).To(MatchError(ContainSubstring(failed)))
			_, err = leases("team-b").Create(ctx, boundLease("team-b", pod("team-b")+"_1", "kcc-leader-team-b-"+fault), metav1.CreateOptions{})
			Expect(err).To(MatchError(ContainSubstring(failed)))
			expectUnchanged(ctx, current)

			By("every manager renews the shared MultiClusterLease; a renewal far ahead, designation changes, finalizers and a manager's status write are refused")
			shared := mcls(manager(outageTeam))
			patch := fmt.Sprintf(`{"spec":{"renewTime":%q}}`, micro(time.Now()))
			sharedRenewed, err := shared.Patch(ctx, outageMCL, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			Expect(err).NotTo(HaveOccurred())
			renewedAt, _, _ := unstructured.NestedString(sharedRenewed.Object, "spec", "renewTime")
			Expect(renewedAt).To(Equal(micro(mustParse(patch))), "the holder's renewal was stored")
			// Every manager of the cluster renews the shared lease with its
			// holder, and leads only when its renewal succeeds: another
			// manager's renewal succeeds too (acknowledged by the API
			// server where leaseguard's MutatingAdmissionPolicy is
			// installed; elsewhere stored through the fail-open route).
			later := fmt.Sprintf(`{"spec":{"renewTime":%q}}`, micro(time.Now().Add(time.Millisecond)))
			before, err := mcls(manager("team-b")).Patch(ctx, outageMCL, types.MergePatchType, []byte(later), metav1.PatchOptions{})
			Expect(err).NotTo(HaveOccurred(), "another manager's renewal of the shared lease must pass while leaseguard is %s", fault)
			Expect(before.GetAnnotations()[designation]).To(Equal(manager(outageTeam)))
			farAhead := `{"spec":{"renewTime":"2099-01-01T00:00:00.000000Z"}}`
			_, err = shared.Patch(ctx, outageMCL, types.MergePatchType, []byte(farAhead), metav1.PatchOptions{})
			Expect(err).To(MatchError(ContainSubstring(failed)))
			steal := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, designation, manager("team-b"))
			_, err = mcls(manager("team-b")).Patch(ctx, outageMCL, types.MergePatchType, []byte(steal), metav1.PatchOptions{})
			Expect(err).To(MatchError(ContainSubstring(failed)))
			_, err = mcls(manager(outageTeam)).Patch(ctx, outageMCL, types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/block"]}}`), metav1.PatchOptions{})
			Expect(err).To(MatchError(ContainSubstring(failed)))
			forged := before.DeepCopy()
			Expect(unstructured.SetNestedField(forged.Object, "cluster-evil", "status", "globalHolderIdentity")).To(Succeed())
			_, err = mcls(manager(outageTeam)).UpdateStatus(ctx, forged, metav1.UpdateOptions{})
			Expect(err).To(MatchError(ContainSubstring(failed)), "a manager's status write")
			after, err := shared.Get(ctx, outageMCL, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(after.GetResourceVersion()).To(Equal(before.GetResourceVersion()), "nothing but renewals was stored")

			By("the status writer's status write flows: every manager's lock polls the status after each renewal")
			// The policy admits a status writer's status write whatever it
			// writes (I8 asks who); refused while leaseguard is down, the
			// controller could not confirm any renewal and every manager
			// would lose its leadership (the kind stage's namespace-mode
			// workload found it: all 10 exited).
			observed := after.DeepCopy()
			Expect(unstructured.SetNestedField(observed.Object, after.GetGeneration(), "status", "observedGeneration")).To(Succeed())
			confirmed, err := mcls(mclCtrl).UpdateStatus(ctx, observed, metav1.UpdateOptions{})
			Expect(err).NotTo(HaveOccurred(), "the status writer's status write while leaseguard is %s", fault)
			Expect(confirmed.Object["status"]).To(HaveKeyWithValue("observedGeneration", after.GetGeneration()))
		})
	}

	// Fourth and fifth attack rounds: only a renewal that is harmless
	// unchecked rides the fail-open webhook. Each write below was stored
	// while leaseguard was down before; now each goes to the fail-closed
	// webhook and is refused, while a plain renewal still flows.
	It("lets only harmless renewals through while leaseguard is down", func() {
		shared, other := mcls(manager(outageTeam)), mcls(manager("team-b"))
		stored, err := shared.Patch(ctx, outageMCL, types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"renewTime":%q}}`, micro(time.Now()))), metav1.PatchOptions{})
		Expect(err).NotTo(HaveOccurred())
		stop := stopLeaseguard("down")
		defer stop()
		failed := "failed calling webhook \"validate.leases.leaseguard.io\""
		refused := func(what, patch string) {
			GinkgoHelper()
			_, err := other.Patch(ctx, outageMCL, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "e2e-attacker"})
			Expect(err).To(MatchError(ContainSubstring(failed)), what)
			after, err := shared.Get(ctx, outageMCL, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(after.GetResourceVersion()).To(Equal(stored.GetResourceVersion()), "%s: stored while leaseguard was down", what)
		}
		// The stored entries, the designated manager's dated 2100.
		planted := func() []any {
			var out []any
			for _, m := range stored.GetManagedFields() {
				e, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&m)
				Expect(err).NotTo(HaveOccurred())
				e["time"] = "2100-01-01T00:00:00Z"
				out = append(out, e)
			}
			return out
		}
		patch := func(v map[string]any) string {
			GinkgoHelper()
			data, err := json.Marshal(v)
			Expect(err).NotTo(HaveOccurred())
			return string(data)
		}

		By("round 4.3: another manager's renewal back to 2000 (the lease would read as long expired) is refused")
		refused("renewTime moved back", `{"spec":{"renewTime":"2000-01-01T00:00:00.000000Z"}}`)
		refused("renewTime cleared", `{"spec":{"renewTime":null}}`)
		By("round 5.4: a renewTime typed clients cannot read is refused")
		refused("renewTime with no fraction", fmt.Sprintf(`{"spec":{"renewTime":%q}}`, time.Now().UTC().Format(time.RFC3339)))
		By("round 4.1 and 4.2: a renewal or a metadata write that dates another managedFields entry 2100 is refused")
		refused("a renewal planting 2100", patch(map[string]any{"metadata": map[string]any{"managedFields": planted()}, "spec": map[string]any{"renewTime": micro(time.Now())}}))
		refused("generateName and a planted 2100", patch(map[string]any{"metadata": map[string]any{"generateName": "x-", "managedFields": planted()}}))
		By("round 4.2: a renewal far ahead is refused")
		refused("renewTime in 2099", `{"spec":{"renewTime":"2099-01-01T00:00:00.000000Z"}}`)

		By("round 4.3's bound is on moving back: the designated manager's late renewal, composed seconds before it arrives, still flows")
		// What a manager sends whose request waited in client-side
		// throttling or a loaded API server's queues: renewTime more than
		// the clock skew behind the API server's clock, yet after the
		// stored one. The kind fault test lost such renewals to a bound
		// that ignored the stored value.
		storedAt, err := time.Parse(time.RFC3339Nano, stored.Object["spec"].(map[string]any)["renewTime"].(string))
		Expect(err).NotTo(HaveOccurred())
		time.Sleep(time.Until(storedAt.Add(4 * time.Second)))
		late, err := shared.Patch(ctx, outageMCL, types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"renewTime":%q}}`, micro(storedAt.Add(500*time.Millisecond)))), metav1.PatchOptions{})
		Expect(err).NotTo(HaveOccurred(), "a late renewal that moves renewTime forwards must pass while leaseguard is down")
		Expect(late.GetResourceVersion()).NotTo(Equal(stored.GetResourceVersion()))

		// Where leaseguard's renewals policy decides plain renewals in the
		// API server, they are judged in full while leaseguard is down: a
		// renewal moved back within the clock skew, which the fail-open
		// route once stored unjudged, is refused with leaseguard's words.
		renewals, vapErr := env.admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, "leaseguard-renewals", metav1.GetOptions{})
		if vapErr != nil {
			Expect(apierrors.IsNotFound(vapErr)).To(BeTrue(), "reading the renewals policy: %v", vapErr)
		}
		decides := vapErr == nil && len(renewals.Spec.MatchConditions) > 0 && renewals.Spec.MatchConditions[len(renewals.Spec.MatchConditions)-1].Expression != "false"
		if decides {
			By("the designated manager's plain renewal is stored, and one moved back within the skew refused, by the renewals policy in the API server")
			// The backwards renewal is sent at once after the fresh one, so
			// that the API server's seconds stamp has not moved on past the
			// skew (then it routes to the fail-closed webhook, down here:
			// tried again, as the integration test of the hot path does).
			var fresh *unstructured.Unstructured
			var freshAt time.Time
			for attempt := 1; ; attempt++ {
				fresh, err = shared.Patch(ctx, outageMCL, types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"renewTime":%q}}`, micro(time.Now()))), metav1.PatchOptions{})
				Expect(err).NotTo(HaveOccurred(), "a plain renewal, decided in the API server, must pass while leaseguard is down")
				Expect(fresh.GetResourceVersion()).NotTo(Equal(late.GetResourceVersion()))
				freshAt, err = time.Parse(time.RFC3339Nano, fresh.Object["spec"].(map[string]any)["renewTime"].(string))
				Expect(err).NotTo(HaveOccurred())
				_, err = shared.Patch(ctx, outageMCL, types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"renewTime":%q}}`, micro(freshAt.Add(-300*time.Millisecond)))), metav1.PatchOptions{})
				if err == nil || !strings.Contains(err.Error(), "failed calling webhook") || attempt == 5 {
					break
				}
				GinkgoWriter.Printf("attempt %d: the stamp moved on past the skew between the two writes; again\n", attempt)
				late = fresh
			}
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want 403, got %v", err)
			Expect(err).To(MatchError(ContainSubstring("ValidatingAdmissionPolicy 'leaseguard-renewals' with binding 'leaseguard-renewals' denied request: leaseguard: rule e2e-mcl: " +
				manager(outageTeam) + " moves renewTime backwards on multiclusterlease " + e2eNS + "/" + outageMCL + " (stored renewTime: " + freshAt.UTC().Format(time.RFC3339Nano) + ")")))
			after, err := shared.Get(ctx, outageMCL, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(after.GetResourceVersion()).To(Equal(fresh.GetResourceVersion()), "a refused renewal was stored")
			late = fresh
		}

		// Another manager's renewal: on a cluster with leaseguard's
		// MutatingAdmissionPolicy the API server acknowledges it itself,
		// leaseguard down or not (success, nothing stored: the same
		// answer as when leaseguard is up); elsewhere it rides the
		// fail-open route and is stored.
		_, mapErr := env.admin.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(ctx, "leaseguard-coalesce-renewals", metav1.GetOptions{})
		inAPIServer := mapErr == nil
		if !inAPIServer {
			Expect(apierrors.IsNotFound(mapErr)).To(BeTrue(), "reading the MutatingAdmissionPolicy: %v", mapErr)
		}
		By(fmt.Sprintf("another manager's plain renewal still succeeds (acknowledged in the API server: %v)", inAPIServer))
		renewed, err := other.Patch(ctx, outageMCL, types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"renewTime":%q}}`, micro(time.Now()))), metav1.PatchOptions{})
		Expect(err).NotTo(HaveOccurred(), "a plain renewal of the shared lease must pass while leaseguard is down")
		if inAPIServer {
			Expect(renewed.GetResourceVersion()).To(Equal(late.GetResourceVersion()), "acknowledged without being stored, though leaseguard is down")
			Expect(renewed.Object["spec"]).To(Equal(late.Object["spec"]))
		} else {
			Expect(renewed.GetResourceVersion()).NotTo(Equal(late.GetResourceVersion()), "stored through the fail-open route")
		}
	})

	// Under designation by annotation nobody renews until an operator
	// records the designated manager. Such a renewal once rode the
	// fail-open webhook and was stored unjudged while leaseguard was down.
	It("renews a Lease designated by annotation only once an operator records the designated manager, leaseguard down or not", func() {
		ops, err := kubernetes.NewForConfig(impersonating(operators, "", operators))
		Expect(err).NotTo(HaveOccurred())
		leases := func(team string) coordinationclient.LeaseInterface {
			return leasesAs(team).CoordinationV1().Leases(e2eNS)
		}
		const name = "annotated-lease"
		now := metav1.NewMicroTime(time.Now())
		created, err := ops.CoordinationV1().Leases(e2eNS).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e2eNS},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(pod(outageTeam) + "_1"), LeaseDurationSeconds: ptr.To[int32](15),
				AcquireTime: &now, RenewTime: &now},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			_ = ops.CoordinationV1().Leases(e2eNS).Delete(context.Background(), name, metav1.DeleteOptions{})
		})
		renew := func(team string, from *coordinationv1.Lease) (*coordinationv1.Lease, error) {
			renewed := from.DeepCopy()
			renewed.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
			return leases(team).Update(ctx, renewed, metav1.UpdateOptions{})
		}

		By("with leaseguard up, a manager's renewal is refused: no designated manager yet")
		_, err = renew(outageTeam, created)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want 403, got %v", err)
		Expect(said(err)).To(Equal("leaseguard: rule e2e-annotated-leases: " + manager(outageTeam) + " may not write lease " + e2eNS + "/" + name +
			" (no designated manager yet: an operator sets annotation " + designation + ")"))
		expectUnchanged(ctx, created)

		By("with leaseguard down, the same renewal is refused too, not stored unjudged")
		restart := stopLeaseguard("down")
		_, err = renew(outageTeam, created)
		Expect(err).To(MatchError(ContainSubstring("failed calling webhook \"validate.leases.leaseguard.io\"")))
		expectUnchanged(ctx, created)
		restart()

		By("an operator records the designated manager; with leaseguard down its renewals flow, another manager's are refused")
		designated := created.DeepCopy()
		designated.Annotations = map[string]string{designation: manager(outageTeam)}
		designated, err = ops.CoordinationV1().Leases(e2eNS).Update(ctx, designated, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		restart = stopLeaseguard("down")
		defer restart()
		renewed, err := renew(outageTeam, designated)
		Expect(err).NotTo(HaveOccurred(), "the designated manager's plain renewal must pass while leaseguard is down")
		Expect(renewed.ResourceVersion).NotTo(Equal(designated.ResourceVersion))
		_, err = renew("team-b", renewed)
		Expect(err).To(MatchError(ContainSubstring("failed calling webhook \"validate.leases.leaseguard.io\"")))
		expectUnchanged(ctx, renewed)
	})

	It("enforces again, with its own messages, once it is back", func() {
		current, err := leasesAs(outageTeam).CoordinationV1().Leases(e2eNS).Get(ctx, held.Name, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		stolen := current.DeepCopy()
		stolen.Spec.HolderIdentity = ptr.To(pod("team-b") + "_1")
		_, err = leasesAs("team-b").CoordinationV1().Leases(e2eNS).Update(ctx, stolen, metav1.UpdateOptions{})
		Expect(said(err)).To(HavePrefix("leaseguard: rule e2e-bound-leases: " + manager("team-b") + " may not write lease leaseguard-e2e/kcc-leader-" + outageTeam))
	})
})

// expectUnchanged checks that the stored Lease is still want.
func expectUnchanged(ctx context.Context, want *coordinationv1.Lease) {
	GinkgoHelper()
	got, err := env.admin.CoordinationV1().Leases(want.Namespace).Get(ctx, want.Name, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	Expect(got.ResourceVersion).To(Equal(want.ResourceVersion), "the Lease was written")
	Expect(*got.Spec.HolderIdentity).To(Equal(*want.Spec.HolderIdentity))
}

// stopLeaseguard takes leaseguard away: "down" stops it, so calls are
// refused at once; "hung" puts in its place a listener that accepts
// connections and never answers, so calls run into the webhook timeout. It
// returns the function that brings leaseguard back.
func stopLeaseguard(fault string) func() {
	env.guard.Stop()
	var hung net.Listener
	var conns []net.Conn
	var mu sync.Mutex
	if fault == "hung" {
		var err error
		hung, err = net.Listen("tcp", net.JoinHostPort(env.cp.WebhookHost, strconv.Itoa(env.cp.WebhookPort)))
		Expect(err).NotTo(HaveOccurred())
		go func() {
			for {
				c, err := hung.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		}()
	}
	return func() {
		if hung != nil {
			_ = hung.Close()
			mu.Lock()
			for _, c := range conns {
				_ = c.Close()
			}
			mu.Unlock()
		}
		var err error
		env.guard, err = env.cp.StartLeaseguard(env.binary, env.policyPath)
		Expect(err).NotTo(HaveOccurred())
	}
}

// mustParse reads the renewTime of a renewal patch.
func mustParse(patch string) time.Time {
	var p struct {
		Spec struct {
			RenewTime time.Time `json:"renewTime"`
		} `json:"spec"`
	}
	Expect(json.Unmarshal([]byte(patch), &p)).To(Succeed())
	return p.Spec.RenewTime
}
