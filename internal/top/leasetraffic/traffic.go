// Package leasetraffic aggregates the lease writes a watcher observes into
// what `leaseguard top` shows: per lease, the write rate over a sliding
// window, the observed renew interval, holder and designation, transitions,
// time to expiry, the field managers that wrote it and whether it is
// contested; totals per namespace and for the cluster; and, with a
// Projector, what a policy would have done with each write.
//
// It is fed by informers (one watch per resource) and read by a UI, from
// different goroutines. Memory is bounded per lease: a ring of at most
// MaxEvents small event records and a fixed number of writer slots, so a
// cluster of 10,000 leases renewed every 2 s costs a few MiB and observing
// a write does not allocate once a lease's ring has grown.
package leasetraffic

import (
	"sync"
	"time"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
)

// MaxEvents bounds the events kept per lease. A lease written more often
// than MaxEvents per window has its rate estimated from the span of its
// last MaxEvents writes.
const MaxEvents = 64

// MaxWriters bounds the field managers remembered per lease; further ones
// are counted under OtherWriters.
const MaxWriters = 6

// OtherWriters names the writers past MaxWriters of one lease.
const OtherWriters = "(others)"

const minEvents = 4

// ManagedEntry is the part of a metadata.managedFields entry that tells who
// wrote: the field manager, the subresource, and the time the API server
// stamped (whole seconds).
type ManagedEntry struct {
	Manager     string
	Subresource string
	Time        time.Time
}

// Observation is one state of a lease as a watch delivered it.
type Observation struct {
	Resource        leaseobject.Resource
	ResourceVersion string
	// Object holds the fields the decision core reads.
	Object leaseobject.Object
	// Transitions is spec.leaseTransitions of a Lease, or
	// status.globalLeaseTransitions of a MultiClusterLease.
	Transitions int32
	// Managers are the managedFields entries, at most MaxWriters of them.
	Managers []ManagedEntry
}

// Key identifies a lease.
type Key struct {
	Resource  leaseobject.Resource
	Namespace string
	Name      string
}

// Projection is what a policy does with one observed write.
type Projection struct {
	// Judged is false when the write was not judged: no rule selects the
	// object, the rule names no writer, or the write was to the status.
	Judged    bool
	Rule      string
	Verdict   policy.Verdict
	Invariant policy.Invariant
	// Code is the HTTP status of a denial: 403 refuses, 429 holds back.
	Code int32
	// Basis says how the writer was assumed.
	Basis WriterBasis
	// Coalesced: the write is an early renewal the policy coalesces
	// (coalesceRenewals): acknowledged, never stored, never decided.
	Coalesced bool
}

// Projector judges an observed write: the stored object before it (nil for
// a creation), the object it stored, the time it was observed, and whether
// it was a status write.
type Projector interface {
	Project(res leaseobject.Resource, old, new *leaseobject.Object, at time.Time, status bool) Projection
}

// event is one observed write, kept small: the ring of a lease holds these.
type event struct {
	at       int64 // observation time, Unix nanoseconds
	renewGap int32 // milliseconds between successive renewTimes of one holder; 0 if not a renewal
	writer   uint8 // index into lease.writers; noWriter when unknown
	outcome  uint8 // index into Aggregator.outcomes; 0 when not judged
	flags    uint8
}

const (
	noWriter uint8 = 255

	flagHolderChanged uint8 = 1 << iota
	flagRenewBackwards
)

type writerSlot struct {
	manager     string
	subresource string
}

type lease struct {
	obj         leaseobject.Object
	rv          string
	transitions int32
	managers    [MaxWriters]ManagedEntry
	nManagers   int
	writers     [MaxWriters + 1]writerSlot // the last slot is OtherWriters
	nWriters    int
	events      []event // ring: oldest at head
	head, n     int
	writes      int64 // since the start
}

