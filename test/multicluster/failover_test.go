package multicluster

import (
	"context"
	"fmt"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/internal/controlplane"
	"github.com/leaseguard/leaseguard/test/multicluster/kccmanager"
)

// Tolerances of the timing assertions: the sampling period, a manager's
// status poll, and a second for requests in flight on a loaded machine.
const slack = time.Second

var phases = []string{"election", "steady", "failover-a", "failover-b", "rejoin"}

// activeCluster returns the cluster whose live managers all reconcile while
// no manager of the other cluster does, or nil.
func activeCluster(f *fleet) *cluster {
	var found *cluster
	for _, c := range env.clusters {
		live := f.live(c)
		reconciling := 0
		for _, m := range live {
			if m.Reconciling() {
				reconciling++
			}
		}
		switch {
		case reconciling == 0:
		case reconciling == len(live) && found == nil:
			found = c
		default:
			return nil
		}
	}
	return found
}

func index(c *cluster) int { return slices.Index(env.clusters, c) }

// expectOneActive checks every sample: active's managers all reconcile,
// none of standby's does, and every standby manager sees active as the
// global holder.
func expectOneActive(samples []sample, active, standby *cluster) {
	ExpectWithOffset(1, samples).NotTo(BeEmpty())
	for _, smp := range samples {
		a, s := smp.clusters[index(active)], smp.clusters[index(standby)]
		ExpectWithOffset(1, a.active()).To(BeTrue(), "%s is not active: %s", active, smp.describe())
		ExpectWithOffset(1, s.reconciling).To(BeZero(), "%s reconciles too: %s", standby, smp.describe())
		for _, v := range s.views {
			ExpectWithOffset(1, v).To(Equal(active.identity), "a manager of %s does not see the global holder: %s", standby, smp.describe())
		}
	}
}

// expectNeverTwo checks that no sample has managers of both clusters
// reconciling.
func expectNeverTwo(samples []sample) {
	for _, smp := range samples {
		ExpectWithOffset(1, smp.reconcilingClusters()).To(BeNumerically("<=", 1), "two clusters reconcile at once: %s", smp.describe())
	}
}

// reconciles sums the reconcile counters of managers.
func reconciles(ms []*kccmanager.Manager) []int64 {
	var out []int64
	for _, m := range ms {
		out = append(out, m.Reconciles())
	}
	return out
}

func getMCL(ctx context.Context, c *cluster) *unstructured.Unstructured {
	u, err := c.dyn.Resource(mclv1alpha1.GroupVersionResource).Namespace(systemNS).Get(ctx, mclName, metav1.GetOptions{})
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return u
}

func designated(ctx context.Context, c *cluster) string {
	return getMCL(ctx, c).GetAnnotations()[kccmanager.DesignationAnnotation]
}

// expectStatus checks what the controller wrote into c's MultiClusterLease.
func expectStatus(ctx context.Context, c *cluster, holder string) {
	u := getMCL(ctx, c)
	var st mclv1alpha1.MultiClusterLeaseStatus
	raw, _, _ := unstructured.NestedMap(u.Object, "status")
	ExpectWithOffset(1, runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st)).To(Succeed())
	ExpectWithOffset(1, st.GlobalHolderIdentity).To(HaveValue(Equal(holder)), "%s: status.globalHolderIdentity", c)
	ExpectWithOffset(1, st.GlobalLeaseDurationSeconds).To(HaveValue(BeEquivalentTo(mclTimings.LeaseDuration/time.Second)), "%s: status.globalLeaseDurationSeconds", c)
	ExpectWithOffset(1, st.GlobalLeaseTransitions).To(HaveValue(BeNumerically(">=", 1)), "%s: status.globalLeaseTransitions", c)
	ExpectWithOffset(1, st.GlobalRenewTime).NotTo(BeNil(), "%s: status.globalRenewTime", c)
	renewed, err := time.Parse(time.RFC3339, *st.GlobalRenewTime)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	ExpectWithOffset(1, time.Since(renewed)).To(BeNumerically("<", mclTimings.LeaseDuration), "%s: status.globalRenewTime %s is not recent", c, *st.GlobalRenewTime)
	ExpectWithOffset(1, st.ObservedGeneration).To(HaveValue(BeNumerically(">", 0)))
	conds := map[string]metav1.Condition{}
	for _, cond := range st.Conditions {
		conds[cond.Type] = cond
	}
	ExpectWithOffset(1, conds).To(HaveKeyWithValue("BackendHealthy", HaveField("Status", metav1.ConditionTrue)), "%s: conditions", c)
	ExpectWithOffset(1, conds).To(HaveKeyWithValue("LockAcquiredInBackend", And(HaveField("Status", metav1.ConditionTrue),
		HaveField("Message", "Lock is held by "+holder))), "%s: conditions", c)
	ExpectWithOffset(1, u.GetFinalizers()).To(ContainElement(mclv1alpha1.Finalizer), "%s: the controller's finalizer", c)
}

