package main

import (
	"container/heap"
	"fmt"
	"math/rand"
	"net/http"
	"runtime"
	"syscall"
	"time"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
)

// The core simulation runs the decision core, as the webhook and the
// coalescing policy would, against a fleet of simulated clients on a
// virtual clock: no API server, so that 10,000 managers fit on this machine.
// Each manager is two actors: a client-go elector renewing its bound Lease,
// and a Config Connector candidate merge-patching the shared
// MultiClusterLease.

// actor is one simulated client and, server side, what it writes.
type actor struct {
	shared       bool // a MultiClusterLease candidate, else a Lease elector
	caller       leaseobject.Caller
	body         leaseobject.Object // the request in flight (re-sent unchanged on a 429)
	attemptStart time.Time
	retries      int
	arrive       time.Time // when the pending request reaches the server
	stored       *leaseobject.Object
	lastWrite    time.Time
}

// coreStats is what one mode's run saw, counted from t=0.
type coreStats struct {
	mode                 string
	duration             time.Duration
	leaseWrites          int64
	mclWrites            int64
	leaseRequests        map[int]int64 // by HTTP status
	mclRequests          map[int]int64
	coalesced            int64
	lost                 int64 // renew attempts of an elector past its renew deadline
	maxLeaseGap          time.Duration
	decisions            int64
	cpu                  time.Duration
	writesPerSec         []float64
	decideWall, wall     time.Duration
	allocPerDecision     float64
	stateBytesPerManager int64
}

type actorQueue struct {
	idx []int32
	as  []actor
}

func (q *actorQueue) Len() int           { return len(q.idx) }
func (q *actorQueue) Less(a, b int) bool { return q.as[q.idx[a]].arrive.Before(q.as[q.idx[b]].arrive) }
func (q *actorQueue) Swap(a, b int)      { q.idx[a], q.idx[b] = q.idx[b], q.idx[a] }
func (q *actorQueue) Push(x any)         { q.idx = append(q.idx, x.(int32)) }
func (q *actorQueue) Pop() any {
	n := len(q.idx) - 1
	x := q.idx[n]
	q.idx = q.idx[:n]
	return x
}

// retryAfter is what client-go sleeps on a 429: the webhook's Retry-After,
// which the API server sends in whole seconds, rounded up, at least one.
func retryAfter(d time.Duration) time.Duration {
	s := (d + time.Second - 1) / time.Second
	if s < 1 {
		s = 1
	}
	return s * time.Second
}

