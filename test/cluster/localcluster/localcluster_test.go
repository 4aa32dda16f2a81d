package localcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCleanupScriptRemovesOnlyTheClustersChainsAndJumps(t *testing.T) {
	rules := `-P PREROUTING ACCEPT
-P OUTPUT ACCEPT
-N KUBE-SERVICES
-N KUBE-SVC-ABC
-N CNI-HOSTPORT-DNAT
-N DOCKER
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A OUTPUT -m addrtype --dst-type LOCAL -j DOCKER
-A KUBE-SERVICES -d 198.19.0.1/32 -j KUBE-SVC-ABC
-A DOCKER -j RETURN
`
	got := cleanupScript("nat", rules)
	want := `*nat
-D PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-D OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-D OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-F KUBE-SERVICES
-F KUBE-SVC-ABC
-F CNI-HOSTPORT-DNAT
-X KUBE-SERVICES
-X KUBE-SVC-ABC
-X CNI-HOSTPORT-DNAT
COMMIT
`
	if got != want {
		t.Fatalf("cleanup script:\n%s\nwant:\n%s", got, want)
	}
	if got := cleanupScript("filter", "-P INPUT ACCEPT\n-N DOCKER\n-A INPUT -j DOCKER\n"); got != "" {
		t.Fatalf("a table without the cluster's chains got a script:\n%s", got)
	}
}

func TestReadDockerfileMatchesTheRepositorysDockerfile(t *testing.T) {
	img, err := readDockerfile(filepath.Join("..", "..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if img.User != "65532:65532" || strings.Join(img.Entrypoint, " ") != "/leaseguard" || strings.Join(img.Cmd, " ") != "serve" {
		t.Fatalf("image: %+v", img)
	}
	if strings.Join(img.BuildArgs, " ") != "-trimpath -buildvcs=false -ldflags -s -w -buildid= -X main.version=e2e ./cmd/leaseguard" {
		t.Fatalf("build args: %q", img.BuildArgs)
	}
}

func TestReadDockerfileRefusesABuildItDoesNotMatch(t *testing.T) {
	for name, text := range map[string]string{
		"another build line": "FROM golang AS build\nRUN CGO_ENABLED=0 GOOS=linux go build -race -o /out/leaseguard ./cmd/leaseguard\nFROM scratch\nUSER 1:1\nENTRYPOINT [\"/leaseguard\"]\n",
		"another base":       "FROM golang AS build\nRUN CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false -ldflags \"-s -w -buildid= -X main.version=${VERSION}\" -o /out/leaseguard ./cmd/leaseguard\nFROM debian\nUSER 1:1\nENTRYPOINT [\"/leaseguard\"]\n",
		"no user":            "FROM golang AS build\nRUN CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false -ldflags \"-s -w -buildid= -X main.version=${VERSION}\" -o /out/leaseguard ./cmd/leaseguard\nFROM scratch\nENTRYPOINT [\"/leaseguard\"]\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "Dockerfile")
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := readDockerfile(path); err == nil || !strings.Contains(err.Error(), path) {
				t.Fatalf("want an error naming %s, got %v", path, err)
			}
		})
	}
}

func TestSingleFileImageIsOneNonRootLayer(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	img, err := singleFileImage(bin, "leaseguard", "65532:65532", []string{"/leaseguard"}, []string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Config.User != "65532:65532" || cfg.Config.Entrypoint[0] != "/leaseguard" || cfg.Config.Cmd[0] != "serve" {
		t.Fatalf("config: %+v", cfg)
	}
}

func TestConfigsKeepTheClusterInItsOwnAddressesAndFolders(t *testing.T) {
	s := State{Dir: "/state"}
	containerd := s.containerdConfig("/cni-bin")
	for _, want := range []string{`restrict_oom_score_adj = true`, `SystemdCgroup = false`, `runtime_type = "io.containerd.runc.v2"`,
		`sandbox_image = "leaseguard.local/pause:3.10"`, `address = "/state/containerd/containerd.sock"`, `Root = "/state/containerd/runc"`} {
		if !strings.Contains(containerd, want) {
			t.Errorf("containerd config lacks %s", want)
		}
	}
	cni := s.cniConfig()
	for _, want := range []string{`"ipMasq": false`, `"subnet": "198.18.0.0/24"`, `"routes": [{"dst": "198.19.0.0/24"}]`, `"dataDir": "/state/cni/ipam"`} {
		if !strings.Contains(cni, want) {
			t.Errorf("CNI config lacks %s", want)
		}
	}
	if strings.Contains(cni, "0.0.0.0/0") || strings.Contains(cni, "isDefaultGateway") {
		t.Errorf("pods must get no default route:\n%s", cni)
	}
	kubelet := s.kubeletConfig()
	for _, want := range []string{"failCgroupV1: false", "cgroupDriver: cgroupfs", "cgroupRoot: /leaseguard-cluster", "readOnlyPort: 0", "address: 198.18.0.1"} {
		if !strings.Contains(kubelet, want) {
			t.Errorf("kubelet config lacks %s", want)
		}
	}
	if !strings.Contains(s.kubeProxyConfig(), "mode: iptables") || !strings.Contains(s.kubeProxyConfig(), "localhostNodePorts: false") {
		t.Errorf("kube-proxy config:\n%s", s.kubeProxyConfig())
	}
}

func TestRecordSurvivesEachUpdate(t *testing.T) {
	s := State{Dir: t.TempDir()}
	if r, err := s.ReadRecord(); err != nil || r.BridgeCreated {
		t.Fatalf("empty state: %+v, %v", r, err)
	}
	if err := s.update(func(r *Record) { r.BridgeCreated = true }); err != nil {
		t.Fatal(err)
	}
	if err := s.update(func(r *Record) { r.CgroupDirs = append(r.CgroupDirs, "/sys/fs/cgroup/pids/leaseguard-cluster") }); err != nil {
		t.Fatal(err)
	}
	r, err := s.ReadRecord()
	if err != nil || !r.BridgeCreated || len(r.CgroupDirs) != 1 {
		t.Fatalf("record: %+v, %v", r, err)
	}
	if err := os.WriteFile(s.recordPath(), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadRecord(); err == nil || !strings.Contains(err.Error(), "cluster.json") {
		t.Fatalf("a corrupt record must be an error naming the file, got %v", err)
	}
}

func TestRecordedProcessIsOnlyOursWhileItRunsTheRecordedExecutable(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if !(Process{PID: os.Getpid(), Exe: self}).Alive() {
		t.Fatal("this test process is not alive by its own executable")
	}
	if (Process{PID: os.Getpid(), Exe: "/usr/bin/some-other-program"}).Alive() {
		t.Fatal("a process running another executable was taken for ours")
	}
	if !hasArgPair([]string{"shim", "-namespace", "k8s.io", "-address", "/s/c.sock"}, "-address", "/s/c.sock") ||
		hasArgPair([]string{"shim", "-address", "/other.sock"}, "-address", "/s/c.sock") {
		t.Fatal("hasArgPair")
	}
}
