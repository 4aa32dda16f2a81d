package faults

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// controlPlaneComponents are the components that elect through
// Kubernetes' coordinated leader election (KEP-4355) when the control
// plane runs with the CoordinatedLeaderElection feature gate, as the kind
// cluster does (hack/kind/cluster.sh): each publishes a LeaseCandidate in
// kube-system, and the API server's election controller writes its Lease.
var controlPlaneComponents = []string{"kube-controller-manager", "kube-scheduler"}

// coordinatedElection watches the control plane's coordinated Leases
// through every fault: leaseguard guards no kube-system Lease, and must
// never delay or refuse their elections, even with every replica down.
type coordinatedElection struct {
	admin kubernetes.Interface
	stop  context.CancelFunc
	done  chan struct{}

	mu      sync.Mutex
	samples []leaseSample
}

type leaseSample struct {
	at          time.Time
	component   string
	holder      string
	renewed     time.Time
	transitions int32
	err         error
}

// startCoordinatedElection checks that the control plane elects through
// LeaseCandidates and starts sampling its Leases every half second. With
// CLUSTER_COORDINATED_ELECTION=1 (the kind stage sets it) a control plane
// that does not is a failure; another target is only told so.
func startCoordinatedElection(t *testing.T, admin kubernetes.Interface) *coordinatedElection {
	t.Helper()
	ctx := context.Background()
	var missing []string
	waitErr := func() error {
		missing = nil
		for _, component := range controlPlaneComponents {
			lease, err := admin.CoordinationV1().Leases("kube-system").Get(ctx, component, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if lease.Spec.Strategy == nil || *lease.Spec.Strategy == "" {
				missing = append(missing, component+"'s Lease has no spec.strategy")
			}
			candidates, err := admin.CoordinationV1beta1().LeaseCandidates("kube-system").List(ctx, metav1.ListOptions{})
			if err != nil {
				missing = append(missing, "LeaseCandidates: "+err.Error())
				continue
			}
			found := false
			for _, c := range candidates.Items {
				found = found || c.Spec.LeaseName == component
			}
			if !found {
				missing = append(missing, "no LeaseCandidate of "+component)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%s", strings.Join(missing, "; "))
		}
		return nil
	}
	expected := os.Getenv("CLUSTER_COORDINATED_ELECTION") == "1"
	var err error
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Second) {
		if err = waitErr(); err == nil || !expected || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		if expected {
			t.Fatalf("the control plane does not elect through coordinated leader election (CLUSTER_COORDINATED_ELECTION=1): %v", err)
		}
		t.Logf("the control plane does not elect through coordinated leader election (%v): its Leases are watched all the same", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	e := &coordinatedElection{admin: admin, stop: cancel, done: make(chan struct{})}
	go e.sample(ctx)
	return e
}

func (e *coordinatedElection) sample(ctx context.Context) {
	defer close(e.done)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, component := range controlPlaneComponents {
			s := leaseSample{at: time.Now(), component: component}
			lease, err := e.admin.CoordinationV1().Leases("kube-system").Get(ctx, component, metav1.GetOptions{})
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				s.err = err
			} else {
				if lease.Spec.HolderIdentity != nil {
					s.holder = *lease.Spec.HolderIdentity
				}
				if lease.Spec.RenewTime != nil {
					s.renewed = lease.Spec.RenewTime.Time
				}
				if lease.Spec.LeaseTransitions != nil {
					s.transitions = *lease.Spec.LeaseTransitions
				}
			}
			e.mu.Lock()
			e.samples = append(e.samples, s)
			e.mu.Unlock()
		}
	}
}

func (e *coordinatedElection) close() {
	e.stop()
	<-e.done
}

// electionFigures are one window's figures of one component's Lease.
type electionFigures struct {
	component string
	// holderChanges counts changes of holder or leaseTransitions between
	// samples the API server answered.
	holderChanges int
	// longestStale is the longest the stored renewTime went without
	// moving, as sampled.
	longestStale time.Duration
	samples      int
	// holders are the holders seen, in order, each once.
	holders []string
	// restarts counts the kubelet's restarts of the component's
	// container in the window (its static Pod's restartCount).
	restarts int
}

// ownRestarts is how many of the holder changes the component's own
// restarts explain: a restarted process comes back as a new candidate
// and the election controller hands it the Lease, with no renewal ever
// missed. A component that lost its Lease and exited for it restarts
// too, but only after its renewTime stood still for the renew deadline
// (the components' default --leader-elect-renew-deadline is client-go's,
// renewDeadline); then no restart explains anything.
func (f *electionFigures) ownRestarts() int {
	if f.longestStale >= renewDeadline {
		return 0
	}
	return min(f.restarts, f.holderChanges)
}

// begin opens a window; the function it returns closes it.
func (e *coordinatedElection) begin() func() []electionFigures {
	from := time.Now()
	before := e.restartCounts()
	return func() []electionFigures {
		after := e.restartCounts()
		e.mu.Lock()
		defer e.mu.Unlock()
		figures := summarizeElection(e.samples, from, time.Now())
		for i := range figures {
			figures[i].restarts = after[figures[i].component] - before[figures[i].component]
		}
		return figures
	}
}

// restartCounts reads the restartCount of each component's static Pods
// (kubeadm labels them component=<name>). One it cannot read counts 0:
// a restart it then misses is charged as a holder change.
func (e *coordinatedElection) restartCounts() map[string]int {
	out := map[string]int{}
	for _, component := range controlPlaneComponents {
		pods, err := e.admin.CoreV1().Pods("kube-system").List(context.Background(), metav1.ListOptions{LabelSelector: "component=" + component})
		if err != nil {
			continue
		}
		for _, p := range pods.Items {
			for _, c := range p.Status.ContainerStatuses {
				out[component] += int(c.RestartCount)
			}
		}
	}
	return out
}

func summarizeElection(samples []leaseSample, from, to time.Time) []electionFigures {
	var out []electionFigures
	for _, component := range controlPlaneComponents {
		f := electionFigures{component: component}
		var last *leaseSample
		var since time.Time
		for i := range samples {
			s := &samples[i]
			if s.component != component || s.at.Before(from) || s.at.After(to) || s.err != nil {
				continue
			}
			f.samples++
			if last == nil {
				last, since = s, s.at
				f.holders = append(f.holders, s.holder)
				continue
			}
			if s.holder != last.holder || s.transitions != last.transitions {
				f.holderChanges++
			}
			if s.holder != last.holder {
				f.holders = append(f.holders, s.holder)
			}
			// From the sample that first saw a renewTime to the one that
			// saw the next: how long it stood still, as sampled.
			f.longestStale = max(f.longestStale, s.at.Sub(since))
			if !s.renewed.Equal(last.renewed) {
				since = s.at
			}
			last = s
		}
		out = append(out, f)
	}
	return out
}

// assertElectionKept fails where a control-plane component lost or
// changed its leadership in a window: leaseguard guards none of their
// Leases, so no fault of leaseguard's may touch them.
func assertElectionKept(t *testing.T, r result) {
	t.Helper()
	for _, f := range r.election {
		if n := f.holderChanges - f.ownRestarts(); n > 0 {
			t.Errorf("%s: %s's Lease changed holder %d times (%s; %d restarts of its container; renewTime still at most %s)", r.name, f.component, n,
				strings.Join(f.holders, " → "), f.restarts, f.longestStale.Round(100*time.Millisecond))
		}
		if f.samples == 0 {
			t.Errorf("%s: no sample of %s's Lease", r.name, f.component)
		}
	}
}

// electionNote says, in the report, how the control plane's Leases fared.
func electionNote(figures []electionFigures) string {
	var parts []string
	for _, f := range figures {
		own := ""
		if n := f.ownRestarts(); n > 0 {
			own = fmt.Sprintf(" (%d of them its own restart by the kubelet, no renewal missed: %s)", n, strings.Join(f.holders, " → "))
		}
		parts = append(parts, fmt.Sprintf("%s %d holder changes%s, renewTime still at most %s", f.component, f.holderChanges, own, f.longestStale.Round(100*time.Millisecond)))
	}
	if len(parts) == 0 {
		return ""
	}
	return "coordinated election: " + strings.Join(parts, ", ")
}
