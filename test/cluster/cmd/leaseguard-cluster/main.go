// Command leaseguard-cluster brings up, and tears down, the single-node
// cluster of leaseguard's cluster tests (package localcluster):
//
//	leaseguard-cluster preflight   # can this machine run it? (installs Debian's containerd, runc, iptables when missing)
//	leaseguard-cluster up          # build images, start everything, wait for a Ready node
//	leaseguard-cluster cert-manager # for config/e2e: issue the Certificate's Secret, run cert-manager's CA injector
//	leaseguard-cluster down        # remove everything the state folder records, report what is left
//
// It runs as root. `make test-e2e-cluster` drives it (hack/e2e-cluster.sh).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/leaseguard/leaseguard/test/cluster/localcluster"
)

// exitSkip is the exit code of `preflight` on a machine that cannot run the
// cluster; the reason is printed as "skipped: <reason>".
const exitSkip = 3

func main() {
	fs := flag.NewFlagSet("leaseguard-cluster", flag.ExitOnError)
	state := fs.String("state-dir", defaultStateDir(), "the cluster's state folder (env CLUSTER_STATE_DIR)")
	repo := fs.String("repo", "", "the leaseguard repository (default: two folders above this module)")
	assets := fs.String("assets", "", "folder with etcd, kube-apiserver, kubectl, kubelet, kube-controller-manager, kube-scheduler, kube-proxy")
	cniBin := fs.String("cni-bin-dir", "", "cache of the built CNI plugins (default <repo>/bin/cluster/cni)")
	install := fs.Bool("install", true, "preflight: install missing Debian packages with apt-get")
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: leaseguard-cluster preflight|up|cert-manager|down [flags]")
		os.Exit(2)
	}
	cmd := os.Args[1]
	_ = fs.Parse(os.Args[2:])

	wd, err := os.Getwd()
	if err != nil {
		fail(err)
	}
	moduleDir := wd
	if *repo == "" {
		*repo = filepath.Join(moduleDir, "..", "..")
	}
	if *cniBin == "" {
		*cniBin = filepath.Join(*repo, "bin", "cluster", "cni")
	}
	s := localcluster.State{Dir: *state}

	switch cmd {
	case "preflight":
		err := localcluster.Preflight(*install, os.Stdout)
		var skip *localcluster.SkipError
		if errors.As(err, &skip) {
			fmt.Printf("skipped: %s\n", skip.Reason)
			os.Exit(exitSkip)
		}
		if err != nil {
			fail(err)
		}
		fmt.Println("cluster: preflight: this machine can run the cluster")
	case "up":
		if *assets == "" {
			fail(errors.New("--assets is required"))
		}
		// Ctrl-C or SIGTERM stops the bring-up; the caller then runs down.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		err := localcluster.Up(ctx, s, localcluster.Options{
			RepoRoot: *repo, ModuleDir: moduleDir, AssetsDir: *assets, CNIBinDir: *cniBin, Out: os.Stdout,
		})
		if err != nil {
			fail(fmt.Errorf("up: %w (logs in %s; run `make test-e2e-cluster-down`)", err, s.LogDir()))
		}
		fmt.Printf("cluster: up; kubeconfig %s\n", s.AdminKubeconfig())
	case "cert-manager":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := localcluster.IssueCertManagerSecret(ctx, s, *repo); err != nil {
			fail(fmt.Errorf("cert-manager: %w", err))
		}
		self, err := os.Executable()
		if err != nil {
			fail(err)
		}
		if err := localcluster.StartCAInjector(s, self, "--state-dir", s.Dir); err != nil {
			fail(fmt.Errorf("cert-manager: %w", err))
		}
		fmt.Println("cluster: cert-manager: Secret issued, CA injector running")
	case "cainjector":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := localcluster.RunCAInjector(ctx, s); err != nil {
			fail(fmt.Errorf("cainjector: %w", err))
		}
	case "down":
		signal.Ignore(os.Interrupt) // a second Ctrl-C must not leave half a teardown
		if err := localcluster.Down(s, os.Stdout); err != nil {
			fail(fmt.Errorf("down: %w", err))
		}
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q: want preflight, up, cert-manager or down\n", cmd)
		os.Exit(2)
	}
}

func defaultStateDir() string {
	if d := os.Getenv("CLUSTER_STATE_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "leaseguard-cluster")
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "leaseguard-cluster: %v\n", err)
	os.Exit(1)
}
