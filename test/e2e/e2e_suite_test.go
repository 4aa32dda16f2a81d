// Package e2e is leaseguard's end-to-end suite: Config Connector's namespace
// mode played by impersonated manager identities against a real API server.
//
// By default it starts the local control plane (kube-apiserver, etcd) and the
// real `leaseguard serve` with config/e2e-policy/policy.yaml. It runs against
// another cluster only when asked explicitly: with E2E_KUBECONFIG set it runs
// unchanged against that cluster, where leaseguard must already be deployed
// with that policy (`make test-e2e-kind` installs it with the Helm chart,
// then with kustomize's cert-manager overlay). An ambient KUBECONFIG is never used: the
// suite creates namespaces and a ClusterRole granting writes on every lease,
// which have no place in a cluster nobody named for it.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/test/controlplane"
)

// ExternalClusterVariable names the kubeconfig of a cluster to run against
// instead of the local control plane.
const ExternalClusterVariable = "E2E_KUBECONFIG"

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "leaseguard e2e")
}

const (
	e2eNS     = "leaseguard-e2e"
	warnNS    = "leaseguard-e2e-warn"
	operators = "leaseguard-e2e:operators"
	mclCtrl   = "system:serviceaccount:multiclusterlease-system:default"
	rbacName  = "leaseguard-e2e-lease-writers"
)

func manager(team string) string {
	return "system:serviceaccount:leaseguard-e2e:cnrm-controller-manager-" + team
}

func pod(team string) string { return "cnrm-controller-manager-" + team + "-0" }

// env is what the specs run against.
var env struct {
	local      bool
	cp         *controlplane.ControlPlane
	guard      *controlplane.Leaseguard
	binary     string
	policyPath string
	config     *rest.Config
	kubeconfig string
	kubectl    string
	admin      kubernetes.Interface
	tmp        string
}

var _ = BeforeSuite(func() {
	var err error
	env.tmp, err = os.MkdirTemp("", "leaseguard-e2e-")
	Expect(err).NotTo(HaveOccurred())
	root, err := controlplane.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	env.policyPath = filepath.Join(root, "config", "e2e-policy", "policy.yaml")

	if kc := os.Getenv(ExternalClusterVariable); kc != "" {
		By("using the cluster of " + ExternalClusterVariable + "=" + kc + " (leaseguard deployed with config/e2e)")
		env.kubeconfig = kc
		env.config, err = clientcmd.BuildConfigFromFlags("", kc)
		Expect(err).NotTo(HaveOccurred())
		env.kubectl = os.Getenv("KUBECTL")
		if env.kubectl == "" {
			env.kubectl, err = exec.LookPath("kubectl")
			Expect(err).NotTo(HaveOccurred(), "set KUBECTL or put kubectl on PATH")
		}
	} else {
		By("starting the local control plane and leaseguard serve")
		env.local = true
		env.binary, err = controlplane.BuildLeaseguard(env.tmp)
		Expect(err).NotTo(HaveOccurred())
		env.cp, err = controlplane.Start(controlplane.Options{Policy: env.policyPath})
		Expect(err).NotTo(HaveOccurred())
		env.config = env.cp.Config
		env.kubeconfig = filepath.Join(env.tmp, "kubeconfig")
		Expect(env.cp.WriteKubeconfig(env.kubeconfig)).To(Succeed())
		env.kubectl = env.cp.KubectlPath
		env.guard, err = env.cp.StartLeaseguard(env.binary, env.policyPath)
		Expect(err).NotTo(HaveOccurred())
	}
	env.admin, err = kubernetes.NewForConfig(env.config)
	Expect(err).NotTo(HaveOccurred())

	ctx := context.Background()
	for _, ns := range []string{e2eNS, warnNS} {
		// A run just before this one (on a cluster given by E2E_KUBECONFIG)
		// deleted its namespaces: a namespace still terminating takes no new
		// objects, so wait until it is gone.
		Eventually(func() error {
			got, err := env.admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err == nil && got.DeletionTimestamp != nil {
				return fmt.Errorf("namespace %s is still terminating", ns)
			}
			return nil
		}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		_, err := env.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			Expect(err).NotTo(HaveOccurred())
		}
	}
	grantLeaseAccess(ctx)
	awaitCoalescingPolicy(ctx)
})

