package integration

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leaseguard/leaseguard/test/controlplane"
)

const (
	fixedNS      = "it-fixed"
	managerA     = "system:serviceaccount:it-fixed:manager-a"
	managerB     = "system:serviceaccount:it-fixed:manager-b"
	intruder     = "system:serviceaccount:default:intruder"
	catchAllRule = "catch-all"
)

// basePolicy guards it-fixed with a fixed designation and, last, every other
// namespace with a rule that denies everyone, so a write that reaches
// leaseguard anywhere else is refused: a write that is admitted there was
// never sent.
const basePolicy = `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
clockSkew: 1s
rules:
- name: auto-mcl
  resources: [multiclusterleases]
  namespaces: [it-auto]
  managers: ["system:serviceaccount:it-auto:manager-*"]
  designation: auto
  operators: ["it:operators"]
  statusWriters: ["system:serviceaccount:multiclusterlease-system:default"]
- name: warn-leases
  resources: [leases]
  namespaces: [it-warn]
  managers: ["system:serviceaccount:it-warn:manager"]
  enforcement: warn
- name: fixed-leases
  resources: [leases]
  namespaces: [it-fixed]
  managers: ["system:serviceaccount:it-fixed:manager-*"]
  designation: system:serviceaccount:it-fixed:manager-a
- name: elector-leases-limited
  resources: [leases]
  namespaces: [it-rate]
  bind:
    manager: "system:serviceaccount:it-rate:manager-{ns}"
    lease: "leader-{ns}"
  holderBinding: pod
  minRenewInterval: 6s
- name: elector-leases-free
  resources: [leases]
  namespaces: [it-free]
  bind:
    manager: "system:serviceaccount:it-free:manager-{ns}"
    lease: "leader-{ns}"
  holderBinding: pod
- name: elector-leases-coalesced
  resources: [leases]
  namespaces: [it-coalesce]
  bind:
    manager: "system:serviceaccount:it-coalesce:manager-{ns}"
    lease: "leader-{ns}"
  holderBinding: pod
  coalesceRenewals: auto
  minRenewInterval: auto
- name: kcc-mcl-coalesced
  resources: [multiclusterleases]
  namespaces: [it-mcl-coalesce]
  managers: ["system:serviceaccount:cnrm-system:cnrm-controller-manager-*"]
  designation: auto
  coalesceRenewals: auto
  minRenewInterval: auto
  backOffLosers: true
- name: kcc-mcl-limited
  resources: [multiclusterleases]
  namespaces: [it-mcl-rate]
  managers: ["system:serviceaccount:cnrm-system:cnrm-controller-manager-*"]
  designation: auto
  minRenewInterval: 5s
- name: kcc-mcl-free
  resources: [multiclusterleases]
  namespaces: [it-mcl-free]
  managers: ["system:serviceaccount:cnrm-system:cnrm-controller-manager-*"]
  designation: auto
- name: hard-leases
  resources: [leases]
  namespaces: [it-hard]
  bind:
    manager: "system:serviceaccount:it-hard:manager-{ns}"
    lease: "leader-{ns}"
  operators: ["system:masters"]
  holderBinding: pod
  minRenewInterval: 5s
- name: hard-mcl
  resources: [multiclusterleases]
  namespaces: [it-hard]
  managers: ["system:serviceaccount:it-hard:manager-*"]
  designation: auto
  operators: ["system:masters", "it:operators"]
  statusWriters: ["system:serviceaccount:multiclusterlease-system:default"]
  minRenewInterval: 5s
  backOffLosers: true
- name: dedicated-manager-leases
  resources: [leases]
  namespaces: ["it-mns-*"]
  bind:
    manager: "system:serviceaccount:{managerNamespace}:cnrm-controller-manager-{ns}"
    namespace: "{managerNamespace}"
    lease: "kcc-leader-{ns}"
  operators: ["system:masters"]
  holderBinding: pod
- name: catch-all
  resources: [leases]
  managers: ["system:serviceaccount:nowhere:nobody"]
`

