// Package mclcontroller is a MultiClusterLease controller for the
// multi-cluster tests, written to behave like the public
// gke-labs/multicluster-leader-election controller (its source and docs
// are the reference):
//
//   - it watches the cluster's MultiClusterLeases and reconciles one when its
//     generation changes (a candidate's spec write; GenerationChangedPredicate
//     lets creations and deletions through) and again every
//     spec.retryPeriodSeconds (10s when absent), never when spec.holderIdentity
//     is empty (no requeue, no status write);
//   - it adds its finalizer with a full UPDATE, and removes it on deletion;
//   - while the candidate named by spec.holderIdentity is live (its
//     spec.renewTime younger than twice spec.leaseDurationSeconds, 15s when
//     that is unset), it
//     acquires or renews the global lock in a GCS bucket on the candidate's
//     behalf (package gcslock: generation preconditions, takeover once the
//     lock is spec.leaseDurationSeconds old);
//   - it writes status.observedGeneration, globalHolderIdentity,
//     globalRenewTime (RFC 3339, seconds), globalLeaseDurationSeconds,
//     globalLeaseTransitions and the conditions BackendHealthy and
//     LockAcquiredInBackend through the status subresource (holder and renew
//     time nil when unknown); a failed status update is only logged after a
//     successful acquire or renew, and returned (requeue with backoff) after a
//     failed one;
//   - a lock create that loses to another controller re-reads the lock and
//     judges it; an update that loses is "not acquired", without error.
//
// It runs under whatever identity its rest.Config carries; the tests give it
// the controller's ServiceAccount, the status writer of leaseguard's policy.
package mclcontroller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/storage"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/test/multicluster/gcslock"
)

// Condition types of status.conditions.
const (
	ConditionBackendHealthy        = "BackendHealthy"
	ConditionLockAcquiredInBackend = "LockAcquiredInBackend"
)

const (
	defaultLeaseDuration = 15 * time.Second
	defaultRetryPeriod   = 10 * time.Second
)

// Options configure a controller.
type Options struct {
	// Config is the controller's identity and API server.
	Config *rest.Config
	// Storage and Bucket are where the global locks live.
	Storage *storage.Client
	Bucket  string
	// Name names the controller; unique within the process.
	Name string
	// Namespaces, when set, are the only namespaces whose
	// MultiClusterLeases it watches and reconciles (in a shared cluster:
	// the controller's Role is granted there only).
	Namespaces []string
	Log        logr.Logger
}

// Controller is one cluster's MultiClusterLease controller.
type Controller struct {
	mgr ctrl.Manager
	r   *reconciler
}

// Stats is what the controller has done so far: reconciles, and writes of
// the global lock.
type Stats struct {
	Reconciles, LockWrites int64
}

// Stats returns the controller's counters.
func (c *Controller) Stats() Stats {
	return Stats{Reconciles: c.r.reconciles.Load(), LockWrites: c.r.lockWrites.Load()}
}

// New builds the controller; Start runs it.
func New(o Options) (*Controller, error) {
	if o.Config == nil || o.Storage == nil || o.Bucket == "" || o.Name == "" {
		return nil, errors.New("mclcontroller: Config, Storage, Bucket and Name are required")
	}
	var watched map[string]cache.Config
	for _, ns := range o.Namespaces {
		if watched == nil {
			watched = map[string]cache.Config{}
		}
		watched[ns] = cache.Config{}
	}
	mgr, err := ctrl.NewManager(o.Config, ctrl.Options{
		Scheme:                 runtime.NewScheme(),
		Cache:                  cache.Options{DefaultNamespaces: watched},
		Logger:                 o.Log,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Read MultiClusterLeases from the informer cache, as the typed
		// client of a kubebuilder controller does.
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}},
	})
	if err != nil {
		return nil, fmt.Errorf("mclcontroller %s: %w", o.Name, err)
	}
	r := &reconciler{
		client:  mgr.GetClient(),
		storage: o.Storage,
		bucket:  o.Bucket,
		now:     time.Now,
		log:     o.Log,
		locks:   map[string]*gcslock.Lock{},
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named(o.Name).
		For(newMCL(), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		Complete(r)
	if err != nil {
		return nil, fmt.Errorf("mclcontroller %s: %w", o.Name, err)
	}
	return &Controller{mgr: mgr, r: r}, nil
}

// Start runs the controller until ctx ends.
func (c *Controller) Start(ctx context.Context) error { return c.mgr.Start(ctx) }

func newMCL() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(mclv1alpha1.GroupVersionResource.GroupVersion().WithKind(mclv1alpha1.Kind))
	return u
}

