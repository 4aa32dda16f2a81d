// Package chartinstall takes leaseguard, installed with its Helm chart by
// `make test-e2e-kind` (self-managed
// certificates, the e2e suite's policy), through what operators do next:
// `helm upgrade` with an edited policy and another replica count, then `helm
// uninstall`, which must leave nothing behind that could hold up a lease
// write. Alone it needs HELM, LEASEGUARD_CHART_ARGS (the install's
// arguments) and the cluster clustertest.TargetFromEnv reads, and is skipped without.
package chartinstall

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/leaseguard/leaseguard/test/cluster/clustertest"
)

const (
	release = "leaseguard"
	lgNS    = "leaseguard-system"
	warnNS  = "leaseguard-e2e-warn"
	// The e2e policy's rule in warn mode, which the upgrade turns to deny.
	warnRule = "- name: e2e-warn"
	intruder = "system:serviceaccount:default:chart-intruder"
	rbacName = "leaseguard-chartinstall-lease-writer"
)

func TestHelmUpgradeThenUninstall(t *testing.T) {
	target, missing := clustertest.TargetFromEnv()
	helm := os.Getenv("HELM")
	if missing != "" || helm == "" {
		t.Skip("needs HELM and a cluster with leaseguard installed by its chart: ", missing)
	}
	kubeconfig := target.Kubeconfig
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 10 * time.Second
	admin := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	installArgs := strings.Fields(os.Getenv("LEASEGUARD_CHART_ARGS"))
	policyPath := valueFile(t, installArgs, "policy")

	helmRun := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(helm, append([]string{"--kubeconfig", kubeconfig}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := helmRun("status", release, "-n", lgNS); !strings.Contains(out, "STATUS: deployed") {
		t.Fatalf("the release is not deployed:\n%s", out)
	}
	grantLeaseWrites(t, admin)
	createNamespace(t, admin, warnNS)
	probe := probeAs(t, cfg)
	// The policy as installed: the warn rule admits the intruder's write
	// (the fault tests' policy edit, undone when they end, may still be
	// reloading: the kubelet syncs a ConfigMap within about a minute).
	clustertest.WaitUntil(t, "the installed policy's warn rule to admit the intruder's write", 3*time.Minute, probe)

	// kubectl leaseguard top, through kubectl's plugin mechanism, against
	// this cluster: the intruder's writes as the watch sees them, and the
	// users behind them from every replica's /debug/leases (HTTPS, a token
	// bound to the chart's leaseguard-debug-reader).
	checkTop(t, admin, kubeconfig, cfg)

	// helm upgrade: the same install, the warn rule now denying, 3 replicas.
	original, err := os.ReadFile(policyPath)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(original), warnRule)
	if i < 0 || !strings.Contains(string(original[i:]), "enforcement: warn") {
		t.Fatalf("%s has no rule e2e-warn in warn mode", policyPath)
	}
	edited := string(original[:i]) + strings.Replace(string(original[i:]), "enforcement: warn", "enforcement: deny", 1)
	editedPath := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(editedPath, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	// The fault tests before this one edited the policy ConfigMap and
	// scaled the Deployment with their own field manager, as an operator's
	// kubectl edit or scale would: Helm 4 applies server-side, so those
	// fields conflict, and the upgrade must take them back
	// (--force-conflicts; docs/helm.md).
	upgrade := append([]string{"upgrade", release}, installArgs...)
	upgrade = append(upgrade, "--set-file", "policy="+editedPath, "--set", "replicas=3", "--force-conflicts", "--wait", "--timeout", "3m")
	start := time.Now()
	helmRun(upgrade...)
	clustertest.WaitUntil(t, "3 available replicas", 3*time.Minute, func() error {
		d, err := admin.AppsV1().Deployments(lgNS).Get(ctx, release, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.AvailableReplicas != 3 || d.Status.UpdatedReplicas != 3 {
			return fmt.Errorf("%d available, %d updated", d.Status.AvailableReplicas, d.Status.UpdatedReplicas)
		}
		return nil
	})
	// Every replica re-reads the ConfigMap once the kubelet has synced it;
	// leaseguard then re-renders its webhook configurations for it.
	sum := sha256.Sum256([]byte(edited))
	clustertest.WaitUntil(t, "the edited policy in force", 3*time.Minute, func() error {
		vwc, err := admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "leaseguard-validating-webhook-configuration", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := vwc.Annotations["leaseguard.io/policy-sha256"]; got != hex.EncodeToString(sum[:]) {
			return fmt.Errorf("the validating configuration is rendered from policy %s", got)
		}
		err = probe()
		if err == nil || !strings.Contains(err.Error(), "rule e2e-warn") {
			return fmt.Errorf("the intruder's write: %v", err)
		}
		return nil
	})
	t.Logf("helm upgrade (policy edit, 2 -> 3 replicas): the new policy denied %s after the upgrade began", time.Since(start).Round(time.Second))
	// Every replica denies it, not only the first to reload.
	for range 12 {
		if err := probe(); err == nil || !strings.Contains(err.Error(), "rule e2e-warn") {
			t.Fatalf("after the upgrade, the intruder's write: %v, want the e2e-warn rule's denial", err)
		}
	}

	// helm uninstall: nothing of leaseguard's that could hold up a write,
	// and no lease data gone with it.
	before := leaseData(t, ctx, cfg)
	helmRun("uninstall", release, "-n", lgNS, "--wait", "--timeout", "3m")
	clustertest.WaitUntil(t, "leaseguard's objects gone", 2*time.Minute, func() error { return leftovers(ctx, admin) })
	keptLeaseData(t, ctx, cfg, before)
	if err := probe(); err != nil {
		t.Fatalf("after helm uninstall the intruder's write is still judged: %v", err)
	}
	// What leaseguard itself created stays, as cert-manager's Secrets do:
	// the self-managed CA (docs/helm.md). Removed here for the next stage.
	if err := admin.CoreV1().Secrets(lgNS).Delete(ctx, "leaseguard-ca", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("the self-managed CA Secret: %v", err)
	}
}

// leftovers names what of leaseguard is still in the cluster: admission
// configuration, cluster RBAC, and every object of its namespace but the
// ones that are not the chart's (the namespace's own, the CA Secret
// leaseguard created).
func leftovers(ctx context.Context, admin kubernetes.Interface) error {
	ar, rbac, core := admin.AdmissionregistrationV1(), admin.RbacV1(), admin.CoreV1()
	all := metav1.ListOptions{}
	leaseguards := func(name string) bool { return strings.HasPrefix(name, "leaseguard") }
	ours := func(name string) bool { return strings.HasPrefix(name, "leaseguard-") && name != rbacName }
	every := func(string) bool { return true }
	var left []string
	for _, c := range []struct {
		kind string
		list func() ([]metav1.Object, error)
		left func(name string) bool
	}{
		{"ValidatingWebhookConfiguration", objects(func() (*admissionregistrationv1.ValidatingWebhookConfigurationList, error) {
			return ar.ValidatingWebhookConfigurations().List(ctx, all)
		}), leaseguards},
		{"MutatingWebhookConfiguration", objects(func() (*admissionregistrationv1.MutatingWebhookConfigurationList, error) {
			return ar.MutatingWebhookConfigurations().List(ctx, all)
		}), leaseguards},
		{"MutatingAdmissionPolicy", objects(func() (*admissionregistrationv1.MutatingAdmissionPolicyList, error) {
			return ar.MutatingAdmissionPolicies().List(ctx, all)
		}), leaseguards},
		{"ClusterRole", objects(func() (*rbacv1.ClusterRoleList, error) { return rbac.ClusterRoles().List(ctx, all) }), ours},
		{"ClusterRoleBinding", objects(func() (*rbacv1.ClusterRoleBindingList, error) { return rbac.ClusterRoleBindings().List(ctx, all) }), ours},
		{"Pod", objects(func() (*corev1.PodList, error) { return core.Pods(lgNS).List(ctx, all) }), every},
		{"Service", objects(func() (*corev1.ServiceList, error) { return core.Services(lgNS).List(ctx, all) }), every},
		{"ConfigMap", objects(func() (*corev1.ConfigMapList, error) { return core.ConfigMaps(lgNS).List(ctx, all) }),
			func(name string) bool { return name != "kube-root-ca.crt" }},
		{"Secret", objects(func() (*corev1.SecretList, error) { return core.Secrets(lgNS).List(ctx, all) }),
			func(name string) bool { return name != "leaseguard-ca" }},
		{"ServiceAccount", objects(func() (*corev1.ServiceAccountList, error) { return core.ServiceAccounts(lgNS).List(ctx, all) }),
			func(name string) bool { return name != "default" }},
	} {
		items, err := c.list()
		if apierrors.IsNotFound(err) {
			continue // a kind this API server does not serve
		}
		if err != nil {
			return fmt.Errorf("listing %ss: %w", c.kind, err)
		}
		for _, o := range items {
			if c.left(o.GetName()) {
				left = append(left, c.kind+" "+o.GetName())
			}
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("left behind: %s", strings.Join(left, ", "))
	}
	return nil
}

// objects adapts a typed List call to its items' metadata.
func objects[L runtime.Object](list func() (L, error)) func() ([]metav1.Object, error) {
	return func() ([]metav1.Object, error) {
		l, err := list()
		if err != nil {
			return nil, err
		}
		items, err := meta.ExtractList(l)
		if err != nil {
			return nil, err
		}
		out := make([]metav1.Object, 0, len(items))
		for _, it := range items {
			m, err := meta.Accessor(it)
			if err != nil {
				return nil, err
			}
			out = append(out, m)
		}
		return out, nil
	}
}

// probeAs returns a dry-run Lease write in warnNS by a user no rule admits
// as a manager: the e2e-warn rule warns about it, or denies it once edited.
func probeAs(t *testing.T, base *rest.Config) func() error {
	cfg := rest.CopyConfig(base)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: intruder}
	cfg.WarningHandler = rest.NoWarnings{}
	cs := kubernetes.NewForConfigOrDie(cfg)
	lease := []byte(`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"chart-probe","namespace":"` + warnNS + `"},"spec":{"holderIdentity":"x"}}`)
	return func() error {
		_, err := cs.CoordinationV1().Leases(warnNS).Patch(context.Background(), "chart-probe", types.ApplyPatchType, lease,
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: "chart-probe"})
		return err
	}
}

func grantLeaseWrites(t *testing.T, admin kubernetes.Interface) {
	ctx := context.Background()
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: rbacName},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"*"}}},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: rbacName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: rbacName},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: intruder}},
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), rbacName, metav1.DeleteOptions{})
		_ = admin.RbacV1().ClusterRoles().Delete(context.Background(), rbacName, metav1.DeleteOptions{})
	})
}

