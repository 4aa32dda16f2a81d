// Package kccworkload is Config Connector's namespace mode on the real lock,
// as Pods of the kind cluster: one manager Pod per reconciled namespace (a
// StatefulSet each, in the system namespace, under ServiceAccount
// cnrm-controller-manager-<ns>, as Config Connector's operator lays them
// out) running test/multicluster/cmd/kcc's manager (client-go's
// LeaderElector over the MultiClusterLease lock; it reconciles only while it
// leads and its process exits on a lost leadership, for the kubelet to
// restart), the MultiClusterLease controller and the GCS emulator. The
// managers run twice, in a system namespace leaseguard guards and in one it
// does not, pinned to the same nodes namespace by namespace, so every figure
// has its baseline from the same seconds. The sampler reads each manager's
// GET /status straight from its Pod IP every second.
// test/cluster/namespacemode runs it in a steady state, test/cluster/faults
// under every fault.
package kccworkload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
)

const (
	// ControllerNamespace holds the MultiClusterLease controller and the
	// GCS emulator; its default ServiceAccount is the status writer of
	// config/e2e-policy's kcc-mcl rule.
	ControllerNamespace = "multiclusterlease-system"
	// Emulator is the GCS emulator's Deployment.
	Emulator = "gcs-emulator"
	// Controller is the MultiClusterLease controller's Deployment.
	Controller = "multiclusterlease-controller"
	bucket     = "kcc-leases"
	// LeaseName is the MultiClusterLease every manager of a cluster renews.
	LeaseName = "kcc-namespaced"
	// statusPort is where each manager answers GET /status.
	statusPort = 8080
	// Identity is the kind cluster's candidate identity, shared by every
	// manager of it, as Config Connector's clusterCandidateIdentity is.
	Identity = "cluster-kind"
	// Designation is leaseguard's annotation naming the designated manager.
	Designation  = "leaseguard.io/designated-manager"
	managerLabel = "app=kcc-manager"
	// scopedNamespace labels a manager Pod with the namespace it reconciles.
	scopedNamespace = "cnrm.cloud.google.com/scoped-namespace"
)

// A Cluster is one set of namespace-mode managers with its system
// namespace: cnrm-system is guarded by leaseguard (config/e2e-policy's
// kcc-mcl rule), cnrm-unguarded by no rule (the webhooks' namespace
// selectors leave it out): the same workload beside it, unguarded.
type Cluster struct {
	System  string
	Guarded bool
}

// Name is the cluster as tables show it.
func (c Cluster) Name() string {
	if c.Guarded {
		return c.System + " (leaseguard)"
	}
	return c.System + " (unguarded)"
}

// Clusters are the guarded cluster, then the unguarded one.
var Clusters = []Cluster{{System: "cnrm-system", Guarded: true}, {System: "cnrm-unguarded"}}

// Namespaces are n reconciled namespaces, kcc-01 on.
func Namespaces(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("kcc-%02d", i+1)
	}
	return out
}

// ManagerName is the StatefulSet and ServiceAccount of a namespace's manager.
func ManagerName(ns string) string { return "cnrm-controller-manager-" + ns }

// Workload is the namespace-mode workload of one kind cluster.
type Workload struct {
	Admin kubernetes.Interface
	// Config is an administrator's, for watches (its Timeout is dropped).
	Config *rest.Config
	// Image is test/multicluster/cmd/kcc's image, loaded into the nodes.
	Image string
	// Reconciled are the namespaces, one manager each per cluster.
	Reconciled []string
	// Nodes are the worker nodes the managers are pinned to, namespace i
	// to Nodes[i % len(Nodes)] in both clusters; none: the scheduler's
	// choice.
	Nodes []string
	// Identity is the managers' candidate identity; "" is Identity. A
	// second kind cluster's installation has one of its own.
	Identity string
	// GCSEndpoint is the GCS emulator the controller uses, when it is
	// another cluster's (SharedEmulator); "" deploys one here.
	GCSEndpoint string
}

// SharedEmulator is the NodePort Service through which a second cluster's
// controller reaches this cluster's GCS emulator: one global lock for both.
const SharedEmulator = Emulator + "-shared"

