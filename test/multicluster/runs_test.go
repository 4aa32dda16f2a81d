package multicluster

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/test/multicluster/kccmanager"
)

// The scenario's bounds, from Config Connector's timings.
const (
	electionWithin = 30 * time.Second
	// takeoverTarget is the bound the issue asks for: 2 × leaseDuration +
	// 15 s. The runs report against it; they assert takeoverBound, which is
	// what the protocol allows (docs/multicluster.md, "Takeover"): the dead
	// cluster's controller renews the global lock until its candidate is
	// stale (its last renewal up to 2 × leaseDuration after the kill), the
	// lock expires one leaseDuration later; the other cluster's controller
	// copies the lock's last renewTime into its status at its next requeue
	// (spec.retryPeriodSeconds, 15 s, after that last renewal at worst); its
	// managers' client-go clocks see the record unchanged for a
	// leaseDuration from their last observation, and they patch at their
	// next retry (2 s, jitter 1.2); the first to confirm leads, its siblings
	// follow at their next retry.
	takeoverTarget = 2*kccmanager.LeaseDuration + 15*time.Second
	takeoverBound  = 2*kccmanager.LeaseDuration + kccmanager.LockRetryPeriod + kccmanager.LeaseDuration +
		2*(kccmanager.RetryPeriod*12/10+time.Second)
	// killWindow is how long the cluster is watched after its designated
	// writer dies: past leaseguard's staleness (lease duration plus clock
	// skew) and a few renewals of the successor.
	killWindow = kccmanager.LeaseDuration + clockSkew + 6*time.Second
)

var phases = []string{"election", "steady", "kill-designated", "takeover"}

func index(c *cluster) int { return slices.Index(env.clusters, c) }

// activeCluster returns the cluster whose live managers all lead while no
// manager of the other cluster does, or nil.
func activeCluster(f *fleet) *cluster {
	var found *cluster
	for _, c := range env.clusters {
		live := f.live(c)
		leading := 0
		for _, m := range live {
			if m.Leading() {
				leading++
			}
		}
		switch {
		case leading == 0:
		case leading == len(live) && found == nil:
			found = c
		default:
			return nil
		}
	}
	return found
}

// state describes every manager incarnation, for failure messages.
func state(f *fleet) string {
	var b strings.Builder
	for _, c := range env.clusters {
		for _, m := range f.all(c) {
			st := m.Stats()
			exit := "running"
			if st.Exit != nil {
				exit = "exited: " + st.Exit.Reason
			}
			fmt.Fprintf(&b, "\n  %s leading=%t confirmed lock writes=%d writes by code=%v gained=%d lost=%d reconciles=%d read errors=%v %s",
				m, m.Leading(), st.LockWrites, st.Writes, st.Gained, st.Lost, st.Reconciles, st.ReadErrors, exit)
		}
	}
	return b.String()
}

// unintendedExits are the exits of managers the test did not kill.
func unintendedExits(f *fleet) []string {
	var out []string
	for _, c := range env.clusters {
		for _, m := range f.all(c) {
			if e := m.Exited(); e != nil && !e.Killed {
				out = append(out, fmt.Sprintf("%s at %s: %s", m, e.At.Format("15:04:05.000"), e.Reason))
			}
		}
	}
	return out
}

func writeRequests(ms []*kccmanager.Manager) (sent, refused int64) {
	for _, m := range ms {
		for code, n := range m.Stats().Writes {
			sent += n
			if code == 403 || code == 429 {
				refused += n
			}
		}
	}
	return sent, refused
}

func designated(ctx context.Context, c *cluster) string {
	u, err := c.dyn.Resource(mclv1alpha1.GroupVersionResource).Namespace(systemNS).Get(ctx, mclName, metav1.GetOptions{})
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return u.GetAnnotations()[kccmanager.DesignationAnnotation]
}

// runResult is one run's line of the summary.
type runResult struct {
	name                   string
	samples, oneActive     int
	twoLeading             int
	leaders                string
	exits                  int
	storedPerMin           float64 // active cluster's stored spec writes, steady state
	standbyStoredPerMin    float64
	requestsPerMin         float64 // active cluster's managers' write requests, steady state
	refusedPerMin          float64
	writers                int
	steady                 time.Duration
	election, moved, takeo time.Duration
}

var (
	resultsMu sync.Mutex
	results   = map[admission]*runResult{}
	order     []admission
)

