package main

import (
	"context"
	"fmt"
	"io"
	"k8s.io/client-go/rest"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leaseguard/leaseguard/test/procstat"
)

// measurement is one setup's run in one round.
type measurement struct {
	setup      string
	round      int
	renewals   int
	failures   int
	p50, p99   time.Duration
	throughput float64            // renewals per second
	cpu        map[string]float64 // CPU seconds per process, per 1,000 renewals
}

// run times every setup in every round; the order of the setups rotates from
// round to round so that no setup always follows the same one.
func (b *bench) run(ctx context.Context) ([]measurement, error) {
	names := splitList(b.o.setups)
	for _, n := range names {
		if b.setups[n] == nil {
			return nil, fmt.Errorf("unknown setup %q (have %v)", n, setupNames)
		}
	}
	var out []measurement
	for r := 0; r < b.o.rounds; r++ {
		for i := range names {
			s := b.setups[names[(i+r)%len(names)]]
			m, err := b.measure(ctx, s, r)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", r+1, s.name, err)
			}
			progress("round %d %-22s %6.0f renewals/s  p50 %-8s p99 %-8s (%d failed)", r+1, s.name, m.throughput, m.p50.Round(10*time.Microsecond), m.p99.Round(10*time.Microsecond), m.failures)
			out = append(out, m)
		}
	}
	return out, nil
}

func (b *bench) measure(ctx context.Context, s *setup, round int) (measurement, error) {
	if err := s.install(ctx); err != nil {
		return measurement{}, fmt.Errorf("install: %w", err)
	}
	defer func() {
		_ = s.uninstall(context.Background())
		b.settle(ctx)
	}()
	if err := s.prove(ctx); err != nil {
		return measurement{}, fmt.Errorf("not in effect: %w", err)
	}
	renewers, err := b.renewers(ctx, s.namespace)
	if err != nil {
		return measurement{}, err
	}
	warm, cancelWarm := context.WithTimeout(ctx, b.o.warmup)
	renewAll(warm, renewers, nil)
	cancelWarm()
	// A renewal cut off by the end of the warm-up may still have been
	// stored: start from what is stored.
	for _, r := range renewers {
		fresh, err := r.leases.Get(ctx, r.lease.Name, metav1.GetOptions{})
		if err != nil {
			return measurement{}, err
		}
		r.lease = fresh
	}

	if name := os.Getenv("BENCH_PPROF"); name != "" && round == 0 {
		go b.profile(s.name, name)
	}
	cpu0 := procstat.ReadCPU(b.procs)
	var mu sync.Mutex
	var latencies []time.Duration
	failures := 0
	timed, cancel := context.WithTimeout(ctx, b.o.duration)
	start := time.Now()
	renewAll(timed, renewers, func(took time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failures++
			if failures <= 3 {
				progress("%s: renewal failed: %v", s.name, err)
			}
			return
		}
		latencies = append(latencies, took)
	})
	elapsed := time.Since(start)
	cancel()
	cpu1 := procstat.ReadCPU(b.procs)

	m := measurement{setup: s.name, round: round, renewals: len(latencies), failures: failures,
		throughput: float64(len(latencies)) / elapsed.Seconds(), cpu: map[string]float64{}}
	if len(latencies) == 0 {
		return m, fmt.Errorf("no renewal succeeded (%d failed)", failures)
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	m.p50, m.p99 = latencies[len(latencies)/2], latencies[len(latencies)*99/100]
	for name := range b.procs {
		m.cpu[name] = (cpu1[name] - cpu0[name]) / float64(len(latencies)) * 1000
	}
	return m, nil
}

// renewer renews one Lease as its bound elector, from its pod.
type renewer struct {
	leases interface {
		Update(context.Context, *coordinationv1.Lease, metav1.UpdateOptions) (*coordinationv1.Lease, error)
		Get(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error)
	}
	lease *coordinationv1.Lease
}

// renewers creates (or reads) every elector's Lease in ns.
func (b *bench) renewers(ctx context.Context, ns string) ([]*renewer, error) {
	var out []*renewer
	for n := 0; n < b.o.clients; n++ {
		user, pod, name := elector(ns, n)
		cs, err := b.as(user, pod)
		if err != nil {
			return nil, err
		}
		leases := cs.CoordinationV1().Leases(ns)
		now := metav1.NewMicroTime(time.Now())
		l, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(pod + "_1"), LeaseDurationSeconds: ptr.To[int32](15), AcquireTime: &now, RenewTime: &now}},
			metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			l, err = leases.Get(ctx, name, metav1.GetOptions{})
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, &renewer{leases: leases, lease: l})
	}
	return out, nil
}

// renewAll has every renewer renew back to back until ctx ends, as client-go
// does (a full UPDATE with the resourceVersion last seen), reporting each.
func renewAll(ctx context.Context, rs []*renewer, report func(time.Duration, error)) {
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Spread the starts so that the renewers do not move in step.
			time.Sleep(time.Duration(rand.Int63n(int64(5 * time.Millisecond))))
			for ctx.Err() == nil {
				next := r.lease.DeepCopy()
				next.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
				start := time.Now()
				got, err := r.leases.Update(ctx, next, metav1.UpdateOptions{})
				took := time.Since(start)
				if ctx.Err() != nil || (err != nil && strings.Contains(err.Error(), "would exceed context deadline")) {
					return
				}
				if err == nil {
					r.lease = got
				} else if apierrors.IsConflict(err) {
					if fresh, gerr := r.leases.Get(ctx, r.lease.Name, metav1.GetOptions{}); gerr == nil {
						r.lease = fresh
					}
				}
				if report != nil {
					report(took, err)
				}
			}
		}()
	}
	wg.Wait()
}

// settle waits until no guard is in effect any more: the API server drops
// admission configuration within a moment of its deletion.
func (b *bench) settle(ctx context.Context) {
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if b.intruderWrite(ctx, selectedNS) == nil {
			return
		}
	}
	progress("a guard was still in effect 15s after it was removed")
}

// profile saves a CPU profile of kube-apiserver while setup runs, for
// BENCH_PPROF=<folder>: where its time goes.
func (b *bench) profile(setup, folder string) {
	rc := rest.CopyConfig(b.cp.Config)
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return
	}
	secs := int(b.o.duration.Seconds()) - 1
	resp, err := hc.Get(strings.TrimSuffix(rc.Host, "/") + "/debug/pprof/profile?seconds=" + strconv.Itoa(secs))
	if err != nil {
		progress("profile: %v", err)
		return
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	_ = os.WriteFile(filepath.Join(folder, setup+".pprof"), data, 0o644)
}