// identity is the managers' candidate identity.
func (w *Workload) identity() string {
	if w.Identity == "" {
		return Identity
	}
	return w.Identity
}

// gcsEndpoint is the controller's GCS endpoint.
func (w *Workload) gcsEndpoint() string {
	if w.GCSEndpoint == "" {
		return "http://" + Emulator + "." + ControllerNamespace + ".svc:4443"
	}
	return w.GCSEndpoint
}

// NodeOf is the node a namespace's managers are pinned to ("" when not).
func (w *Workload) NodeOf(ns string) string {
	if len(w.Nodes) == 0 {
		return ""
	}
	for i, r := range w.Reconciled {
		if r == ns {
			return w.Nodes[i%len(w.Nodes)]
		}
	}
	return ""
}

// WorkerNodes are the cluster's nodes that are not control-plane nodes, by
// name.
func WorkerNodes(ctx context.Context, admin kubernetes.Interface) ([]string, error) {
	nodes, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "!node-role.kubernetes.io/control-plane"})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range nodes.Items {
		out = append(out, n.Name)
	}
	sort.Strings(out)
	return out, nil
}

// restricted is the securityContext of every container: the namespaces
// enforce the restricted Pod Security Standard.
func restricted() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// container is the image's one program with a command; a container that
// fails says why in its termination message (its log's tail).
func (w *Workload) container(args ...string) corev1.Container {
	return corev1.Container{
		Name: "kcc", Image: w.Image, ImagePullPolicy: corev1.PullNever, Args: args,
		SecurityContext:          restricted(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}
}

// create runs a create, leaving an object already there (a rerun on the
// same cluster) as it is.
func create(what string, f func() error) error {
	if err := f(); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %s: %w", what, err)
	}
	return nil
}

