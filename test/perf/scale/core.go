package main

import (
	"container/heap"
	"fmt"
	"math/rand"
	"net/http"
	"runtime"
	"syscall"
	"time"

	"github.com/leaseguard/leaseguard/webhook/policy"
	"github.com/leaseguard/leaseguard/webhook/policyfile"
)

// The namespace-mode shape of docs/design.md §1/§3: every manager runs as its own
// service account and writes only the Lease bound to it, holding it from its
// pod.
const (
	simNamespace  = "cnrm-system"
	managerPrefix = "system:serviceaccount:cnrm-system:cnrm-controller-manager-"
	leasePrefix   = "kcc-leader-"
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
)

// policyYAML is the rule the managers are held to; without an interval it
// is the baseline (every check but I6 still runs).
func policyYAML(interval time.Duration) string {
	s := `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
clockSkew: 2s
rules:
- name: kcc-namespace-leases
  resources: [leases]
  namespaces: [` + simNamespace + `]
  bind:
    manager: "` + managerPrefix + `{ns}"
    lease: "` + leasePrefix + `{ns}"
  holderBinding: pod
  enforcement: deny
`
	if interval > 0 {
		s += "  minRenewInterval: " + interval.String() + "\n"
	}
	return s
}

func managerID(i int) string   { return fmt.Sprintf("team-%05d", i) }
func podName(id string) string { return "cnrm-controller-manager-" + id + "-0" }

// coreManager is one simulated manager and, on the server side, its stored
// Lease.
type coreManager struct {
	caller       policy.Caller
	stored       policy.Object
	exists       bool
	body         policy.Object // the request in flight (re-sent unchanged on a 429)
	attemptStart time.Time     // when the current renew attempt began (client clock)
	lastAdmit    time.Time
	arrive       time.Time // when the pending request reaches the server
}

// corePhase is the outcome of one simulated phase.
type corePhase struct {
	name            string
	decisions       int64 // from t=0
	allDecisions    int64 // warm-up included: what the CPU and memory figures divide by
	admitted        int64 // storage writes
	denied          int64 // I6 429s
	lost            int64 // renew attempts that ran past the renew deadline
	maxGap          time.Duration
	cpu             time.Duration // user+sys of the decide loop
	decideWall      time.Duration // time inside policy.Decide alone
	wall            time.Duration
	allocBytes      uint64
	heapInuse       uint64
	stateBytes      uint64    // the simulated managers and their stored Leases
	writesPerSec    []float64 // per virtual second
	deniedPerSec    []float64
	virtualDuration time.Duration
}

func (p *corePhase) writesPerSecond() []float64 { return p.writesPerSec }

// coreResult holds both phases.
type coreResult struct{ free, limited corePhase }

func (r *coreResult) predictedFree(o options) float64 {
	return float64(o.coreManagers) * float64(time.Second) / float64(o.retryPeriod+o.coreRTT)
}

func (r *coreResult) predictedLimited(o options) float64 {
	return r.predictedFree(o) / predictedFactor(o.interval, o.retryPeriod)
}

func runCore(o options) (*coreResult, error) {
	free, err := policyfile.Parse([]byte(policyYAML(0)), policy.CompileOptions{OwnNamespace: "leaseguard-system"})
	if err != nil {
		return nil, fmt.Errorf("baseline policy: %w", err)
	}
	limited, err := policyfile.Parse([]byte(policyYAML(o.interval)), policy.CompileOptions{OwnNamespace: "leaseguard-system"})
	if err != nil {
		return nil, fmt.Errorf("rate-limited policy: %w", err)
	}
	res := &coreResult{}
	if res.free, err = simulate("without minRenewInterval", free, o); err != nil {
		return nil, err
	}
	if res.limited, err = simulate("with minRenewInterval "+o.interval.String(), limited, o); err != nil {
		return nil, err
	}
	return res, nil
}

// eventQueue orders managers by the arrival time of their next request.
type eventQueue struct {
	idx []int32
	ms  []coreManager
}