// outcomeKey is one distinct projected result.
type outcomeKey struct {
	rule      string
	verdict   policy.Verdict
	invariant policy.Invariant
	code      int32
	basis     WriterBasis
	coalesced bool
}

// Options configure an Aggregator.
type Options struct {
	// Window is the sliding window of rates; 30s when zero.
	Window time.Duration
	// Projector, when set, judges every observed write.
	Projector Projector
}

// Aggregator holds the observed traffic. Its methods are safe for
// concurrent use.
type Aggregator struct {
	window    time.Duration
	projector Projector

	mu      sync.Mutex
	started time.Time
	leases  map[Key]*lease
	// outcomes interns projected results; index 0 is "not judged".
	outcomes     []outcomeKey
	outcomeIndex map[outcomeKey]uint8
	// projected counts each outcome since the start.
	projected []int64
	writes    int64
	deleted   int64
}

// New returns an empty aggregator.
func New(o Options) *Aggregator {
	if o.Window <= 0 {
		o.Window = 30 * time.Second
	}
	return &Aggregator{
		window:       o.Window,
		projector:    o.Projector,
		leases:       map[Key]*lease{},
		outcomes:     []outcomeKey{{}},
		outcomeIndex: map[outcomeKey]uint8{},
		projected:    []int64{0},
	}
}

// Window returns the sliding window of rates.
func (a *Aggregator) Window() time.Duration { return a.window }

// Start marks when observation began (the watches have listed every lease):
// rates are averaged over the window or the time since then, whichever is
// shorter.
func (a *Aggregator) Start(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.started = now
}

// Seed records a lease that existed before observation began (an item of
// the initial list): its state, not a write.
func (a *Aggregator) Seed(o *Observation) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := Key{o.Resource, o.Object.Namespace, o.Object.Name}
	l := a.leases[k]
	if l == nil {
		l = &lease{}
		a.leases[k] = l
	}
	l.set(o)
}

// Observe records a write observed at time at: a lease created, or changed
// (a new resourceVersion). A delivery of an unchanged resourceVersion (a
// re-list) is not a write and is ignored.
func (a *Aggregator) Observe(o *Observation, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := Key{o.Resource, o.Object.Namespace, o.Object.Name}
	l := a.leases[k]
	created := l == nil
	if created {
		l = &lease{}
		a.leases[k] = l
	} else if l.rv == o.ResourceVersion {
		return
	}
	ev := event{at: at.UnixNano(), writer: noWriter}
	status := false
	if w, ok := l.writer(o.Managers); ok {
		ev.writer = l.writerIndex(w.Manager, w.Subresource)
		status = w.Subresource == leaseobject.StatusSubresource
	}
	var old *leaseobject.Object
	if !created {
		old = &l.obj
		prev, cur := &l.obj.Spec, &o.Object.Spec
		switch {
		case prev.Holder != cur.Holder:
			ev.flags |= flagHolderChanged
		case cur.RenewTime.Before(prev.RenewTime):
			ev.flags |= flagRenewBackwards
		case cur.Holder != "" && !prev.RenewTime.IsZero() && cur.RenewTime.After(prev.RenewTime):
			ev.renewGap = int32(min(cur.RenewTime.Sub(prev.RenewTime)/time.Millisecond, 1<<31-1))
		}
	}
	if a.projector != nil {
		p := a.projector.Project(o.Resource, old, &o.Object, at, status)
		if p.Judged {
			ev.outcome = a.intern(outcomeKey{p.Rule, p.Verdict, p.Invariant, p.Code, p.Basis, p.Coalesced})
			a.projected[ev.outcome]++
		}
	}
	l.set(o)
	l.push(ev)
	l.writes++
	a.writes++
}

// Delete forgets a lease that was deleted.
func (a *Aggregator) Delete(res leaseobject.Resource, namespace, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := Key{res, namespace, name}
	if _, ok := a.leases[k]; ok {
		delete(a.leases, k)
		a.deleted++
	}
}

