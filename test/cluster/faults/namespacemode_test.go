package faults

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/test/cluster/kccworkload"
)

// nsReconciled is how many namespaces the namespace-mode workload's
// managers reconcile, in each of its two clusters.
const nsReconciled = 10

// gapTolerance is how much longer than unguarded a namespace of the guarded
// cluster may be without a leader in one window: the sampling period, and
// a lock's retry period (managers of the two clusters renew out of step).
const gapTolerance = 3 * time.Second

// restartTolerance is added where the fault made unguarded managers exit
// too: a namespace then leads again only once the kubelet has restarted
// its manager, after a back-off of 10 s doubling with each restart of that
// Pod in the last ten minutes, and the lock has acquired again; the twins'
// restart histories and renew phases differ, and one back-off step apart
// is their ordinary spread (six runs of the emulator fault: guarded 23–32 s,
// unguarded 25–37 s; the node loss: 1m27s–1m58s and 1m29s–2m6s, the guarded
// cluster 5.3 s and 10 s longer once each).
const restartTolerance = 10 * time.Second

// namespaceMode is Config Connector's namespace mode on the real lock
// (package kccworkload), guarded and unguarded side by side, running
// through every fault: what decides whether every namespace keeps
// reconciling.
type namespaceMode struct {
	w      *kccworkload.Workload
	s      *kccworkload.Sampler
	writes map[string]*kccworkload.Writes
	stop   context.CancelFunc
}

// nsFigures are one window's figures of one cluster.
type nsFigures struct {
	cluster kccworkload.Cluster
	figures kccworkload.Figures
	// exits counts manager exits by reconciled namespace.
	exits        map[string]int
	spec, status int64
}

func startNamespaceMode(t *testing.T, c *cluster) *namespaceMode {
	t.Helper()
	image := os.Getenv("CLUSTER_KCC_IMAGE")
	if image == "" {
		t.Fatal("CLUSTER_KCC_IMAGE is not set: the image of test/multicluster/cmd/kcc loaded into the cluster (hack/kind/e2e.sh builds kcc-workload:e2e); " +
			"the faults are judged on Config Connector's namespace mode on the real lock too")
	}
	ctx := context.Background()
	nodes, err := kccworkload.WorkerNodes(ctx, c.admin)
	if err != nil {
		t.Fatal(err)
	}
	m := &namespaceMode{w: &kccworkload.Workload{Admin: c.admin, Config: c.config, Image: image,
		Reconciled: kccworkload.Namespaces(nsReconciled), Nodes: nodes}}
	if err := m.w.Deploy(ctx); err != nil {
		t.Fatal(err)
	}
	m.s = m.w.NewSampler()
	if _, err := m.w.WaitAllLeading(ctx, m.s, 4*time.Minute); err != nil {
		t.Fatal(err)
	}
	var counting context.Context
	counting, m.stop = context.WithCancel(ctx)
	if m.writes, err = m.w.CountWrites(counting); err != nil {
		t.Fatal(err)
	}
	m.s.Start()
	return m
}

func (m *namespaceMode) close(t *testing.T) {
	m.s.Stop()
	m.stop()
	if err := m.w.Undeploy(context.Background()); err != nil {
		t.Error(err)
	}
}

