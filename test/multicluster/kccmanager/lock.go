package kccmanager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
)

// MCLLock is the resource lock of the multicluster-leader-election client
// library that Config Connector uses in multicluster mode, re-implemented
// from its described behaviour (docs/multicluster.md cites
// gke-labs/multicluster-leader-election@1ae5cb16f27e pkg/client/resourcelock.go):
// the MultiClusterLease's status is the lock record, and a write is a merge
// patch of the spec followed by a poll of the status until the
// MultiClusterLease controller confirms the global holder.
//
// Every read is a live GET (Config Connector builds an uncached client).
// MultiClusterLeases are decoded into the typed api/multicluster/v1alpha1
// object (spec.renewTime as a metav1.MicroTime), so an object a typed client
// cannot read fails the read, with an error.
type MCLLock struct {
	client      dynamic.ResourceInterface
	namespace   string
	name        string
	identity    string
	retryPeriod time.Duration

	// observe, when set, is told about every read error and every
	// renewTime this lock sends.
	onReadError func(error)
	onSend      func(renewTime string)
	onConfirmed func()

	// floor, when set, makes this lock send some renewals as no-ops
	// itself (FloorRenewals): a measuring switch, never Config Connector's
	// behaviour.
	floor *FloorRenewals
}

// FloorRenewals is the harness switch of the cost floor
// (docs/multicluster-curve.md): the request stream leaseguard leaves, made
// by the clients themselves with no admission at all. A renewal (the
// holder kept) is sent with the stored renewTime, so that the API server
// stores nothing for it, unless this manager is the designated one and the
// stored renewTime is at least StoreEvery old by its clock: what the
// coalescing and acknowledging policy would store.
type FloorRenewals struct {
	Designated bool
	StoreEvery time.Duration
}

var _ resourcelock.Interface = (*MCLLock)(nil)

// NewMCLLock returns the lock of the MultiClusterLease namespace/name for
// identity; retryPeriod becomes spec.retryPeriodSeconds (15s in Config
// Connector).
func NewMCLLock(client dynamic.ResourceInterface, namespace, name, identity string, retryPeriod time.Duration) *MCLLock {
	return &MCLLock{client: client, namespace: namespace, name: name, identity: identity, retryPeriod: retryPeriod}
}

