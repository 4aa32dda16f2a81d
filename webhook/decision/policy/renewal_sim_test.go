package policy

import (
	"fmt"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"net/http"
	"strings"
	"testing"
	"time"
)

// These tests replay a client-go leader elector renewing its Lease against
// Decide, to check the claim behind I6's shape and MaxRenewInterval: a
// leader throttled with 429 + Retry-After keeps its lease, also when its
// clock runs ahead of the server's by up to the policy's clockSkew.
//
// The model of client-go (tools/leaderelection and rest): after a successful
// renewal the elector waits retryPeriod, then starts a renew attempt that
// may last renewDeadline. Its Update carries renewTime = the client's clock
// when the attempt starts. A 429 with Retry-After makes the REST client sleep
// that many seconds (the webhook rounds RetryAfter up to whole seconds, at
// least 1) and send the identical body again, up to 10 times, as long as the
// attempt's deadline has not passed. A failed attempt costs the leadership.

type electorSim struct {
	timings ClientTimings
	// clientAhead is how far the client's clock runs ahead of the server's
	// (negative: behind).
	clientAhead time.Duration
	// rtt is the round trip; each way takes half.
	rtt time.Duration
}

// simRetryAfter mirrors the admission handler's retryAfterSeconds: whole seconds, rounded
// up, at least one.
func simRetryAfter(d time.Duration) time.Duration {
	s := (d + time.Second - 1) / time.Second
	if s < 1 {
		s = 1
	}
	return s * time.Second
}

// run replays rounds renew attempts under policy p and returns the server
// times at which renewals were admitted, or an error describing how the
// elector lost its lease.
func (e electorSim) run(p *Policy, rounds int) ([]time.Time, error) {
	const ns, name = "team-sim", "l"
	stored := mk(leaseobject.Leases, ns, name, holder("h1"), renewAt(e.clientAhead))
	lastAdmit := t0
	admits := []time.Time{}
	for round := 0; round < rounds; round++ {
		start := lastAdmit.Add(e.rtt/2 + e.timings.RetryPeriod) // client receives the success, waits retryPeriod
		deadline := start.Add(e.timings.RenewDeadline)
		body := mk(leaseobject.Leases, ns, name, holder("h1"))
		body.Spec.RenewTime = start.Add(e.clientAhead)
		send := start
		admitted := false
		for try := 0; try <= 10; try++ {
			arrive := send.Add(e.rtt / 2)
			if !arrive.Before(deadline) {
				return admits, fmt.Errorf("round %d: try %d arrives %v after the attempt started, renew deadline %v", round, try, arrive.Sub(start), e.timings.RenewDeadline)
			}
			d := Decide(p, &leaseobject.Request{Resource: leaseobject.Leases, Operation: leaseobject.Update, Caller: mgrA, Old: stored, New: body, Now: arrive})
			if d.Verdict == Allow {
				if gap := arrive.Sub(lastAdmit); gap >= e.timings.LeaseDuration {
					return admits, fmt.Errorf("round %d: %v between admitted renewals, lease duration %v", round, gap, e.timings.LeaseDuration)
				}
				stored, lastAdmit, admitted = body, arrive, true
				admits = append(admits, arrive)
				break
			}
			if d.Invariant != InvariantRenewalRate || d.Code != http.StatusTooManyRequests || d.RetryAfter <= 0 {
				return admits, fmt.Errorf("round %d: decision %+v, want an admission or an I6 429", round, d)
			}
			send = arrive.Add(e.rtt/2 + simRetryAfter(d.RetryAfter))
		}
		if !admitted {
			return admits, fmt.Errorf("round %d: still throttled after 10 retries", round)
		}
	}
	return admits, nil
}

func simPolicy(tb testing.TB, interval string, extra ...string) *Policy {
	tb.Helper()
	return simPolicySkew(tb, "", interval, extra...)
}

// simPolicySkew is simPolicy with the policy's clockSkew set ("" for the
// default 2s).
func simPolicySkew(tb testing.TB, skew, interval string, extra ...string) *Policy {
	tb.Helper()
	rule := "- name: sim\n  resources: [leases]\n  namespaces: [team-sim]\n  managers: [\"user:mgr-*\"]\n  minRenewInterval: " + interval + "\n"
	for _, e := range extra {
		rule += "  " + e + "\n"
	}
	src := withRules(rule)
	if skew != "" {
		src = withClockSkew(skew, src)
	}
	return mustCompile(tb, src)
}

