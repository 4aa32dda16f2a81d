package clustertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/leaseguard/leaseguard/test/cluster/localcluster"
)

// Target is the cluster a test breaks: the single-node cluster of
// `leaseguard-cluster up` (CLUSTER_STATE_DIR) or any other one described by
// the environment, as hack/kind does:
//
//	CLUSTER_KUBECONFIG         an administrator's kubeconfig
//	CLUSTER_PKI                a folder with apiserver-admission-client.{crt,key}
//	                           (the client certificate the API server presents
//	                           to webhooks) and kubelet-client.{crt,key} (another
//	                           name from a CA leaseguard trusts)
//	CLUSTER_RESTART_APISERVER  a command that stops the API server and returns
//	                           once it is ready again
type Target struct {
	Kubeconfig string
	PKI        string
	// RestartAPIServer is nil where the target cannot restart its API server.
	RestartAPIServer func(ctx context.Context) (time.Duration, error)
}

// TargetFromEnv returns the target the environment names, or why there is none.
func TargetFromEnv() (Target, string) {
	if dir := os.Getenv("CLUSTER_STATE_DIR"); dir != "" {
		state := localcluster.State{Dir: dir}
		t := Target{Kubeconfig: state.AdminKubeconfig(), PKI: filepath.Join(dir, "pki")}
		if assets := os.Getenv("CLUSTER_ASSETS"); assets != "" {
			t.RestartAPIServer = func(ctx context.Context) (time.Duration, error) {
				return state.RestartAPIServer(ctx, assets)
			}
		}
		return t, ""
	}
	kubeconfig := os.Getenv("CLUSTER_KUBECONFIG")
	if kubeconfig == "" {
		return Target{}, "needs CLUSTER_STATE_DIR (a cluster of `leaseguard-cluster up`) or CLUSTER_KUBECONFIG (hack/kind): " +
			"a cluster with leaseguard installed by its chart (make test-e2e-cluster, make test-e2e-kind)"
	}
	t := Target{Kubeconfig: kubeconfig, PKI: os.Getenv("CLUSTER_PKI")}
	if restart := strings.Fields(os.Getenv("CLUSTER_RESTART_APISERVER")); len(restart) > 0 {
		t.RestartAPIServer = func(ctx context.Context) (time.Duration, error) {
			start := time.Now()
			out, err := exec.CommandContext(ctx, restart[0], restart[1:]...).CombinedOutput()
			if err != nil {
				return 0, fmt.Errorf("%s: %v\n%s", strings.Join(restart, " "), err, out)
			}
			return time.Since(start), nil
		}
	}
	return t, ""
}
