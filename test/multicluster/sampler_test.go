package multicluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/leaseguard/leaseguard/test/multicluster/gcslock"
)

const sampleEvery = 200 * time.Millisecond

// clusterSample is one cluster at one instant.
type clusterSample struct {
	live, reconciling int
	// views are the global holders the live managers last read.
	views []string
	// oldestRenewal is the age of the oldest global renewal a reconciling
	// manager goes by: how close it came to standing down.
	oldestRenewal time.Duration
}

// active: the cluster has managers and every one of them reconciles.
func (s clusterSample) active() bool { return s.live > 0 && s.reconciling == s.live }

// sample is both clusters and the global lock at one instant.
type sample struct {
	at       time.Time
	phase    string
	clusters []clusterSample // in env.clusters order
	lock     gcslock.Observed
	lockRead bool
}

// reconcilingClusters counts the clusters with any manager reconciling.
func (s sample) reconcilingClusters() int {
	n := 0
	for _, c := range s.clusters {
		if c.reconciling > 0 {
			n++
		}
	}
	return n
}

// sampler records both clusters every sampleEvery, from the managers' own
// state and the global lock in the bucket, while the specs act.
type sampler struct {
	f      *fleet
	lock   *gcslock.Lock
	cancel context.CancelFunc
	done   sync.WaitGroup

	mu      sync.Mutex
	phase   string
	samples []sample
}

func startSampler(f *fleet) *sampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sampler{f: f, lock: gcslock.New(env.admin, bucket, systemNS+"/"+mclName), cancel: cancel, phase: "start"}
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.take(ctx)
			}
		}
	}()
	return s
}

func (s *sampler) take(ctx context.Context) {
	smp := sample{at: time.Now()}
	for _, c := range env.clusters {
		var cs clusterSample
		for _, m := range s.f.live(c) {
			cs.live++
			view := m.View()
			if m.Reconciling() {
				cs.reconciling++
				cs.oldestRenewal = max(cs.oldestRenewal, smp.at.Sub(view.GlobalRenewTime))
			}
			cs.views = append(cs.views, view.GlobalHolder)
		}
		smp.clusters = append(smp.clusters, cs)
	}
	lock, err := s.lock.Read(ctx)
	smp.lock, smp.lockRead = lock, err == nil
	s.mu.Lock()
	defer s.mu.Unlock()
	smp.phase = s.phase
	s.samples = append(s.samples, smp)
}

func (s *sampler) stop() {
	s.cancel()
	s.done.Wait()
}

// setPhase labels the samples from now on.
func (s *sampler) setPhase(name string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.phase = name
	return time.Now()
}

// of returns the samples of phase, or all of them for "".
func (s *sampler) of(phase string) []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sample
	for _, smp := range s.samples {
		if phase == "" || smp.phase == phase {
			out = append(out, smp)
		}
	}
	return out
}

// phaseCounts are how the samples of a phase split.
type phaseCounts struct {
	phase                               string
	samples, oneActive, none, twoActive int
	oldestRenewal                       time.Duration
}

func countPhase(phase string, samples []sample) phaseCounts {
	pc := phaseCounts{phase: phase, samples: len(samples)}
	for _, smp := range samples {
		for _, c := range smp.clusters {
			pc.oldestRenewal = max(pc.oldestRenewal, c.oldestRenewal)
		}
		switch smp.reconcilingClusters() {
		case 0:
			pc.none++
		case 1:
			for _, c := range smp.clusters {
				if c.active() {
					pc.oneActive++
				}
			}
		default:
			pc.twoActive++
		}
	}
	return pc
}

// report prints how every phase's samples split.
func (s *sampler) report(phases []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s %8s %18s %12s %16s %22s\n", "phase", "samples", "one cluster active", "none active", "two reconciling", "oldest global renewal")
	total := phaseCounts{phase: "all"}
	for _, p := range phases {
		pc := countPhase(p, s.of(p))
		fmt.Fprintf(&b, "%-12s %8d %18d %12d %16d %22s\n", pc.phase, pc.samples, pc.oneActive, pc.none, pc.twoActive, pc.oldestRenewal.Round(time.Millisecond))
		total.samples += pc.samples
		total.oneActive += pc.oneActive
		total.none += pc.none
		total.twoActive += pc.twoActive
		total.oldestRenewal = max(total.oldestRenewal, pc.oldestRenewal)
	}
	fmt.Fprintf(&b, "%-12s %8d %18d %12d %16d %22s\n", total.phase, total.samples, total.oneActive, total.none, total.twoActive, total.oldestRenewal.Round(time.Millisecond))
	fmt.Fprintf(&b, "(a manager reconciles while its cluster's last global renewal is younger than %s; another cluster can take the lock once it is %s old)\n",
		mclTimings.RenewDeadline, mclTimings.LeaseDuration)
	return b.String()
}

// describe shows a sample for a failure message.
func (smp sample) describe() string {
	var parts []string
	for i, c := range smp.clusters {
		parts = append(parts, fmt.Sprintf("%s: %d/%d reconciling, views %v", env.clusters[i], c.reconciling, c.live, c.views))
	}
	lock := "unread"
	if smp.lockRead {
		lock = fmt.Sprintf("%s renewed %s", smp.lock.HolderIdentity, smp.lock.RenewTime.Format("15:04:05.000"))
	}
	return fmt.Sprintf("%s [%s] %s; lock %s", smp.at.Format("15:04:05.000"), smp.phase, strings.Join(parts, "; "), lock)
}