func createNamespace(t *testing.T, admin kubernetes.Interface, name string) {
	clustertest.WaitUntil(t, "namespace "+name, 2*time.Minute, func() error {
		_, err := admin.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			ns, gerr := admin.CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
			if gerr == nil && ns.DeletionTimestamp == nil {
				return nil
			}
			return fmt.Errorf("namespace %s is being deleted", name)
		}
		return err
	})
	// Gone before the next stage, which creates it again.
	t.Cleanup(func() {
		_ = admin.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
		clustertest.WaitUntil(t, "namespace "+name+" deleted", 2*time.Minute, func() error {
			_, err := admin.CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there (%v)", err)
		})
	})
}

// valueFile is the file a --set-file name=FILE of the install's arguments
// gives.
func valueFile(t *testing.T, args []string, name string) string {
	for i, a := range args {
		if a == "--set-file" && i+1 < len(args) && strings.HasPrefix(args[i+1], name+"=") {
			return strings.TrimPrefix(args[i+1], name+"=")
		}
	}
	t.Fatalf("LEASEGUARD_CHART_ARGS %q has no --set-file %s=FILE", strings.Join(args, " "), name)
	return ""
}

// checkTop runs `kubectl leaseguard top --once -o json` for a window in
// which the intruder writes the probe Lease for real (the warn rule admits
// it), with --webhook-stats at every replica, and checks what it reports.
func checkTop(t *testing.T, admin kubernetes.Interface, kubeconfig string, base *rest.Config) {
	t.Helper()
	ctx := context.Background()
	kubectl := os.Getenv("KUBECTL")
	if kubectl == "" {
		t.Fatal("KUBECTL is not set: the kubectl that runs the plugin (make test-e2e-kind sets it)")
	}
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "kubectl-leaseguard"), "./cmd/kubectl-leaseguard")
	build.Dir = "../../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/kubectl-leaseguard: %v\n%s", err, out)
	}
	// A lease auditor: a service account bound to the chart's
	// leaseguard-debug-reader, outside leaseguard's namespace.
	token := clustertest.BoundToken(t, admin, "default", "lease-auditor", "leaseguard-debug-reader")
	pods, err := admin.CoreV1().Pods(lgNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=leaseguard,app.kubernetes.io/component=webhook"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("leaseguard's pods: %v", err)
	}
	args := []string{"leaseguard", "top", "--once", "--window", "10s", "-o", "json", "-n", warnNS, "--webhook-stats-token", token}
	for _, p := range pods.Items {
		args = append(args, "--webhook-stats", "https://"+p.Status.PodIP+":8443")
	}
	top := exec.Command(kubectl, args...)
	top.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stdout strings.Builder
	top.Stdout = &stdout
	errPipe, err := top.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := top.Start(); err != nil {
		t.Fatal(err)
	}
	// top says "watching" once its watch is up and its first read of the
	// replicas done: the writes come after.
	var stderr strings.Builder
	lines := bufio.NewScanner(errPipe)
	for lines.Scan() {
		stderr.WriteString(lines.Text() + "\n")
		if strings.HasPrefix(lines.Text(), "leaseguard top: watching ") {
			break
		}
	}
	stderrDone := make(chan struct{})
	go func() {
		for lines.Scan() {
			stderr.WriteString(lines.Text() + "\n")
		}
		close(stderrDone)
	}()
	// The intruder writes the probe Lease for real, once a second.
	cfg := rest.CopyConfig(base)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: intruder}
	cfg.WarningHandler = rest.NoWarnings{}
	leases := kubernetes.NewForConfigOrDie(cfg).CoordinationV1().Leases(warnNS)
	for i := range 8 {
		time.Sleep(time.Second)
		lease := fmt.Sprintf(`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"chart-probe","namespace":%q},"spec":{"holderIdentity":"x","leaseDurationSeconds":%d}}`, warnNS, 10+i)
		if _, err := leases.Patch(ctx, "chart-probe", types.ApplyPatchType, []byte(lease), metav1.PatchOptions{FieldManager: "chart-probe"}); err != nil {
			t.Fatalf("the intruder's write (the warn rule admits it): %v", err)
		}
	}
	<-stderrDone
	if err := top.Wait(); err != nil {
		t.Fatalf("kubectl leaseguard top: %v\n%s", err, stderr.String())
	}
	var report struct {
		WebhookSources []string `json:"webhookSources"`
		Leases         []struct {
			Namespace, Name string
			Writes          int
			Webhook         *struct {
				Requests int64
				Users    []struct{ User string }
			}
		} `json:"leases"`
	}
	if err := json.Unmarshal([]byte(stdout.String()), &report); err != nil {
		t.Fatalf("kubectl leaseguard top -o json: %v\n%s", err, stdout.String())
	}
	if len(report.WebhookSources) != len(pods.Items) {
		t.Errorf("top read %v, want every replica's /debug/leases", report.WebhookSources)
	}
	found := false
	for _, l := range report.Leases {
		if l.Namespace != warnNS || l.Name != "chart-probe" {
			continue
		}
		found = true
		if l.Writes < 4 || l.Webhook == nil || l.Webhook.Requests < 4 || len(l.Webhook.Users) != 1 || l.Webhook.Users[0].User != intruder {
			t.Errorf("top: %s/chart-probe: %d writes, webhook %+v; want the intruder's 8 writes, judged by the replicas", warnNS, l.Writes, l.Webhook)
		}
	}
	if !found {
		t.Errorf("top did not report %s/chart-probe:\n%s", warnNS, stdout.String())
	}
	t.Logf("kubectl leaseguard top against the cluster: %d replicas read", len(report.WebhookSources))
}

