package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/leaseguard/leaseguard/internal/top/leasetraffic"
	"github.com/leaseguard/leaseguard/test/controlplane"
)

// apiserver runs the real `kubectl leaseguard top --once` binary against a real API
// server while writers renew the leases at a known period.
func apiserver(o options) error {
	tmp, err := os.MkdirTemp("", "topload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	binary, err := controlplane.BuildPlugin(tmp)
	if err != nil {
		return err
	}
	cp, err := controlplane.Start(controlplane.Options{})
	if err != nil {
		return err
	}
	defer func() { _ = cp.Stop() }()
	kubeconfig := filepath.Join(tmp, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS, cfg.Burst = 1e6, 1e6
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Only top is measured: no webhook is called for these writes.
	_ = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, "leaseguard-validating-webhook-configuration", metav1.DeleteOptions{})
	_ = cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, "leaseguard-mutating-webhook-configuration", metav1.DeleteOptions{})

	namespaces := min(o.namespaces, o.leases)
	for n := 0; n < namespaces; n++ {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ns-%04d", n)}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	leases := make([]*coordinationv1.Lease, o.leases)
	for i := range leases {
		now := metav1.NewMicroTime(time.Now())
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%04d", i%namespaces), Name: fmt.Sprintf("leader-%05d", i)},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(fmt.Sprintf("leader-%05d-0_x", i)), LeaseDurationSeconds: ptr.To[int32](15),
				AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To[int32](0)},
		}
		if leases[i], err = cs.CoordinationV1().Leases(l.Namespace).Create(ctx, l, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	fmt.Printf("# leaseguard top through a real API server: %d leases every %s (%.0f writes/s asked), %d writers, window %s, %d CPUs, %s\n\n",
		o.leases, o.period, float64(o.leases)/o.period.Seconds(), o.writers, o.window, runtime.NumCPU(), time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("command: %s\n\n", strings.Join(os.Args, " "))

	// Writer w renews leases w, w+writers, ... each every period, spread
	// evenly over the period, and records the acknowledged writes.
	var mu sync.Mutex
	acked := make([][]time.Time, o.leases)
	var failures atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < o.writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ctx.Err() == nil; k++ {
				for i := w; i < o.leases && ctx.Err() == nil; i += o.writers {
					due := start.Add(time.Duration(k)*o.period + time.Duration(i)*o.period/time.Duration(o.leases))
					if wait := time.Until(due); wait > 0 {
						select {
						case <-ctx.Done():
							return
						case <-time.After(wait):
						}
					}
					l := leases[i]
					l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
					updated, err := cs.CoordinationV1().Leases(l.Namespace).Update(ctx, l, metav1.UpdateOptions{})
					if err != nil {
						if ctx.Err() == nil {
							failures.Add(1)
						}
						continue
					}
					leases[i] = updated
					mu.Lock()
					acked[i] = append(acked[i], time.Now())
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(o.period + time.Second) // the writers reach their pace

	cmd := exec.Command(binary, "top", "--kubeconfig", kubeconfig, "-A", "--once", "-o", "json", "--window", o.window.String())
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("leaseguard top: %w", err)
	}
	cancel()
	wg.Wait()
	var r leasetraffic.Report
	if err := json.Unmarshal(out, &r); err != nil {
		return err
	}
	maxRSS := float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss) / 1024
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()

	var truthTotal, maxErr, sumErr float64
	var topTotal float64
	n := 0
	mu.Lock()
	for _, l := range r.Leases {
		var idx int
		if _, err := fmt.Sscanf(l.Name, "leader-%05d", &idx); err != nil || !strings.HasPrefix(l.Namespace, "ns-") {
			continue
		}
		c := 0
		for _, at := range acked[idx] {
			if at.After(r.Time.Add(-o.window)) && !at.After(r.Time) {
				c++
			}
		}
		truth := float64(c) / o.window.Seconds()
		truthTotal += truth
		topTotal += l.WritesPerSecond
		e := math.Abs(l.WritesPerSecond-truth) / truth
		maxErr = math.Max(maxErr, e)
		sumErr += e
		n++
	}
	mu.Unlock()
	fmt.Println("| leases | writes/s acknowledged (truth) | writes/s reported by top | failed writes | max / mean per-lease rate error | top peak RSS | top CPU |")
	fmt.Println("|---|---|---|---|---|---|---|")
	fmt.Printf("| %d | %.1f | %.1f | %d | %.1f%% / %.2f%% | %.1f MiB | %.1fs over %s |\n",
		n, truthTotal, topTotal, failures.Load(), 100*maxErr, 100*sumErr/float64(n), maxRSS, cpu.Seconds(), o.window)
	return nil
}