type reconciler struct {
	client  client.Client
	storage *storage.Client
	bucket  string
	now     func() time.Time
	log     logr.Logger

	mu    sync.Mutex
	locks map[string]*gcslock.Lock

	reconciles, lockWrites atomic.Int64
}

// candidate is what the controller reads of a MultiClusterLease's spec.
type candidate struct {
	holder        string
	renewTime     *time.Time
	leaseDuration time.Duration
	declaredLease *int64
	retryPeriod   time.Duration
}

func readCandidate(u *unstructured.Unstructured) (candidate, error) {
	c := candidate{leaseDuration: defaultLeaseDuration, retryPeriod: defaultRetryPeriod}
	c.holder, _, _ = unstructured.NestedString(u.Object, "spec", "holderIdentity")
	if s, ok, _ := unstructured.NestedString(u.Object, "spec", "renewTime"); ok {
		// The CRD schema's date-time also admits a lower-case t and z.
		t, err := time.Parse(time.RFC3339Nano, strings.ToUpper(s))
		if err != nil {
			return c, fmt.Errorf("spec.renewTime %q: %w", s, err)
		}
		c.renewTime = &t
	}
	if v, ok, _ := unstructured.NestedInt64(u.Object, "spec", "leaseDurationSeconds"); ok {
		c.leaseDuration = time.Duration(v) * time.Second
		c.declaredLease = &v
	}
	if v, ok, _ := unstructured.NestedInt64(u.Object, "spec", "retryPeriodSeconds"); ok && v > 0 {
		c.retryPeriod = time.Duration(v) * time.Second
	}
	return c, nil
}

func (r *reconciler) lock(key string) *gcslock.Lock {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, ok := r.locks[key]
	if !ok {
		l = gcslock.New(r.storage, r.bucket, key)
		r.locks[key] = l
	}
	return l
}

func (r *reconciler) forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.locks, key)
}

func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	r.reconciles.Add(1)
	log := r.log.WithValues("multiclusterlease", req.String())
	mcl := newMCL()
	if err := r.client.Get(ctx, req.NamespacedName, mcl); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !mcl.GetDeletionTimestamp().IsZero() {
		// Like the reference controller, deletion forgets the lock without
		// releasing it: it expires on its own.
		r.forget(req.String())
		if controllerutil.RemoveFinalizer(mcl, mclv1alpha1.Finalizer) {
			return reconcile.Result{}, r.client.Update(ctx, mcl)
		}
		return reconcile.Result{}, nil
	}
	if controllerutil.AddFinalizer(mcl, mclv1alpha1.Finalizer) {
		if err := r.client.Update(ctx, mcl); err != nil {
			return reconcile.Result{}, err
		}
	}
	cand, err := readCandidate(mcl)
	if err != nil {
		return reconcile.Result{}, reconcile.TerminalError(err)
	}
	if cand.holder == "" {
		log.V(1).Info("no candidate in spec.holderIdentity")
		return reconcile.Result{}, nil
	}

	lockState, acquireErr := r.contend(ctx, req.String(), cand)
	status, err := readStatus(mcl)
	if err != nil {
		return reconcile.Result{}, reconcile.TerminalError(err)
	}
	if lockState != nil {
		setLockStatus(&status, mcl.GetGeneration(), lockState, cand)
	}
	setBackendHealthy(&status, mcl.GetGeneration(), acquireErr)
	if acquireErr != nil {
		// The reference controller returns the status update's error on
		// this path (a requeue with backoff), and requeues after the retry
		// period otherwise.
		log.Info("global lock not renewed", "candidate", cand.holder, "reason", acquireErr.Error())
		if err := writeStatus(mcl, status); err != nil {
			return reconcile.Result{}, reconcile.TerminalError(err)
		}
		if err := r.client.Status().Update(ctx, mcl); err != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{RequeueAfter: cand.retryPeriod}, nil
	}
	setLockAcquired(&status, mcl.GetGeneration(), lockState)
	if err := writeStatus(mcl, status); err != nil {
		return reconcile.Result{}, reconcile.TerminalError(err)
	}
	if err := r.client.Status().Update(ctx, mcl); err != nil {
		// Only logged on this path: a candidate's spec write that raced the
		// status update (a conflict) brings its own reconcile through the
		// generation change.
		log.Info("status update failed", "error", err.Error())
	}
	return reconcile.Result{RequeueAfter: cand.retryPeriod}, nil
}

