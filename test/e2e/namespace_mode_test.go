package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
)

const (
	designation = "leaseguard.io/designated-manager"
	denied      = `admission webhook "validate.leases.leaseguard.io" denied the request: `
	// The shared lease is short, so takeover is quick to observe: stale after
	// 3s + 1s clock-skew grace.
	mclLeaseSeconds = 3
)

func mcls(user string, groups ...string) dynamic.ResourceInterface {
	dyn, err := dynamic.NewForConfig(impersonating(user, "", groups...))
	Expect(err).NotTo(HaveOccurred())
	return dyn.Resource(mclv1alpha1.GroupVersionResource).Namespace(e2eNS)
}

func leasesAs(team string) kubernetes.Interface {
	cs, err := kubernetes.NewForConfig(impersonating(manager(team), pod(team)))
	Expect(err).NotTo(HaveOccurred())
	return cs
}

func micro(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z07:00") }

// renew is a KCC candidate's acquire/renew merge PATCH. All candidates of a
// cluster send the same holder identity.
func renew(ctx context.Context, team string) (*unstructured.Unstructured, error) {
	patch := fmt.Sprintf(`{"spec":{"holderIdentity":"cluster-e2e","renewTime":%q,"leaseDurationSeconds":%d,"retryPeriodSeconds":%d}}`,
		micro(time.Now()), mclLeaseSeconds, mclLeaseSeconds)
	return mcls(manager(team)).Patch(ctx, "kcc-leader", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
}

var _ = Describe("Config Connector namespace mode", Ordered, func() {
	ctx := context.Background()
	var designated string

	BeforeAll(func() {
		_ = mcls(operators, operators).Delete(ctx, "kcc-leader", metav1.DeleteOptions{})
		Eventually(func() bool {
			_, err := mcls(operators, operators).Get(ctx, "kcc-leader", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(30 * time.Second).Should(BeTrue())
	})

	// Designation decides who writes, never who leads: Config Connector's
	// managers share one MultiClusterLease and one holder identity, and
	// each leads only once its own renewal succeeds.
	It("answers every manager's renewal of the shared MultiClusterLease and stores only the designated one's", func() {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": mclv1alpha1.Group + "/" + mclv1alpha1.Version,
			"kind":       mclv1alpha1.Kind,
			"metadata":   map[string]any{"name": "kcc-leader", "namespace": e2eNS},
			"spec": map[string]any{"holderIdentity": "cluster-e2e", "renewTime": micro(time.Now()),
				"leaseDurationSeconds": int64(mclLeaseSeconds), "retryPeriodSeconds": int64(mclLeaseSeconds)},
		}}
		created, err := mcls(manager("team-a")).Create(ctx, obj, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		designated = created.GetAnnotations()[designation]
		Expect(designated).To(Equal(manager("team-a")), "the first writer is designated")

		for _, team := range []string{"team-b", "team-c"} {
			got, err := renew(ctx, team)
			Expect(err).NotTo(HaveOccurred(), "team %s's renewal", team)
			Expect(got.GetResourceVersion()).To(Equal(created.GetResourceVersion()), "team %s's renewal was acknowledged without being stored", team)
			Expect(got.GetGeneration()).To(Equal(created.GetGeneration()))
			Expect(got.GetAnnotations()[designation]).To(Equal(designated))
		}
		_, err = renew(ctx, "team-a")
		Expect(err).NotTo(HaveOccurred(), "the designated manager's renewal")

		// Any other lease write by a manager that is not designated is
		// refused.
		patch := fmt.Sprintf(`{"spec":{"renewTime":%q,"leaseDurationSeconds":%d}}`, micro(time.Now()), mclLeaseSeconds+1)
		_, err = mcls(manager("team-b")).Patch(ctx, "kcc-leader", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		Expect(apierrors.IsForbidden(err) || apierrors.IsTooManyRequests(err)).To(BeTrue(), "%v", err)
		Expect(said(err)).To(HavePrefix("leaseguard: rule e2e-mcl: " + manager("team-b") +
			" is not the designated manager of multiclusterlease leaseguard-e2e/kcc-leader (designated: ...cnrm-controller-manager-team-a, stale in "))
	})

	It("still lets the other managers read the lease", func() {
		for _, team := range []string{"team-b", "team-c"} {
			got, err := mcls(manager(team)).Get(ctx, "kcc-leader", metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(got.GetAnnotations()[designation]).To(Equal(designated))
		}
	})

	It("lets only the MultiClusterLease controller write status", func() {
		current, err := mcls(mclCtrl).Get(ctx, "kcc-leader", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		forged := current.DeepCopy()
		Expect(unstructured.SetNestedField(forged.Object, "cluster-evil", "status", "globalHolderIdentity")).To(Succeed())

		_, err = mcls(manager("team-a")).UpdateStatus(ctx, forged, metav1.UpdateOptions{})
		Expect(said(err)).To(Equal("leaseguard: rule e2e-mcl: " + manager("team-a") +
			" may not write the status of multiclusterlease leaseguard-e2e/kcc-leader (status writers: " + mclCtrl + ")"))

		Expect(unstructured.SetNestedField(forged.Object, "cluster-e2e", "status", "globalHolderIdentity")).To(Succeed())
		written, err := mcls(mclCtrl).UpdateStatus(ctx, forged, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		holder, _, _ := unstructured.NestedString(written.Object, "status", "globalHolderIdentity")
		Expect(holder).To(Equal("cluster-e2e"))
	})

	It("hands the lease over when the designated manager stops renewing", func() {
		// team-a stops; team-b's renewals are acknowledged (never refused)
		// until team-a's lease is stale, then one is stored and takes the
		// designation over.
		var took *unstructured.Unstructured
		Eventually(func() string {
			got, err := renew(ctx, "team-b")
			Expect(err).NotTo(HaveOccurred(), "team-b's renewal is never refused")
			took = got
			return got.GetAnnotations()[designation]
		}).WithTimeout(20 * time.Second).WithPolling(500 * time.Millisecond).Should(Equal(manager("team-b")))

		// The former designated manager's renewal is now acknowledged
		// without being stored.
		got, err := renew(ctx, "team-a")
		Expect(err).NotTo(HaveOccurred(), "the former designated manager's renewal")
		Expect(got.GetResourceVersion()).To(Equal(took.GetResourceVersion()), "acknowledged, not stored")
		Expect(got.GetAnnotations()[designation]).To(Equal(manager("team-b")))
	})
})

var _ = Describe("bound Leases and kubectl --dry-run=server", func() {
	ctx := context.Background()

	leaseFile := func(team, holder string) string {
		f := filepath.Join(env.tmp, "lease-"+team+"-"+strings.ReplaceAll(holder, "_", "-")+".yaml")
		Expect(os.WriteFile(f, []byte(fmt.Sprintf(`apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: kcc-leader-%s
  namespace: %s
spec:
  holderIdentity: %s
  leaseDurationSeconds: 15
`, team, e2eNS, holder)), 0o600)).To(Succeed())
		return f
	}

	It("admits a manager's own bound lease and stores nothing", func() {
		out, err := kubectl("apply", "--dry-run=server", "--as", manager("team-c"),
			"--as-user-extra", "authentication.kubernetes.io/pod-name="+pod("team-c"), "-f", leaseFile("team-c", pod("team-c")+"_1"))
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(strings.TrimSpace(out)).To(Equal("lease.coordination.k8s.io/kcc-leader-team-c created (server dry run)"))
		_, err = env.admin.CoordinationV1().Leases(e2eNS).Get(ctx, "kcc-leader-team-c", metav1.GetOptions{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "a dry-run stored the lease: %v", err)
	})

	It("denies another manager's lease", func() {
		out, err := kubectl("apply", "--dry-run=server", "--as", manager("team-b"),
			"--as-user-extra", "authentication.kubernetes.io/pod-name="+pod("team-b"), "-f", leaseFile("team-c", pod("team-b")+"_1"))
		Expect(err).To(HaveOccurred(), out)
		Expect(out).To(ContainSubstring(`Error from server (Forbidden): error when creating "` + leaseFile("team-c", pod("team-b")+"_1") + `": ` +
			denied + "leaseguard: rule e2e-bound-leases: " + manager("team-b") +
			" may not write lease leaseguard-e2e/kcc-leader-team-c (bound lease: kcc-leader-team-b)"))
	})

	It("denies a holder that is not the calling pod's", func() {
		_, err := leasesAs("team-a").CoordinationV1().Leases(e2eNS).Create(ctx, boundLease("team-a", "someone-else_1"), metav1.CreateOptions{})
		Expect(said(err)).To(Equal("leaseguard: rule e2e-bound-leases: " + manager("team-a") +
			" writes holder someone-else_1 of another pod on lease leaseguard-e2e/kcc-leader-team-a (want " +
			pod("team-a") + "[_<id>])"))
		_, err = leasesAs("team-a").CoordinationV1().Leases(e2eNS).Create(ctx, boundLease("team-a", pod("team-a")+"_1"), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
	})

	It("admits with a warning kubectl prints in warn mode", func() {
		f := filepath.Join(env.tmp, "warned.yaml")
		Expect(os.WriteFile(f, []byte("apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: warned\n  namespace: "+warnNS+"\nspec:\n  holderIdentity: x\n"), 0o600)).To(Succeed())
		out, err := kubectl("apply", "--dry-run=server", "--as", "system:serviceaccount:default:intruder", "-f", f)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("Warning: leaseguard: rule e2e-warn: system:serviceaccount:default:intruder is not a manager of lease leaseguard-e2e-warn/warned (managers: system:serviceaccount:leaseguard-e2e-warn:manager)"))
		Expect(out).To(ContainSubstring("lease.coordination.k8s.io/warned created (server dry run)"))
	})
})