// writerOf maps every admitted MultiClusterLease write of c's managers (all
// incarnations) to its manager.
func writerOf(f *fleet, c *cluster) map[string]*kccmanager.Manager {
	out := map[string]*kccmanager.Manager{}
	for _, m := range f.all(c) {
		for _, v := range m.Stats().AdmittedMCLVersions {
			out[v] = m
		}
	}
	return out
}

// expectOnlyDesignatedWrites checks c's history of the shared object: every
// spec write that reached storage is an admitted write of exactly the
// manager the stored object names as designated, and every admitted write
// is in the history. It returns the distinct writers in order.
func expectOnlyDesignatedWrites(f *fleet, c *cluster, rec *recorder) []string {
	writers := writerOf(f, c)
	seen := map[string]bool{}
	var order []string
	for _, w := range rec.between(time.Time{}, time.Now()) {
		if w.resource != mclv1alpha1.Resource || !w.spec {
			continue
		}
		m, ok := writers[w.version]
		ExpectWithOffset(1, ok).To(BeTrue(), "%s: spec write at resourceVersion %s is no admitted manager write", c, w.version)
		user := m.Config().Username()
		ExpectWithOffset(1, w.designated).To(Equal(user), "%s: resourceVersion %s written by %s while %q is designated", c, w.version, user, w.designated)
		if len(order) == 0 || order[len(order)-1] != user {
			order = append(order, user)
		}
		seen[w.version] = true
	}
	for v, m := range writers {
		ExpectWithOffset(1, seen).To(HaveKey(v), "%s: admitted write %s of %s missing from the watch", c, v, m)
	}
	return order
}

