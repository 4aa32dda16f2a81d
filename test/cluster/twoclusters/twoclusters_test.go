package twoclusters

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/test/cluster/clustertest"
	"github.com/leaseguard/leaseguard/test/cluster/kccworkload"
)

const (
	// reconciledNamespaces is how many namespaces each installation
	// reconciles: one manager Pod each, guarded and unguarded.
	reconciledNamespaces = 5
	// secondIdentity is the second cluster's candidate identity.
	secondIdentity = "cluster-kind-b"
	// standbyWindow is how long both installations are watched side by
	// side before the stop.
	standbyWindow = 30 * time.Second

	// The protocol's timings (test/multicluster/kccmanager, Config
	// Connector's): lease duration, the managers' retry period, the
	// controller's requeue (spec.retryPeriodSeconds).
	leaseDuration   = 15 * time.Second
	retryPeriod     = 2 * time.Second
	lockRetryPeriod = 15 * time.Second
	// takeoverBound is what the protocol allows a takeover, as
	// test/multicluster holds its own to (docs/multicluster.md,
	// "Takeover"): the stopped cluster's controller renews the global lock
	// until its candidate is stale (up to 2 × leaseDuration after its last
	// renewal), the lock expires a leaseDuration later, the other cluster's
	// controller reads it at its next requeue, and its managers patch at
	// their next jittered retry, twice. Nothing in it is leaseguard's.
	takeoverBound = 2*leaseDuration + lockRetryPeriod + leaseDuration + 2*(retryPeriod*12/10+time.Second)
	// stopGrace is the managers' termination: a stopped Pod's process ends
	// within its grace period (10 s) after the stop.
	stopGrace = 10 * time.Second
)

type installation struct {
	name   string
	config *rest.Config
	admin  kubernetes.Interface
	w      *kccworkload.Workload
	s      *kccworkload.Sampler
}

func connect(t *testing.T, name, kubeconfig string) *installation {
	t.Helper()
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	config.Timeout = 10 * time.Second
	return &installation{name: name, config: config, admin: kubernetes.NewForConfigOrDie(config)}
}

// lease is the cluster's MultiClusterLease of system, as stored.
func (in *installation) lease(ctx context.Context, system string) (*unstructured.Unstructured, error) {
	return dynamic.NewForConfigOrDie(in.config).Resource(mclv1alpha1.GroupVersionResource).Namespace(system).Get(ctx, kccworkload.LeaseName, metav1.GetOptions{})
}

// globalHolder is what a cluster's MultiClusterLease of system says holds
// the global lock.
func (in *installation) globalHolder(ctx context.Context, system string) (string, error) {
	u, err := in.lease(ctx, system)
	if err != nil {
		return "", err
	}
	holder, _, _ := unstructured.NestedString(u.Object, "status", "globalHolderIdentity")
	return holder, nil
}

// storedRenewTime is a cluster's MultiClusterLease of system's
// spec.renewTime: the candidate's last renewal its controller sees.
func (in *installation) storedRenewTime(ctx context.Context, system string) (time.Time, error) {
	u, err := in.lease(ctx, system)
	if err != nil {
		return time.Time{}, err
	}
	renewTime, _, _ := unstructured.NestedString(u.Object, "spec", "renewTime")
	var at metav1.MicroTime
	if err := at.UnmarshalQueryParameter(renewTime); err != nil {
		return time.Time{}, fmt.Errorf("%s/%s: spec.renewTime %q: %w", system, kccworkload.LeaseName, renewTime, err)
	}
	return at.Time, nil
}

func (in *installation) designated(ctx context.Context, system string) (string, error) {
	u, err := in.lease(ctx, system)
	if err != nil {
		return "", err
	}
	return u.GetAnnotations()[kccworkload.Designation], nil
}

// keep removes a workload after the test unless CLUSTER_KCC_KEEP is set
// (the workloads left up for a look at their Pods' logs).
func keep(t *testing.T, w *kccworkload.Workload) {
	if os.Getenv("CLUSTER_KCC_KEEP") != "" {
		return
	}
	t.Cleanup(func() {
		if err := w.Undeploy(context.Background()); err != nil {
			t.Error(err)
		}
	})
}