// Deploy lays the workload out: the namespaces (restricted Pod Security),
// the managers' and the controller's RBAC, the GCS emulator and the
// controller, and one StatefulSet per namespace and cluster.
func (w *Workload) Deploy(ctx context.Context) error {
	a := w.Admin
	labels := map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}
	var steps []func() error
	for _, ns := range []string{ControllerNamespace, Clusters[0].System, Clusters[1].System} {
		steps = append(steps, func() error {
			return create("namespace "+ns, func() error {
				_, err := a.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{})
				return err
			})
		})
	}
	for _, c := range Clusters {
		steps = append(steps, w.rbac(ctx, c)...)
	}
	gcsLabels := map[string]string{"app": Emulator}
	emulator := []func() error{
		func() error {
			return create("the GCS emulator's Service", func() error {
				_, err := a.CoreV1().Services(ControllerNamespace).Create(ctx, &corev1.Service{
					ObjectMeta: metav1.ObjectMeta{Name: Emulator},
					Spec: corev1.ServiceSpec{Selector: gcsLabels,
						Ports: []corev1.ServicePort{{Name: "http", Port: 4443, TargetPort: intstr.FromInt32(4443)}}},
				}, metav1.CreateOptions{})
				return err
			})
		},
		func() error {
			return create("the GCS emulator", func() error {
				_, err := a.AppsV1().Deployments(ControllerNamespace).Create(ctx, deployment(Emulator, gcsLabels,
					w.container("gcs-emulator", "--listen=0.0.0.0:4443", "--bucket="+bucket)), metav1.CreateOptions{})
				return err
			})
		},
	}
	if w.GCSEndpoint == "" {
		steps = append(steps, emulator...)
	}
	steps = append(steps,
		func() error {
			return create("the MultiClusterLease controller", func() error {
				_, err := a.AppsV1().Deployments(ControllerNamespace).Create(ctx, deployment(Controller, map[string]string{"app": Controller},
					w.container("controller", "--gcs-endpoint="+w.gcsEndpoint(), "--bucket="+bucket,
						"--namespaces="+Clusters[0].System+","+Clusters[1].System)), metav1.CreateOptions{})
				return err
			})
		})
	for _, c := range Clusters {
		for _, ns := range w.Reconciled {
			steps = append(steps,
				func() error {
					return create("ServiceAccount "+c.System+"/"+ManagerName(ns), func() error {
						_, err := a.CoreV1().ServiceAccounts(c.System).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: ManagerName(ns)}}, metav1.CreateOptions{})
						return err
					})
				},
				func() error {
					return create("StatefulSet "+c.System+"/"+ManagerName(ns), func() error {
						_, err := a.AppsV1().StatefulSets(c.System).Create(ctx, w.statefulSet(ns), metav1.CreateOptions{})
						return err
					})
				})
		}
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// rbac are the steps that grant a cluster's managers and the controller
// what they use of its MultiClusterLeases.
func (w *Workload) rbac(ctx context.Context, c Cluster) []func() error {
	a := w.Admin
	mclGroup := []string{mclv1alpha1.Group}
	var subjects []rbacv1.Subject
	for _, ns := range w.Reconciled {
		subjects = append(subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: ManagerName(ns), Namespace: c.System})
	}
	return []func() error{
		// The managers' Role: the lock's reads and writes of the
		// MultiClusterLease (kccmanager: get, create, patch).
		func() error {
			return create("the managers' Role in "+c.System, func() error {
				_, err := a.RbacV1().Roles(c.System).Create(ctx, &rbacv1.Role{
					ObjectMeta: metav1.ObjectMeta{Name: "cnrm-manager-multiclusterlease"},
					Rules: []rbacv1.PolicyRule{{APIGroups: mclGroup, Resources: []string{"multiclusterleases"},
						Verbs: []string{"get", "list", "watch", "create", "update", "patch"}}},
				}, metav1.CreateOptions{})
				return err
			})
		},
		func() error {
			return create("the managers' RoleBinding in "+c.System, func() error {
				_, err := a.RbacV1().RoleBindings(c.System).Create(ctx, &rbacv1.RoleBinding{
					ObjectMeta: metav1.ObjectMeta{Name: "cnrm-manager-multiclusterlease"},
					RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "cnrm-manager-multiclusterlease"},
					Subjects:   subjects,
				}, metav1.CreateOptions{})
				return err
			})
		},
		// The controller's: the watch, the finalizer's update, the status.
		func() error {
			return create("the controller's Role in "+c.System, func() error {
				_, err := a.RbacV1().Roles(c.System).Create(ctx, &rbacv1.Role{
					ObjectMeta: metav1.ObjectMeta{Name: Controller},
					Rules: []rbacv1.PolicyRule{
						{APIGroups: mclGroup, Resources: []string{"multiclusterleases"}, Verbs: []string{"get", "list", "watch", "update", "patch"}},
						{APIGroups: mclGroup, Resources: []string{"multiclusterleases/status"}, Verbs: []string{"get", "update", "patch"}},
					},
				}, metav1.CreateOptions{})
				return err
			})
		},
		func() error {
			return create("the controller's RoleBinding in "+c.System, func() error {
				_, err := a.RbacV1().RoleBindings(c.System).Create(ctx, &rbacv1.RoleBinding{
					ObjectMeta: metav1.ObjectMeta{Name: Controller},
					RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: Controller},
					Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "default", Namespace: ControllerNamespace}},
				}, metav1.CreateOptions{})
				return err
			})
		},
	}
}

// statefulSet is a namespace's manager, as Config Connector's operator
// writes it: one replica, the manager's own ServiceAccount.
func (w *Workload) statefulSet(ns string) *appsv1.StatefulSet {
	labels := map[string]string{"app": "kcc-manager", scopedNamespace: ns}
	kcc := w.container("manager", "--identity="+w.identity(), "--namespace="+ns, "--lease-name="+LeaseName,
		"--listen=:"+strconv.Itoa(statusPort))
	kcc.Ports = []corev1.ContainerPort{{Name: "status", ContainerPort: statusPort}}
	spec := corev1.PodSpec{
		ServiceAccountName:            ManagerName(ns),
		Containers:                    []corev1.Container{kcc},
		TerminationGracePeriodSeconds: ptr.To[int64](10),
	}
	if node := w.NodeOf(ns); node != "" {
		spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: ManagerName(ns)},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}
}

func deployment(name string, labels map[string]string, c corev1.Container) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{c}, TerminationGracePeriodSeconds: ptr.To[int64](5)},
			},
		},
	}
}

