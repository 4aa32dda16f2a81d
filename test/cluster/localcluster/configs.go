package localcluster

import (
	"fmt"
	"os"
	"path/filepath"
)

// containerdConfig is containerd 1.6's configuration (Debian bookworm's):
// its own root, state and socket in the state folder, the CRI plugin with
// runc v2 on cgroupfs, our pause image, and the CNI bridge of the cluster.
func (s State) containerdConfig(cniBinDir string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
# Plugins the CRI does not need, and ones that would write outside the
# state folder (opt writes /opt/containerd).
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = %[3]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  # The machine's root may lack CAP_SYS_RESOURCE: without this, runc fails
  # every sandbox ("can't get final child's PID from pipe").
  restrict_oom_score_adj = true
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[5]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[6]q
    conf_dir = %[7]q
    max_conf_num = 1
`, s.path("containerd", "root"), s.path("containerd", "state"), s.ContainerdSocket(), PauseImage,
		s.path("containerd", "runc"), cniBinDir, s.path("cni", "net.d"))
}

// cniConfig puts pods on the cluster's bridge with addresses from PodCIDR
// and one route, to the services through the node: no default route and no
// masquerading, so a pod reaches nothing but the node and other pods.
func (s State) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "leaseguard-cluster",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %[1]q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %[2]q,
        "ranges": [[{"subnet": %[3]q, "gateway": %[4]q}]],
        "routes": [{"dst": %[5]q}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, BridgeName, s.path("cni", "ipam"), PodCIDR, NodeIP, ServiceCIDR)
}

// kubeletConfig is the kubelet's configuration: containerd's CRI socket,
// cgroupfs under CgroupRoot (cgroup v1 allowed), serving on the node
// address with certificates of the cluster CA, no read-only port, no DNS,
// no image garbage collection (the images are imported, not pullable) and
// eviction thresholds a busy shared disk does not cross.
func (s State) kubeletConfig() string {
	pki := s.path("pki")
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
tlsCertFile: %[2]s/kubelet.crt
tlsPrivateKeyFile: %[2]s/kubelet.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[2]s/ca.crt
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://%[3]s
cgroupDriver: cgroupfs
cgroupRoot: /%[4]s
failCgroupV1: false
failSwapOn: false
resolvConf: ""
clusterDomain: cluster.local
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
serializeImagePulls: false
rotateCertificates: false
serverTLSBootstrap: false
`, NodeIP, pki, s.ContainerdSocket(), CgroupRoot)
}

// kubeProxyConfig is kube-proxy in iptables mode, serving its health and
// metrics on loopback, NodePorts only on the node address, and leaving the
// kernel's conntrack settings and route_localnet as they are.
func (s State) kubeProxyConfig() string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %[1]s
hostnameOverride: %[2]s
bindAddress: %[3]s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clusterCIDR: %[4]s
nodePortAddresses: ["%[3]s/32"]
iptables:
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, s.path("kube-proxy.kubeconfig"), NodeName, NodeIP, PodCIDR)
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}