// watch looks at both installations every second, at once, until ctx ends.
func watch(ctx context.Context, first, second *installation) func() []Look {
	var mu sync.Mutex
	var looks []Look
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for i := 0; ; i++ {
			if i%5 == 0 {
				_ = first.s.Refresh(ctx)
				_ = second.s.Refresh(ctx)
			}
			var l Look
			var wg sync.WaitGroup
			l.At = time.Now()
			wg.Go(func() { l.First = first.s.Look(ctx) })
			wg.Go(func() { l.Second = second.s.Look(ctx) })
			wg.Wait()
			if ctx.Err() != nil {
				return
			}
			mu.Lock()
			looks = append(looks, l)
			mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() []Look {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return looks
	}
}

func between(looks []Look, from, to time.Time) []Look {
	var out []Look
	for _, l := range looks {
		if !l.At.Before(from) && !l.At.After(to) {
			out = append(out, l)
		}
	}
	return out
}

func TestTwoClustersShareOneGlobalLock(t *testing.T) {
	target, missing := clustertest.TargetFromEnv()
	if missing != "" {
		t.Skip(missing)
	}
	secondKubeconfig, image := os.Getenv("CLUSTER_B_KUBECONFIG"), os.Getenv("CLUSTER_KCC_IMAGE")
	if secondKubeconfig == "" {
		t.Fatal("CLUSTER_B_KUBECONFIG is not set: the second kind cluster's kubeconfig, leaseguard installed (hack/kind/e2e.sh's second-cluster-up stage)")
	}
	if image == "" {
		t.Fatal("CLUSTER_KCC_IMAGE is not set: the image of test/multicluster/cmd/kcc loaded into both clusters (hack/kind/e2e.sh builds kcc-workload:e2e)")
	}
	ctx := context.Background()
	first, second := connect(t, "first cluster", target.Kubeconfig), connect(t, "second cluster", secondKubeconfig)
	reconciled := kccworkload.Namespaces(reconciledNamespaces)

	// The first installation, with the emulator, alone: it takes the lock.
	nodes, err := kccworkload.WorkerNodes(ctx, first.admin)
	if err != nil {
		t.Fatal(err)
	}
	first.w = &kccworkload.Workload{Admin: first.admin, Config: first.config, Image: image, Reconciled: reconciled, Nodes: nodes}
	if err := first.w.Deploy(ctx); err != nil {
		t.Fatal(err)
	}
	keep(t, first.w)
	endpoint, err := first.w.ShareEmulator(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first.s = first.w.NewSampler()
	if took, err := first.w.WaitAllLeading(ctx, first.s, 4*time.Minute); err != nil {
		t.Fatalf("the first installation: %v", err)
	} else {
		t.Logf("the first installation leads in every namespace, guarded and unguarded, %s after its deploy; its GCS emulator is shared at %s", took.Round(time.Second), endpoint)
	}

	// The second, its controller on the first cluster's emulator: it sees
	// the lock held and waits.
	second.w = &kccworkload.Workload{Admin: second.admin, Config: second.config, Image: image, Reconciled: reconciled,
		Identity: secondIdentity, GCSEndpoint: endpoint}
	if err := second.w.Deploy(ctx); err != nil {
		t.Fatal(err)
	}
	keep(t, second.w)
	second.s = second.w.NewSampler()
	for _, c := range kccworkload.Clusters {
		deadline := time.Now().Add(3 * time.Minute)
		for {
			holder, err := second.globalHolder(ctx, c.System)
			if err == nil && holder == kccworkload.Identity {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s/%s in the second cluster: the global holder is %q (%v), want %q: its controller does not read the shared lock", c.System, kccworkload.LeaseName, holder, err, kccworkload.Identity)
			}
			time.Sleep(2 * time.Second)
		}
	}
	secondBefore, _, err := second.w.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}

	firstBefore, _, err := first.w.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	watchCtx, stopWatching := context.WithCancel(ctx)
	looksOf := watch(watchCtx, first, second)
	standbyFrom := time.Now()
	time.Sleep(standbyWindow)
	firstAfter, firstWhy, err := first.w.Processes(ctx)
	if err != nil {
		stopWatching()
		t.Fatal(err)
	}
	firstExits := kccworkload.Exits(firstBefore, firstAfter)
	if firstWhy != "" {
		t.Logf("the first cluster's last exits:\n%s", firstWhy)
	}
	// The standby window ends as the stop begins: a look taken while the
	// StatefulSets are being scaled down already sees managers ending.
	stopping := time.Now()
	// How old each stored renewal is as the stop begins: the stopped
	// cluster's controller renews the global lock until it is 2 ×
	// leaseDuration old.
	storedAge := map[string]time.Duration{}
	for _, c := range kccworkload.Clusters {
		at, err := first.storedRenewTime(ctx, c.System)
		if err != nil {
			stopWatching()
			t.Fatal(err)
		}
		storedAge[c.System] = stopping.Sub(at)
	}
	if err := first.w.StopManagers(ctx); err != nil {
		stopWatching()
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Logf("every manager of the first cluster stopped at %s (scaled down from %s)", stopped.Format("15:04:05.000"), stopping.Format("15:04:05.000"))
	// Until both systems took over, or the bound and the managers' grace
	// period passed.
	deadline := stopped.Add(takeoverBound + stopGrace + 5*time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(2 * time.Second)
		guarded, err1 := second.globalHolder(ctx, kccworkload.Clusters[0].System)
		unguarded, err2 := second.globalHolder(ctx, kccworkload.Clusters[1].System)
		if err1 == nil && err2 == nil && guarded == secondIdentity && unguarded == secondIdentity {
			// Every manager follows at its next retry.
			time.Sleep(2*retryPeriod + 2*time.Second)
			break
		}
	}
	stopWatching()
	looks := looksOf()
	secondAfter, why, err := second.w.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exits := kccworkload.Exits(secondBefore, secondAfter)

	var report strings.Builder
	fmt.Fprintf(&report, "| MultiClusterLease | looks | both clusters leading | first cluster active (standby window) | stored renewTime's age at the stop | takeover after the stop | protocol's bound | second cluster's manager exits |\n|---|---|---|---|---|---|---|---|\n")
	takeovers := map[bool]time.Duration{}
	for _, c := range kccworkload.Clusters {
		standby := Judge(between(looks, standbyFrom, stopping), c.System, reconciled, time.Time{})
		all := Judge(looks, c.System, reconciled, stopped)
		takeovers[c.Guarded] = all.Takeover
		took := "none"
		if all.Takeover > 0 {
			took = all.Takeover.Round(100 * time.Millisecond).String()
		}
		fmt.Fprintf(&report, "| %s | %d | %d | %d of %d | %s | %s | %s | %d |\n", c.Name(), all.Looks, all.Both, standby.FirstActive, standby.Looks,
			storedAge[c.System].Round(100*time.Millisecond), took, takeoverBound, kccworkload.Total(exits[c.System]))
		if standby.Looks < int(standbyWindow/time.Second)-5 {
			t.Errorf("%s: %d looks in the standby window of %s, want one a second", c.System, standby.Looks, standbyWindow)
		}
		if standby.FirstActive != standby.Looks {
			t.Errorf("%s: the first cluster was the one active installation in %d of %d looks before the stop; first miss %s (first cluster's manager exits meanwhile: %d)",
				c.System, standby.FirstActive, standby.Looks, standby.FirstNeither, kccworkload.Total(firstExits[c.System]))
		}
		if all.Both != 0 {
			t.Errorf("%s: managers of both clusters led at once in %d looks; first %s", c.System, all.Both, all.FirstBoth)
		}
		if all.Takeover == 0 {
			t.Errorf("%s: the second cluster never led in every namespace within %s of the stop", c.System, takeoverBound+stopGrace)
		} else if all.Takeover > takeoverBound+stopGrace {
			t.Errorf("%s: the second cluster took over %s after the stop, beyond the protocol's bound %s (and the managers' %s grace)", c.System, all.Takeover.Round(100*time.Millisecond), takeoverBound, stopGrace)
		}
		if n := kccworkload.Total(exits[c.System]); n != 0 {
			t.Errorf("%s: %d exits of the second cluster's managers, waiting and taking over:\n%s", c.System, n, why)
		}
	}
	if n := kccworkload.Total(exits[kccworkload.ControllerNamespace]); n != 0 {
		t.Errorf("the second cluster's MultiClusterLease controller exited %d times:\n%s", n, why)
	}
	// leaseguard in the second cluster decides its installation's writes:
	// one of its managers is designated once it leads.
	system := kccworkload.Clusters[0].System
	if d, err := second.designated(ctx, system); err != nil {
		t.Error(err)
	} else if !strings.HasPrefix(d, "system:serviceaccount:"+system+":"+kccworkload.ManagerName("kcc-")) {
		t.Errorf("the second cluster's guarded MultiClusterLease designates %q, want one of its managers", d)
	}
	fmt.Fprintf(&report, "\nTakeover with leaseguard %s, without %s (each from the stop of every manager of the first cluster to the first look in which every namespace of the second led).\n",
		takeovers[true].Round(100*time.Millisecond), takeovers[false].Round(100*time.Millisecond))
	t.Logf("two clusters, one global lock:\n%s", report.String())
	if path := os.Getenv("TWOCLUSTERS_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(report.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
}
