package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
)

// After the API server restarts, its MutatingAdmissionPolicy cannot patch a
// custom resource until its type converter has read the resource's OpenAPI
// schema (it polls /openapi/v3 every 5 s, and its first poll may come
// before the CRD's schema is published): until then the policy answers
// every renewal it would acknowledge with 503 "Resource kind … not found",
// whatever its failurePolicy. Leases are built in and never wait. This
// measures the window over restarts: from the first write the restarted
// API server serves (a MultiClusterLease no rule selects) to the first
// acknowledged renewal of a shared one; it fails only if acknowledgements
// never come back.
func TestAcknowledgementsAfterAnAPIServerRestart(t *testing.T) {
	ctx := context.Background()
	const (
		ns       = "cnrm-system"
		name     = "kcc-leader"
		managerA = "system:serviceaccount:cnrm-system:cnrm-controller-manager-team-a"
		managerB = "system:serviceaccount:cnrm-system:cnrm-controller-manager-team-b"
	)
	own, _ := ownSamplePlane(t, ns)
	// envtest makes a new serving certificate when it starts the API
	// server again; the client certificate stays valid.
	cfg := rest.CopyConfig(own.Config)
	cfg.Timeout = 10 * time.Second
	cfg.Insecure, cfg.CAData, cfg.CAFile = true, nil, ""
	as := func(user, namespace string) dynamic.ResourceInterface {
		return multiClusterLeasesAs(t, cfg, user, namespace)
	}
	lease := func(holder string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": mclv1alpha1.Group + "/" + mclv1alpha1.Version, "kind": mclv1alpha1.Kind,
			"metadata": map[string]any{"name": name},
			"spec": map[string]any{"holderIdentity": holder, "renewTime": micro(time.Now()),
				"leaseDurationSeconds": int64(15), "retryPeriodSeconds": int64(2)},
		}}
	}
	if _, err := as(managerA, ns).Create(ctx, lease("cluster-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := as(managerA, "default").Create(ctx, lease("control"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	renew := func(user, namespace, holder string) (*unstructured.Unstructured, error) {
		return as(user, namespace).Patch(ctx, name, types.MergePatchType,
			[]byte(fmt.Sprintf(`{"spec":{"holderIdentity":%q,"renewTime":%q}}`, holder, micro(time.Now()))), metav1.PatchOptions{})
	}
	acknowledged := func() (bool, error) {
		stored, err := as(managerA, ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got, err := renew(managerB, ns, "cluster-a")
		if err != nil {
			return false, err
		}
		return fmt.Sprint(got.Object["spec"].(map[string]any)["renewTime"]) == fmt.Sprint(stored.Object["spec"].(map[string]any)["renewTime"]), nil
	}
	// The steady state before the first restart.
	for start := time.Now(); ; time.Sleep(500 * time.Millisecond) {
		if ok, _ := acknowledged(); ok {
			break
		}
		if time.Since(start) > time.Minute {
			t.Fatal("another manager's renewal not acknowledged within a minute of the start")
		}
	}

	apiServer := own.Env.ControlPlane.GetAPIServer()
	var windows []string
	for round := 0; round < 3; round++ {
		if err := apiServer.Stop(); err != nil {
			t.Fatalf("stopping kube-apiserver: %v", err)
		}
		if err := apiServer.Start(); err != nil {
			t.Fatalf("starting kube-apiserver again: %v", err)
		}
		var served time.Time
		for start := time.Now(); served.IsZero(); time.Sleep(100 * time.Millisecond) {
			if _, err := renew(managerA, "default", "control"); err == nil {
				served = time.Now()
			} else if time.Since(start) > time.Minute {
				t.Fatalf("the restarted API server serves no write for a minute: %v", err)
			}
		}
		refused, other := 0, 0
		var last error
		for {
			ok, err := acknowledged()
			if ok {
				break
			}
			switch {
			case err != nil && apierrors.IsServiceUnavailable(err) && strings.Contains(err.Error(), "Resource kind"):
				refused++
			case err != nil:
				other++
				last = err
			}
			if time.Since(served) > time.Minute {
				t.Fatalf("restart %d: shared renewals not acknowledged a minute after the API server served again (%d refused 503, %d other errors, last: %v)", round+1, refused, other, last)
			}
			time.Sleep(100 * time.Millisecond)
		}
		w := fmt.Sprintf("%.1f s (%d refused 503, %d other errors)", time.Since(served).Seconds(), refused, other)
		windows = append(windows, w)
		t.Logf("restart %d: acknowledged again %s after the first served write", round+1, w)
	}
	t.Logf("windows: %s", strings.Join(windows, "; "))
}
