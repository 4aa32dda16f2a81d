package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/leaseguard/leaseguard/test/controlplane"
)

// Options say where the pieces of the cluster come from.
type Options struct {
	// RepoRoot is the leaseguard repository (Dockerfile, cmd/leaseguard).
	RepoRoot string
	// ModuleDir is this module's folder (test/cluster), where the pause
	// program and the CNI plugins build.
	ModuleDir string
	// AssetsDir holds etcd, kube-apiserver, kubectl, kubelet,
	// kube-controller-manager, kube-scheduler and kube-proxy.
	AssetsDir string
	// CNIBinDir caches the built CNI plugins.
	CNIBinDir string
	// Out receives progress lines with timings.
	Out io.Writer
}

// Components are the binaries Up needs in Options.AssetsDir.
var Components = []string{"etcd", "kube-apiserver", "kubectl", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"}

// hostPackages are Debian's packages of the node's runtime, installed by
// Preflight when a command is missing; hostCommands are the commands each
// provides.
var hostCommands = map[string]string{
	"containerd": "containerd", "ctr": "containerd", "containerd-shim-runc-v2": "containerd",
	"runc": "runc", "iptables": "iptables", "iptables-restore": "iptables", "ip": "iproute2",
}

// SkipError says why this machine cannot run the cluster; make prints it as
// "skipped: <reason>".
type SkipError struct{ Reason string }

func (e *SkipError) Error() string { return e.Reason }

// Preflight checks that the machine can run the cluster: Linux, root,
// cgroups, and the node's runtime, which it installs with apt-get when
// install is set and a command is missing. A machine that truly cannot (not
// Linux, not root, no cgroups or IPv4, no apt-get) is reported with a
// *SkipError; a root machine whose package install fails is an error: the
// stage must run there, so it fails and says why.
func Preflight(install bool, out io.Writer) error {
	if runtime.GOOS != "linux" {
		return &SkipError{"the cluster harness runs on Linux only (this is " + runtime.GOOS + ")"}
	}
	if os.Geteuid() != 0 {
		return &SkipError{"the cluster harness needs root (kubelet, containerd, iptables, a bridge)"}
	}
	if mounts, err := cgroupMounts(); err != nil || len(mounts) == 0 {
		return &SkipError{"no cgroup hierarchy is mounted at /sys/fs/cgroup"}
	}
	if _, err := os.Stat("/proc/sys/net/ipv4"); err != nil {
		return &SkipError{"no IPv4 networking in this kernel"}
	}
	missing := map[string]bool{}
	for cmd, pkg := range hostCommands {
		if _, err := exec.LookPath(cmd); err != nil {
			missing[pkg] = true
		}
	}
	if len(missing) == 0 {
		return nil
	}
	var pkgs []string
	for p := range missing {
		pkgs = append(pkgs, p)
	}
	if !install {
		return &SkipError{"missing Debian packages " + strings.Join(pkgs, ", ")}
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return &SkipError{"missing " + strings.Join(pkgs, ", ") + " and no apt-get to install them"}
	}
	fmt.Fprintf(out, "cluster: installing %s with apt-get\n", strings.Join(pkgs, " "))
	update := exec.Command("apt-get", "update", "-q")
	if msg, err := update.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get update failed (%v): %s", err, lastLine(msg))
	}
	inst := exec.Command("apt-get", append([]string{"install", "-y", "-q", "--no-install-recommends"}, pkgs...)...)
	inst.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if msg, err := inst.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get install %s failed (%v): %s", strings.Join(pkgs, " "), err, lastLine(msg))
	}
	return nil
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// Up brings the cluster up in the state folder, recording as it goes. On
// error the caller runs Down, which removes whatever was made.
func Up(ctx context.Context, s State, o Options) error {
	out := o.Out
	if out == nil {
		out = io.Discard
	}
	if err := checkAssets(o.AssetsDir); err != nil {
		return err
	}
	if procs, _ := s.Recorded(); len(procs) > 0 {
		return fmt.Errorf("state folder %s records running components: run `make test-e2e-cluster-down` first", s.Dir)
	}
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return err
	}
	step := stepper(out)

	var tarballs []string
	if err := step("build CNI plugins, pause and leaseguard images", func() (err error) {
		if err := buildCNIPlugins(o.ModuleDir, o.CNIBinDir); err != nil {
			return err
		}
		tarballs, err = buildImages(o.RepoRoot, o.ModuleDir, s.path("images"))
		return err
	}); err != nil {
		return err
	}

	if err := step("certificates, kubeconfigs, bridge, cgroups", func() error { return s.prepareHost() }); err != nil {
		return err
	}
	if err := step("etcd and kube-apiserver", func() error { return s.startControlPlane(ctx, o.AssetsDir) }); err != nil {
		return err
	}
	if err := step("containerd, image import", func() error {
		if err := s.startContainerd(ctx, o.CNIBinDir); err != nil {
			return err
		}
		return s.importImages(tarballs)
	}); err != nil {
		return err
	}
	if err := step("controller-manager, scheduler, kubelet, kube-proxy; node Ready", func() error {
		return s.startNode(ctx, o.AssetsDir)
	}); err != nil {
		return err
	}
	return step("cert-manager CRDs (for config/default's dry-run in the e2e suite)", func() error {
		return s.installCertManagerCRDs(ctx, o)
	})
}