// Undeploy stops every manager, the controller and the emulator (their
// StatefulSets and Deployments); the MultiClusterLeases stay: nothing here
// deletes lease data.
func (w *Workload) Undeploy(ctx context.Context) error {
	var errs []error
	for _, c := range Clusters {
		for _, ns := range w.Reconciled {
			if err := w.Admin.AppsV1().StatefulSets(c.System).Delete(ctx, ManagerName(ns), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("deleting StatefulSet %s/%s: %w", c.System, ManagerName(ns), err))
			}
		}
	}
	for _, name := range []string{Controller, Emulator} {
		if err := w.Admin.AppsV1().Deployments(ControllerNamespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting Deployment %s/%s: %w", ControllerNamespace, name, err))
		}
	}
	if err := w.Admin.CoreV1().Services(ControllerNamespace).Delete(ctx, SharedEmulator, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("deleting Service %s/%s: %w", ControllerNamespace, SharedEmulator, err))
	}
	return errors.Join(errs...)
}

// ShareEmulator opens this cluster's GCS emulator to another cluster's
// controller (SharedEmulator, a NodePort Service) and returns its endpoint
// on the control-plane node's address, which every kind cluster's nodes
// reach on the engine's network. Undeploy removes the Service.
func (w *Workload) ShareEmulator(ctx context.Context) (string, error) {
	err := create("Service "+SharedEmulator, func() error {
		_, err := w.Admin.CoreV1().Services(ControllerNamespace).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: SharedEmulator},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": Emulator},
				Ports: []corev1.ServicePort{{Name: "http", Port: 4443, TargetPort: intstr.FromInt32(4443)}}},
		}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return "", err
	}
	svc, err := w.Admin.CoreV1().Services(ControllerNamespace).Get(ctx, SharedEmulator, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].NodePort == 0 {
		return "", fmt.Errorf("the shared GCS emulator's Service %s/%s has no node port: %+v", ControllerNamespace, SharedEmulator, svc.Spec.Ports)
	}
	nodes, err := w.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "node-role.kubernetes.io/control-plane"})
	if err != nil {
		return "", err
	}
	for _, n := range nodes.Items {
		for _, addr := range n.Status.Addresses {
			if addr.Type == corev1.NodeInternalIP {
				return "http://" + net.JoinHostPort(addr.Address, strconv.Itoa(int(svc.Spec.Ports[0].NodePort))), nil
			}
		}
	}
	return "", errors.New("no control-plane node with an InternalIP to reach the shared GCS emulator on")
}

// StopManagers scales every manager StatefulSet of every cluster to zero
// replicas at once: the installation stops, as when its managers are all
// gone.
func (w *Workload) StopManagers(ctx context.Context) error {
	var errs []error
	for _, c := range Clusters {
		for _, ns := range w.Reconciled {
			if _, err := w.Admin.AppsV1().StatefulSets(c.System).Patch(ctx, ManagerName(ns), types.MergePatchType,
				[]byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
				errs = append(errs, fmt.Errorf("stopping StatefulSet %s/%s: %w", c.System, ManagerName(ns), err))
			}
		}
	}
	return errors.Join(errs...)
}