// Decode reads u as the typed MultiClusterLease.
func Decode(u *unstructured.Unstructured) (*mclv1alpha1.MultiClusterLease, error) {
	data, err := u.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var m mclv1alpha1.MultiClusterLease
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("decoding MultiClusterLease %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return &m, nil
}

func (l *MCLLock) get(ctx context.Context) (*mclv1alpha1.MultiClusterLease, error) {
	u, err := l.client.Get(ctx, l.name, metav1.GetOptions{})
	if err != nil {
		// NotFound stays a NotFound: client-go then takes the Create path.
		return nil, err
	}
	m, err := Decode(u)
	if err != nil && l.onReadError != nil {
		l.onReadError(err)
	}
	return m, err
}

// record is the lock record of a MultiClusterLease: the status's global
// holder, renew time (RFC 3339, zero when absent or unreadable), transitions,
// the spec's lease duration and the creation time as acquire time.
func record(m *mclv1alpha1.MultiClusterLease) resourcelock.LeaderElectionRecord {
	var r resourcelock.LeaderElectionRecord
	if t := m.Status.GlobalLeaseTransitions; t != nil {
		r.LeaderTransitions = int(*t)
	}
	if s := m.Status.GlobalRenewTime; s != nil {
		if t, err := time.Parse(time.RFC3339, *s); err == nil {
			r.RenewTime = metav1.NewTime(t)
		}
	}
	r.AcquireTime = m.CreationTimestamp
	if d := m.Spec.LeaseDurationSeconds; d != nil {
		r.LeaseDurationSeconds = int(*d)
	}
	if h := m.Status.GlobalHolderIdentity; h != nil {
		r.HolderIdentity = *h
	}
	return r
}

// Get returns the lock record and its JSON, by which client-go tells
// whether the record changed.
func (l *MCLLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	m, err := l.get(ctx)
	if err != nil {
		return nil, nil, err
	}
	r := record(m)
	raw, err := json.Marshal(r)
	if err != nil {
		return nil, nil, err
	}
	return &r, raw, nil
}

func (l *MCLLock) setSpec(m *mclv1alpha1.MultiClusterLease, ler resourcelock.LeaderElectionRecord) {
	m.Spec.HolderIdentity = ptr.To(ler.HolderIdentity)
	m.Spec.RenewTime = ptr.To(metav1.NewMicroTime(ler.RenewTime.Time))
	m.Spec.LeaseDurationSeconds = ptr.To(int32(ler.LeaseDurationSeconds))
	m.Spec.RetryPeriodSeconds = ptr.To(int32(l.retryPeriod.Seconds()))
	if l.onSend != nil {
		l.onSend(m.Spec.RenewTime.UTC().Format(metav1.RFC3339Micro))
	}
}

// Create posts a new MultiClusterLease with the four spec fields (no GET
// before, no finalizer, no label), reads its generation and waits for the
// controller to confirm the holder.
func (l *MCLLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	m := &mclv1alpha1.MultiClusterLease{
		TypeMeta:   metav1.TypeMeta{APIVersion: mclv1alpha1.Group + "/" + mclv1alpha1.Version, Kind: mclv1alpha1.Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: l.namespace, Name: l.name},
	}
	l.setSpec(m, ler)
	u, err := toUnstructured(m)
	if err != nil {
		return err
	}
	delete(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	if _, err := l.client.Create(ctx, u, metav1.CreateOptions{}); err != nil {
		// AlreadyExists from a sibling included: client-go retries.
		return err
	}
	created, err := l.get(ctx)
	if err != nil {
		return err
	}
	if err := l.confirm(ctx, created.Generation, ler); err != nil {
		return fmt.Errorf("failed to confirm leadership in status after create: %w", err)
	}
	return nil
}

// Update reads the MultiClusterLease, merge-patches the difference between
// what it read and the same object with the four spec fields set (usually
// only spec.renewTime; no resourceVersion, so no optimistic lock), reads the
// generation after its patch and waits for the controller to confirm the
// holder at that generation.
func (l *MCLLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	cur, err := l.get(ctx)
	if err != nil {
		return err
	}
	original, err := json.Marshal(cur)
	if err != nil {
		return err
	}
	next := &mclv1alpha1.MultiClusterLease{}
	if err := json.Unmarshal(original, next); err != nil {
		return err
	}
	if f := l.floor; f != nil && cur.Spec.RenewTime != nil && cur.Spec.HolderIdentity != nil && *cur.Spec.HolderIdentity == ler.HolderIdentity &&
		(!f.Designated || time.Since(cur.Spec.RenewTime.Time) < f.StoreEvery) {
		ler.RenewTime = metav1.NewTime(cur.Spec.RenewTime.Time)
	}
	l.setSpec(next, ler)
	modified, err := json.Marshal(next)
	if err != nil {
		return err
	}
	patch, err := jsonpatch.CreateMergePatch(original, modified)
	if err != nil {
		return err
	}
	if _, err := l.client.Patch(ctx, l.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return err
	}
	after, err := l.get(ctx)
	if err != nil {
		return err
	}
	if err := l.confirm(ctx, after.Generation, ler); err != nil {
		return fmt.Errorf("failed to confirm leadership in status: %w", err)
	}
	return nil
}

// confirm polls every second, first at once, for at most the record's lease
// duration (cut by ctx: client-go's renew deadline while renewing) until the
// status has observed generation and names ler's holder. Read errors are
// swallowed: the next tick reads again.
func (l *MCLLock) confirm(ctx context.Context, generation int64, ler resourcelock.LeaderElectionRecord) error {
	pollCtx, cancel := context.WithTimeout(ctx, time.Duration(ler.LeaseDurationSeconds)*time.Second)
	defer cancel()
	err := wait.PollUntilContextCancel(pollCtx, time.Second, true, func(ctx context.Context) (bool, error) {
		m, err := l.get(ctx)
		if err != nil {
			return false, nil //nolint:nilerr // the library swallows read errors here: the next tick reads again
		}
		st := m.Status
		return st.ObservedGeneration != nil && *st.ObservedGeneration >= generation &&
			st.GlobalHolderIdentity != nil && *st.GlobalHolderIdentity == ler.HolderIdentity, nil
	})
	if err != nil {
		return err
	}
	if l.onConfirmed != nil {
		l.onConfirmed()
	}
	return nil
}

// RecordEvent records nothing, like the library.
func (l *MCLLock) RecordEvent(string) {}

// Describe names the lock.
func (l *MCLLock) Describe() string { return "multiclusterlease/" + l.namespace + "/" + l.name }

// Identity is the cluster's candidate identity, shared by every manager of
// the cluster.
func (l *MCLLock) Identity() string { return l.identity }

func toUnstructured(m *mclv1alpha1.MultiClusterLease) (*unstructured.Unstructured, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		return nil, err
	}
	if u.Object == nil {
		return nil, errors.New("empty MultiClusterLease")
	}
	return u, nil
}
