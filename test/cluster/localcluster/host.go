package localcluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func linkExists(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name))
	return err == nil
}

// createBridge creates the cluster's bridge with the node address, and a
// route sending the service range to it: a service address kube-proxy has
// no rule for then goes nowhere instead of to the default route.
func (s State) createBridge() error {
	if linkExists(BridgeName) {
		return fmt.Errorf("network interface %s already exists: a cluster is up or was left behind; run `make test-e2e-cluster-down`", BridgeName)
	}
	if err := run("ip", "link", "add", BridgeName, "type", "bridge"); err != nil {
		return err
	}
	if err := s.update(func(r *Record) { r.BridgeCreated = true }); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"addr", "add", NodeIP + "/24", "dev", BridgeName},
		{"link", "set", BridgeName, "up"},
		{"route", "add", ServiceCIDR, "dev", BridgeName, "src", NodeIP},
	} {
		if err := run("ip", args...); err != nil {
			return err
		}
	}
	return nil
}

// deleteBridge removes the bridge (its addresses and routes go with it) and
// any interface still enslaved to it.
func deleteBridge() error {
	if !linkExists(BridgeName) {
		return nil
	}
	ports, _ := os.ReadDir(filepath.Join("/sys/class/net", BridgeName, "brif"))
	var errs []error
	for _, p := range ports {
		if err := run("ip", "link", "del", p.Name()); err != nil && linkExists(p.Name()) {
			errs = append(errs, err)
		}
	}
	if err := run("ip", "link", "del", BridgeName); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// guardedSysctls are the kernel settings the kubelet (protectKernelDefaults
// false sets the first six) and kube-proxy may change; Up records them and
// Down puts them back.
var guardedSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
	"net/ipv4/ip_forward", "net/ipv4/conf/all/route_localnet",
	"net/netfilter/nf_conntrack_max", "net/netfilter/nf_conntrack_tcp_timeout_established",
	"net/netfilter/nf_conntrack_tcp_timeout_close_wait",
	"net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables",
}

func readSysctls() map[string]string {
	out := map[string]string{}
	for _, k := range guardedSysctls {
		if v, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil {
			out[k] = strings.TrimSpace(string(v))
		}
	}
	return out
}

func restoreSysctls(saved map[string]string) error {
	var errs []error
	for k, v := range saved {
		path := filepath.Join("/proc/sys", k)
		cur, err := os.ReadFile(path)
		if err != nil || strings.TrimSpace(string(cur)) == v {
			continue
		}
		if err := os.WriteFile(path, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s=%s: %w", k, v, err))
		}
	}
	return errors.Join(errs...)
}

// cgroupMounts returns the mount points of the cgroup hierarchies: one per
// v1 controller set, and the unified (v2) one.
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// mount ID, parent, major:minor, root, mount point, options, [optional...], "-", fstype, source, super options
		for i, field := range fields {
			if field == "-" && i+1 < len(fields) && (fields[i+1] == "cgroup" || fields[i+1] == "cgroup2") {
				out = append(out, fields[4])
				break
			}
		}
	}
	return out, sc.Err()
}

// createCgroupRoot creates CgroupRoot in every hierarchy, as the kubelet
// requires its cgroupRoot to exist. A v1 cpuset child starts with no CPUs
// or memory nodes; it gets its parent's.
func (s State) createCgroupRoot() error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	if len(mounts) == 0 {
		return errors.New("no cgroup hierarchy is mounted")
	}
	for _, m := range mounts {
		dir := filepath.Join(m, CgroupRoot)
		if _, err := os.Stat(dir); err == nil {
			return fmt.Errorf("cgroup %s already exists: a cluster is up or was left behind; run `make test-e2e-cluster-down`", dir)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		if err := s.update(func(r *Record) { r.CgroupDirs = append(r.CgroupDirs, dir) }); err != nil {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if parent, err := os.ReadFile(filepath.Join(m, f)); err == nil {
				if err := os.WriteFile(filepath.Join(dir, f), parent, 0o644); err != nil {
					return fmt.Errorf("initialising %s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

// cgroupProcesses returns the ids of the processes in the cgroup trees.
func cgroupProcesses(roots []string) []int {
	seen := map[int]bool{}
	var pids []int
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return filepath.SkipDir
			}
			if !d.IsDir() {
				return nil
			}
			data, _ := os.ReadFile(filepath.Join(path, "cgroup.procs"))
			for _, f := range strings.Fields(string(data)) {
				var pid int
				if _, err := fmt.Sscan(f, &pid); err == nil && !seen[pid] {
					seen[pid] = true
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// removeCgroupTrees removes the cgroup trees, deepest first (a cgroup is
// removed with rmdir once it has no processes and no children).
func removeCgroupTrees(roots []string) error {
	var errs []error
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// mountsUnder returns the mount points at or below any of the folders,
// deepest first.
func mountsUnder(dirs ...string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		for _, d := range dirs {
			if mp == d || strings.HasPrefix(mp, d+"/") {
				out = append(out, mp)
				break
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, sc.Err()
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}
