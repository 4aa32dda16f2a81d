package leasestats

import "container/heap"

// sketch is a space-saving sketch (Metwally, Agrawal, El Abbadi, 2005):
// at most capacity counters; a key not counted yet takes over the smallest
// counter, inheriting its count as its overestimation error. Every key
// seen more than total/capacity times holds a counter, and a counter's
// count - err <= true count <= count. A min-heap keeps the smallest
// counter at hand, so an observation costs O(log capacity).
type sketch[K comparable, V any] struct {
	capacity int
	index    map[K]*entry[K, V]
	heap     entryHeap[K, V]
}

type entry[K comparable, V any] struct {
	key   K
	count int64
	err   int64
	// value holds what is kept per key (per-verdict counts, users); it is
	// reset when the counter changes hands.
	value V
	pos   int
}

func newSketch[K comparable, V any](capacity int) *sketch[K, V] {
	return &sketch[K, V]{capacity: capacity, index: make(map[K]*entry[K, V], capacity)}
}

// observe counts one occurrence of key and returns its entry; reset is true
// when the entry was taken over from another key (its value is stale).
func (s *sketch[K, V]) observe(key K) (e *entry[K, V], reset bool) {
	if e, ok := s.index[key]; ok {
		e.count++
		heap.Fix(&s.heap, e.pos)
		return e, false
	}
	if len(s.heap) < s.capacity {
		e := &entry[K, V]{key: key, count: 1}
		heap.Push(&s.heap, e)
		s.index[key] = e
		return e, true
	}
	e = s.heap[0]
	delete(s.index, e.key)
	e.key, e.err = key, e.count
	e.count++
	s.index[key] = e
	heap.Fix(&s.heap, 0)
	return e, true
}

type entryHeap[K comparable, V any] []*entry[K, V]

func (h entryHeap[K, V]) Len() int           { return len(h) }
func (h entryHeap[K, V]) Less(i, j int) bool { return h[i].count < h[j].count }
func (h entryHeap[K, V]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}
func (h *entryHeap[K, V]) Push(x any) {
	e := x.(*entry[K, V])
	e.pos = len(*h)
	*h = append(*h, e)
}
func (h *entryHeap[K, V]) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
