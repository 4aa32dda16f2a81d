package kccmanager

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
)

func stored(spec, status map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mclv1alpha1.Group + "/" + mclv1alpha1.Version,
		"kind":       mclv1alpha1.Kind,
		"metadata":   map[string]any{"name": "kcc-leader", "namespace": "cnrm-system", "creationTimestamp": "2026-01-02T03:00:00Z"},
		"spec":       spec,
		"status":     status,
	}}
	return u
}

func fakeLock(t *testing.T, obj *unstructured.Unstructured) (*MCLLock, *dynamicfake.FakeDynamicClient) {
	t.Helper()
	gvr := mclv1alpha1.GroupVersionResource
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{gvr: mclv1alpha1.Kind + "List"}, obj)
	return NewMCLLock(client.Resource(gvr).Namespace("cnrm-system"), "cnrm-system", "kcc-leader", "cluster-a", LockRetryPeriod), client
}

func TestGetBuildsTheRecordFromTheStatus(t *testing.T) {
	l, _ := fakeLock(t, stored(
		map[string]any{"holderIdentity": "cluster-a", "renewTime": "2026-01-02T03:04:05.123456Z", "leaseDurationSeconds": int64(15), "retryPeriodSeconds": int64(15)},
		map[string]any{"globalHolderIdentity": "cluster-b", "globalRenewTime": "2026-01-02T03:04:00Z", "globalLeaseDurationSeconds": int64(20), "globalLeaseTransitions": int64(3)},
	))
	rec, raw, err := l.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := resourcelock.LeaderElectionRecord{
		HolderIdentity:       "cluster-b",
		LeaseDurationSeconds: 15, // the spec's, not the status's
		AcquireTime:          metav1.NewTime(time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)),
		RenewTime:            metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)),
		LeaderTransitions:    3,
	}
	if !rec.RenewTime.Equal(&want.RenewTime) || !rec.AcquireTime.Equal(&want.AcquireTime) || rec.HolderIdentity != want.HolderIdentity ||
		rec.LeaseDurationSeconds != want.LeaseDurationSeconds || rec.LeaderTransitions != want.LeaderTransitions {
		t.Fatalf("record %+v, want %+v", *rec, want)
	}
	wantRaw, _ := json.Marshal(*rec)
	if string(raw) != string(wantRaw) {
		t.Fatalf("raw record %s, want %s", raw, wantRaw)
	}
	if l.Describe() != "multiclusterlease/cnrm-system/kcc-leader" || l.Identity() != "cluster-a" {
		t.Fatalf("Describe %q, Identity %q", l.Describe(), l.Identity())
	}
}

func TestGetFailsOnAnObjectATypedClientCannotRead(t *testing.T) {
	l, _ := fakeLock(t, stored(map[string]any{"renewTime": "yesterday"}, map[string]any{}))
	var seen error
	l.onReadError = func(err error) { seen = err }
	_, _, err := l.Get(context.Background())
	if err == nil || !strings.Contains(err.Error(), "decoding MultiClusterLease cnrm-system/kcc-leader") || seen == nil {
		t.Fatalf("got %v (seen %v), want a decoding error", err, seen)
	}
}

func TestUpdatePatchesOnlyWhatChangedWithoutResourceVersionAndWaitsForTheStatus(t *testing.T) {
	l, client := fakeLock(t, stored(
		map[string]any{"holderIdentity": "cluster-a", "renewTime": "2026-01-02T03:04:05.123456Z", "leaseDurationSeconds": int64(15), "retryPeriodSeconds": int64(15)},
		// The fake does not bump generations: observedGeneration 0 >= 0.
		map[string]any{"globalHolderIdentity": "cluster-a", "observedGeneration": int64(0)},
	))
	var patches []string
	client.PrependReactor("patch", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.PatchAction)
		patches = append(patches, string(p.GetPatchType())+" "+string(p.GetPatch()))
		return false, nil, nil
	})
	renew := time.Date(2026, 1, 2, 3, 4, 7, 654321000, time.UTC)
	err := l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "cluster-a", LeaseDurationSeconds: 15, RenewTime: metav1.NewTime(renew)})
	if err != nil {
		t.Fatal(err)
	}
	want := `application/merge-patch+json {"spec":{"renewTime":"2026-01-02T03:04:07.654321Z"}}`
	if len(patches) != 1 || patches[0] != want {
		t.Fatalf("patches %q, want [%q]", patches, want)
	}

	// A holder the status does not confirm: the poll times out (ctx cuts it).
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	err = l.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "cluster-b", LeaseDurationSeconds: 15, RenewTime: metav1.NewTime(renew)})
	if err == nil || !strings.HasPrefix(err.Error(), "failed to confirm leadership in status") {
		t.Fatalf("got %v, want a confirmation timeout", err)
	}
}

// The curve's floor switch: a renewal the policy would not store is sent
// as a no-op (the stored renewTime, an empty merge patch), still as one
// request; the designated client stores one once the stored renewTime is
// StoreEvery old; a change of holder is always sent whole.
func TestFloorRenewalsSendNoOpsExceptTheDesignatedDueOnes(t *testing.T) {
	storedAt := time.Now().Add(-3 * time.Second).UTC().Truncate(time.Microsecond)
	renew := time.Now().UTC().Truncate(time.Microsecond)
	sent := func(floor *FloorRenewals, holder string) []string {
		t.Helper()
		l, client := fakeLock(t, stored(
			map[string]any{"holderIdentity": "cluster-a", "renewTime": storedAt.Format(metav1.RFC3339Micro), "leaseDurationSeconds": int64(15), "retryPeriodSeconds": int64(15)},
			map[string]any{"globalHolderIdentity": holder, "observedGeneration": int64(0)},
		))
		l.floor = floor
		var patches []string
		client.PrependReactor("patch", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
			patches = append(patches, string(a.(k8stesting.PatchAction).GetPatch()))
			return false, nil, nil
		})
		if err := l.Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: 15, RenewTime: metav1.NewTime(renew)}); err != nil {
			t.Fatal(err)
		}
		return patches
	}
	renewal := `{"spec":{"renewTime":"` + renew.Format(metav1.RFC3339Micro) + `"}}`
	for _, c := range []struct {
		name  string
		floor *FloorRenewals
		want  string
	}{
		{"no switch: Config Connector's renewal", nil, renewal},
		{"another manager: a no-op", &FloorRenewals{Designated: false, StoreEvery: time.Second}, `{}`},
		{"the designated one, early: a no-op", &FloorRenewals{Designated: true, StoreEvery: 7 * time.Second}, `{}`},
		{"the designated one, due: stored", &FloorRenewals{Designated: true, StoreEvery: 2 * time.Second}, renewal},
	} {
		if got := sent(c.floor, "cluster-a"); len(got) != 1 || got[0] != c.want {
			t.Errorf("%s: patches %q, want [%q]", c.name, got, c.want)
		}
	}
}