var _ = Describe("two clusters in namespace mode, one MultiClusterLease synced through a global lock", Ordered, func() {
	teams := []string{"team-a", "team-b", "team-c"}
	var (
		f                *fleet
		s                *sampler
		recs             map[*cluster]*recorder
		active, standby  *cluster
		transitionsAfter int32
	)

	BeforeAll(func() {
		recs = map[*cluster]*recorder{}
		for _, c := range env.clusters {
			recs[c] = startRecorder(c)
		}
		f = startFleet(teams)
		s = startSampler(f)
		DeferCleanup(func(ctx SpecContext) {
			s.stop()
			AddReportEntry("samples by phase (every 200ms)", s.report(phases))
			f.stop(ctx)
			for _, r := range recs {
				r.stop()
			}
		}, NodeTimeout(2*time.Minute))
	})

	It("elects exactly one cluster: all its namespaces reconcile, the other's stand by and see the global holder", func(ctx SpecContext) {
		s.setPhase("election")
		Eventually(func() *cluster { return activeCluster(f) }).WithTimeout(60 * time.Second).WithPolling(sampleEvery).ShouldNot(BeNil())
		active = activeCluster(f)
		standby = env.clusters[1-index(active)]
		Eventually(func(g Gomega) {
			for _, m := range f.live(standby) {
				g.Expect(m.View().GlobalHolder).To(Equal(active.identity))
			}
		}).WithTimeout(10 * time.Second).WithPolling(sampleEvery).Should(Succeed())
		By(fmt.Sprintf("%s is active; sampling both clusters", active))

		s.setPhase("steady")
		before := reconciles(f.live(active))
		standbyBefore := reconciles(f.live(standby))
		time.Sleep(12 * time.Second)
		expectOneActive(s.of("steady"), active, standby)
		for i, n := range reconciles(f.live(active)) {
			Expect(n).To(BeNumerically(">", before[i]), "%s reconciled nothing while its cluster was active", f.live(active)[i])
		}
		Expect(reconciles(f.live(standby))).To(Equal(standbyBefore), "standby managers reconciled")

		By("both controllers report the global holder through the status subresource")
		for _, c := range env.clusters {
			expectStatus(ctx, c, active.identity)
		}
		lock, err := s.lock.Read(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(lock.HolderIdentity).To(Equal(active.identity))
		transitionsAfter = lock.LeaseTransitions

		By("in each cluster only the designated manager's writes reach the shared object")
		for _, c := range env.clusters {
			writers := expectOnlyDesignatedWrites(f, c, recs[c])
			Expect(writers).To(HaveLen(1), "%s: one designated writer while nobody failed", c)
			refused := 0
			for _, m := range f.live(c) {
				st := m.Stats()
				if m.Config().Username() != writers[0] {
					Expect(st.AdmittedMCLVersions).To(BeEmpty(), "%s: a manager that is not designated wrote", m)
					refused += int(st.MCLWrites[403] + st.MCLWrites[429])
				}
			}
			Expect(refused).To(BeNumerically(">", 0), "%s: the other managers' writes were refused", c)
			families, err := c.guard.Metrics(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(controlplane.Counter(families, "leaseguard_decisions_total",
				map[string]string{"resource": "multiclusterleases", "rule": "kcc-mcl", "verdict": "deny"})).
				To(BeNumerically(">", 0), "%s: leaseguard counted no refusal on the shared object", c)
		}
	})

	It("keeps the cluster active when its designated manager dies: a sibling takes over the designation once it is stale", func(ctx SpecContext) {
		victimUser := designated(ctx, active)
		victim := f.byUser(active, victimUser)
		Expect(victim).NotTo(BeNil(), "designated manager %q of %s", victimUser, active)
		lastRenewal := lastSpecWrite(recs[active], victimUser).renewTime

		s.setPhase("failover-a")
		victim.Kill()
		killed := time.Now()
		By(fmt.Sprintf("killed %s, the designated manager of %s", victim, active))
		var successor string
		Eventually(func() string {
			successor = designated(ctx, active)
			return successor
		}).WithTimeout(mclTimings.LeaseDuration + clockSkew + mclTimings.RetryPeriod + 2*slack).WithPolling(sampleEvery).
			ShouldNot(Equal(victimUser))
		Expect(f.byUser(active, successor)).NotTo(BeNil(), "the designation went to %q, not to a live sibling", successor)
		takeover := firstSpecWrite(recs[active], successor, killed)
		msg := fmt.Sprintf("%s killed; %s took over the designation %s after the victim's last stored renewTime",
			victim, successor, takeover.Sub(lastRenewal).Round(time.Millisecond))
		By(msg)
		AddReportEntry("failover (a)", msg)
		// Not before the designation is stale (leaseguard: the stored
		// renewTime plus the lease duration plus the clock-skew grace), and
		// at the sibling's first renewal after that.
		Expect(takeover.Sub(lastRenewal)).To(BeNumerically(">", mclTimings.LeaseDuration+clockSkew),
			"the designation moved before the victim's lease was stale")
		Expect(takeover.Sub(lastRenewal)).To(BeNumerically("<=", mclTimings.LeaseDuration+clockSkew+mclTimings.RetryPeriod+slack))

		time.Sleep(6 * time.Second) // the successor renews; the cluster must stay active throughout
		expectOneActive(s.of("failover-a"), active, standby)
		lock, err := s.lock.Read(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(lock.HolderIdentity).To(Equal(active.identity))
		Expect(lock.LeaseTransitions).To(Equal(transitionsAfter), "the global lock changed hands")
	})

	It("fails over to the other cluster when every manager of the active cluster dies, never both at once", func(ctx SpecContext) {
		s.setPhase("failover-b")
		for _, m := range f.live(active) {
			m.Kill()
		}
		killed := time.Now()
		By(fmt.Sprintf("killed every manager of %s", active))
		// The controller keeps the lock for a candidate renewed within twice
		// the lease duration (the reference controller's staleness
		// threshold); the lock then expires after one lease duration, and
		// the other controller takes it at its next reconcile.
		worstCase := 3*mclTimings.LeaseDuration + mclTimings.RetryPeriod + pollPeriod + slack
		Eventually(func() *cluster { return activeCluster(f) }).WithTimeout(worstCase + 5*time.Second).WithPolling(sampleEvery).
			Should(Equal(standby))
		time.Sleep(3 * time.Second)

		samples := s.of("failover-b")
		expectNeverTwo(samples)
		var lastRenewal, acquired, becameActive time.Time
		for _, smp := range samples {
			switch {
			case smp.lockRead && smp.lock.HolderIdentity == active.identity:
				lastRenewal = smp.lock.RenewTime
			case smp.lockRead && smp.lock.HolderIdentity == standby.identity && acquired.IsZero():
				acquired = smp.at
			}
			if becameActive.IsZero() && smp.clusters[index(standby)].active() {
				becameActive = smp.at
			}
		}
		Expect(lastRenewal).NotTo(BeZero())
		Expect(acquired).NotTo(BeZero())
		Expect(becameActive).NotTo(BeZero())
		msg := fmt.Sprintf("%s's last global renewal %s after the kill; %s took the lock %s and was active %s after it (%s after the kill)",
			active, lastRenewal.Sub(killed).Round(time.Millisecond), standby, acquired.Sub(lastRenewal).Round(time.Millisecond),
			becameActive.Sub(lastRenewal).Round(time.Millisecond), becameActive.Sub(killed).Round(time.Millisecond))
		By(msg)
		AddReportEntry("failover (b)", msg)
		Expect(acquired.Sub(lastRenewal)).To(BeNumerically(">", mclTimings.LeaseDuration), "the lock was taken before it expired")
		Expect(acquired.Sub(lastRenewal)).To(BeNumerically("<=", mclTimings.LeaseDuration+mclTimings.RetryPeriod+sampleEvery+slack))
		Expect(becameActive.Sub(lastRenewal)).To(BeNumerically("<=", mclTimings.LeaseDuration+mclTimings.RetryPeriod+pollPeriod+sampleEvery+slack),
			"the other cluster became active later than the global lease duration plus one renew period (plus a status poll)")
		Expect(becameActive.Sub(killed)).To(BeNumerically("<=", worstCase))

		lock, err := s.lock.Read(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(lock.LeaseTransitions).To(Equal(transitionsAfter+1), "one transition of the global lock")
		expectStatus(ctx, standby, standby.identity)
		active, standby = standby, active
	})

	It("keeps the new active cluster when the old one's managers come back: they stand by and see the global holder", func(ctx SpecContext) {
		s.setPhase("rejoin")
		for _, team := range teams {
			f.start(standby, team)
		}
		Eventually(func(g Gomega) {
			for _, m := range f.live(standby) {
				g.Expect(m.View().GlobalHolder).To(Equal(active.identity))
			}
		}).WithTimeout(10 * time.Second).WithPolling(sampleEvery).Should(Succeed())
		settled := time.Now()
		time.Sleep(8 * time.Second)
		var after []sample
		for _, smp := range s.of("rejoin") {
			if smp.at.After(settled) {
				after = append(after, smp)
			}
		}
		expectOneActive(after, active, standby)
		expectNeverTwo(s.of("rejoin"))
		lock, err := s.lock.Read(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(lock.HolderIdentity).To(Equal(active.identity), "the returning candidates took the lock back")
		expectStatus(ctx, standby, active.identity)
	})

	It("let only designated managers write the shared object in either cluster, and never had two clusters reconciling", func() {
		for _, c := range env.clusters {
			writers := expectOnlyDesignatedWrites(f, c, recs[c])
			AddReportEntry(fmt.Sprintf("designated writers of %s, in order", c), writers)
		}
		all := s.of("")
		expectNeverTwo(all)
		for _, p := range phases {
			Expect(s.of(p)).NotTo(BeEmpty(), "phase %s was not sampled", p)
		}
		GinkgoWriter.Print(s.report(phases))
	})
})

// lastSpecWrite is user's last stored spec write to the shared object.
func lastSpecWrite(rec *recorder, user string) write {
	var last write
	for _, w := range rec.between(time.Time{}, time.Now()) {
		if w.resource == mclv1alpha1.Resource && w.spec && w.designated == user {
			last = w
		}
	}
	ExpectWithOffset(1, last.renewTime).NotTo(BeZero(), "no write of %s with a renewTime in the history", user)
	return last
}

// firstSpecWrite is when user's first spec write after since was stored.
func firstSpecWrite(rec *recorder, user string, since time.Time) time.Time {
	for _, w := range rec.between(since, time.Now()) {
		if w.resource == mclv1alpha1.Resource && w.spec && w.designated == user {
			return w.at
		}
	}
	Fail("no write of " + user + " after " + since.Format(time.RFC3339Nano))
	return time.Time{}
}