func resultOf(a admission) *runResult {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	r, ok := results[a]
	if !ok {
		r = &runResult{name: string(a)}
		results[a] = r
		order = append(order, a)
	}
	return r
}

func baseline() *runResult {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	r := results[admissionNone]
	if r == nil || r.storedPerMin == 0 {
		return nil
	}
	return r
}

func dur(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.Round(100 * time.Millisecond).String()
}

// summary is the table of every run so far.
func summary() string {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "| run | samples | one active | two leading | leaders (active / standby) | unintended exits | steady state | stored spec writes/min (active / standby) | spec writers (active) | write requests/min (active) | refused/min | election | designation moved | takeover |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, a := range order {
		r := results[a]
		takeover := dur(r.takeo)
		if r.takeo > takeoverTarget {
			takeover += " (> 45s)"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %d | %s | %.1f / %.1f | %d | %.1f | %.1f | %s | %s | %s |\n",
			r.name, r.samples, r.oneActive, r.twoLeading, r.leaders, r.exits, dur(r.steady), r.storedPerMin, r.standbyStoredPerMin,
			r.writers, r.requestsPerMin, r.refusedPerMin, dur(r.election), dur(r.moved), takeover)
	}
	return b.String()
}

// run is one configuration of the scenario.
type run struct {
	name      string
	admission admission
	steady    time.Duration
}

// The runs, in this order: the baseline first, so that the guarded runs can
// compare their stored writes with it. Ginkgo shuffles only top-level
// containers; these are one.
// Ginkgo orders containers defined at one code location by their text: the
// names are numbered.
var runs = []run{
	{name: "run 1", admission: admissionNone, steady: steadyFor(30 * time.Second)},
	{name: "run 2", admission: admissionShipped, steady: steadyFor(time.Minute)},
	{name: "run 3", admission: admissionWebhookCoalescing, steady: steadyFor(30 * time.Second)},
}

// steadyFor is d, or MULTICLUSTER_STEADY when set (for quicker runs while
// developing).
func steadyFor(d time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv("MULTICLUSTER_STEADY")); err == nil && v > 0 {
		return v
	}
	return d
}

var _ = Describe("two clusters in namespace mode, Config Connector's multicluster leader election", func() {
	for _, r := range runs {
		describeRun(r)
	}
})