// intern returns the index of an outcome, adding it when new. Outcomes are
// bounded by rules × verdicts × invariants; past 255 they share the last.
func (a *Aggregator) intern(k outcomeKey) uint8 {
	if i, ok := a.outcomeIndex[k]; ok {
		return i
	}
	if len(a.outcomes) == 255 {
		return 254
	}
	i := uint8(len(a.outcomes))
	a.outcomes = append(a.outcomes, k)
	a.projected = append(a.projected, 0)
	a.outcomeIndex[k] = i
	return i
}

func (l *lease) set(o *Observation) {
	l.obj = o.Object
	l.rv = o.ResourceVersion
	l.transitions = o.Transitions
	l.nManagers = copy(l.managers[:], o.Managers)
}

// writer tells which field manager made the write that produced managers:
// the entry whose time advanced over the previous state (the newest, when
// several did); when none did (a second write within the same second), the
// newest entry.
func (l *lease) writer(managers []ManagedEntry) (ManagedEntry, bool) {
	var best ManagedEntry
	found, advanced := false, false
	for _, m := range managers {
		adv := true
		for _, p := range l.managers[:l.nManagers] {
			if p.Manager == m.Manager && p.Subresource == m.Subresource {
				adv = m.Time.After(p.Time)
				break
			}
		}
		better := !found || (adv && !advanced) || (adv == advanced && m.Time.After(best.Time))
		if better {
			best, found, advanced = m, true, adv
		}
	}
	return best, found
}

func (l *lease) writerIndex(manager, subresource string) uint8 {
	for i := 0; i < l.nWriters; i++ {
		if l.writers[i].manager == manager && l.writers[i].subresource == subresource {
			return uint8(i)
		}
	}
	if l.nWriters == MaxWriters {
		l.writers[MaxWriters] = writerSlot{manager: OtherWriters}
		return MaxWriters
	}
	l.writers[l.nWriters] = writerSlot{manager, subresource}
	l.nWriters++
	return uint8(l.nWriters - 1)
}

// push appends to the ring, growing it up to MaxEvents and then overwriting
// the oldest event.
func (l *lease) push(ev event) {
	if l.n == len(l.events) && len(l.events) < MaxEvents {
		grown := make([]event, max(minEvents, min(2*len(l.events), MaxEvents)))
		for i := 0; i < l.n; i++ {
			grown[i] = l.events[(l.head+i)%len(l.events)]
		}
		l.events, l.head = grown, 0
	}
	if l.n < len(l.events) {
		l.events[(l.head+l.n)%len(l.events)] = ev
		l.n++
		return
	}
	l.events[l.head] = ev
	l.head = (l.head + 1) % len(l.events)
}

// each calls f for the events observed after since, oldest first, and tells
// whether older events were overwritten while still inside the window.
func (l *lease) each(since int64, f func(*event)) (truncated bool) {
	for i := 0; i < l.n; i++ {
		ev := &l.events[(l.head+i)%len(l.events)]
		if ev.at <= since {
			continue
		}
		if i == 0 && l.n == MaxEvents && l.writes > MaxEvents {
			truncated = true
		}
		f(ev)
	}
	return truncated
}

// WriterBasis says how the projector derived the writer of an object that
// a watcher saw stored (it does not see who wrote it).
type WriterBasis string

// The bases of an assumed writer, from the most to the least certain.
const (
	// WriterDesignated: the designation annotation on the object names it.
	WriterDesignated WriterBasis = "designation"
	// WriterFixed: the rule's fixed designation names it.
	WriterFixed WriterBasis = "fixed"
	// WriterBound: the rule's bind template maps the lease name to it.
	WriterBound WriterBasis = "bind"
	// WriterPattern: only a managers pattern is known; the username is the
	// pattern itself, so the real writer stays unknown.
	WriterPattern WriterBasis = "pattern"
)