// contend acquires or renews the global lock for a live candidate, or reads
// it for a stale one. It returns the lock as it stands (nil when unknown)
// and why the candidate could not hold it, if so.
func (r *reconciler) contend(ctx context.Context, key string, cand candidate) (*gcslock.Observed, error) {
	lock := r.lock(key)
	if cand.renewTime == nil {
		// Known to be nobody: the status's holder and renew time are
		// cleared.
		return &gcslock.Observed{}, errors.New("candidate has no renew time")
	}
	// Twice the declared lease duration; 15s when none is declared.
	staleAfter := defaultLeaseDuration
	if cand.declaredLease != nil {
		staleAfter = 2 * cand.leaseDuration
	}
	if age := r.now().Sub(*cand.renewTime); age > staleAfter {
		cur, err := lock.Read(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading the global lock: %w", err)
		}
		return &cur, fmt.Errorf("candidate %s is stale: renewed %s ago, more than %s", cand.holder, age.Round(time.Millisecond), staleAfter)
	}
	before := lock.Writes()
	res, err := lock.AcquireOrRenew(ctx, cand.holder, cand.leaseDuration, r.now)
	r.lockWrites.Add(lock.Writes() - before)
	if err != nil {
		return nil, err
	}
	return &res.Lock, nil
}

func readStatus(u *unstructured.Unstructured) (mclv1alpha1.MultiClusterLeaseStatus, error) {
	var st mclv1alpha1.MultiClusterLeaseStatus
	raw, ok, err := unstructured.NestedMap(u.Object, "status")
	if err != nil || !ok {
		return st, err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st); err != nil {
		return st, fmt.Errorf("status: %w", err)
	}
	return st, nil
}

func writeStatus(u *unstructured.Unstructured, st mclv1alpha1.MultiClusterLeaseStatus) error {
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
	if err != nil {
		return err
	}
	u.Object["status"] = raw
	return nil
}

func setLockStatus(st *mclv1alpha1.MultiClusterLeaseStatus, generation int64, lock *gcslock.Observed, cand candidate) {
	st.ObservedGeneration = ptr.To(generation)
	// Unknown holder and renew time are nil, not empty.
	st.GlobalHolderIdentity, st.GlobalRenewTime = nil, nil
	if lock.HolderIdentity != "" {
		st.GlobalHolderIdentity = ptr.To(lock.HolderIdentity)
	}
	if !lock.RenewTime.IsZero() {
		st.GlobalRenewTime = ptr.To(lock.RenewTime.UTC().Format(time.RFC3339))
	}
	if cand.declaredLease != nil {
		st.GlobalLeaseDurationSeconds = ptr.To(int32(*cand.declaredLease))
	}
	if lock.LeaseTransitions != 0 {
		st.GlobalLeaseTransitions = ptr.To(lock.LeaseTransitions)
	}
}

func setBackendHealthy(st *mclv1alpha1.MultiClusterLeaseStatus, generation int64, err error) {
	c := metav1.Condition{Type: ConditionBackendHealthy, ObservedGeneration: generation, Status: metav1.ConditionTrue,
		Reason: "BackendHealthy", Message: "successfully communicated with backend"}
	if err != nil {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, "BackendError", "failed to communicate with backend: "+err.Error()
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

func setLockAcquired(st *mclv1alpha1.MultiClusterLeaseStatus, generation int64, lock *gcslock.Observed) {
	c := metav1.Condition{Type: ConditionLockAcquiredInBackend, ObservedGeneration: generation, Status: metav1.ConditionFalse,
		Reason: "LockNotAcquired", Message: "No cluster currently holds the lock in the backend"}
	if lock != nil && lock.HolderIdentity != "" {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, "LockAcquired", "Lock is held by "+lock.HolderIdentity
	}
	meta.SetStatusCondition(&st.Conditions, c)
}