func describeRun(r run) {
	guarded := r.admission.guarded()
	Context(r.name+": "+string(r.admission), Ordered, func() {
		teams := []string{"team-a", "team-b", "team-c"}
		var (
			f               *fleet
			s               *sampler
			recs            map[*cluster]*recorder
			active, standby *cluster
			started         time.Time
			res             *runResult
		)

		BeforeAll(func(ctx SpecContext) {
			res = resultOf(r.admission)
			for _, c := range env.clusters {
				Expect(c.setAdmission(ctx, r.admission)).To(Succeed())
			}
			// The API server loads webhook configurations and admission
			// policies from informers: let them settle before any write.
			time.Sleep(3 * time.Second)
			recs = map[*cluster]*recorder{}
			for _, c := range env.clusters {
				recs[c] = startRecorder(c)
			}
			started = time.Now()
			f = startFleet(teams)
			s = startSampler(f)
			DeferCleanup(func(ctx SpecContext) {
				s.stop()
				pcs := countPhase("", s.of(""))
				res.samples, res.oneActive, res.twoLeading = pcs.samples, pcs.oneActive, pcs.twoLeading
				res.exits = len(unintendedExits(f))
				GinkgoWriter.Printf("%s: samples by phase (every %s)\n%s", r.admission, sampleEvery, s.report(phases))
				AddReportEntry(string(r.admission)+": samples by phase", s.report(phases))
				GinkgoWriter.Printf("%s: managers at the end:%s\n", r.admission, state(f))
				f.stop(ctx)
				for _, rec := range recs {
					rec.stop()
				}
			}, NodeTimeout(2*time.Minute))
		})

		It("makes every namespace's manager of one cluster leader within 30 s, and none of the other cluster's", func(ctx SpecContext) {
			s.setPhase("election")
			Eventually(func() *cluster { return activeCluster(f) }).WithTimeout(electionWithin-time.Since(started)).WithPolling(sampleEvery).
				ShouldNot(BeNil(), func() string { return "no cluster has every manager leading:" + state(f) })
			active = activeCluster(f)
			standby = env.clusters[1-index(active)]
			res.election = time.Since(started)
			res.leaders = fmt.Sprintf("%d/%d / 0/%d", len(f.live(active)), len(teams), len(teams))
			By(fmt.Sprintf("%s is active after %s", active, dur(res.election)))
			for _, m := range f.live(standby) {
				Expect(m.Leading()).To(BeFalse(), "%s leads too", m)
			}
			Expect(unintendedExits(f)).To(BeEmpty())
		})

		It("keeps exactly one cluster active at every sample in steady state, with no manager exiting", func(ctx SpecContext) {
			from := s.setPhase("steady")
			before := map[*kccmanager.Manager]int64{}
			for _, c := range env.clusters {
				for _, m := range f.live(c) {
					before[m] = m.Stats().Reconciles
				}
			}
			sentBefore, refusedBefore := writeRequests(f.all(active))
			callsBefore := webhookCallsOf(ctx)
			time.Sleep(r.steady)
			to := time.Now()
			calls := webhookCallsOf(ctx) - callsBefore
			res.steady = to.Sub(from)
			minutes := to.Sub(from).Minutes()

			samples := s.of("steady")
			Expect(samples).NotTo(BeEmpty())
			for _, smp := range samples {
				Expect(smp.activeIndex()).To(Equal(index(active)), "not exactly %s active: %s", active, smp.describe())
			}
			Expect(unintendedExits(f)).To(BeEmpty(), "managers exited in steady state")
			for _, m := range f.live(active) {
				Expect(m.Stats().Reconciles).To(BeNumerically(">", before[m]), "%s reconciled nothing while its cluster was active", m)
			}
			for _, m := range f.live(standby) {
				Expect(m.Stats().Reconciles).To(Equal(before[m]), "%s of the standby cluster reconciled", m)
			}

			By("counting the spec writes that reached storage, and who sent them")
			writes := recs[active].specWrites(from, to)
			res.storedPerMin = float64(len(writes)) / minutes
			res.standbyStoredPerMin = float64(len(recs[standby].specWrites(from, to))) / minutes
			sent, refused := writeRequests(f.all(active))
			res.requestsPerMin = float64(sent-sentBefore) / minutes
			res.refusedPerMin = float64(refused-refusedBefore) / minutes
			writers := map[string]bool{}
			for _, w := range writes {
				m := writerOf(f, active, w)
				Expect(m).NotTo(BeNil(), "%s: stored spec.renewTime %s (resourceVersion %s) was sent by no manager", active, w.renewTime, w.version)
				writers[m.Config().Username()] = true
				if guarded {
					Expect(w.designated).To(Equal(m.Config().Username()),
						"%s: resourceVersion %s stored a renewal of %s while the object names %q designated", active, w.version, m, w.designated)
				}
				for _, fm := range w.managers {
					Expect(fm).To(Equal("manager"), "%s: field managers of resourceVersion %s", active, w.version)
				}
			}
			res.writers = len(writers)
			// As shipped the API server answers the acknowledged and
			// coalesced renewals itself (docs/design.md §5, "The hot
			// path"): leaseguard's webhooks see only writes that are
			// stored (the designated writer's due renewals, the
			// controller's status), never one per renewal. A second of
			// slack each side of the window for a call counted on one
			// side and its write on the other: the watch delivers a write
			// decided just before `to` a moment after it, so the slack
			// after it is waited out before counting.
			time.Sleep(time.Until(to.Add(time.Second)))
			stored := 0
			for _, c := range env.clusters {
				stored += recs[c].storedWrites(from.Add(-time.Second), to.Add(time.Second))
			}
			GinkgoWriter.Printf("%s: %.0f webhook calls (the API servers' count) for %d write requests and %d stored writes\n",
				r.admission, calls, sent-sentBefore, stored)
			if r.admission == admissionShipped {
				Expect(calls).To(BeNumerically("<=", stored),
					"webhook calls in steady state as shipped: %.0f for %d stored writes and %d write requests", calls, stored, sent-sentBefore)
			}
			GinkgoWriter.Printf("%s: %s stored %d spec writes in %s (%.1f/min) from %v; the managers sent %.1f write requests/min, %.1f/min refused\n",
				r.admission, active, len(writes), dur(to.Sub(from)), res.storedPerMin, sortedKeys(writers), res.requestsPerMin, res.refusedPerMin)
			if !guarded {
				Expect(writers).To(HaveLen(len(teams)), "without leaseguard every leading manager's renewals are stored")
				return
			}
			Expect(writers).To(HaveLen(1), "under the guard only the designated manager's renewals are stored")
			// Designation alone stores one manager's renewals of three;
			// coalescing stores fewer still.
			if b := baseline(); b != nil {
				Expect(res.storedPerMin).To(BeNumerically("<", b.storedPerMin/3),
					"stored spec writes/min of the active cluster: %.1f under the guard against %.1f without", res.storedPerMin, b.storedPerMin)
			} else {
				// Run alone (focused): below one manager's renewals (one per
				// retry period plus a poll, about 20/min).
				Expect(res.storedPerMin).To(BeNumerically("<", 20))
			}
		})

		It("keeps every other manager of the active cluster leading when the designated writer dies, with no exit", func(ctx SpecContext) {
			var victim *kccmanager.Manager
			if guarded {
				user := designated(ctx, active)
				Expect(user).NotTo(BeEmpty(), "%s: no designated manager", active)
				victim = f.byUser(active, user)
				Expect(victim).NotTo(BeNil(), "%s: designated manager %q is not live", active, user)
			} else {
				victim = f.live(active)[0]
			}
			s.setPhase("kill-designated")
			victim.Kill()
			killed := time.Now()
			By(fmt.Sprintf("killed %s", victim))
			if guarded {
				victimUser := victim.Config().Username()
				var successor string
				Eventually(func() string {
					successor = designated(ctx, active)
					return successor
				}).WithTimeout(killWindow).WithPolling(sampleEvery).ShouldNot(Equal(victimUser), "the designation stays with the dead manager")
				res.moved = time.Since(killed)
				Expect(f.byUser(active, successor)).NotTo(BeNil(), "the designation went to %q, no live sibling", successor)
				By(fmt.Sprintf("the designation moved to %s %s after the kill", successor, dur(res.moved)))
			}
			time.Sleep(time.Until(killed.Add(killWindow)))
			for _, smp := range s.of("kill-designated") {
				Expect(smp.activeIndex()).To(Equal(index(active)), "not exactly %s active: %s", active, smp.describe())
				// The phase begins just before the kill: a sample taken
				// while Kill() was still waiting for the victim to exit
				// counts it live.
				if !smp.at.Before(killed) {
					Expect(smp.clusters[index(active)].live).To(Equal(len(teams)-1), "live managers of %s after the kill: %s", active, smp.describe())
				}
			}
			Expect(unintendedExits(f)).To(BeEmpty(), "managers exited after the designated writer died")
		})

		It("fails over to the other cluster when every manager of the active cluster stops, never both at once (takeover time against 2 × leaseDuration + 15 s reported)", func(ctx SpecContext) {
			s.setPhase("takeover")
			for _, m := range f.live(active) {
				m.Kill()
			}
			killed := time.Now()
			By(fmt.Sprintf("stopped every manager of %s", active))
			Eventually(func() *cluster { return activeCluster(f) }).WithTimeout(takeoverBound+10*time.Second).WithPolling(sampleEvery).
				Should(Equal(standby), func() string { return "no takeover:" + state(f) })
			var became time.Time
			for _, smp := range s.of("takeover") {
				Expect(smp.leadingClusters()).To(BeNumerically("<=", 1), "both clusters lead: %s", smp.describe())
				if became.IsZero() && smp.activeIndex() == index(standby) {
					became = smp.at
				}
			}
			if became.IsZero() {
				became = time.Now()
			}
			res.takeo = became.Sub(killed)
			verdict := "within"
			if res.takeo > takeoverTarget {
				verdict = "NOT within"
			}
			msg := fmt.Sprintf("%s took over %s after the kill: %s the target of 2 × leaseDuration + 15 s (%s); the protocol's bound is %s",
				standby, dur(res.takeo), verdict, takeoverTarget, takeoverBound)
			By(msg)
			AddReportEntry(string(r.admission)+": takeover", msg)
			Expect(unintendedExits(f)).To(BeEmpty(), "managers exited during the takeover")
			Expect(res.takeo).To(BeNumerically("<=", takeoverBound), "takeover after %s", dur(res.takeo))
		})
	})
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
