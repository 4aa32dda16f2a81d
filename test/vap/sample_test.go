package vap

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/test/testfixtures"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
)

// config/vap, applied with kubectl to an API server without leaseguard,
// enforces the sample policy: strangers are refused, the designated
// manager renews, a manager may not write another manager's bound Lease
// (warned, as the sample's rule says), and the coalescing policy is there.
func TestSampleKustomizationEnforces(t *testing.T) {
	ctx := context.Background()
	cp, err := controlplane.StartWithoutWebhooks(controlplane.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cp.Stop() }()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	if out, err := cp.Kubectl(kubeconfig, "apply", "--server-side", "-k", filepath.Join(root, "config", "vap")).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply -k config/vap: %v\n%s", err, out)
	}
	e, err := newEnv("sample", cp)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.createNamespaces(ctx, []string{testfixtures.KCCNamespace}); err != nil {
		t.Fatal(err)
	}
	if out, err := cp.Kubectl(kubeconfig, "get", "mutatingadmissionpolicy", "leaseguard-coalesce-renewals").CombinedOutput(); err != nil {
		t.Errorf("the coalescing policy is not installed: %v\n%s", err, out)
	}

	managerA := leaseobject.Caller{Username: testfixtures.KCCManagerPrefix + "a", PodName: "cnrm-controller-manager-a-0"}
	managerB := leaseobject.Caller{Username: testfixtures.KCCManagerPrefix + "b", PodName: "cnrm-controller-manager-b-0"}
	stranger := leaseobject.Caller{Username: "system:serviceaccount:cnrm-system:other"}
	mcl := func(holder string) []byte {
		body, _ := json.Marshal(apiObject(leaseobject.MultiClusterLeases, &leaseobject.Object{Namespace: testfixtures.KCCNamespace, Name: "kcc-leader",
			Designated: managerA.Username, HasDesignation: true,
			Spec: leaseobject.Spec{Holder: holder, RenewTime: time.Now(), LeaseDuration: 15 * time.Second}}, 0))
		return body
	}
	// The policies take effect shortly after they are created. The probe is
	// a dry run: on a slow machine it lands before they do, and a real
	// create would then be stored and turn the designated manager's create
	// into a 409.
	var out *outcome
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if out, err = e.do(ctx, stranger, http.MethodPost, objectPath(leaseobject.MultiClusterLeases, testfixtures.KCCNamespace, "", ""), mcl("x"), url.Values{"dryRun": {"All"}}); err != nil {
			t.Fatal(err)
		}
		if out.Code == http.StatusForbidden {
			break
		}
	}
	want := `multiclusterleases.multicluster.core.cnrm.cloud.google.com "kcc-leader" is forbidden: ` +
		"ValidatingAdmissionPolicy 'leaseguard-kcc-mcl-multiclusterleases' with binding 'leaseguard-kcc-mcl-multiclusterleases' denied request: " +
		"leaseguard: rule kcc-mcl: system:serviceaccount:cnrm-system:other is not a manager of multiclusterlease cnrm-system/kcc-leader (managers: " + testfixtures.KCCManagerPrefix + "*, system:serviceaccount:*:cnrm-controller-manager-*)"
	if out.Code != http.StatusForbidden || out.Message != want {
		t.Fatalf("a stranger's create: HTTP %d %q\nwant HTTP 403 %q", out.Code, out.Message, want)
	}
	if out, err = e.do(ctx, managerA, http.MethodPost, objectPath(leaseobject.MultiClusterLeases, testfixtures.KCCNamespace, "", ""), mcl("cluster-a"), nil); err != nil || out.Code != http.StatusCreated {
		t.Fatalf("the designated manager's create: %v HTTP %d %s", err, out.Code, out.Message)
	}
	created := out.Body
	renewal := deepCopy(created)
	renewal["spec"].(map[string]any)["renewTime"] = microTime(time.Now().Add(time.Second))
	body, _ := json.Marshal(renewal)
	path := objectPath(leaseobject.MultiClusterLeases, testfixtures.KCCNamespace, "kcc-leader", "")
	// Designation decides who writes, never who leads: another manager's
	// renewal of the shared lease is admitted (without leaseguard's
	// mutating webhook it is stored), any other write of it refused.
	retuned := deepCopy(created)
	retuned["spec"].(map[string]any)["renewTime"] = microTime(time.Now().Add(time.Second))
	retuned["spec"].(map[string]any)["leaseDurationSeconds"] = 20
	retunedBody, _ := json.Marshal(retuned)
	if out, err = e.do(ctx, managerB, http.MethodPut, path, retunedBody, nil); err != nil || out.Code != http.StatusForbidden ||
		!strings.Contains(out.Message, "is not the designated manager of multiclusterlease cnrm-system/kcc-leader (designated: ...cnrm-controller-manager-a, stale in ") {
		t.Errorf("another manager's write of a lease field: %v HTTP %d %s", err, out.Code, out.Message)
	}
	// (The coalescing policy answers 503 until the API server has the
	// MultiClusterLease's schema, shortly after its CRD is created.)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if out, err = e.do(ctx, managerB, http.MethodPut, path, body, nil); err != nil || out.Code != http.StatusServiceUnavailable {
			break
		}
	}
	if err != nil || out.Code != http.StatusOK {
		t.Errorf("another manager's renewal: %v HTTP %d %s", err, out.Code, out.Message)
	} else if got, _ := out.Body["metadata"].(map[string]any)["annotations"].(map[string]any)[leaseobject.DesignationAnnotation]; got != managerA.Username {
		t.Errorf("another manager's renewal changed the designation to %v", got)
	} else {
		renewal = deepCopy(out.Body)
		renewal["spec"].(map[string]any)["renewTime"] = microTime(time.Now().Add(2 * time.Second))
		body, _ = json.Marshal(renewal)
	}
	// The coalescing policy answers 503 until the API server has the
	// MultiClusterLease's schema, shortly after its CRD is created.
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if out, err = e.do(ctx, managerA, http.MethodPut, path, body, nil); err != nil || out.Code != http.StatusServiceUnavailable {
			break
		}
	}
	if err != nil || out.Code != http.StatusOK {
		t.Errorf("the designated manager's renewal: %v HTTP %d %s", err, out.Code, out.Message)
	}

	// kcc-namespace-leases warns: manager a writing b's bound Lease is
	// admitted with the warning kubectl prints.
	// Each policy takes effect on its own: the Lease policy is probed
	// apart, with the same create as a dry run, until it warns (CI once
	// saw the MultiClusterLease policy in effect and this one not yet).
	lease, _ := json.Marshal(apiObject(leaseobject.Leases, &leaseobject.Object{Namespace: testfixtures.KCCNamespace, Name: "kcc-leader-b",
		Spec: leaseobject.Spec{Holder: managerA.PodName + "_1", RenewTime: time.Now(), AcquireTime: time.Now(), LeaseDuration: 15 * time.Second}}, 0))
	leases := objectPath(leaseobject.Leases, testfixtures.KCCNamespace, "", "")
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if out, err = e.do(ctx, managerA, http.MethodPost, leases, lease, url.Values{"dryRun": {"All"}}); err != nil || len(out.guardWarnings()) > 0 {
			break
		}
	}
	if err != nil || len(out.guardWarnings()) == 0 {
		t.Fatalf("the Lease policy is not in effect after 60s: a dry-run create of another's bound Lease: %v HTTP %d %q %q", err, out.Code, out.Message, out.Warnings)
	}
	out, err = e.do(ctx, managerA, http.MethodPost, leases, lease, nil)
	if err != nil || out.Code != http.StatusCreated || len(out.guardWarnings()) != 1 ||
		!strings.HasSuffix(out.guardWarnings()[0], "leaseguard: rule kcc-namespace-leases: "+managerA.Username+" may not write lease cnrm-system/kcc-leader-b (bound lease: kcc-leader-a)") {
		t.Errorf("a manager's create of another's bound Lease: %v HTTP %d %q %q", err, out.Code, out.Message, out.Warnings)
	}
}