// simulate runs one mode.
func simulate(m mode, o options) (*coreStats, error) {
	p, err := m.compile()
	if err != nil {
		return nil, err
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	n := o.coreManagers
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	first := start.Add(-o.coreWarmup)
	end := start.Add(o.coreDuration)
	rng := rand.New(rand.NewSource(o.seed))
	oneWay := func() time.Duration {
		half := int64(o.coreRTT / 2)
		if half == 0 {
			return 0
		}
		return time.Duration(half/2 + rng.Int63n(half+1))
	}
	st := &coreStats{mode: m.name, duration: o.coreDuration, leaseRequests: map[int]int64{}, mclRequests: map[int]int64{},
		writesPerSec: make([]float64, int(o.coreDuration/time.Second))}
	q := &actorQueue{idx: make([]int32, 0, 2*n), as: make([]actor, 2*n)}
	shared := &leaseobject.Object{}
	sharedExists := false
	for i := 0; i < n; i++ {
		id := managerID(i)
		pod := podName(id)
		caller := leaseobject.Caller{Username: managerPrefix + id, PodName: pod}
		// Electors and candidates start at random during a warm-up that is
		// not counted, so that the fleet renews at random phases.
		t := first.Add(time.Duration(rng.Int63n(int64(o.coreWarmup))))
		e := &q.as[2*i]
		e.caller, e.attemptStart, e.arrive = caller, t, t.Add(oneWay())
		e.body = leaseobject.Object{Namespace: simNamespace, Name: leasePrefix + id,
			Spec: leaseobject.Spec{Holder: pod + "_0f8c2d1e", AcquireTime: t, RenewTime: t, LeaseDuration: leaseDuration}}
		e.stored = &leaseobject.Object{}
		c := &q.as[2*i+1]
		c.shared, c.caller = true, caller
		tc := first.Add(time.Duration(rng.Int63n(int64(o.coreWarmup))))
		c.attemptStart, c.arrive = tc, tc.Add(oneWay())
		c.body = leaseobject.Object{Namespace: simNamespace, Name: sharedMCL,
			Spec: leaseobject.Spec{Holder: clusterID, RenewTime: tc, LeaseDuration: leaseDuration, RetryPeriod: leaseDuration}}
		c.stored = shared
		q.idx = append(q.idx, int32(2*i), int32(2*i+1))
	}
	heap.Init(q)
	var setUp runtime.MemStats
	runtime.ReadMemStats(&setUp)
	st.stateBytesPerManager = int64(setUp.HeapAlloc-before.HeapAlloc) / int64(n)

	var ru0, ru1 syscall.Rusage
	wall0 := time.Now()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	req := leaseobject.Request{}
	for q.Len() > 0 {
		i := q.idx[0]
		a := &q.as[i]
		now := a.arrive
		if !now.Before(end) {
			heap.Pop(q)
			continue
		}
		counted := !now.Before(start)
		exists := a.stored.Name != ""
		if a.shared {
			exists = sharedExists
		}
		// The API server stamps the write's managedFields time.
		body := a.body
		body.RenewWrite = now.Truncate(time.Second)
		req = leaseobject.Request{Caller: a.caller, Now: now, New: &body, Resource: leaseobject.Leases}
		if a.shared {
			req.Resource = leaseobject.MultiClusterLeases
			// A merge patch of the four spec fields: the stored metadata
			// (the designation) stays.
			if exists {
				body.Designated, body.HasDesignation = shared.Designated, shared.HasDesignation
			}
		}
		req.Operation = leaseobject.Create
		if exists {
			req.Operation, req.Old = leaseobject.Update, a.stored
		}
		code, stored, retryIn := http.StatusOK, true, time.Duration(0)
		if p != nil {
			if user, ok := policy.Designate(p, &req); ok {
				body.Designated, body.HasDesignation = user, true
			}
			t0 := time.Now()
			switch {
			case policy.Coalesce(p, &req):
				stored = false
				if counted {
					st.coalesced++
				}
			default:
				d := policy.Decide(p, &req)
				if counted {
					st.decisions++
				}
				if d.Verdict == policy.Deny {
					stored, code, retryIn = false, int(d.Code), d.RetryAfter
				}
			}
			st.decideWall += time.Since(t0)
		}
		if stored && a.shared && exists && body.Spec.Equal(&shared.Spec) && body.Designated == shared.Designated {
			stored = false // a write that changes nothing is not stored
		}
		sec := int(now.Sub(start) / time.Second)
		if counted {
			if a.shared {
				st.mclRequests[code]++
			} else {
				st.leaseRequests[code]++
			}
		}
		if stored {
			if counted {
				if a.shared {
					st.mclWrites++
				} else {
					st.leaseWrites++
					if !a.lastWrite.IsZero() && now.Sub(a.lastWrite) > st.maxLeaseGap {
						st.maxLeaseGap = now.Sub(a.lastWrite)
					}
				}
				st.writesPerSec[sec]++
			}
			if a.shared {
				*shared, sharedExists = body, true
			} else {
				*a.stored = body
			}
			a.lastWrite = now
		}
		switch {
		case code == http.StatusTooManyRequests && a.retries < clientRetries:
			// client-go's REST client sleeps Retry-After and sends the same
			// body again.
			a.retries++
			a.arrive = now.Add(oneWay() + retryAfter(retryIn) + oneWay())
			if !a.shared && a.arrive.Sub(a.attemptStart) >= renewDeadline && counted {
				st.lost++
			}
		default:
			// The answer (success, a refusal, or the last retry) comes back;
			// the next attempt starts a retry period later, with renewTime
			// its clock.
			a.retries = 0
			next := now.Add(oneWay() + o.retryPeriod)
			a.body.Spec.RenewTime = next
			a.attemptStart = next
			a.arrive = next.Add(oneWay())
		}
		heap.Fix(q, 0)
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	st.wall = time.Since(wall0)
	st.cpu = time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()) - time.Duration(ru0.Utime.Nano()+ru0.Stime.Nano())
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if st.decisions > 0 {
		st.allocPerDecision = float64(after.TotalAlloc-setUp.TotalAlloc) / float64(st.decisions)
	}
	runtime.KeepAlive(q)
	return st, nil
}

func (s *coreStats) perSecond(n int64) float64 { return float64(n) / s.duration.Seconds() }

func sum(m map[int]int64) int64 {
	var t int64
	for _, v := range m {
		t += v
	}
	return t
}

func runCore(o options) ([]*coreStats, error) {
	var out []*coreStats
	for _, m := range coreModes() {
		progress("core: simulating %d managers, mode %s ...", o.coreManagers, m.name)
		st, err := simulate(m, o)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

func printCore(o options, res []*coreStats) {
	fmt.Printf("## core simulation: the decision core, %d managers, %s of virtual time per mode\n\n", o.coreManagers, o.coreDuration)
	fmt.Printf("Each manager is a client-go elector renewing its bound Lease every %s and a Config Connector candidate merge-patching the shared MultiClusterLease every %s "+
		"(%s round trip); they start at random during a %s warm-up that is not counted. Every watcher receives one event per storage write, so watch events fall as storage writes do.\n\n",
		o.retryPeriod, o.retryPeriod, o.coreRTT, o.coreWarmup)
	base := res[0]
	fmt.Println("| mode | storage writes/s (Leases + shared) | × fewer than unguarded | requests/s, Leases | requests/s, shared lease (by status) | × fewer on the shared lease | all lease requests/s | coalesced/s | renew attempts past the deadline | longest gap between stored renewals |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range res {
		writes := s.leaseWrites + s.mclWrites
		fmt.Printf("| %s | %.0f + %.1f | %.2f | %.0f | %.0f (%s) | %.2f | %.0f | %.0f | %d | %s |\n", s.mode,
			s.perSecond(s.leaseWrites), s.perSecond(s.mclWrites), ratio(base.leaseWrites+base.mclWrites, writes),
			s.perSecond(sum(s.leaseRequests)), s.perSecond(sum(s.mclRequests)), byCode(s.mclRequests, s.duration),
			ratio(sum(base.mclRequests), sum(s.mclRequests)), s.perSecond(sum(s.leaseRequests)+sum(s.mclRequests)),
			s.perSecond(s.coalesced), s.lost, s.maxLeaseGap.Round(time.Millisecond))
	}
	fmt.Println()
	fmt.Println("| mode | decisions | CPU per 1,000 requests (whole loop) | decide + coalesce per request | bytes allocated per decision | simulated state per manager |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, s := range res {
		reqs := sum(s.leaseRequests) + sum(s.mclRequests)
		fmt.Printf("| %s | %d | %s | %s | %.0f B | %d B |\n", s.mode, s.decisions, perThousand(s.cpu, reqs),
			(s.decideWall / time.Duration(max(reqs, 1))).Round(time.Nanosecond), s.allocPerDecision, s.stateBytesPerManager)
	}
	fmt.Println()
}

func ratio(base, x int64) float64 {
	if x == 0 {
		return 0
	}
	return float64(base) / float64(x)
}

func byCode(m map[int]int64, d time.Duration) string {
	out := ""
	for _, c := range []int{200, 403, 429} {
		if m[c] > 0 {
			if out != "" {
				out += ", "
			}
			out += fmt.Sprintf("%d: %s", c, short(float64(m[c])/d.Seconds()))
		}
	}
	return out
}

func perThousand(cpu time.Duration, n int64) string {
	if n == 0 {
		return "n/a"
	}
	per := time.Duration(float64(cpu) * 1000 / float64(n))
	if per >= 10*time.Millisecond {
		return per.Round(time.Millisecond).String()
	}
	return per.Round(time.Microsecond).String()
}
