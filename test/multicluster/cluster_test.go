package multicluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"cloud.google.com/go/storage"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/internal/controlplane"
	"github.com/leaseguard/leaseguard/test/multicluster/gcslock"
	"github.com/leaseguard/leaseguard/test/multicluster/kccmanager"
	"github.com/leaseguard/leaseguard/test/multicluster/mclcontroller"
)

const (
	systemNS = "cnrm-system"
	mclName  = "kcc-leader"
	bucket   = "leaseguard-multicluster"
	// The MultiClusterLease controller's ServiceAccount, the status writer
	// of the policy.
	controllerUser = "system:serviceaccount:multiclusterlease-system:default"
	// The Config Connector operator, an operator of the policy: the suite
	// cleans up as it.
	operatorUser = "system:serviceaccount:configconnector-operator-system:configconnector-operator"
	// Names of leaseguard's webhook configurations.
	validatingWebhooks = "leaseguard-validating-webhook-configuration"
	mutatingWebhooks   = "leaseguard-mutating-webhook-configuration"
)

// Timings of the shared MultiClusterLease the managers declare, and of
// leaseguard's clockSkew in testdata/policy.yaml.
var (
	mclTimings = kccmanager.Timings{LeaseDuration: 8 * time.Second, RenewDeadline: 6 * time.Second, RetryPeriod: 2 * time.Second}
	pollPeriod = time.Second
	clockSkew  = time.Second
)

// cluster is one of the two clusters: a control plane with leaseguard in
// front of its lease writes and a MultiClusterLease controller.
type cluster struct {
	name     string // "a"
	identity string // the candidate identity its managers write: "cluster-a"
	cp       *controlplane.ControlPlane
	guard    *controlplane.Leaseguard
	admin    kubernetes.Interface
	dyn      dynamic.Interface
	// webhooks are the configurations installed with leaseguard, kept to
	// restore them after a run without leaseguard.
	validating *admissionregistrationv1.ValidatingWebhookConfiguration
	mutating   *admissionregistrationv1.MutatingWebhookConfiguration

	stopController context.CancelFunc
	controllerDone chan error
	storage        *storage.Client
}

func (c *cluster) String() string { return c.identity }

// as returns a config of the cluster acting as user.
func (c *cluster) as(user string) *rest.Config {
	cfg := rest.CopyConfig(c.cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return cfg
}

func (c *cluster) mcls(user string) dynamic.ResourceInterface {
	dyn, err := dynamic.NewForConfig(c.as(user))
	Expect(err).NotTo(HaveOccurred())
	return dyn.Resource(mclv1alpha1.GroupVersionResource).Namespace(systemNS)
}

// freePorts returns n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// startCluster starts a control plane (kube-apiserver and etcd with the
// MultiClusterLease CRD) with the webhook configurations `leaseguard
// manifests` renders for the suite's policy, calling webhookPort, and
// creates the namespace of the leases.
func startCluster(name string, webhookPort int, policyPath string) (*cluster, error) {
	cp, err := controlplane.Start(controlplane.Options{WebhookPort: webhookPort, Policy: policyPath})
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", name, err)
	}
	c := &cluster{name: name, identity: "cluster-" + name, cp: cp}
	if c.admin, err = kubernetes.NewForConfig(cp.Config); err != nil {
		return c, err
	}
	if c.dyn, err = dynamic.NewForConfig(cp.Config); err != nil {
		return c, err
	}
	_, err = c.admin.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: systemNS}}, metav1.CreateOptions{})
	return c, err
}

// installLeaseguard puts leaseguard in front of the cluster's lease writes:
// `leaseguard serve` with the suite's policy, and the webhook configurations
// generated from that policy (controlplane.Start installed them, pointed at
// this cluster's webhook port), kept to be removed and restored.
func installLeaseguard(c *cluster, binary, policyPath string) error {
	ctx := context.Background()
	api := c.admin.AdmissionregistrationV1()
	v, err := api.ValidatingWebhookConfigurations().Get(ctx, validatingWebhooks, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("cluster %s: %w", c.name, err)
	}
	m, err := api.MutatingWebhookConfigurations().Get(ctx, mutatingWebhooks, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("cluster %s: %w", c.name, err)
	}
	c.validating, c.mutating = v, m
	c.guard, err = c.cp.StartLeaseguard(binary, policyPath)
	if err != nil {
		return fmt.Errorf("cluster %s: %w", c.name, err)
	}
	return nil
}

