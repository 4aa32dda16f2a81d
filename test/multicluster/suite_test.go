// Package multicluster is the test the Config Connector design thread asks
// for: namespace mode with several namespaces, one MultiClusterLease synced
// across two clusters through a global lock, and exactly one cluster active.
//
// Two local control planes (kube-apiserver and etcd) each run the real
// `leaseguard serve` with testdata/policy.yaml, a MultiClusterLease
// controller (package mclcontroller) whose global lock is an object in a
// bucket of an in-process GCS-protocol server (fake-gcs-server), and three
// namespace-mode managers (package kccmanager). The specs sample both
// clusters every 200ms while they kill managers, and check every sample.
package multicluster

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/test/multicluster/gcsemulator"
)

func TestMultiCluster(t *testing.T) {
	RegisterFailHandler(Fail)
	// The load curve (label "curve") runs only when a label filter asks
	// for it: `make measure-multicluster-curve`.
	suiteConfig, reporterConfig := GinkgoConfiguration()
	if suiteConfig.LabelFilter == "" {
		suiteConfig.LabelFilter = "!curve"
	}
	RunSpecs(t, "leaseguard multi-cluster", suiteConfig, reporterConfig)
}

// env is what every spec runs against.
var env struct {
	tmp        string
	binary     string
	policyPath string
	gcs        *gcsemulator.Server
	// admin is the suite's own GCS client, to read the lock.
	admin    *storage.Client
	clusters []*cluster
}

var _ = BeforeSuite(func(ctx SpecContext) {
	// client-go's leader election and controller-runtime log through klog
	// and logr; their lines belong with the spec that produced them.
	klog.SetLogger(GinkgoLogr)
	ctrllog.SetLogger(GinkgoLogr)

	var err error
	env.tmp, err = os.MkdirTemp("", "leaseguard-multicluster-")
	Expect(err).NotTo(HaveOccurred())
	env.policyPath, err = filepath.Abs(filepath.Join("testdata", "policy.yaml"))
	Expect(err).NotTo(HaveOccurred())

	By("building leaseguard and starting the GCS emulator and two control planes")
	ports, err := freePorts(2)
	Expect(err).NotTo(HaveOccurred())
	env.clusters = make([]*cluster, 2)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, name := range []string{"a", "b"} {
		wg.Go(func() { env.clusters[i], errs[i] = startCluster(name, ports[i], env.policyPath) })
	}
	wg.Go(func() { env.binary, errs[2] = controlplane.BuildLeaseguard(env.tmp) })
	wg.Wait()
	for _, err := range errs {
		Expect(err).NotTo(HaveOccurred())
	}
	env.gcs, err = gcsemulator.Start(bucket, nil)
	Expect(err).NotTo(HaveOccurred())
	env.admin, err = env.gcs.NewClient(context.Background())
	Expect(err).NotTo(HaveOccurred())

	By("installing leaseguard and starting a MultiClusterLease controller in each cluster")
	for _, c := range env.clusters {
		Expect(installLeaseguard(c, env.binary, env.policyPath)).To(Succeed())
		Expect(c.startController()).To(Succeed())
	}
}, NodeTimeout(5*time.Minute))

var _ = AfterSuite(func() {
	if table := summary(); len(order) > 0 {
		GinkgoWriter.Print("\nsummary of the runs\n" + table)
		AddReportEntry("summary of the runs", table)
		if path := os.Getenv("MULTICLUSTER_REPORT"); path != "" {
			_ = os.WriteFile(path, []byte(table), 0o644)
		}
	}
	for _, c := range env.clusters {
		if c != nil {
			c.stop()
		}
	}
	if env.admin != nil {
		_ = env.admin.Close()
	}
	if env.gcs != nil {
		env.gcs.Stop()
	}
	if env.tmp != "" {
		_ = os.RemoveAll(env.tmp)
	}
})