func newLease(ns, name, holder string) *coordinationv1.Lease {
	now := metav1.NewMicroTime(time.Now())
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}
}

func TestDesignatedManagerWritesAndOthersAreDenied(t *testing.T) {
	ctx := context.Background()
	createNamespace(t, fixedNS)
	leasesA := as(t, managerA, "").CoordinationV1().Leases(fixedNS)
	leasesB := as(t, managerB, "").CoordinationV1().Leases(fixedNS)

	// (a) the designated manager creates and updates its lease.
	created, err := leasesA.Create(ctx, newLease(fixedNS, "leader", "manager-a-0_1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("designated manager's create: %v", err)
	}
	created.Spec.LeaseDurationSeconds = ptr.To[int32](20)
	updated, err := leasesA.Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("designated manager's update: %v", err)
	}
	if got := *updated.Spec.LeaseDurationSeconds; got != 20 {
		t.Fatalf("stored leaseDurationSeconds = %d, want 20", got)
	}

	// (b) another manager's update is denied with the webhook's message.
	attempt := updated.DeepCopy()
	attempt.Spec.HolderIdentity = ptr.To("manager-b-0_2")
	_, err = leasesB.Update(ctx, attempt, metav1.UpdateOptions{})
	wantMsg := `admission webhook "validate.leases.leaseguard.io" denied the request: leaseguard: rule fixed-leases: ` +
		managerB + ` is not the designated manager of lease it-fixed/leader (designated: ...manager-a)`
	assertDenied(t, err, http.StatusForbidden, wantMsg)

	stored, err := admin.CoordinationV1().Leases(fixedNS).Get(ctx, "leader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if stored.ResourceVersion != updated.ResourceVersion || *stored.Spec.HolderIdentity != "manager-a-0_1" {
		t.Fatalf("denied update changed the lease: resourceVersion %s -> %s, holder %q",
			updated.ResourceVersion, stored.ResourceVersion, *stored.Spec.HolderIdentity)
	}

	// A non-manager is denied too, by I1.
	_, err = as(t, intruder, "").CoordinationV1().Leases(fixedNS).Update(ctx, attempt, metav1.UpdateOptions{})
	assertDenied(t, err, http.StatusForbidden, `admission webhook "validate.leases.leaseguard.io" denied the request: leaseguard: rule fixed-leases: `+
		intruder+` is not a manager of lease it-fixed/leader (managers: system:serviceaccount:it-fixed:manager-*, `+managerA+`)`)

	// Metadata-only writes by another manager touch no lease field and pass.
	labelled := stored.DeepCopy()
	labelled.Labels = map[string]string{"team": "b"}
	if _, err := leasesB.Update(ctx, labelled, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("label-only update by another manager: %v", err)
	}
}