func stepper(out io.Writer) func(string, func() error) error {
	return func(what string, f func() error) error {
		start := time.Now()
		fmt.Fprintf(out, "cluster: %s...\n", what)
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		fmt.Fprintf(out, "cluster: %s: %.1fs\n", what, time.Since(start).Seconds())
		return nil
	}
}

func checkAssets(dir string) error {
	for _, c := range Components {
		if _, err := os.Stat(filepath.Join(dir, c)); err != nil {
			return fmt.Errorf("%s not found in %s: run `make controlplane-node` (builds the pinned Kubernetes components, minutes on a cold cache)", c, dir)
		}
	}
	return nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (s State) prepareHost() error {
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return err
		}
		ports[i] = p
	}
	sysctls := readSysctls()
	var created []string
	// containerd's shim sockets, its pods' network namespaces, libcni's
	// result cache: made outside the state folder, removed when left empty.
	for _, d := range []string{"/run/containerd", "/run/netns", "/var/run/netns", "/var/lib/cni"} {
		if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
			created = append(created, d)
		}
	}
	if err := s.update(func(r *Record) {
		r.EtcdClientPort, r.EtcdPeerPort, r.APIServerPort = ports[0], ports[1], ports[2]
		r.Sysctls = sysctls
		r.CreatedDirs = created
	}); err != nil {
		return err
	}
	p, err := newPKI(s.path("pki"))
	if err != nil {
		return err
	}
	issues := []struct {
		name, cn string
		orgs     []string
		hosts    []string
	}{
		{"apiserver", "kube-apiserver", nil, []string{NodeIP, APIServiceIP, "127.0.0.1", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}},
		{"admin", "leaseguard-cluster-admin", []string{"system:masters"}, nil},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, nil},
		{"kube-controller-manager", "system:kube-controller-manager", nil, nil},
		{"kube-scheduler", "system:kube-scheduler", nil, nil},
		{"kube-proxy", "system:kube-proxy", nil, nil},
		{"kubelet-client", "system:node:" + NodeName, []string{"system:nodes"}, nil},
		{"kubelet", NodeName, nil, []string{NodeIP, NodeName}},
		// What the API server presents to webhooks: the cluster CA signs
		// it, as it signs the kubelets', so leaseguard accepts the CA and
		// this name only (--client-name).
		{"apiserver-admission-client", controlplane.AdmissionClientName, nil, nil},
	}
	for _, i := range issues {
		if err := p.issue(i.name, i.cn, i.orgs, i.hosts...); err != nil {
			return err
		}
	}
	server := "https://" + net.JoinHostPort(NodeIP, strconv.Itoa(ports[2]))
	for kc, cert := range map[string]string{
		s.AdminKubeconfig():                          "admin",
		s.path("kube-controller-manager.kubeconfig"): "kube-controller-manager",
		s.path("kube-scheduler.kubeconfig"):          "kube-scheduler",
		s.path("kube-proxy.kubeconfig"):              "kube-proxy",
		s.path("kubelet.kubeconfig"):                 "kubelet-client",
	} {
		if err := p.kubeconfig(kc, server, cert); err != nil {
			return err
		}
	}
	if err := controlplane.WriteAdmissionConfiguration(p.path("admission-configuration.yaml"),
		p.path("apiserver-admission-client.crt"), p.path("apiserver-admission-client.key")); err != nil {
		return err
	}
	if err := s.createBridge(); err != nil {
		return err
	}
	return s.createCgroupRoot()
}