// begin opens a window; the function it returns closes it and returns its
// figures, by cluster, and a note on the processes every cluster depends
// on (the controller, the GCS emulator) and on why managers exited.
func (m *namespaceMode) begin(t *testing.T) func(t *testing.T) ([]nsFigures, string) {
	ctx := context.Background()
	// A fault starts from the steady state: every namespace of both
	// clusters leading again after the previous fault (managers that
	// exited late come back after the kubelet's back-off, then take the
	// global lock). One run's API-server restart began while no namespace
	// led, just after the GCS emulator's outage: its probes found the
	// shared lease expired, so nothing could be acknowledged.
	if took, err := m.w.WaitAllLeading(ctx, m.s, 4*time.Minute); err != nil {
		t.Fatalf("before the fault: %v", err)
	} else if took > 3*time.Second {
		t.Logf("every namespace of both clusters leads again %s after the previous window", took.Round(time.Second))
	}
	var before kccworkload.Processes
	waitUntil(t, "the manager Pods", time.Minute, func() (err error) {
		before, _, err = m.w.Processes(ctx)
		return err
	})
	from := time.Now()
	spec, status := map[string]int64{}, map[string]int64{}
	for system, w := range m.writes {
		spec[system], status[system] = w.Spec.Load(), w.Status.Load()
	}
	return func(t *testing.T) ([]nsFigures, string) {
		// A manager that exited late in the window is counted by its
		// restart, which the kubelet's back-off delays by up to tens of
		// seconds: the window closes once every manager runs again (or
		// after 90 s), so that its exits are counted in it, not in the next
		// fault's.
		for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
			if waiting, err := m.w.Waiting(ctx); err == nil && len(waiting) == 0 {
				break
			}
		}
		samples := m.s.Between(from, time.Now())
		var after kccworkload.Processes
		var why string
		waitUntil(t, "the manager Pods", 2*time.Minute, func() (err error) {
			after, why, err = m.w.Processes(ctx)
			return err
		})
		exits := kccworkload.Exits(before, after)
		var out []nsFigures
		for _, c := range kccworkload.Clusters {
			out = append(out, nsFigures{cluster: c, figures: kccworkload.Summarize(samples, c.System, m.w.Reconciled), exits: exits[c.System],
				spec: m.writes[c.System].Spec.Load() - spec[c.System], status: m.writes[c.System].Status.Load() - status[c.System]})
		}
		if kccworkload.Total(exits[kccworkload.Clusters[0].System])+kccworkload.Total(exits[kccworkload.Clusters[1].System]) > 0 && why != "" {
			t.Logf("manager exits so far:\n%s", why)
		}
		return out, supportNote(exits[kccworkload.ControllerNamespace], after, from)
	}
}

// supportNote names the controller's and the emulator's exits in a window,
// and the termination messages of the exits since from, most frequent
// first: why a fault ended leaderships, for the report.
func supportNote(support map[string]int, after kccworkload.Processes, from time.Time) string {
	var parts []string
	for _, name := range []string{kccworkload.Controller, kccworkload.Emulator} {
		if n := support[name]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s exited %d times", name, n))
		}
	}
	count := map[string]int{}
	for _, procs := range after {
		for _, p := range procs {
			for _, e := range p.LastExits {
				// The kubelet's FinishedAt is whole seconds.
				if !e.At.Before(from.Truncate(time.Second)) {
					count[fmt.Sprintf("exit %d: %s", e.ExitCode, e.Message)]++
				}
			}
		}
	}
	reasons := mostFrequentFirst(count)
	for i, r := range reasons {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("%d more exit reasons", len(reasons)-3))
			break
		}
		parts = append(parts, fmt.Sprintf("%d× %q", count[r], r))
	}
	if len(parts) == 0 {
		return ""
	}
	return "namespace mode: " + strings.Join(parts, "; ")
}

// leaseguardsExits are the guarded cluster's namespaces whose manager
// exited while its unguarded twin, on the same node under the same fault,
// neither exited nor lost its leader: exits leaseguard caused. A fault that
// ends every leadership by the protocol (the lock's backend or the API
// server away past the renew deadline, a node with the controller lost)
// ends the twins' alike, and the kubelet's restart back-off then sets them
// apart by seconds: counting totals would set them apart too.
//
// Where the fault ended some unguarded leaderships but not all (an API
// server away about as long as the renew deadline), which managers lose is
// decided by where each was in its renew period, independently in the two
// clusters: the twins are no pairs there (one run had 8 guarded and 4
// unguarded exits, 3 of the guarded ones' twins leading). Then the two
// clusters are compared as two draws of the same chance: leaseguard is
// charged only where more guarded namespaces lost their manager than
// unguarded ones lost their leader by over two standard deviations of that
// difference, and one; the gap check (assertNamespaceMode) still holds
// every namespace to its twin's time without a leader.
//
// So it is where the API server itself stalled (apiStalled: the control
// writes failed or stalled in the window), even if no unguarded leadership
// ended: a stall hits both clusters' managers wherever each is in its
// renew period, and one CI run's stall of minutes ended 18 leaderships
// across the two.
func leaseguardsExits(guarded, unguarded nsFigures, apiStalled bool) []string {
	var out []string
	affected := lostLeaders(unguarded)
	exited := 0
	for ns, n := range guarded.exits {
		if n > 0 {
			exited++
			if unguarded.exits[ns] == 0 && !unguarded.figures.Missed[ns] {
				out = append(out, ns)
			}
		}
	}
	if affected > 0 || apiStalled {
		p := float64(exited+affected) / float64(2*nsReconciled)
		if float64(exited) <= float64(affected)+2*math.Sqrt(2*nsReconciled*p*(1-p))+1 {
			return nil
		}
	}
	sort.Strings(out)
	return out
}

