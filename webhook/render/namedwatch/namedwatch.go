// Package namedwatch runs one reconcile function whenever any of a few
// objects, each known by name, changes: the shape of a controller-runtime
// reconciler for objects leaseguard owns but may only read by name.
//
// configsync (leaseguard's admission configuration) and the self-managed
// caBundle keeper used to poll once a minute with fixed retries, so an edit
// (a kubectl apply that resets a caBundle, a hand edit of a webhook) stood
// for up to a minute. Here they are controllers: controller-runtime's
// controller, queue and rate limiter, fed by a cache whose informers each
// list and watch one object by name (a field selector on metadata.name,
// which RBAC authorizes against resourceNames, so the install's Roles stay
// limited by name), metadata only: what changed is read fresh by the
// reconcile function, which must be idempotent.
package namedwatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Object is one object watched, by kind and name.
type Object struct {
	Kind            schema.GroupVersionKind
	Namespace, Name string
}

func (o Object) String() string {
	if o.Namespace == "" {
		return fmt.Sprintf("%s %s", o.Kind.Kind, o.Name)
	}
	return fmt.Sprintf("%s %s/%s", o.Kind.Kind, o.Namespace, o.Name)
}

// Options configure Run.
type Options struct {
	// Name names the controller: its log name and the label of
	// controller-runtime's controller metrics.
	Name   string
	Config *rest.Config
	// Objects whose changes (creation, any update, deletion) trigger
	// Reconcile. A kind the API server does not serve (a
	// MutatingAdmissionPolicy before Kubernetes 1.36) is not watched, and
	// said so once. At most one object per kind.
	Objects []Object
	// Changed, when set, returns a channel closed at the next change of
	// something else Reconcile depends on (the policy file); each close
	// triggers Reconcile.
	Changed func() <-chan struct{}
	// Reconcile brings the objects where they should be. It runs once at
	// start, then after every trigger (triggers that arrive while it runs
	// coalesce into one run), never concurrently with itself. An error is
	// retried with exponential back-off (RetryBase doubling up to
	// RetryMax); otherwise it runs again after the duration it returns (a
	// safety net, and the delays its own judgement needs), or only on
	// triggers when that is zero.
	Reconcile func(context.Context) (time.Duration, error)
	// RetryBase and RetryMax bound the back-off after errors (1 s and 1 min
	// when zero).
	RetryBase, RetryMax time.Duration
	Log                 logr.Logger
}

// key is the only item ever queued: every trigger asks for the same whole
// reconcile, so triggers that arrive together are one run.
var key = reconcile.Request{NamespacedName: types.NamespacedName{Name: "all"}}

// Run runs the controller until ctx ends. It fails when an object's kind
// cannot be looked up, or its informer does not sync within two minutes
// (typically RBAC without list and watch on that name).
func Run(ctx context.Context, o Options) error {
	httpClient, err := rest.HTTPClientFor(o.Config)
	if err != nil {
		return err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(o.Config, httpClient)
	if err != nil {
		return err
	}
	watched, byObject, err := served(o, mapper)
	if err != nil {
		return err
	}
	c, err := cache.New(o.Config, cache.Options{HTTPClient: httpClient, Mapper: mapper, ByObject: byObject})
	if err != nil {
		return err
	}
	ctrl, err := controller.NewTypedUnmanaged(o.Name, controller.TypedOptions[reconcile.Request]{
		Reconciler: reconcile.Func(func(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
			after, err := o.Reconcile(ctx)
			if ctx.Err() != nil {
				// Stopping: a run cut short has not failed, and is not
				// retried (nor logged as a reconciler error).
				err = nil
			}
			return reconcile.Result{RequeueAfter: after}, err
		}),
		RateLimiter:        workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](orDefault(o.RetryBase, time.Second), orDefault(o.RetryMax, time.Minute)),
		SkipNameValidation: ptr.To(true),
		CacheSyncTimeout:   2 * time.Minute,
		Logger:             o.Log,
	})
	if err != nil {
		return err
	}
	always := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{key}
	})
	for _, obj := range watched {
		if err := ctrl.Watch(source.Kind(c, obj, always)); err != nil {
			return err
		}
	}
	if err := ctrl.Watch(source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		// The first run, whether or not any object exists yet.
		q.Add(key)
		if o.Changed != nil {
			go func() {
				// The next channel is taken before the run is queued, so a
				// change made while the queued run reads is never missed.
				changed := o.Changed()
				for {
					select {
					case <-ctx.Done():
						return
					case <-changed:
						changed = o.Changed()
						q.Add(key)
					}
				}
			}()
		}
		return nil
	})); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cacheDone := make(chan error, 1)
	go func() { cacheDone <- c.Start(ctx) }()
	err = ctrl.Start(ctx)
	cancel()
	if cerr := <-cacheDone; err == nil && cerr != nil && !errors.Is(cerr, context.Canceled) {
		err = cerr
	}
	return err
}

// served returns the metadata-only objects to watch, each with its
// informer's selection (its name, its namespace), leaving out kinds the
// API server does not serve.
func served(o Options, mapper meta.RESTMapper) ([]client.Object, map[client.Object]cache.ByObject, error) {
	var watched []client.Object
	byObject := map[client.Object]cache.ByObject{}
	seen := map[schema.GroupVersionKind]bool{}
	for _, obj := range o.Objects {
		if seen[obj.Kind] {
			return nil, nil, fmt.Errorf("%s: one object per kind", obj)
		}
		seen[obj.Kind] = true
		if _, err := mapper.RESTMapping(obj.Kind.GroupKind(), obj.Kind.Version); err != nil {
			if meta.IsNoMatchError(err) {
				o.Log.Info("not watched: the API server does not serve this kind", "object", obj.String(), "apiVersion", obj.Kind.GroupVersion().String())
				continue
			}
			return nil, nil, fmt.Errorf("%s: %w", obj, err)
		}
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(obj.Kind)
		sel := cache.ByObject{Field: fields.OneTermEqualSelector("metadata.name", obj.Name)}
		if obj.Namespace != "" {
			sel.Namespaces = map[string]cache.Config{obj.Namespace: {}}
		}
		byObject[m] = sel
		watched = append(watched, m)
	}
	return watched, byObject, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