func TestKubectlServerDryRunGetsTheSameVerdict(t *testing.T) {
	ctx := context.Background()
	createNamespace(t, fixedNS)
	leasesA := as(t, managerA, "").CoordinationV1().Leases(fixedNS)
	before, err := leasesA.Create(ctx, newLease(fixedNS, "dry-run", "manager-a-0_1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch := `{"spec":{"holderIdentity":"manager-b-0_2"}}`

	// (c) denied for the other manager, through the real kubectl, and nothing changes.
	out, err := cp.Kubectl(kubeconfig, "--as", managerB, "-n", fixedNS, "patch", "lease", "dry-run",
		"--type", "merge", "-p", patch, "--dry-run=server").CombinedOutput()
	if err == nil {
		t.Fatalf("kubectl dry-run as %s succeeded, want a denial:\n%s", managerB, out)
	}
	want := `Error from server (Forbidden): admission webhook "validate.leases.leaseguard.io" denied the request: leaseguard: rule fixed-leases: ` +
		managerB + ` is not the designated manager of lease it-fixed/dry-run (designated: ...manager-a)`
	if strings.TrimSpace(string(out)) != want {
		t.Fatalf("kubectl output:\n%s\nwant:\n%s", out, want)
	}

	// The designated manager's dry-run is admitted and changes nothing either.
	out, err = cp.Kubectl(kubeconfig, "--as", managerA, "-n", fixedNS, "patch", "lease", "dry-run",
		"--type", "merge", "-p", `{"spec":{"leaseDurationSeconds":30}}`, "--dry-run=server").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl dry-run as %s: %v\n%s", managerA, err, out)
	}
	// kubectl prints "patched" for a server-side dry-run patch; the
	// unchanged resourceVersion below is what shows nothing was stored.
	if got := strings.TrimSpace(string(out)); !strings.HasPrefix(got, "lease.coordination.k8s.io/dry-run patched") {
		t.Fatalf("kubectl output %q", got)
	}
	after, err := admin.CoordinationV1().Leases(fixedNS).Get(ctx, "dry-run", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion {
		t.Fatalf("dry-runs changed the lease: resourceVersion %s -> %s", before.ResourceVersion, after.ResourceVersion)
	}
}

func TestNeverCalledForExcludedNamespacesAndIdentities(t *testing.T) {
	ctx := context.Background()
	createNamespace(t, "it-elsewhere")

	// Control: in an ordinary namespace the catch-all rule denies the intruder,
	// so an admitted write below can only mean leaseguard was not called.
	_, err := as(t, intruder, "").CoordinationV1().Leases("it-elsewhere").Create(ctx, newLease("it-elsewhere", "x", "x"), metav1.CreateOptions{})
	assertDenied(t, err, http.StatusForbidden, `admission webhook "validate.leases.leaseguard.io" denied the request: leaseguard: rule catch-all: `+
		intruder+` is not a manager of lease it-elsewhere/x (managers: system:serviceaccount:nowhere:nobody)`)

	before := decisions(t)
	cases := []struct {
		name, user, namespace string
	}{
		{"kube-node-lease", intruder, "kube-node-lease"},
		{"kube-system", intruder, "kube-system"},
		{"leaseguard's namespace", intruder, "leaseguard-system"},
		{"a node", "system:node:worker-1", "it-elsewhere"},
		{"the scheduler", "system:kube-scheduler", "it-elsewhere"},
		{"the controller manager", "system:kube-controller-manager", "it-elsewhere"},
		{"a kube-system service account", "system:serviceaccount:kube-system:namespace-controller", "it-elsewhere"},
	}
	createNamespace(t, "leaseguard-system")
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "never-sent-" + string(rune('a'+i))
			l, err := as(t, tc.user, "").CoordinationV1().Leases(tc.namespace).Create(ctx, newLease(tc.namespace, name, "x"), metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("write as %s in %s: %v", tc.user, tc.namespace, err)
			}
			l.Spec.HolderIdentity = ptr.To("y")
			if _, err := as(t, tc.user, "").CoordinationV1().Leases(tc.namespace).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("update as %s in %s: %v", tc.user, tc.namespace, err)
			}
		})
	}
	if after := decisions(t); after != before {
		t.Fatalf("leaseguard decided %v requests for excluded namespaces or identities, want 0", after-before)
	}
}

func decisions(t *testing.T) float64 {
	t.Helper()
	fams, err := guard.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return controlplane.Counter(fams, "leaseguard_decisions_total", nil)
}

// assertDenied checks the error a client sees for a denied write: the HTTP
// code and the exact message.
func assertDenied(t *testing.T, err error, code int32, message string) {
	t.Helper()
	if err == nil {
		t.Fatalf("write admitted, want denial %q", message)
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		t.Fatalf("error %v is not an API status", err)
	}
	if got := status.Status().Code; got != code {
		t.Errorf("HTTP code %d, want %d (%v)", got, code, err)
	}
	// Identity changes are refused by validate.leases.leaseguard.io, other
	// updates by renewals.leases.leaseguard.io: both are leaseguard, with
	// the same message.
	if got := status.Status().Message; webhookless(got) != webhookless(message) {
		t.Errorf("message:\n  %s\nwant:\n  %s", got, message)
	}
}

func webhookless(msg string) string {
	return strings.Replace(msg, `admission webhook "renewals.leases.leaseguard.io"`, `admission webhook "validate.leases.leaseguard.io"`, 1)
}