// assertNamespaceMode fails where leaseguard cost namespace mode something
// the same fault did not cost it unguarded: a manager exit its unguarded
// twin did not have, or a namespace longer without a leader.
//
// One cost is the API server's own and is not charged: after its restart,
// its MutatingAdmissionPolicy plugin answers the shared renewals
// leaseguard's policy acknowledges 503 until it has read the
// MultiClusterLease's schema (r.policyWindow, measured): the guarded
// cluster's non-designated managers are without the API server that much
// longer than their twins. Where that can end leaderships by the protocol
// (restartWindowEndsLeaderships), such exits are named in the note it
// returns instead; the window's bound is the fault's own assertion.
func assertNamespaceMode(t *testing.T, r result) (note string) {
	t.Helper()
	if len(r.namespaceMode) != 2 {
		return ""
	}
	guarded, unguarded := r.namespaceMode[0], r.namespaceMode[1]
	if caused := leaseguardsExits(guarded, unguarded, r.controlTrouble > 0); len(caused) > 0 {
		if restartWindowEndsLeaderships(r, lostLeaders(unguarded)) {
			note = fmt.Sprintf("%d guarded exits whose twins kept leading (%s): shared renewals unanswered %s in the restart and %s more by the admission policy plugin reach the lock's renew deadline less a retry period (%s)",
				len(caused), strings.Join(caused, ", "), r.apiAway.Round(100*time.Millisecond), r.policyWindow.Round(100*time.Millisecond), kccRenewDeadline-kccRetryPeriod)
		} else {
			t.Errorf("%s: managers exited with leaseguard whose unguarded twins kept leading: %s (%d exits with leaseguard, %d unguarded)",
				r.name, strings.Join(caused, ", "), kccworkload.Total(guarded.exits), kccworkload.Total(unguarded.exits))
		}
	}
	tolerance := gapTolerance + r.policyWindow
	if kccworkload.Total(unguarded.exits) > 0 {
		tolerance += restartTolerance
	}
	if guarded.figures.LongestGap > unguarded.figures.LongestGap+tolerance {
		t.Errorf("%s: a namespace without a leader for %s with leaseguard (%s; %s), %s unguarded", r.name,
			guarded.figures.LongestGap.Round(100*time.Millisecond), guarded.figures.GapNamespace, guarded.figures.FirstMiss,
			unguarded.figures.LongestGap.Round(100*time.Millisecond))
	}
	if guarded.figures.Samples == 0 {
		t.Errorf("%s: no sample of the namespace-mode workload", r.name)
	}
	return note
}

// Config Connector's lock (test/multicluster/kccmanager): a leader that has
// not renewed for kccRenewDeadline gives its leadership up (and the manager
// exits); it retries a failed renewal every kccRetryPeriod.
const (
	kccRenewDeadline = 10 * time.Second
	kccRetryPeriod   = 2 * time.Second
)

// restartWindowEndsLeaderships tells whether a restarted API server's
// policy window (r.policyWindow) can have ended guarded leaderships by the
// protocol. The window made every guarded non-designated manager's outage
// longer than its twin's; that ends leaderships where the restart alone
// already ended some unguarded ones (unguardedLost: the outage was at the
// protocol's edge), or where the probed outage and the window together
// reach the renew deadline less a retry period (a renewal due just before
// the restart, retried every kccRetryPeriod, may not succeed in time). The
// probes, fresh connections from the host, see less of the outage than the
// managers do through their Pods' connections: one run probed 6.6 s
// unguarded and 8.1 s guarded, and every manager of both clusters exited.
func restartWindowEndsLeaderships(r result, unguardedLost int) bool {
	return r.policyWindow > 0 && (unguardedLost > 0 || r.apiAway+r.policyWindow >= kccRenewDeadline-kccRetryPeriod)
}