// leaseObject names a Lease or MultiClusterLease by where it lives and
// which incarnation it is.
type leaseObject struct{ kind, namespace, name string }

// multiClusterLeases is Config Connector's resource; its CRD is not
// leaseguard's, and deleting it would delete every MultiClusterLease.
var multiClusterLeases = schema.GroupVersionResource{Group: "multicluster.core.cnrm.cloud.google.com", Version: "v1alpha1", Resource: "multiclusterleases"}

// leaseData lists every Lease and MultiClusterLease in the cluster with its
// UID (a deleted and re-created object has another).
func leaseData(t *testing.T, ctx context.Context, cfg *rest.Config) map[leaseObject]types.UID {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(cfg)
	out := map[leaseObject]types.UID{}
	for kind, gvr := range map[string]schema.GroupVersionResource{
		"Lease":             {Group: "coordination.k8s.io", Version: "v1", Resource: "leases"},
		"MultiClusterLease": multiClusterLeases,
	} {
		list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("listing %ss: %v", kind, err)
		}
		for _, o := range list.Items {
			out[leaseObject{kind, o.GetNamespace(), o.GetName()}] = o.GetUID()
		}
	}
	return out
}

// keptLeaseData fails for every lease object of before that the uninstall
// removed or replaced, and if the MultiClusterLease CRD is gone. Objects in
// namespaces being deleted (the earlier stages' clean-up) or gone are not
// the uninstall's doing and are left out; the chart deletes no namespace.
func keptLeaseData(t *testing.T, ctx context.Context, cfg *rest.Config, before map[leaseObject]types.UID) {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(cfg)
	crd := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(crd).Get(ctx, multiClusterLeases.Resource+"."+multiClusterLeases.Group, metav1.GetOptions{}); err != nil {
		t.Fatalf("the MultiClusterLease CRD after helm uninstall: %v", err)
	}
	after := leaseData(t, ctx, cfg)
	admin := kubernetes.NewForConfigOrDie(cfg)
	settled := map[string]bool{}
	namespaceSettled := func(name string) bool {
		if name == "" {
			return true
		}
		if s, ok := settled[name]; ok {
			return s
		}
		ns, err := admin.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		settled[name] = err == nil && ns.DeletionTimestamp == nil
		return settled[name]
	}
	kept, skipped := 0, 0
	for o, uid := range before {
		if !namespaceSettled(o.namespace) {
			skipped++
			continue
		}
		switch got, ok := after[o]; {
		case !ok:
			t.Errorf("%s %s/%s is gone after helm uninstall", o.kind, o.namespace, o.name)
		case got != uid:
			t.Errorf("%s %s/%s was deleted and re-created during helm uninstall (uid %s, was %s)", o.kind, o.namespace, o.name, got, uid)
		default:
			kept++
		}
	}
	if kept == 0 {
		t.Errorf("no lease object to check after helm uninstall (%d in namespaces being deleted)", skipped)
	}
	t.Logf("helm uninstall kept all %d Leases and MultiClusterLeases (%d in namespaces being deleted not checked) and the MultiClusterLease CRD", kept, skipped)
}
