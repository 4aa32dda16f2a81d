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
	// live managers (not exited) and, of them, those leading (and so
	// reconciling).
	live, leading int
}

// active: the cluster has managers and every one of them leads.
func (s clusterSample) active() bool { return s.live > 0 && s.leading == s.live }

// sample is both clusters and the global lock at one instant.
type sample struct {
	at       time.Time
	phase    string
	clusters []clusterSample // in env.clusters order
	lock     gcslock.Observed
	lockRead bool
}

// leadingClusters counts the clusters with any manager leading.
func (s sample) leadingClusters() int {
	n := 0
	for _, c := range s.clusters {
		if c.leading > 0 {
			n++
		}
	}
	return n
}

// activeIndex is the index of the one active cluster while the other has
// no manager leading, or -1.
func (s sample) activeIndex() int {
	found := -1
	for i, c := range s.clusters {
		switch {
		case c.leading == 0:
		case c.active() && found < 0:
			found = i
		default:
			return -1
		}
	}
	return found
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
			if m.Leading() {
				cs.leading++
			}
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
	phase                           string
	samples, oneActive, none, mixed int
	twoLeading                      int
}

func countPhase(phase string, samples []sample) phaseCounts {
	pc := phaseCounts{phase: phase, samples: len(samples)}
	for _, smp := range samples {
		switch {
		case smp.leadingClusters() > 1:
			pc.twoLeading++
		case smp.activeIndex() >= 0:
			pc.oneActive++
		case smp.leadingClusters() == 0:
			pc.none++
		default:
			pc.mixed++ // one cluster with some managers leading, not all
		}
	}
	return pc
}

// report prints how every phase's samples split.
func (s *sampler) report(phases []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-16s %8s %11s %12s %16s %14s\n", "phase", "samples", "one active", "none leading", "partly leading", "two leading")
	total := phaseCounts{phase: "all"}
	for _, p := range phases {
		pc := countPhase(p, s.of(p))
		fmt.Fprintf(&b, "%-16s %8d %11d %12d %16d %14d\n", pc.phase, pc.samples, pc.oneActive, pc.none, pc.mixed, pc.twoLeading)
		total.samples += pc.samples
		total.oneActive += pc.oneActive
		total.none += pc.none
		total.mixed += pc.mixed
		total.twoLeading += pc.twoLeading
	}
	fmt.Fprintf(&b, "%-16s %8d %11d %12d %16d %14d\n", total.phase, total.samples, total.oneActive, total.none, total.mixed, total.twoLeading)
	return b.String()
}

// describe shows a sample for a failure message.
func (smp sample) describe() string {
	var parts []string
	for i, c := range smp.clusters {
		parts = append(parts, fmt.Sprintf("%s: %d/%d leading", env.clusters[i], c.leading, c.live))
	}
	lock := "unread"
	if smp.lockRead {
		lock = fmt.Sprintf("%s renewed %s", smp.lock.HolderIdentity, smp.lock.RenewTime.Format("15:04:05.000"))
	}
	return fmt.Sprintf("%s [%s] %s; lock %s", smp.at.Format("15:04:05.000"), smp.phase, strings.Join(parts, "; "), lock)
}
