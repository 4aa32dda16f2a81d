// Package localcluster brings up a single-node Kubernetes cluster from
// binaries on a root Linux machine, as Kubernetes' hack/local-up-cluster.sh
// does: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
// kubelet and kube-proxy (iptables mode) built from the pinned
// k8s.io/kubernetes, containerd and runc from Debian's packages, the CNI
// bridge plugin on a bridge of its own, and images written without Docker.
//
// Everything it creates is recorded in a state folder as it is created
// (process ids, the bridge, the cgroup root, the kernel settings it found), so
// Down removes exactly that, also after a failed or interrupted Up, and a
// later Down (make test-e2e-cluster-down) removes what an earlier run left.
//
// Addresses: pods 198.18.0.0/24 on the bridge, services 198.19.0.0/24, both
// inside 198.18.0.0/15, the range set aside for benchmarking test hosts. The
// API server and the kubelet listen on the bridge's address 198.18.0.1, every
// other port on loopback; pods get no default route.
package localcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Network plan of the cluster (see the package comment).
const (
	BridgeName  = "lgcluster0"
	NodeIP      = "198.18.0.1"
	PodCIDR     = "198.18.0.0/24"
	ServiceCIDR = "198.19.0.0/24"
	// APIServiceIP is the ClusterIP of the kubernetes Service (the first of
	// ServiceCIDR), in the API server's serving certificate.
	APIServiceIP = "198.19.0.1"
	NodeName     = "leaseguard-node"
	// CgroupRoot is the kubelet's cgroupRoot: every pod cgroup lives below
	// it, in every hierarchy, so teardown removes one tree.
	CgroupRoot = "leaseguard-cluster"
	// PauseImage is the sandbox image: our own pause program, imported
	// under a name no registry serves.
	PauseImage = "leaseguard.local/pause:3.10"
	// LeaseguardImage is the image `make deploy IMG=leaseguard:e2e` uses.
	LeaseguardImage = "leaseguard:e2e"
)

// Record is what Up wrote down about the machine as it changed it; Down
// reads it to undo exactly that.
type Record struct {
	EtcdClientPort int `json:"etcdClientPort,omitempty"`
	EtcdPeerPort   int `json:"etcdPeerPort,omitempty"`
	APIServerPort  int `json:"apiServerPort,omitempty"`
	// APIServerArgs are kube-apiserver's arguments, for a restart.
	APIServerArgs []string `json:"apiServerArgs,omitempty"`
	// BridgeCreated is set once the bridge exists.
	BridgeCreated bool `json:"bridgeCreated,omitempty"`
	// Sysctls are the kernel settings the kubelet and kube-proxy may change,
	// as they were before Up.
	Sysctls map[string]string `json:"sysctls,omitempty"`
	// CgroupDirs are the cgroup roots Up created (one per hierarchy).
	CgroupDirs []string `json:"cgroupDirs,omitempty"`
	// CreatedDirs are folders outside the state folder that did not exist
	// before Up and that containerd or the CNI plugins create (removed when
	// nothing but empty folders is left in them).
	CreatedDirs []string `json:"createdDirs,omitempty"`
}

// State is the state folder of one cluster.
type State struct {
	Dir string
}

func (s State) path(elem ...string) string { return filepath.Join(append([]string{s.Dir}, elem...)...) }

// AdminKubeconfig is a system:masters kubeconfig for the cluster.
func (s State) AdminKubeconfig() string { return s.path("admin.kubeconfig") }

// LogDir holds one log file per component.
func (s State) LogDir() string { return s.path("logs") }

// ContainerdSocket is containerd's gRPC socket (CRI included).
func (s State) ContainerdSocket() string { return s.path("containerd", "containerd.sock") }

func (s State) recordPath() string { return s.path("cluster.json") }

// ReadRecord returns the record, empty when there is none yet.
func (s State) ReadRecord() (Record, error) {
	var r Record
	data, err := os.ReadFile(s.recordPath())
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%s: %w", s.recordPath(), err)
	}
	return r, nil
}

// update changes the record on disk at once, so an interrupted Up leaves
// a record of everything it did so far.
func (s State) update(change func(*Record)) error {
	r, err := s.ReadRecord()
	if err != nil {
		return err
	}
	change(&r)
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := s.recordPath() + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.recordPath())
}
