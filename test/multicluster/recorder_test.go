package multicluster

import (
	"context"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/test/multicluster/kccmanager"
)

// write is one write to the MultiClusterLease that reached storage, as a
// watch saw it.
type write struct {
	at         time.Time
	version    string
	generation int64
	// spec: the write changed the spec (the generation went up: a
	// candidate's write), not the status or the metadata.
	spec bool
	// designated is the manager the stored object names; renewTime is the
	// stored spec.renewTime as written, by which the writer is found.
	designated string
	renewTime  string
	// managers are the field managers of the stored object.
	managers []string
}

// recorder keeps every stored write to one cluster's MultiClusterLeases,
// from a watch started before the managers.
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
	client := c.dyn.Resource(mclv1alpha1.GroupVersionResource).Namespace(systemNS)
	list, err := client.List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	r.done.Add(1)
	go func() {
		defer r.done.Done()
		defer GinkgoRecover()
		r.watch(ctx, client, list)
	}()
	return r
}

// watch follows the MultiClusterLeases from list on, resuming after the API
// server closes the stream.
func (r *recorder) watch(ctx context.Context, client dynamic.ResourceInterface, list *unstructured.UnstructuredList) {
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
				if ev.Type == watch.Deleted {
					delete(generations, u.GetName())
				}
				continue
			}
			wr := write{at: time.Now(), version: version, generation: u.GetGeneration()}
			// A deletion (the deletionTimestamp bumps the generation too) is
			// no candidate's write.
			wr.spec = u.GetDeletionTimestamp() == nil && u.GetGeneration() > generations[u.GetName()]
			wr.designated = u.GetAnnotations()[kccmanager.DesignationAnnotation]
			wr.renewTime, _, _ = unstructured.NestedString(u.Object, "spec", "renewTime")
			for _, mf := range u.GetManagedFields() {
				wr.managers = append(wr.managers, mf.Manager)
			}
			generations[u.GetName()] = u.GetGeneration()
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

// specWrites returns the spec writes stored in [from, to).
func (r *recorder) specWrites(from, to time.Time) []write {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []write
	for _, w := range r.writes {
		if w.spec && !w.at.Before(from) && w.at.Before(to) {
			out = append(out, w)
		}
	}
	return out
}

// storedWrites counts every write stored in [from, to): spec, status and
// metadata.
func (r *recorder) storedWrites(from, to time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, w := range r.writes {
		if !w.at.Before(from) && w.at.Before(to) {
			n++
		}
	}
	return n
}

// writerOf returns the manager (any incarnation) that sent w's stored
// spec.renewTime, or nil.
func writerOf(f *fleet, c *cluster, w write) *kccmanager.Manager {
	for _, m := range f.all(c) {
		if m.Sent(w.renewTime) {
			return m
		}
	}
	return nil
}