// ScaleEmulator sets the GCS emulator's replicas (0: the global lock's
// backend down).
func (w *Workload) ScaleEmulator(ctx context.Context, replicas int32) error {
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	_, err := w.Admin.AppsV1().Deployments(ControllerNamespace).Patch(ctx, Emulator, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// managerStatus is a manager's GET /status (test/multicluster/cmd/kcc).
type managerStatus struct {
	Namespace string `json:"namespace"`
	Leading   bool   `json:"leading"`
}

// Sample is one look at every manager of every cluster.
type Sample struct {
	At time.Time
	// Leading says, by cluster system namespace and reconciled namespace,
	// whether the manager leads; a manager that did not answer (its Pod
	// gone, its node down) does not lead.
	Leading map[string]map[string]bool
}

// Sampler reads every manager's /status straight from its Pod IP (the host
// routes to the pod CIDRs: hack/kind/cluster.sh), not through the API
// server: the figures must not depend on the API server under test, nor add
// to its load.
type Sampler struct {
	w    *Workload
	http *http.Client
	// port is the managers' status port.
	port int

	mu      sync.Mutex
	ips     map[string]string // system/namespace → pod IP
	samples []Sample
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewSampler returns a sampler of w's managers.
func (w *Workload) NewSampler() *Sampler {
	return &Sampler{w: w, http: &http.Client{Timeout: 800 * time.Millisecond}, port: statusPort, ips: map[string]string{}}
}

// Refresh rereads the managers' Pod IPs; on error (the API server away)
// the last ones are kept.
func (s *Sampler) Refresh(ctx context.Context) error {
	ips := map[string]string{}
	for _, c := range Clusters {
		pods, err := s.w.Admin.CoreV1().Pods(c.System).List(ctx, metav1.ListOptions{LabelSelector: managerLabel})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if p.Status.PodIP != "" && p.DeletionTimestamp == nil {
				ips[c.System+"/"+p.Labels[scopedNamespace]] = p.Status.PodIP
			}
		}
	}
	s.mu.Lock()
	s.ips = ips
	s.mu.Unlock()
	return nil
}

func (s *Sampler) leads(ctx context.Context, ip string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(ip, strconv.Itoa(s.port))+"/status", nil)
	if err != nil {
		return false
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var st managerStatus
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return false
	}
	return st.Leading
}

// Look takes one sample, asking every manager at once.
func (s *Sampler) Look(ctx context.Context) Sample {
	out := Sample{At: time.Now(), Leading: map[string]map[string]bool{}}
	s.mu.Lock()
	ips := s.ips
	s.mu.Unlock()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range Clusters {
		out.Leading[c.System] = map[string]bool{}
	}
	for _, c := range Clusters {
		for _, ns := range s.w.Reconciled {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ip, ok := ips[c.System+"/"+ns]
				leads := ok && s.leads(ctx, ip)
				mu.Lock()
				out.Leading[c.System][ns] = leads
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	return out
}

// Start samples every second until Stop, rereading the Pod IPs every 5 s.
func (s *Sampler) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for i := 0; ; i++ {
			if i%5 == 0 {
				_ = s.Refresh(ctx)
			}
			smp := s.Look(ctx)
			if ctx.Err() != nil {
				return
			}
			s.mu.Lock()
			s.samples = append(s.samples, smp)
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// Stop ends the sampling.
func (s *Sampler) Stop() {
	if s.cancel != nil {
		s.cancel()
		<-s.done
	}
}

// Between returns the samples taken in [from, to].
func (s *Sampler) Between(from, to time.Time) []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Sample
	for _, smp := range s.samples {
		if !smp.At.Before(from) && !smp.At.After(to) {
			out = append(out, smp)
		}
	}
	return out
}

// Figures are what a window's samples say of one cluster.
type Figures struct {
	Samples int
	// AllLeading counts samples where every namespace led; Fewest is the
	// fewest namespaces leading in one sample.
	AllLeading, Fewest int
	// LongestGap is the longest time one namespace had no leader (from its
	// first sample without to its next sample with one, or the window's
	// end), and GapNamespace that namespace.
	LongestGap   time.Duration
	GapNamespace string
	// FirstMiss is the first sample where a namespace did not lead, and
	// whom it missed.
	FirstMiss string
	// Missed are the namespaces without a leader in at least one sample.
	Missed map[string]bool
}

// Summarize reads one cluster's figures from samples (in time order).
func Summarize(samples []Sample, system string, reconciled []string) Figures {
	f := Figures{Samples: len(samples), Fewest: len(reconciled), Missed: map[string]bool{}}
	since := map[string]time.Time{}
	for _, smp := range samples {
		leading := 0
		var missed []string
		for _, ns := range reconciled {
			if smp.Leading[system][ns] {
				leading++
				if start, ok := since[ns]; ok {
					if gap := smp.At.Sub(start); gap > f.LongestGap {
						f.LongestGap, f.GapNamespace = gap, ns
					}
					delete(since, ns)
				}
				continue
			}
			missed = append(missed, ns)
			f.Missed[ns] = true
			if _, ok := since[ns]; !ok {
				since[ns] = smp.At
			}
		}
		if leading == len(reconciled) {
			f.AllLeading++
		} else if f.FirstMiss == "" {
			sort.Strings(missed)
			f.FirstMiss = smp.At.Format("15:04:05") + " not leading: " + strings.Join(missed, ", ")
		}
		f.Fewest = min(f.Fewest, leading)
	}
	if len(samples) > 0 {
		end := samples[len(samples)-1].At
		for ns, start := range since {
			// A gap still open at the window's end lasted at least until
			// its last sample, plus the sampling period.
			if gap := end.Sub(start) + time.Second; gap > f.LongestGap {
				f.LongestGap, f.GapNamespace = gap, ns
			}
		}
	} else {
		f.Fewest = 0
	}
	return f
}

// Processes are the manager processes of each cluster (by system
// namespace): each Pod's restart count and the namespace it reconciles, by
// Pod UID.
type Processes map[string]map[string]Process

// Process is one manager Pod's.
type Process struct {
	Namespace string
	Restarts  int32
	// LastExits are its containers' last terminations, when they restarted.
	LastExits []Termination
}

// Termination is how a container last ended.
type Termination struct {
	At       time.Time
	ExitCode int32
	// Message is the last line of its termination message.
	Message string
}

// Processes reads the managers' Pods, and under ControllerNamespace the
// controller's and the GCS emulator's (by Deployment name): a fault that
// restarts what every cluster depends on ends every leadership alike. why
// names the last exits, from their termination messages.
func (w *Workload) Processes(ctx context.Context) (Processes, string, error) {
	out := Processes{}
	var why []string
	for _, look := range []struct{ ns, selector, by string }{
		{Clusters[0].System, managerLabel, scopedNamespace},
		{Clusters[1].System, managerLabel, scopedNamespace},
		{ControllerNamespace, "app in (" + Controller + "," + Emulator + ")", "app"},
	} {
		pods, err := w.Admin.CoreV1().Pods(look.ns).List(ctx, metav1.ListOptions{LabelSelector: look.selector})
		if err != nil {
			return nil, "", err
		}
		out[look.ns] = map[string]Process{}
		for _, p := range pods.Items {
			proc := Process{Namespace: p.Labels[look.by]}
			for _, cs := range p.Status.ContainerStatuses {
				proc.Restarts += cs.RestartCount
				if t := cs.LastTerminationState.Terminated; cs.RestartCount > 0 && t != nil {
					msg := strings.TrimSpace(t.Message)
					if i := strings.LastIndex(msg, "\n"); i >= 0 {
						msg = msg[i+1:]
					}
					why = append(why, fmt.Sprintf("%s/%s: exit %d at %s: %s", look.ns, p.Name, t.ExitCode, t.FinishedAt.Format("15:04:05"), msg))
					proc.LastExits = append(proc.LastExits, Termination{At: t.FinishedAt.Time, ExitCode: t.ExitCode, Message: msg})
				}
			}
			out[look.ns][string(p.UID)] = proc
		}
	}
	return out, strings.Join(why, "\n"), nil
}

// Waiting lists the manager containers of both clusters that are not
// running (waiting out the kubelet's restart back-off, or not started).
func (w *Workload) Waiting(ctx context.Context) ([]string, error) {
	var out []string
	for _, c := range Clusters {
		pods, err := w.Admin.CoreV1().Pods(c.System).List(ctx, metav1.ListOptions{LabelSelector: managerLabel})
		if err != nil {
			return nil, err
		}
		for _, p := range pods.Items {
			if len(p.Status.ContainerStatuses) == 0 {
				out = append(out, c.System+"/"+p.Name)
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Running == nil {
					out = append(out, c.System+"/"+p.Name)
				}
			}
		}
	}
	return out, nil
}

// Exits counts, by cluster and reconciled namespace, the manager processes
// that ended between two looks: restarts of the same Pod, and Pods gone
// (replaced) with their process; a Pod new since before counts its
// restarts from zero.
func Exits(before, after Processes) map[string]map[string]int {
	out := map[string]map[string]int{}
	for system, now := range after {
		then := before[system]
		out[system] = map[string]int{}
		for uid, p := range now {
			if n := int(p.Restarts - then[uid].Restarts); n > 0 {
				out[system][p.Namespace] += n
			}
		}
		for uid, p := range then {
			if _, ok := now[uid]; !ok {
				out[system][p.Namespace]++
			}
		}
	}
	return out
}

// Total sums a cluster's exits.
func Total(exits map[string]int) int {
	n := 0
	for _, e := range exits {
		n += e
	}
	return n
}

// Writes counts the stored writes of one MultiClusterLease.
type Writes struct{ Spec, Status atomic.Int64 }

// CountWrites watches each cluster's MultiClusterLease until ctx ends,
// counting each MODIFIED event as a spec write (metadata.generation moved)
// or a status write; a watch that ends (the API server restarted) is
// resumed from the last resourceVersion seen.
func (w *Workload) CountWrites(ctx context.Context) (map[string]*Writes, error) {
	cfg := rest.CopyConfig(w.Config)
	cfg.Timeout = 0
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	out := map[string]*Writes{}
	for _, c := range Clusters {
		client := dyn.Resource(mclv1alpha1.GroupVersionResource).Namespace(c.System)
		current, err := client.Get(ctx, LeaseName, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		counts := &Writes{}
		out[c.System] = counts
		go func() {
			rv, generation := current.GetResourceVersion(), current.GetGeneration()
			for ctx.Err() == nil {
				wi, err := client.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", LeaseName).String(),
					ResourceVersion: rv})
				if err != nil {
					select {
					case <-ctx.Done():
					case <-time.After(time.Second):
					}
					continue
				}
				for ev := range wi.ResultChan() {
					if ev.Type == watch.Error {
						// Most likely 410 Gone: resume from now (what
						// was stored meanwhile is not counted).
						if now, err := client.Get(ctx, LeaseName, metav1.GetOptions{}); err == nil {
							rv, generation = now.GetResourceVersion(), now.GetGeneration()
						} else {
							time.Sleep(time.Second)
						}
						break
					}
					u, ok := ev.Object.(*unstructured.Unstructured)
					if !ok || ev.Type != watch.Modified {
						continue
					}
					rv = u.GetResourceVersion()
					if u.GetGeneration() != generation {
						counts.Spec.Add(1)
						generation = u.GetGeneration()
					} else {
						counts.Status.Add(1)
					}
				}
				wi.Stop()
			}
		}()
	}
	return out, nil
}

// WaitAllLeading waits until every namespace of both clusters leads (the
// managers' Pods started, one created each MultiClusterLease, the
// controller took the global lock, each manager's renewal was confirmed),
// and returns how long that took.
func (w *Workload) WaitAllLeading(ctx context.Context, s *Sampler, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	var last Sample
	for {
		if err := s.Refresh(ctx); err == nil {
			last = s.Look(ctx)
			all := true
			for _, c := range Clusters {
				for _, ns := range w.Reconciled {
					all = all && last.Leading[c.System][ns]
				}
			}
			if all {
				return time.Since(start), nil
			}
		}
		if time.Since(start) > timeout {
			var parts []string
			for _, c := range Clusters {
				f := Summarize([]Sample{last}, c.System, w.Reconciled)
				parts = append(parts, fmt.Sprintf("%s: %d of %d lead (%s)", c.System, f.Fewest, len(w.Reconciled), f.FirstMiss))
			}
			trouble, _ := w.podTrouble(ctx)
			return 0, fmt.Errorf("not every namespace leads within %s: %s\n%s", timeout, strings.Join(parts, "; "), trouble)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// podTrouble lists the workload's containers that are not running or have
// restarted, for a failure message.
func (w *Workload) podTrouble(ctx context.Context) (string, error) {
	var out []string
	for _, ns := range []string{ControllerNamespace, Clusters[0].System, Clusters[1].System} {
		pods, err := w.Admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		for _, p := range pods.Items {
			if len(p.Status.ContainerStatuses) == 0 {
				out = append(out, fmt.Sprintf("%s/%s: %s %s", ns, p.Name, p.Status.Phase, p.Status.Message))
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Running == nil || cs.RestartCount > 0 {
					out = append(out, fmt.Sprintf("%s/%s: %+v, %d restarts", ns, p.Name, cs.State, cs.RestartCount))
				}
			}
		}
	}
	return strings.Join(out, "\n"), nil
}