func (s State) startControlPlane(ctx context.Context, assets string) error {
	rec, err := s.ReadRecord()
	if err != nil {
		return err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", rec.EtcdClientPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", rec.EtcdPeerPort)
	_, etcdExited, err := s.Start("etcd", filepath.Join(assets, "etcd"),
		"--name", "leaseguard-cluster", "--data-dir", s.path("etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "leaseguard-cluster="+peerURL,
		"--unsafe-no-fsync", "--log-level", "warn")
	if err != nil {
		return err
	}
	if err := waitFor(ctx, "etcd healthy", time.Minute, etcdExited, s.logTail("etcd"), func() error {
		resp, err := http.Get(etcdURL + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("etcd /health: %s", resp.Status)
		}
		return nil
	}); err != nil {
		return err
	}

	pki := s.path("pki")
	args := []string{
		"--etcd-servers", etcdURL,
		"--bind-address", NodeIP, "--advertise-address", NodeIP, "--secure-port", strconv.Itoa(rec.APIServerPort),
		"--tls-cert-file", filepath.Join(pki, "apiserver.crt"), "--tls-private-key-file", filepath.Join(pki, "apiserver.key"),
		"--client-ca-file", filepath.Join(pki, "ca.crt"),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(pki, "sa.key"),
		"--service-cluster-ip-range", ServiceCIDR,
		"--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction",
		// Its client certificate for webhooks (controlplane.WriteAdmissionConfiguration).
		"--admission-control-config-file", filepath.Join(pki, "admission-configuration.yaml"),
		"--kubelet-client-certificate", filepath.Join(pki, "apiserver-kubelet-client.crt"),
		"--kubelet-client-key", filepath.Join(pki, "apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority", filepath.Join(pki, "ca.crt"),
		"--kubelet-preferred-address-types", "InternalIP",
		// Watches (the kubelet's, the controllers') would otherwise hold a
		// graceful shutdown for its full minute.
		"--shutdown-watch-termination-grace-period", "5s",
		"--profiling=false",
	}
	if err := s.update(func(r *Record) { r.APIServerArgs = args }); err != nil {
		return err
	}
	return s.startAPIServer(ctx, assets, args)
}

func (s State) startAPIServer(ctx context.Context, assets string, args []string) error {
	_, exited, err := s.Start("kube-apiserver", filepath.Join(assets, "kube-apiserver"), args...)
	if err != nil {
		return err
	}
	cs, err := s.AdminClient()
	if err != nil {
		return err
	}
	return waitFor(ctx, "kube-apiserver ready", 2*time.Minute, exited, s.logTail("kube-apiserver"), func() error {
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
}

// AdminClient is a system:masters client of the cluster.
func (s State) AdminClient() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", s.AdminKubeconfig())
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 10 * time.Second
	return kubernetes.NewForConfig(cfg)
}

// RestartAPIServer stops kube-apiserver (SIGTERM: it drains as in a rolling
// control-plane upgrade) and starts it again with the same arguments, and
// returns once it is ready, with how long it was away.
func (s State) RestartAPIServer(ctx context.Context, assets string) (time.Duration, error) {
	rec, err := s.ReadRecord()
	if err != nil {
		return 0, err
	}
	if len(rec.APIServerArgs) == 0 {
		return 0, errors.New("no kube-apiserver arguments recorded: is the cluster up?")
	}
	start := time.Now()
	if err := s.StopRecorded("kube-apiserver", 70*time.Second); err != nil {
		return 0, err
	}
	if err := s.startAPIServer(ctx, assets, rec.APIServerArgs); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func (s State) startContainerd(ctx context.Context, cniBinDir string) error {
	if err := writeFile(s.path("containerd", "config.toml"), s.containerdConfig(cniBinDir)); err != nil {
		return err
	}
	if err := writeFile(s.path("cni", "net.d", "10-leaseguard-cluster.conflist"), s.cniConfig()); err != nil {
		return err
	}
	_, exited, err := s.Start("containerd", mustLookPath("containerd"), "--config", s.path("containerd", "config.toml"))
	if err != nil {
		return err
	}
	return waitFor(ctx, "containerd serving", time.Minute, exited, s.logTail("containerd"), func() error {
		out, err := exec.Command("ctr", "--address", s.ContainerdSocket(), "version").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
}

func mustLookPath(cmd string) string {
	if p, err := exec.LookPath(cmd); err == nil {
		return p
	}
	return cmd
}

func (s State) startNode(ctx context.Context, assets string) error {
	pki := s.path("pki")
	if _, _, err := s.Start("kube-controller-manager", filepath.Join(assets, "kube-controller-manager"),
		"--kubeconfig", s.path("kube-controller-manager.kubeconfig"),
		"--service-account-private-key-file", filepath.Join(pki, "sa.key"),
		"--root-ca-file", filepath.Join(pki, "ca.crt"),
		"--use-service-account-credentials",
		"--service-cluster-ip-range", ServiceCIDR,
		"--leader-elect=false", "--secure-port=0", "--profiling=false"); err != nil {
		return err
	}
	if _, _, err := s.Start("kube-scheduler", filepath.Join(assets, "kube-scheduler"),
		"--kubeconfig", s.path("kube-scheduler.kubeconfig"),
		"--leader-elect=false", "--secure-port=0", "--profiling=false"); err != nil {
		return err
	}
	if err := writeFile(s.path("kubelet", "config.yaml"), s.kubeletConfig()); err != nil {
		return err
	}
	_, kubeletExited, err := s.Start("kubelet", filepath.Join(assets, "kubelet"),
		"--config", s.path("kubelet", "config.yaml"),
		"--kubeconfig", s.path("kubelet.kubeconfig"),
		"--root-dir", s.path("kubelet", "root"),
		"--hostname-override", NodeName, "--node-ip", NodeIP, "--v", "1")
	if err != nil {
		return err
	}
	if err := writeFile(s.path("kube-proxy", "config.yaml"), s.kubeProxyConfig()); err != nil {
		return err
	}
	_, proxyExited, err := s.Start("kube-proxy", filepath.Join(assets, "kube-proxy"), "--config", s.path("kube-proxy", "config.yaml"))
	if err != nil {
		return err
	}
	cs, err := s.AdminClient()
	if err != nil {
		return err
	}
	if err := waitFor(ctx, "node "+NodeName+" Ready", 2*time.Minute, kubeletExited, s.logTail("kubelet"), func() error {
		node, err := cs.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node not Ready: %s", c.Message)
			}
		}
		return errors.New("node has no Ready condition yet")
	}); err != nil {
		return err
	}
	if err := waitFor(ctx, "kube-proxy healthy", time.Minute, proxyExited, s.logTail("kube-proxy"), func() error {
		resp, err := http.Get("http://127.0.0.1:10256/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("kube-proxy /healthz: %s", resp.Status)
		}
		return nil
	}); err != nil {
		return err
	}
	// Pods need their namespace's default ServiceAccount and the cluster
	// CA ConfigMap, made by the controller manager.
	return waitFor(ctx, "default ServiceAccount and kube-root-ca.crt", time.Minute, nil, s.logTail("kube-controller-manager"), func() error {
		if _, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err
	})
}

func (s State) installCertManagerCRDs(ctx context.Context, o Options) error {
	files, err := controlplane.CertManagerCRDs()
	if err != nil {
		return err
	}
	kubectl := filepath.Join(o.AssetsDir, "kubectl")
	for _, f := range files {
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", s.AdminKubeconfig(), "apply", "--server-side", "-f", f).CombinedOutput()
		if err != nil {
			return fmt.Errorf("kubectl apply %s: %v\n%s", f, err, out)
		}
	}
	// Right after the apply the CRDs may have no conditions yet, which
	// kubectl wait takes for an error: poll.
	return waitFor(ctx, "cert-manager CRDs established", time.Minute, nil, func() string { return "" }, func() error {
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", s.AdminKubeconfig(), "wait", "--for=condition=Established", "--timeout=5s",
			"crd/certificates.cert-manager.io", "crd/issuers.cert-manager.io").CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
}

// waitFor polls check until it succeeds, the process ends (exited closed)
// or the time is up; the error carries the last check error and the end of
// the component's log.
func waitFor(ctx context.Context, what string, timeout time.Duration, exited <-chan struct{}, logTail func() string, check func() error) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if last = check(); last == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s: the process exited (last check: %v); end of its log:\n%s", what, last, logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s (last check: %v); end of its log:\n%s", what, timeout, last, logTail())
		}
	}
}

// logTail returns the last lines of a component's log.
func (s State) logTail(name string) func() string {
	return func() string {
		data, err := os.ReadFile(filepath.Join(s.LogDir(), name+".log"))
		if err != nil {
			return err.Error()
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 30 {
			lines = lines[len(lines)-30:]
		}
		return strings.Join(lines, "\n")
	}
}
