// Package leasewatch feeds the lease traffic aggregator from the API
// server: one client-go informer per resource (Leases, and
// MultiClusterLeases through the dynamic client), cluster-wide or in one
// namespace. Objects are cut down to the fields leaseguard reads before the
// informer caches them, so 10,000 leases cost little memory, and every
// delivery that carries a new resourceVersion is reported as a write.
package leasewatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/internal/top/leasetraffic"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
)

// Sink receives what the informers deliver (leasetraffic.Aggregator).
type Sink interface {
	Seed(o *leasetraffic.Observation)
	Observe(o *leasetraffic.Observation, at time.Time)
	Delete(res leaseobject.Resource, namespace, name string)
	Start(now time.Time)
}

// Options say what to watch.
type Options struct {
	Config *rest.Config
	// Namespace limits the watches to one namespace; all when empty.
	Namespace string
	// Resources to watch; both when empty.
	Resources []leaseobject.Resource
	// Now is the clock of observations; time.Now when nil.
	Now func() time.Time
}

// Status tells what is being watched and the last watch error.
type Status struct {
	mu sync.Mutex
	// Watching lists the resources watched; Skipped explains those that
	// are not (the MultiClusterLease CRD is not installed).
	Watching []leaseobject.Resource
	Skipped  []string
	lastErr  string
	errAt    time.Time
}

// LastError returns the last watch error and when it happened.
func (s *Status) LastError() (string, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr, s.errAt
}

func (s *Status) setError(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastErr, s.errAt = err.Error(), time.Now()
}

// Source is one resource to watch and where its list and watch come from.
type Source struct {
	Resource      leaseobject.Resource
	ListerWatcher cache.ListerWatcher
	// Example is the type the list-watch returns (*coordinationv1.Lease or
	// *unstructured.Unstructured).
	Example runtime.Object
}

// Start checks access, starts the informers and returns once they have
// listed every lease (the sink is then started). They run until ctx ends.
func Start(ctx context.Context, o Options, sink Sink) (*Status, error) {
	resources := o.Resources
	if len(resources) == 0 {
		resources = []leaseobject.Resource{leaseobject.Leases, leaseobject.MultiClusterLeases}
	}
	var sources []Source
	var skipped []string
	for _, res := range resources {
		lw, example, err := listWatch(ctx, o, res)
		if errors.Is(err, errNoCRD) {
			skipped = append(skipped, "multiclusterleases: the MultiClusterLease CRD ("+mclv1alpha1.Resource+"."+mclv1alpha1.Group+") is not installed")
			continue
		}
		if err != nil {
			return nil, err
		}
		sources = append(sources, Source{Resource: res, ListerWatcher: lw, Example: example})
	}
	st, err := StartSources(ctx, sources, sink, o.Now)
	if err != nil {
		return nil, err
	}
	st.Skipped = skipped
	return st, nil
}

// StartSources runs one informer per source into sink and returns once they
// have listed (the sink is then started). now is the clock of observations
// (time.Now when nil).
func StartSources(ctx context.Context, sources []Source, sink Sink, now func() time.Time) (*Status, error) {
	if now == nil {
		now = time.Now
	}
	st := &Status{}
	var informers []cache.SharedIndexInformer
	for _, src := range sources {
		res := src.Resource
		inf := cache.NewSharedIndexInformerWithOptions(src.ListerWatcher, src.Example, cache.SharedIndexInformerOptions{})
		if err := inf.SetTransform(transform(res)); err != nil {
			return nil, err
		}
		if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			if !errors.Is(err, context.Canceled) {
				st.setError(fmt.Errorf("watching %s: %w", res, err))
			}
		}); err != nil {
			return nil, err
		}
		if _, err := inf.AddEventHandler(handler(res, sink, now)); err != nil {
			return nil, err
		}
		informers = append(informers, inf)
		st.Watching = append(st.Watching, res)
	}
	synced := make([]cache.InformerSynced, 0, len(informers))
	for _, inf := range informers {
		go inf.RunWithContext(ctx)
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil, fmt.Errorf("listing leases: %w", context.Cause(ctx))
	}
	sink.Start(now())
	return st, nil
}

var errNoCRD = errors.New("CRD not installed")

// listWatch builds the list-watch of one resource after checking that the
// caller may list it, so a missing permission is an error naming it rather
// than an informer retrying for ever.
func listWatch(ctx context.Context, o Options, res leaseobject.Resource) (cache.ListerWatcher, runtime.Object, error) {
	where := "in all namespaces"
	if o.Namespace != "" {
		where = "in namespace " + o.Namespace
	}
	switch res {
	case leaseobject.Leases:
		cfg := rest.CopyConfig(o.Config)
		// Protobuf halves the cost of decoding thousands of lease events a second.
		cfg.ContentType = runtime.ContentTypeProtobuf
		cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, nil, err
		}
		leases := cs.CoordinationV1().Leases(o.Namespace)
		if _, err := leases.List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			return nil, nil, accessError("leases.coordination.k8s.io", where, err)
		}
		return &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				return leases.List(ctx, opts)
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				return leases.Watch(ctx, opts)
			},
		}, &coordinationv1.Lease{}, nil
	case leaseobject.MultiClusterLeases:
		disc, err := discovery.NewDiscoveryClientForConfig(o.Config)
		if err != nil {
			return nil, nil, err
		}
		gv := schema.GroupVersion{Group: mclv1alpha1.Group, Version: mclv1alpha1.Version}.String()
		if _, err := disc.ServerResourcesForGroupVersion(gv); apierrors.IsNotFound(err) {
			return nil, nil, errNoCRD
		} else if err != nil {
			return nil, nil, fmt.Errorf("discovering %s: %w", gv, err)
		}
		dyn, err := dynamic.NewForConfig(o.Config)
		if err != nil {
			return nil, nil, err
		}
		mcls := dyn.Resource(mclv1alpha1.GroupVersionResource).Namespace(o.Namespace)
		if _, err := mcls.List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			return nil, nil, accessError(mclv1alpha1.Resource+"."+mclv1alpha1.Group, where, err)
		}
		return &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				return mcls.List(ctx, opts)
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				return mcls.Watch(ctx, opts)
			},
		}, &unstructured.Unstructured{}, nil
	}
	return nil, nil, fmt.Errorf("resource %q: want leases or multiclusterleases", res)
}

func accessError(resource, where string, err error) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("cannot list %s %s: leaseguard top needs list and watch on it: %w", resource, where, err)
	}
	return fmt.Errorf("listing %s %s: %w", resource, where, err)
}

func handler(res leaseobject.Resource, sink Sink, now func() time.Time) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			o, ok := obj.(*observed)
			if !ok {
				return
			}
			if initial {
				sink.Seed(&o.obs)
				return
			}
			sink.Observe(&o.obs, now())
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok := newObj.(*observed)
			if !ok {
				return
			}
			if prev, ok := oldObj.(*observed); ok && prev.obs.ResourceVersion == o.obs.ResourceVersion {
				return // a re-list delivered the same state
			}
			sink.Observe(&o.obs, now())
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if o, ok := obj.(*observed); ok {
				sink.Delete(res, o.Namespace, o.Name)
			}
		},
	}
}