func TestThrottledElectorKeepsItsLease(t *testing.T) {
	def := DefaultClientTimings
	custom := ClientTimings{LeaseDuration: 60 * sec, RenewDeadline: 40 * sec, RetryPeriod: 5 * sec}
	const customClient = "assumedClient: {leaseDuration: 60s, renewDeadline: 40s, retryPeriod: 5s}"
	cases := []struct {
		name     string
		skew     string // the policy's clockSkew; "" is the default 2s
		interval string
		extra    []string
		timings  ClientTimings
		aheads   []time.Duration
	}{
		// auto: 5s for a 15s Lease, also for a client clock up to the
		// default clockSkew ahead or behind.
		{"auto with client-go defaults", "", "auto", nil, def, []time.Duration{-2 * sec, -700 * time.Millisecond, 0, 300 * time.Millisecond, 2 * sec}},
		{"5s with client-go defaults", "", "5s", nil, def, []time.Duration{-2 * sec, 0, 2 * sec}},
		// The largest fixed interval Compile accepts with the default 2s
		// clockSkew: MaxRenewInterval takes the skew off, so a client clock
		// ahead of the server's by as much as I7 accepts (which makes the
		// stored renewTime look that much younger) still keeps its lease.
		{"8s (the maximum with clockSkew 2s) with client-go defaults", "", "8s", nil, def,
			[]time.Duration{-2 * sec, -500 * time.Millisecond, 0, sec, 1500 * time.Millisecond, 2 * sec}},
		// With clockSkew 0s I7 refuses a renewTime ahead of the server
		// clock, so only clients not ahead are replayed; they survive 10s.
		{"10s (the maximum with clockSkew 0s) with client-go defaults", "0s", "10s", nil, def, []time.Duration{-2 * sec, -500 * time.Millisecond, 0}},
		// 7s with clockSkew 3s: a client 3s ahead keeps its lease.
		{"7s (the maximum with clockSkew 3s) with client-go defaults", "3s", "7s", nil, def, []time.Duration{-2 * sec, 0, 2 * sec, 3 * sec}},
		{"41s (the maximum with clockSkew 2s) with 60s/40s/5s", "", "41s", []string{customClient}, custom, []time.Duration{-2 * sec, 0, 2 * sec}},
		{"43s (the maximum with clockSkew 0s) with 60s/40s/5s", "0s", "43s", []string{customClient}, custom, []time.Duration{-2 * sec, 0}},
		{"30s with 60s/40s/5s", "", "30s", []string{customClient}, custom, []time.Duration{-2 * sec, 0, 2 * sec}},
	}
	for _, c := range cases {
		p := simPolicySkew(t, c.skew, c.interval, c.extra...)
		for _, ahead := range c.aheads {
			for _, rtt := range []time.Duration{0, 10 * time.Millisecond, 250 * time.Millisecond, 900 * time.Millisecond} {
				t.Run(fmt.Sprintf("%s/client %v ahead/rtt %v", c.name, ahead, rtt), func(t *testing.T) {
					sim := electorSim{timings: c.timings, clientAhead: ahead, rtt: rtt}
					admits, err := sim.run(p, 40)
					if err != nil {
						t.Fatalf("elector lost its lease: %v", err)
					}
					if len(admits) != 40 {
						t.Fatalf("%d renewals admitted, want 40", len(admits))
					}
				})
			}
		}
	}
}

// TestThrottledElectorSimulationDetectsLoss guards the simulation itself: a
// client with the defaults throttled at 12s (accepted only because the rule
// assumes slower clients) misses its renew deadline.
func TestThrottledElectorSimulationDetectsLoss(t *testing.T) {
	p := simPolicy(t, "12s", "assumedClient: {leaseDuration: 30s, renewDeadline: 20s, retryPeriod: 4s}")
	_, err := electorSim{timings: DefaultClientTimings, rtt: 10 * time.Millisecond}.run(p, 10)
	if err == nil || !strings.Contains(err.Error(), "renew deadline 10s") {
		t.Errorf("12s interval with client-go defaults: err = %v, want a missed renew deadline", err)
	}
}

// TestThrottledElectorClockAheadNeedsSkewTerm shows why MaxRenewInterval
// takes clockSkew off: 10s, the most client-go's defaults survive with a
// client clock in step with the server's, costs the lease of such a client
// whose clock runs 2s ahead (which I7 accepts with clockSkew 2s). The rule
// declares renewDeadline 12s, which makes 10s the maximum with clockSkew 2s.
func TestThrottledElectorClockAheadNeedsSkewTerm(t *testing.T) {
	p := simPolicy(t, "10s", "assumedClient: {renewDeadline: 12s}")
	if _, err := (electorSim{timings: DefaultClientTimings, rtt: 10 * time.Millisecond}).run(p, 10); err != nil {
		t.Errorf("10s interval, client clock in step: %v, want the lease kept", err)
	}
	_, err := electorSim{timings: DefaultClientTimings, clientAhead: 2 * sec, rtt: 10 * time.Millisecond}.run(p, 10)
	if err == nil || !strings.Contains(err.Error(), "renew deadline 10s") {
		t.Errorf("10s interval, client clock 2s ahead: err = %v, want a missed renew deadline", err)
	}
	// The same client under the 8s the defaults allow with clockSkew 2s.
	if _, err := (electorSim{timings: DefaultClientTimings, clientAhead: 2 * sec, rtt: 10 * time.Millisecond}).run(simPolicy(t, "8s"), 10); err != nil {
		t.Errorf("8s interval, client clock 2s ahead: %v, want the lease kept", err)
	}
}

// TestThrottledElectorRenewalRate checks what the rate limit buys against an
// elector that would renew every retryPeriod (2s). Every admission comes at
// least the interval after the stored renewTime it replaces; but a retried
// body stores the renewTime of the attempt's start, so the next attempt,
// retryPeriod later, is admitted at once: admitted writes alternate gaps of
// about retryPeriod and about the interval, never two short gaps in a row.
func TestThrottledElectorRenewalRate(t *testing.T) {
	const interval = 5 * sec
	retry := DefaultClientTimings.RetryPeriod
	p := simPolicy(t, "5s")
	admits, err := electorSim{timings: DefaultClientTimings, rtt: 10 * time.Millisecond}.run(p, 40)
	if err != nil {
		t.Fatal(err)
	}
	for i := 2; i < len(admits); i++ {
		short, long := admits[i-1].Sub(admits[i-2]), admits[i].Sub(admits[i-1])
		if short > long {
			short, long = long, short
		}
		if short < retry || long < interval || short+long < interval+retry {
			t.Errorf("admissions %d..%d %v apart, then %v: want gaps of at least %v, one of them at least %v",
				i-2, i, admits[i-1].Sub(admits[i-2]), admits[i].Sub(admits[i-1]), retry, interval)
		}
	}
}
