package clustertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Target is the cluster a test breaks, as the environment describes it
// (hack/kind/e2e.sh sets it for its kind cluster):
//
//	CLUSTER_KUBECONFIG         an administrator's kubeconfig
//	CLUSTER_PKI                a folder with apiserver-admission-client.{crt,key}
//	                           (the client certificate the API server presents
//	                           to webhooks) and kubelet-client.{crt,key} (another
//	                           name from a CA leaseguard trusts)
//	CLUSTER_RESTART_APISERVER  a command that stops the API server and returns
//	                           once it is ready again
//	CLUSTER_NODE_FAULT         a command taking node-kill NODE, node-start NODE
//	                           (returns once the node is Ready), partition NODE
//	                           POD_IP PORT and heal NODE POD_IP PORT (hack/kind/cluster.sh)
type Target struct {
	Kubeconfig string
	PKI        string
	// RestartAPIServer is nil where the target cannot restart its API server.
	RestartAPIServer func(ctx context.Context) (time.Duration, error)
	// NodeFault is nil where the target cannot break its nodes.
	NodeFault func(ctx context.Context, args ...string) error
}

// TargetFromEnv returns the target the environment names, or why there is none.
func TargetFromEnv() (Target, string) {
	kubeconfig := os.Getenv("CLUSTER_KUBECONFIG")
	if kubeconfig == "" {
		return Target{}, "needs CLUSTER_KUBECONFIG: a cluster with leaseguard installed by its chart (make test-e2e-kind sets it)"
	}
	t := Target{Kubeconfig: kubeconfig, PKI: os.Getenv("CLUSTER_PKI")}
	if restart := strings.Fields(os.Getenv("CLUSTER_RESTART_APISERVER")); len(restart) > 0 {
		t.RestartAPIServer = func(ctx context.Context) (time.Duration, error) {
			start := time.Now()
			if err := run(ctx, restart); err != nil {
				return 0, err
			}
			return time.Since(start), nil
		}
	}
	if fault := strings.Fields(os.Getenv("CLUSTER_NODE_FAULT")); len(fault) > 0 {
		t.NodeFault = func(ctx context.Context, args ...string) error {
			return run(ctx, append(fault[:len(fault):len(fault)], args...))
		}
	}
	return t, ""
}

func run(ctx context.Context, command []string) error {
	out, err := exec.CommandContext(ctx, command[0], command[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v\n%s", strings.Join(command, " "), err, out)
	}
	return nil
}