// setLeaseguard removes the webhook configurations (off: the API server
// calls no webhook, every lease write goes through unchecked) or restores
// them (on). `leaseguard serve` keeps running either way.
func (c *cluster) setLeaseguard(ctx context.Context, on bool) error {
	api := c.admin.AdmissionregistrationV1()
	if !on {
		if err := api.ValidatingWebhookConfigurations().Delete(ctx, validatingWebhooks, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if err := api.MutatingWebhookConfigurations().Delete(ctx, mutatingWebhooks, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return nil
	}
	v := c.validating.DeepCopy()
	v.ObjectMeta = metav1.ObjectMeta{Name: v.Name, Labels: v.Labels, Annotations: v.Annotations}
	if _, err := api.ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	m := c.mutating.DeepCopy()
	m.ObjectMeta = metav1.ObjectMeta{Name: m.Name, Labels: m.Labels, Annotations: m.Annotations}
	if _, err := api.MutatingWebhookConfigurations().Create(ctx, m, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// startController runs the cluster's MultiClusterLease controller as its
// ServiceAccount, with a GCS client of its own.
func (c *cluster) startController() error {
	ctx, cancel := context.WithCancel(context.Background())
	client, err := env.gcs.NewClient(ctx)
	if err != nil {
		cancel()
		return err
	}
	ctrl, err := mclcontroller.New(mclcontroller.Options{
		Config:  c.as(controllerUser),
		Storage: client,
		Bucket:  bucket,
		Name:    "multiclusterlease-" + c.name,
		Log:     GinkgoLogr.WithName(c.identity).WithName("mcl-controller"),
	})
	if err != nil {
		cancel()
		_ = client.Close()
		return err
	}
	c.storage, c.stopController, c.controllerDone = client, cancel, make(chan error, 1)
	go func() { c.controllerDone <- ctrl.Start(ctx) }()
	return nil
}

// stop stops what runs for the cluster, the control plane last.
func (c *cluster) stop() {
	if c.stopController != nil {
		c.stopController()
		select {
		case err := <-c.controllerDone:
			if err != nil {
				GinkgoWriter.Printf("cluster %s: controller: %v\n", c.name, err)
			}
		case <-time.After(30 * time.Second):
			GinkgoWriter.Printf("cluster %s: controller did not stop within 30s\n", c.name)
		}
		_ = c.storage.Close()
	}
	if c.guard != nil {
		c.guard.Stop()
	}
	if c.cp != nil {
		if err := c.cp.Stop(); err != nil {
			GinkgoWriter.Printf("cluster %s: stopping the control plane: %v\n", c.name, err)
		}
	}
}

// fleet is the namespace-mode managers of both clusters.
type fleet struct {
	teams []string

	mu       sync.Mutex
	managers map[*cluster][]*kccmanager.Manager // every incarnation, killed ones included
}

func managerConfig(c *cluster, team string) kccmanager.Config {
	return kccmanager.Config{
		Cluster:         c.identity,
		Namespace:       team,
		SystemNamespace: systemNS,
		LeaseName:       mclName,
		Base:            c.cp.Config,
		MCL:             mclTimings,
		PollPeriod:      pollPeriod,
		Log:             GinkgoLogr.WithName(c.identity),
	}
}

func startFleet(teams []string) *fleet {
	f := &fleet{teams: teams, managers: map[*cluster][]*kccmanager.Manager{}}
	for _, c := range env.clusters {
		for _, team := range teams {
			f.start(c, team)
		}
	}
	return f
}

// start starts (or restarts, as a new incarnation) team's manager in c.
func (f *fleet) start(c *cluster, team string) *kccmanager.Manager {
	m, err := kccmanager.Start(managerConfig(c, team))
	Expect(err).NotTo(HaveOccurred())
	f.mu.Lock()
	defer f.mu.Unlock()
	f.managers[c] = append(f.managers[c], m)
	return m
}

// all returns every incarnation of c's managers, killed ones included.
func (f *fleet) all(c *cluster) []*kccmanager.Manager {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*kccmanager.Manager(nil), f.managers[c]...)
}

// live returns c's running managers.
func (f *fleet) live(c *cluster) []*kccmanager.Manager {
	var out []*kccmanager.Manager
	for _, m := range f.all(c) {
		if m.Alive() {
			out = append(out, m)
		}
	}
	return out
}

// byUser returns c's live manager of the username.
func (f *fleet) byUser(c *cluster, user string) *kccmanager.Manager {
	for _, m := range f.live(c) {
		if m.Config().Username() == user {
			return m
		}
	}
	return nil
}

// stop kills every manager and removes what they and the controllers wrote:
// the MultiClusterLeases (as the operator, through the controller's
// finalizer), the bound Leases and the global lock.
func (f *fleet) stop(ctx context.Context) {
	for _, c := range env.clusters {
		for _, m := range f.live(c) {
			m.Kill()
		}
	}
	for _, c := range env.clusters {
		ops := c.mcls(operatorUser)
		if err := ops.Delete(ctx, mclName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			Expect(err).NotTo(HaveOccurred())
		}
		Eventually(func() bool {
			_, err := ops.Get(ctx, mclName, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).WithTimeout(30*time.Second).Should(BeTrue(), "cluster %s: the controller removes its finalizer from a deleted MultiClusterLease", c)
		leases, err := kubernetes.NewForConfig(c.as(operatorUser))
		Expect(err).NotTo(HaveOccurred())
		for _, team := range f.teams {
			err := leases.CoordinationV1().Leases(systemNS).Delete(ctx, "kcc-leader-"+team, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				Expect(err).NotTo(HaveOccurred())
			}
		}
	}
	err := env.admin.Bucket(bucket).Object(gcslock.ObjectName(systemNS + "/" + mclName)).Delete(ctx)
	if err != nil && !errors.Is(err, storage.ErrObjectNotExist) {
		Expect(err).NotTo(HaveOccurred())
	}
}
