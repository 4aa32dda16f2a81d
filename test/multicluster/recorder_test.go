package multicluster

import (
	"context"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/test/multicluster/kccmanager"
)

var leasesGVR = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}

// write is one write that reached storage, as a watch saw it.
type write struct {
	at       time.Time
	resource string // mclv1alpha1.Resource or "leases"
	name     string
	version  string
	// For the MultiClusterLease: whether the write changed the spec (the
	// generation went up: a candidate's write) and the designated manager
	// the stored object names.
	spec       bool
	designated string
	renewTime  time.Time
}

// recorder keeps every stored write to the leases of one cluster's lease
// namespace, from watches started before the managers.
type recorder struct {
	mu     sync.Mutex
	writes []write
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// startRecorder returns once it has listed the current state, so every
// write after it is seen.
func startRecorder(c *cluster) *recorder {
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{cancel: cancel}
	for _, gvr := range []schema.GroupVersionResource{mclv1alpha1.GroupVersionResource, leasesGVR} {
		client := c.dyn.Resource(gvr).Namespace(systemNS)
		list, err := client.List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		r.done.Add(1)
		go func() {
			defer r.done.Done()
			defer GinkgoRecover()
			r.watch(ctx, client, gvr, list)
		}()
	}
	return r
}

// watch follows gvr from list on, resuming after the API server closes the
// stream.
func (r *recorder) watch(ctx context.Context, client dynamic.ResourceInterface, gvr schema.GroupVersionResource, list *unstructured.UnstructuredList) {
	version := list.GetResourceVersion()
	generations := map[string]int64{}
	for _, item := range list.Items {
		generations[item.GetName()] = item.GetGeneration()
	}
	for ctx.Err() == nil {
		w, err := client.Watch(ctx, metav1.ListOptions{ResourceVersion: version, AllowWatchBookmarks: true})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue // an error event: the stream ends and is resumed
			}
			version = u.GetResourceVersion()
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			wr := write{at: time.Now(), resource: gvr.Resource, name: u.GetName(), version: version}
			if gvr == mclv1alpha1.GroupVersionResource {
				// A deletion (the deletionTimestamp bumps the generation
				// too) is no candidate's write.
				wr.spec = u.GetDeletionTimestamp() == nil && (ev.Type == watch.Added || u.GetGeneration() > generations[u.GetName()])
				wr.designated = u.GetAnnotations()[kccmanager.DesignationAnnotation]
				if s, ok, _ := unstructured.NestedString(u.Object, "spec", "renewTime"); ok {
					wr.renewTime, _ = time.Parse(time.RFC3339Nano, s)
				}
				generations[u.GetName()] = u.GetGeneration()
			}
			r.mu.Lock()
			r.writes = append(r.writes, wr)
			r.mu.Unlock()
		}
		w.Stop()
	}
}

func (r *recorder) stop() {
	r.cancel()
	r.done.Wait()
}

// between returns the writes stored in [from, to).
func (r *recorder) between(from, to time.Time) []write {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []write
	for _, w := range r.writes {
		if !w.at.Before(from) && w.at.Before(to) {
			out = append(out, w)
		}
	}
	return out
}

// writeCounts are the stored writes of a window, by kind.
type writeCounts struct {
	mclSpec, mclOther, leases int
}

func (w writeCounts) total() int { return w.mclSpec + w.mclOther + w.leases }

func countWrites(ws []write) writeCounts {
	var c writeCounts
	for _, w := range ws {
		switch {
		case w.resource == leasesGVR.Resource:
			c.leases++
		case w.spec:
			c.mclSpec++
		default:
			c.mclOther++
		}
	}
	return c
}