// awaitCoalescingPolicy waits until the API server can apply leaseguard's
// MutatingAdmissionPolicy to a MultiClusterLease. The policy plugin learns a
// custom resource's schema from the API server's OpenAPI, which it reads
// every 5 s: until then, a write the policy mutates is answered 503
// ("Resource kind ... not found. There can be a delay between when
// CustomResourceDefinitions are created and when they are available") —
// right after the CRD is installed, as on this suite's fresh control plane
// (a busy machine made the first spec meet it once). It sends a
// non-designated manager's renewal of a throw-away MultiClusterLease as a
// server-side dry run (admission runs, nothing is stored) until no such 503
// comes back.
func awaitCoalescingPolicy(ctx context.Context) {
	const name = "warm-up"
	_, err := mcls(manager("team-a")).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mclv1alpha1.Group + "/" + mclv1alpha1.Version,
		"kind":       mclv1alpha1.Kind,
		"metadata":   map[string]any{"name": name, "namespace": e2eNS},
		"spec":       map[string]any{"holderIdentity": "cluster-e2e", "renewTime": micro(time.Now()), "leaseDurationSeconds": int64(15)},
	}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	defer func() { _ = mcls(operators, operators).Delete(ctx, name, metav1.DeleteOptions{}) }()
	Eventually(func() error {
		patch := fmt.Sprintf(`{"spec":{"renewTime":%q}}`, micro(time.Now()))
		_, err := mcls(manager("team-b")).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsServiceUnavailable(err) {
			return err
		}
		return nil
	}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
}

var _ = AfterSuite(func() {
	ctx := context.Background()
	if env.admin != nil {
		_ = env.admin.RbacV1().ClusterRoleBindings().Delete(ctx, rbacName, metav1.DeleteOptions{})
		_ = env.admin.RbacV1().ClusterRoles().Delete(ctx, rbacName, metav1.DeleteOptions{})
		if !env.local {
			for _, ns := range []string{e2eNS, warnNS} {
				_ = env.admin.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
			}
		}
	}
	if env.guard != nil {
		env.guard.Stop()
	}
	if env.cp != nil {
		Expect(env.cp.Stop()).To(Succeed())
	}
	if env.tmp != "" {
		_ = os.RemoveAll(env.tmp)
	}
})

// grantLeaseAccess lets exactly the suite's identities read and write
// leases, as their own RBAC would in a real cluster; leaseguard is what
// tells them apart.
func grantLeaseAccess(ctx context.Context) {
	subjects := []rbacv1.Subject{
		{APIGroup: rbacv1.GroupName, Kind: "Group", Name: operators},
		{APIGroup: rbacv1.GroupName, Kind: "User", Name: mclCtrl},
		{APIGroup: rbacv1.GroupName, Kind: "User", Name: "system:serviceaccount:default:intruder"},
		{APIGroup: rbacv1.GroupName, Kind: "User", Name: "system:serviceaccount:leaseguard-e2e-warn:manager"},
	}
	for _, team := range []string{"team-a", "team-b", "team-c", outageTeam} {
		subjects = append(subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: "User", Name: manager(team)})
	}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: rbacName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"*"}},
			{APIGroups: []string{"multicluster.core.cnrm.cloud.google.com"}, Resources: []string{"multiclusterleases", "multiclusterleases/status"}, Verbs: []string{"*"}},
		},
	}
	_, err := env.admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: rbacName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: rbacName},
		Subjects:   subjects,
	}
	_, err = env.admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
}

// said returns what leaseguard said in a refusal: the message after the API
// server's "admission webhook ... denied the request: ", whichever of
// leaseguard's two validating webhooks refused (identity changes go to
// validate.leases.leaseguard.io, other updates to renewals.leases.leaseguard.io).
func said(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	for _, hook := range []string{"validate", "renewals"} {
		if rest, ok := strings.CutPrefix(msg, `admission webhook "`+hook+`.leases.leaseguard.io" denied the request: `); ok {
			return rest
		}
	}
	return "not leaseguard's refusal: " + msg
}

// impersonating returns a client config acting as user, with the pod-name
// extra a bound service-account token carries when pod is set.
func impersonating(user, podName string, groups ...string) *rest.Config {
	cfg := rest.CopyConfig(env.config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	if podName != "" {
		cfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/pod-name": {podName}}
	}
	return cfg
}

// kubectl runs the suite's kubectl against the suite's cluster.
func kubectl(args ...string) (string, error) {
	out, err := exec.Command(env.kubectl, append([]string{"--kubeconfig", env.kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}
