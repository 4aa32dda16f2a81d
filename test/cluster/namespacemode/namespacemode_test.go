// Package namespacemode runs Config Connector's namespace mode in the kind
// cluster of hack/kind on the real lock (package kccworkload: one manager
// Pod per namespace, the MultiClusterLease controller and the GCS emulator
// as Pods), guarded by leaseguard and, beside it, unguarded, and checks the
// steady state: every namespace leads at every sample, no manager exits,
// and leaseguard stores a fraction of the unguarded renewals.
//
// `make test-e2e-kind` (and make test's kind stage) runs it; alone it needs
// clustertest.TargetFromEnv's environment and CLUSTER_KCC_IMAGE, the
// workload's image loaded into the cluster; with CLUSTER_KCC_KEEP=1 the
// workload stays up afterwards (for test/cluster/faults).
package namespacemode

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/test/cluster/clustertest"
	"github.com/leaseguard/leaseguard/test/cluster/kccworkload"
)

const (
	// reconciledNamespaces is how many namespaces each cluster's managers
	// reconcile: one manager Pod each.
	reconciledNamespaces = 10
	// steadyWindow is how long the steady state is sampled.
	steadyWindow = 60 * time.Second
)

func TestNamespaceModeOnTheRealLock(t *testing.T) {
	target, missing := clustertest.TargetFromEnv()
	if missing != "" {
		t.Skip(missing)
	}
	image := os.Getenv("CLUSTER_KCC_IMAGE")
	if image == "" {
		t.Fatal("CLUSTER_KCC_IMAGE is not set: the image of test/multicluster/cmd/kcc loaded into the cluster (hack/kind/e2e.sh builds kcc-workload:e2e)")
	}
	config, err := clientcmd.BuildConfigFromFlags("", target.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	config.Timeout = 10 * time.Second
	admin := kubernetes.NewForConfigOrDie(config)
	ctx := context.Background()
	nodes, err := kccworkload.WorkerNodes(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	w := &kccworkload.Workload{Admin: admin, Config: config, Image: image, Reconciled: kccworkload.Namespaces(reconciledNamespaces), Nodes: nodes}

	deployed := time.Now()
	if err := w.Deploy(ctx); err != nil {
		t.Fatal(err)
	}
	// The kind stage keeps the workload for the fault tests, which judge
	// every fault on it (CLUSTER_KCC_KEEP=1) and remove it.
	if os.Getenv("CLUSTER_KCC_KEEP") == "" {
		t.Cleanup(func() {
			if err := w.Undeploy(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	s := w.NewSampler()
	took, err := w.WaitAllLeading(ctx, s, 4*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("every namespace of both clusters leads %s after the deploy (%s to lead)", time.Since(deployed).Round(time.Second), took.Round(time.Second))

	before, _, err := w.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	windowCtx, stopCounting := context.WithCancel(ctx)
	defer stopCounting()
	stored, err := w.CountWrites(windowCtx)
	if err != nil {
		t.Fatal(err)
	}
	from := time.Now()
	s.Start()
	time.Sleep(steadyWindow)
	s.Stop()
	stopCounting()
	samples := s.Between(from, time.Now())
	after, why, err := w.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}

	exits := kccworkload.Exits(before, after)
	var report strings.Builder
	fmt.Fprintf(&report, "| cluster | namespaces | samples | with every namespace leading | fewest leading | longest without a leader | manager exits | stored writes (spec / status) |\n|---|---|---|---|---|---|---|---|\n")
	for _, c := range kccworkload.Clusters {
		f := kccworkload.Summarize(samples, c.System, w.Reconciled)
		st := stored[c.System]
		fmt.Fprintf(&report, "| %s | %d | %d | %d | %d | %s | %d | %d (%d / %d) |\n", c.Name(), len(w.Reconciled), f.Samples, f.AllLeading, f.Fewest,
			f.LongestGap.Round(100*time.Millisecond), kccworkload.Total(exits[c.System]), st.Spec.Load()+st.Status.Load(), st.Spec.Load(), st.Status.Load())
		if f.Samples < int(steadyWindow/time.Second)-5 {
			t.Errorf("%s: %d samples in %s, want one a second", c.System, f.Samples, steadyWindow)
		}
		if f.AllLeading != f.Samples {
			t.Errorf("%s: every namespace led in %d of %d samples; first miss %s", c.System, f.AllLeading, f.Samples, f.FirstMiss)
		}
		if n := kccworkload.Total(exits[c.System]); n != 0 {
			t.Errorf("%s: %d manager exits in a steady state:\n%s", c.System, n, why)
		}
	}
	if n := kccworkload.Total(exits[kccworkload.ControllerNamespace]); n != 0 {
		t.Errorf("the MultiClusterLease controller or the GCS emulator exited %d times in a steady state:\n%s", n, why)
	}
	t.Logf("steady state, %s:\n%s", steadyWindow, report.String())
	if path := os.Getenv("NAMESPACEMODE_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(report.String()), 0o644); err != nil {
			t.Error(err)
		}
	}

	// leaseguard stores one manager's renewals of the shared lease; the
	// others' are acknowledged without being stored.
	guarded, unguarded := stored[kccworkload.Clusters[0].System], stored[kccworkload.Clusters[1].System]
	if g, u := guarded.Spec.Load(), unguarded.Spec.Load(); u < int64(len(w.Reconciled)) || g*3 > u {
		t.Errorf("spec writes stored in %s: %d with leaseguard, %d unguarded: want at most a third, and the unguarded managers' renewals counted", steadyWindow, g, u)
	}
	mcls := dynamic.NewForConfigOrDie(config).Resource(mclv1alpha1.GroupVersionResource)
	got, err := mcls.Namespace(kccworkload.Clusters[0].System).Get(ctx, kccworkload.LeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	designated := got.GetAnnotations()[kccworkload.Designation]
	if !strings.HasPrefix(designated, "system:serviceaccount:"+kccworkload.Clusters[0].System+":"+kccworkload.ManagerName("kcc-")) {
		t.Errorf("the guarded MultiClusterLease designates %q, want one of its managers", designated)
	}
	holder, _, _ := unstructured.NestedString(got.Object, "status", "globalHolderIdentity")
	if holder != kccworkload.Identity {
		t.Errorf("the guarded MultiClusterLease's status.globalHolderIdentity is %q, want %q", holder, kccworkload.Identity)
	}
}