func renderNamespaceMode(results []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Namespace mode on the real lock (%d namespaces per cluster, one manager Pod each; 1 s samples):\n\n", nsReconciled)
	b.WriteString("| fault | cluster | samples with every namespace leading | fewest leading | longest without a leader | manager exits (of them leaseguard's) | stored writes (spec / status) |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		for i, f := range r.namespaceMode {
			caused := "—"
			if i == 0 && len(r.namespaceMode) == 2 {
				caused = fmt.Sprint(len(leaseguardsExits(f, r.namespaceMode[1], r.controlTrouble > 0)))
			}
			fmt.Fprintf(&b, "| %s | %s | %d of %d | %d | %s | %d (%s) | %d (%d / %d) |\n", r.name, f.cluster.Name(), f.figures.AllLeading, f.figures.Samples,
				f.figures.Fewest, f.figures.LongestGap.Round(100*time.Millisecond), kccworkload.Total(f.exits), caused, f.spec+f.status, f.spec, f.status)
		}
	}
	return b.String()
}

// designatedNode returns the namespace of the guarded cluster's designated
// manager and the node its Pod is pinned to.
func (m *namespaceMode) designatedNode(t *testing.T) (string, string) {
	t.Helper()
	mcl, err := dynamic.NewForConfigOrDie(m.w.Config).Resource(mclv1alpha1.GroupVersionResource).
		Namespace(kccworkload.Clusters[0].System).Get(context.Background(), kccworkload.LeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	designated := mcl.GetAnnotations()[kccworkload.Designation]
	prefix := "system:serviceaccount:" + kccworkload.Clusters[0].System + ":" + kccworkload.ManagerName("")
	ns, ok := strings.CutPrefix(designated, prefix)
	if !ok || m.w.NodeOf(ns) == "" {
		t.Fatalf("the guarded MultiClusterLease designates %q: not one of the workload's pinned managers", designated)
	}
	return ns, m.w.NodeOf(ns)
}

// lostLeaders counts a cluster's namespaces whose manager exited or that
// were without a leader at a sample.
func lostLeaders(f nsFigures) int {
	n := 0
	for ns := range unionKeys(f.exits, f.figures.Missed) {
		if f.exits[ns] > 0 || f.figures.Missed[ns] {
			n++
		}
	}
	return n
}

func unionKeys(a map[string]int, b map[string]bool) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// restartOutages runs restart (the API server's) while two probes send,
// every 100 ms, a dry-run renewal (admission runs, nothing is stored) of
// each cluster's shared MultiClusterLease as one of its managers: in the
// guarded cluster a non-designated one, whose renewal leaseguard's
// admission policy acknowledges. It returns how long each probe had no
// answer of success: the unguarded one the restart itself, the guarded one
// also the time its MutatingAdmissionPolicy plugin answered 503 ("Resource
// kind ... not found"), until it had read the MultiClusterLease's schema
// from the OpenAPI it polls every 5 s (docs/operations.md) — the API server
// serves writes before /readyz says so, hence probes, not readiness.
func (m *namespaceMode) restartOutages(ctx context.Context, restart func() error) (guarded, unguarded restartOutage, err error) {
	probes := make([]*restartOutage, len(kccworkload.Clusters))
	restarted := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range kccworkload.Clusters {
		probes[i] = &restartOutage{}
		wg.Go(func() { m.probeRenewals(ctx, c, probes[i], restarted) })
	}
	err = restart()
	close(restarted)
	wg.Wait()
	if err != nil {
		return restartOutage{}, restartOutage{}, err
	}
	for i, p := range probes {
		if !p.failed.IsZero() && p.back.IsZero() {
			return *probes[0], *probes[1], fmt.Errorf("%s: no renewal of the shared MultiClusterLease answered within a minute of the API server's restart (%d answered 503): last %v",
				kccworkload.Clusters[i].Name(), p.answered503, p.last)
		}
	}
	return *probes[0], *probes[1], nil
}

// A restartOutage is what one probe saw of an API server's restart.
type restartOutage struct {
	// failed is the first probe that failed, back the first success after it.
	failed, back time.Time
	// answered503 counts the probes answered 503 "Resource kind ... not
	// found", last503 is the last of them.
	answered503 int
	last503     time.Time
	// acknowledged counts the probes answered with the stored renewTime;
	// stored the guarded ones answered with the renewal stored instead (a
	// lease near expiry is not acknowledged): answered, as a manager's
	// renewal would be.
	acknowledged, stored int
	// failures counts the failed probes by what failed them.
	failures map[string]int
	last     error
}

func (o restartOutage) length() time.Duration {
	if o.failed.IsZero() {
		return 0
	}
	return o.back.Sub(o.failed)
}

// schemaWindow is how long after the unguarded probe was answered again
// this one was still answered 503 while the admission policy plugin had
// not read the MultiClusterLease's schema: the part of its longer outage
// that is the API server's plugin, not anything of leaseguard's.
func (o restartOutage) schemaWindow(unguarded restartOutage) time.Duration {
	if o.last503.IsZero() || unguarded.back.IsZero() {
		return 0
	}
	return max(o.last503.Add(100*time.Millisecond).Sub(unguarded.back), 0)
}

// failureNote lists what failed the probes, most frequent first.
func (o restartOutage) failureNote() string {
	return countedList(o.failures)
}

// probeRenewals probes one cluster from before the restart until its
// renewals have been answered for 2 s after restarted closed (or a minute
// after that): its outage runs from the first failure to the success that
// followed the last.
func (m *namespaceMode) probeRenewals(ctx context.Context, c kccworkload.Cluster, o *restartOutage, restarted <-chan struct{}) {
	admin := dynamic.NewForConfigOrDie(m.w.Config).Resource(mclv1alpha1.GroupVersionResource).Namespace(c.System)
	clients := map[string]dynamic.ResourceInterface{}
	o.failures = map[string]int{}
	var deadline time.Time
	for ; ; time.Sleep(100 * time.Millisecond) {
		select {
		case <-restarted:
			if deadline.IsZero() {
				deadline = time.Now().Add(time.Minute)
			}
		default:
		}
		if !deadline.IsZero() && (time.Now().After(deadline) || !o.back.IsZero() && time.Since(o.back) > 2*time.Second) {
			return
		}
		sent := time.Now()
		acknowledged, err := m.probeRenewal(ctx, c, admin, clients)
		if err == nil {
			if acknowledged {
				o.acknowledged++
			} else if c.Guarded {
				o.stored++
			}
			if !o.failed.IsZero() && o.back.IsZero() {
				o.back = sent
			}
			continue
		}
		var status apierrors.APIStatus
		switch {
		case apierrors.IsServiceUnavailable(err) && strings.Contains(err.Error(), "Resource kind"):
			o.answered503++
			o.last503 = sent
			o.failures["503 (schema not read yet)"]++
		case errors.As(err, &status):
			o.failures[fmt.Sprintf("%d %s", status.Status().Code, status.Status().Reason)]++
		default:
			o.failures["no answer"]++
		}
		o.last = err
		if o.failed.IsZero() {
			o.failed = sent
		}
		o.back = time.Time{}
	}
}

// probeRenewal sends one manager's dry-run renewal of the cluster's shared
// MultiClusterLease, a non-designated manager's where leaseguard guards it,
// and says whether it was answered acknowledged (the stored renewTime
// returned) rather than stored.
func (m *namespaceMode) probeRenewal(ctx context.Context, c kccworkload.Cluster, admin dynamic.ResourceInterface, clients map[string]dynamic.ResourceInterface) (acknowledged bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	mcl, err := admin.Get(ctx, kccworkload.LeaseName, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	designated := mcl.GetAnnotations()[kccworkload.Designation]
	var manager string
	for _, ns := range m.w.Reconciled {
		if user := serviceAccountUser(c.System, kccworkload.ManagerName(ns)); user != designated {
			manager = user
			break
		}
	}
	if clients[manager] == nil {
		cfg := rest.CopyConfig(m.w.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: manager,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + c.System, "system:authenticated"}}
		clients[manager] = dynamic.NewForConfigOrDie(cfg).Resource(mclv1alpha1.GroupVersionResource).Namespace(c.System)
	}
	stored, _, _ := unstructured.NestedString(mcl.Object, "spec", "renewTime")
	patch := fmt.Sprintf(`{"spec":{"renewTime":%q}}`, time.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00"))
	answer, err := clients[manager].Patch(ctx, kccworkload.LeaseName, types.MergePatchType, []byte(patch), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return false, err
	}
	renewTime, _, _ := unstructured.NestedString(answer.Object, "spec", "renewTime")
	return renewTime == stored, nil
}

func serviceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}
