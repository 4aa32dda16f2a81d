// benchapi measures what admission costs a Lease renewal through a real
// kube-apiserver and etcd, side by side: no admission, an equivalent
// ValidatingAdmissionPolicy, a no-op controller-runtime webhook (in a
// process of its own, this program started again), and
// leaseguard on a lease its policy selects and on one it does not. The
// setups run in interleaved rounds and every figure is a ratio against its
// baseline in the same round: this machine is shared and noisy, so read the
// ratios, not the times.
//
//	cd test/perf && go run ./benchapi --rounds 3 --duration 8s
//
// (make bench-apiserver). Each setup is proven in effect before it is timed:
// a policy or leaseguard refuses an intruder, a webhook counts its calls,
// and on the unselected lease leaseguard is not called at all.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/leaseguard/leaseguard/test/controlplane"
)

type options struct {
	rounds   int
	duration time.Duration
	warmup   time.Duration
	clients  int
	setups   string
}

func main() {
	if spec := os.Getenv(noopServerEnv); spec != "" {
		ctrllog.SetLogger(logr.Discard())
		if err := runNoopServer(spec); err != nil {
			fmt.Fprintln(os.Stderr, "benchapi no-op webhook:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.IntVar(&o.rounds, "rounds", 3, "interleaved rounds of every setup")
	flag.DurationVar(&o.duration, "duration", 8*time.Second, "measured time per setup and round")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured renewals before each measurement")
	flag.IntVar(&o.clients, "clients", 8, "concurrent renewing clients, each on its own Lease")
	flag.StringVar(&o.setups, "setups", strings.Join(setupNames, ","), "setups to run, in this order in the first round")
	flag.Parse()
	klog.SetLogger(logr.Discard())
	ctrllog.SetLogger(logr.Discard())
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "benchapi:", err)
		os.Exit(1)
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "benchapi: %s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func run(o options) error {
	tmp, err := os.MkdirTemp("", "leaseguard-benchapi-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	progress("building leaseguard, starting kube-apiserver and etcd ...")
	binary, err := controlplane.BuildLeaseguard(tmp)
	if err != nil {
		return err
	}
	policyPath := filepath.Join(tmp, "policy.yaml")
	if err := os.WriteFile(policyPath, []byte(benchPolicy), 0o600); err != nil {
		return err
	}
	cp, err := controlplane.Start(controlplane.Options{Policy: policyPath, SkipAdmission: true})
	if err != nil {
		return err
	}
	defer func() { _ = cp.Stop() }()
	guard, err := cp.StartLeaseguard(binary, policyPath)
	if err != nil {
		return err
	}
	defer guard.Stop()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, err := newBench(ctx, cp, guard, policyPath, o)
	if err != nil {
		return err
	}
	results, err := b.run(ctx)
	if err != nil {
		return err
	}
	report(os.Stdout, o, results)
	return nil
}