func (q *eventQueue) Len() int { return len(q.idx) }
func (q *eventQueue) Less(a, b int) bool {
	return q.ms[q.idx[a]].arrive.Before(q.ms[q.idx[b]].arrive)
}
func (q *eventQueue) Swap(a, b int) { q.idx[a], q.idx[b] = q.idx[b], q.idx[a] }
func (q *eventQueue) Push(x any)    { q.idx = append(q.idx, x.(int32)) }
func (q *eventQueue) Pop() any {
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

func simulate(name string, p *policy.Policy, o options) (corePhase, error) {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)

	n := o.coreManagers
	// Managers start (create their Lease) at random times during a warm-up
	// that is not counted, so that at t=0 the fleet renews at random phases,
	// as independent pods do.
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	first := start.Add(-o.coreWarmup)
	end := start.Add(o.coreDuration)
	rng := rand.New(rand.NewSource(o.seed))
	// oneWay is a request's or an answer's trip: half the round trip, give
	// or take half of that.
	oneWay := func() time.Duration {
		half := int64(o.coreRTT / 2)
		if half == 0 {
			return 0
		}
		return time.Duration(half/2 + rng.Int63n(half+1))
	}
	seconds := int(o.coreDuration / time.Second)
	ph := corePhase{
		name:            name,
		virtualDuration: o.coreDuration,
		writesPerSec:    make([]float64, seconds),
		deniedPerSec:    make([]float64, seconds),
	}
	q := &eventQueue{idx: make([]int32, 0, n), ms: make([]coreManager, n)}
	for i := range q.ms {
		id := managerID(i)
		pod := podName(id)
		m := &q.ms[i]
		m.caller = policy.Caller{Username: managerPrefix + id, PodName: pod}
		// client-go creates the Lease when it finds none: holder
		// <pod>_<uuid>, acquired and renewed now, 15s, no transition yet.
		t := first.Add(time.Duration(rng.Int63n(int64(o.coreWarmup))))
		m.body = policy.Object{
			Namespace: simNamespace, Name: leasePrefix + id,
			Spec: policy.Spec{Holder: pod + "_0f8c2d1e", AcquireTime: t, RenewTime: t, LeaseDuration: leaseDuration},
		}
		m.attemptStart = t
		m.arrive = t.Add(oneWay())
		q.idx = append(q.idx, int32(i))
	}
	heap.Init(q)

	req := policy.Request{Resource: policy.Leases}
	var setUp runtime.MemStats
	runtime.ReadMemStats(&setUp)
	ph.stateBytes = setUp.HeapAlloc - before.HeapAlloc
	var ru0, ru1 syscall.Rusage
	wall0 := time.Now()
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru0); err != nil {
		return ph, err
	}
	for q.Len() > 0 {
		i := q.idx[0]
		m := &q.ms[i]
		now := m.arrive
		if !now.Before(end) {
			heap.Pop(q)
			continue
		}
		req.Caller = m.caller
		req.Now = now
		req.New = &m.body
		if m.exists {
			req.Operation, req.Old = policy.Update, &m.stored
		} else {
			req.Operation, req.Old = policy.Create, nil
		}
		t0 := time.Now()
		d := policy.Decide(p, &req)
		took := time.Since(t0)
		counted := !now.Before(start)
		sec := int(now.Sub(start) / time.Second)
		ph.decideWall += took
		ph.allDecisions++
		if counted {
			ph.decisions++
		}

		switch {
		case d.Verdict == policy.Allow:
			if counted {
				ph.admitted++
				ph.writesPerSec[sec]++
				if m.exists {
					if gap := now.Sub(m.lastAdmit); gap > ph.maxGap {
						ph.maxGap = gap
					}
				}
			}
			m.stored, m.exists, m.lastAdmit = m.body, true, now
			// The elector gets the answer, waits a retry period and starts the
			// next renew attempt with renewTime = its clock.
			next := now.Add(oneWay() + o.retryPeriod)
			m.body.Spec.RenewTime = next
			m.attemptStart = next
			m.arrive = next.Add(oneWay())
		case d.Invariant == policy.InvariantRenewalRate && d.Code == http.StatusTooManyRequests:
			if counted {
				ph.denied++
				ph.deniedPerSec[sec]++
			}
			// client-go's REST client sleeps Retry-After and re-sends the
			// same body.
			m.arrive = now.Add(oneWay() + retryAfter(d.RetryAfter) + oneWay())
			if m.arrive.Sub(m.attemptStart) >= renewDeadline {
				ph.lost++
			}
		default:
			return ph, fmt.Errorf("%s: manager %d refused unexpectedly: %s", name, i, d.Message)
		}
		heap.Fix(q, 0)
	}
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru1); err != nil {
		return ph, err
	}
	ph.wall = time.Since(wall0)
	ph.cpu = rusageCPU(&ru1) - rusageCPU(&ru0)

	// Live heap: collect first, so that the messages of denials already
	// answered do not count.
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	ph.allocBytes = after.TotalAlloc - setUp.TotalAlloc
	ph.heapInuse = after.HeapInuse
	runtime.KeepAlive(q)
	return ph, nil
}

func rusageCPU(r *syscall.Rusage) time.Duration {
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

func (r *coreResult) print(o options) {
	fmt.Printf("## core mode: policy.Decide, %d managers, %s virtual time per phase\n\n", o.coreManagers, o.coreDuration)
	fmt.Printf("Bound Leases renewed every %s (client-go semantics, %s round trip, +/-50%%), started at random during a %s warm-up that is not counted; minRenewInterval %s in the limited phase.\n\n",
		o.retryPeriod, o.coreRTT, o.coreWarmup, o.interval)
	fmt.Println("| phase | decisions | storage writes/s (mean) | peak second | denied (429)/s | longest gap between writes to one lease | renew attempts past the deadline | CPU per 1,000 decisions (whole loop) | policy.Decide per decision | bytes allocated per decision | heap in use after GC |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, p := range []*corePhase{&r.free, &r.limited} {
		secs := p.virtualDuration.Seconds()
		fmt.Printf("| %s | %d | %.0f | %.0f | %.0f | %s | %d | %s | %s | %.0f B | %.1f MiB |\n",
			p.name, p.decisions, float64(p.admitted)/secs, peak(p.writesPerSec), float64(p.denied)/secs, p.maxGap.Round(time.Millisecond), p.lost,
			perThousand(p.cpu, p.allDecisions), (p.decideWall / time.Duration(p.allDecisions)).Round(time.Nanosecond),
			float64(p.allocBytes)/float64(p.allDecisions), float64(p.heapInuse)/(1<<20))
	}
	fmt.Printf("\nStorage writes fell %.2fx; predicted (i+r)/(2r) = %.2fx. Wall time of the two decide loops: %s and %s. The simulated managers and their stored Leases take %.1f MiB of heap (%d B per manager); heap in use is read after each phase and a GC, with that state alive.\n\n",
		float64(r.free.admitted)/float64(r.limited.admitted), predictedFactor(o.interval, o.retryPeriod),
		r.free.wall.Round(time.Millisecond), r.limited.wall.Round(time.Millisecond),
		float64(r.free.stateBytes)/(1<<20), r.free.stateBytes/uint64(o.coreManagers))
}

func peak(series []float64) float64 {
	m := 0.0
	for _, v := range series {
		if v > m {
			m = v
		}
	}
	return m
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
