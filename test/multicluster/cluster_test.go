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
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/test/multicluster/gcslock"
	"github.com/leaseguard/leaseguard/test/multicluster/kccmanager"
	"github.com/leaseguard/leaseguard/test/multicluster/mclcontroller"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
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
	// Prefix of leaseguard's admission configuration (webhook
	// configurations and the coalescing MutatingAdmissionPolicy).
	admissionPrefix = "leaseguard"
)

// clockSkew is leaseguard's clockSkew in testdata/policy.yaml.
const clockSkew = time.Second

// cluster is one of the two clusters: a control plane with leaseguard in
// front of its lease writes and a MultiClusterLease controller.
type cluster struct {
	name           string // "a"
	identity       string // the candidate identity its managers write: "cluster-a"
	cp             *controlplane.ControlPlane
	guard          *controlplane.Leaseguard
	admin          kubernetes.Interface
	dyn            dynamic.Interface
	stopController context.CancelFunc
	controllerDone chan error
	storage        *storage.Client
	controller     *mclcontroller.Controller
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

// installLeaseguard starts `leaseguard serve` with the suite's policy for
// the cluster. controlplane.Start installed the admission configuration
// `leaseguard manifests` renders for that policy with its defaults:
// coalescing in the API server, i.e. the validating and mutating webhook
// configurations and the MutatingAdmissionPolicy with its binding.
func installLeaseguard(c *cluster, binary, policyPath string) error {
	var err error
	c.guard, err = c.cp.StartLeaseguard(binary, policyPath)
	if err != nil {
		return fmt.Errorf("cluster %s: %w", c.name, err)
	}
	return nil
}

// admission is what stands in front of a cluster's lease writes in a run.
type admission string

const (
	// shipped: the configuration `leaseguard manifests` renders by default
	// (coalescing by MutatingAdmissionPolicy).
	admissionShipped admission = "leaseguard as shipped (coalescing by MutatingAdmissionPolicy)"
	// webhookCoalescing: rendered with --coalesce webhook.
	admissionWebhookCoalescing admission = "leaseguard --coalesce webhook"
	// none: every webhook configuration and the policy deleted; `leaseguard
	// serve` keeps running unasked.
	admissionNone admission = "without leaseguard (baseline)"
	// floor: no admission at all, and the clients themselves send as
	// no-ops the renewals leaseguard would not store (the curve's cost
	// floor; kccmanager.FloorRenewals).
	admissionFloor admission = "floor: no admission, no-op renewals sent by the clients"
)

func (a admission) guarded() bool { return a != admissionNone && a != admissionFloor }

// setAdmission installs (replacing what is there) or removes leaseguard's
// admission configuration, rendered from the suite's policy as `leaseguard
// manifests` renders it, then gives the API server time to load it.
func (c *cluster) setAdmission(ctx context.Context, a admission) error {
	var err error
	switch a {
	case admissionNone, admissionFloor:
		err = c.cp.RemoveAdmission(ctx, admissionPrefix)
	case admissionShipped:
		err = c.cp.InstallAdmission(ctx, env.policyPath, manifests.Options{Coalescing: manifests.CoalesceInAPIServer})
	case admissionWebhookCoalescing:
		err = c.cp.InstallAdmission(ctx, env.policyPath, manifests.Options{Coalescing: manifests.CoalesceInWebhook})
	default:
		err = fmt.Errorf("unknown admission %q", a)
	}
	if err != nil {
		return fmt.Errorf("cluster %s: %s: %w", c.name, a, err)
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
	cfg := c.as(controllerUser)
	// Like the managers: the field manager is "manager" (the reference
	// controller's binary is also named manager).
	cfg.UserAgent = kccmanager.UserAgent
	ctrl, err := mclcontroller.New(mclcontroller.Options{
		Config:  cfg,
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
	c.storage, c.stopController, c.controllerDone, c.controller = client, cancel, make(chan error, 1), ctrl
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
	floor func(team string) *kccmanager.FloorRenewals

	mu       sync.Mutex
	managers map[*cluster][]*kccmanager.Manager // every incarnation, killed ones included
}

func managerConfig(c *cluster, team string) kccmanager.Config {
	return kccmanager.Config{
		Identity:        c.identity,
		Namespace:       team,
		SystemNamespace: systemNS,
		LeaseName:       mclName,
		Base:            c.cp.Config,
		Log:             GinkgoLogr.WithName(c.identity),
	}
}

func startFleet(teams []string) *fleet { return startFleetWith(teams, nil) }

// startFleetWith starts the teams' managers; floor, when set, gives each
// manager its FloorRenewals switch (the curve's floor mode).
func startFleetWith(teams []string, floor func(team string) *kccmanager.FloorRenewals) *fleet {
	f := &fleet{teams: teams, managers: map[*cluster][]*kccmanager.Manager{}, floor: floor}
	for _, c := range env.clusters {
		for _, team := range teams {
			f.start(c, team)
		}
	}
	return f
}

// start starts (or restarts, as a new incarnation) team's manager in c.
func (f *fleet) start(c *cluster, team string) *kccmanager.Manager {
	cfg := managerConfig(c, team)
	if f.floor != nil {
		cfg.Floor = f.floor(team)
	}
	m, err := kccmanager.Start(cfg)
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
// finalizer) and the global lock (the controller never deletes it).
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
	}
	err := env.admin.Bucket(bucket).Object(gcslock.ObjectName(systemNS + "/" + mclName)).Delete(ctx)
	if err != nil && !errors.Is(err, storage.ErrObjectNotExist) {
		Expect(err).NotTo(HaveOccurred())
	}
}
