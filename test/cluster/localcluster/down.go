package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Down removes everything the state folder records: the pods (through the
// CRI, so the CNI plugins remove their interfaces, addresses and network
// namespaces), every process by its recorded id, what containerd leaves
// (shims, container processes), mounts below the state folder, the
// cluster's iptables chains, the cgroup trees, the bridge, the kernel
// settings, and the state folder but its logs. It goes on past errors and
// returns them all, then what is still left, if anything.
func Down(s State, out io.Writer) error {
	if out == nil {
		out = io.Discard
	}
	if _, err := os.Stat(s.Dir); errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(out, "cluster: down: no state folder %s, nothing recorded\n", s.Dir)
	}
	rec, err := s.ReadRecord()
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	if len(rec.CgroupDirs) == 0 {
		// No record (a lost state folder): the cgroup root has a fixed name.
		rec.CgroupDirs = existingCgroupRoots()
	}
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
			fmt.Fprintf(out, "cluster: down: %v\n", err)
		}
	}

	// The kubelet first, so it restarts nothing, then what writes to the
	// API server or the node's rules.
	for _, name := range []string{"cert-manager-cainjector", "kubelet", "kube-proxy", "kube-scheduler", "kube-controller-manager"} {
		note(s.StopRecorded(name, 15*time.Second))
	}
	if p, err := s.recorded("containerd"); err == nil && p.Alive() {
		note(removePodSandboxes(s.ContainerdSocket(), out))
	}
	note(s.StopRecorded("containerd", 15*time.Second))
	// Shims outlive containerd; so would a container whose shim was killed.
	shims := processesWhere(func(args []string) bool {
		return len(args) > 0 && strings.HasSuffix(args[0], "containerd-shim-runc-v2") && hasArgPair(args, "-address", s.ContainerdSocket())
	})
	for _, pid := range append(shims, cgroupProcesses(rec.CgroupDirs)...) {
		note(Process{Name: fmt.Sprintf("pid %d", pid), PID: pid}.Stop(5 * time.Second))
	}
	note(s.StopRecorded("kube-apiserver", 15*time.Second))
	note(s.StopRecorded("etcd", 15*time.Second))
	// Anything else recorded (a component this list does not know yet).
	procs, err := s.Recorded()
	note(err)
	for _, p := range procs {
		note(s.StopRecorded(p.Name, 15*time.Second))
	}

	note(removeOwnedChains())
	note(unmountUnder(s.Dir))
	for _, d := range rec.CreatedDirs {
		if d == "/run/netns" || d == "/var/run/netns" {
			// Made by containerd for its pods' network namespaces: all ours.
			note(unmountUnder(d))
		}
	}
	note(removeCgroupTrees(rec.CgroupDirs))
	note(deleteBridge())
	note(restoreSysctls(rec.Sysctls))
	for _, d := range rec.CreatedDirs {
		note(removeIfOnlyEmptyDirs(d))
	}

	left := Leftovers(s, rec)
	if len(left) == 0 {
		note(removeStateKeepingLogs(s))
		fmt.Fprintf(out, "cluster: down: nothing left behind (logs kept in %s)\n", s.LogDir())
	} else {
		errs = append(errs, fmt.Errorf("left behind:\n  %s", strings.Join(left, "\n  ")))
	}
	return errors.Join(errs...)
}

func hasArgPair(args []string, flag, value string) bool {
	for i := 0; i+1 < len(args); i++ {
		if (args[i] == flag || args[i] == "-"+flag) && args[i+1] == value {
			return true
		}
	}
	return false
}

func existingCgroupRoots() []string {
	mounts, _ := cgroupMounts()
	var out []string
	for _, m := range mounts {
		if _, err := os.Stat(filepath.Join(m, CgroupRoot)); err == nil {
			out = append(out, filepath.Join(m, CgroupRoot))
		}
	}
	return out
}

// removePodSandboxes stops and removes every pod sandbox through the CRI.
func removePodSandboxes(socket string, out io.Writer) error {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("listing pod sandboxes: %w", err)
	}
	var errs []error
	for _, sb := range list.GetItems() {
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("stopping pod %s/%s: %w", sb.GetMetadata().GetNamespace(), sb.GetMetadata().GetName(), err))
			continue
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("removing pod %s/%s: %w", sb.GetMetadata().GetNamespace(), sb.GetMetadata().GetName(), err))
		}
	}
	fmt.Fprintf(out, "cluster: down: removed %d pod sandboxes\n", len(list.GetItems()))
	return errors.Join(errs...)
}

// unmountUnder unmounts every mount at or below dir, deepest first; a busy
// one is detached.
func unmountUnder(dir string) error {
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		if err := syscall.Unmount(m, 0); err != nil {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
			}
		}
	}
	return errors.Join(errs...)
}

// removeIfOnlyEmptyDirs removes dir when nothing but empty folders and
// (for a network-namespace folder, already unmounted) empty files are in it.
func removeIfOnlyEmptyDirs(dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	nonEmpty := false
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			nonEmpty = true // unreadable: keep it
			return filepath.SkipAll
		}
		if !d.IsDir() {
			info, err := d.Info()
			if err != nil || info.Size() > 0 || d.Type()&os.ModeSocket != 0 {
				nonEmpty = true
				return filepath.SkipAll
			}
		}
		return nil
	})
	if nonEmpty {
		return nil
	}
	return os.RemoveAll(dir)
}

func removeStateKeepingLogs(s State) error {
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.Name() == "logs" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.Dir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Leftovers lists what of the cluster is still on the machine: recorded
// processes, containerd shims of its socket, processes in its cgroups,
// mounts under the state folder or in a network-namespace folder it made,
// its iptables chains, its bridge, its cgroup trees.
func Leftovers(s State, rec Record) []string {
	var left []string
	procs, _ := s.Recorded()
	for _, p := range procs {
		if p.Alive() {
			left = append(left, fmt.Sprintf("process %s (pid %d)", p.Name, p.PID))
		}
	}
	for _, pid := range processesWhere(func(args []string) bool {
		return len(args) > 0 && strings.HasSuffix(args[0], "containerd-shim-runc-v2") && hasArgPair(args, "-address", s.ContainerdSocket())
	}) {
		left = append(left, fmt.Sprintf("containerd shim (pid %d)", pid))
	}
	for _, pid := range cgroupProcesses(rec.CgroupDirs) {
		left = append(left, fmt.Sprintf("process %d in the cluster's cgroups", pid))
	}
	dirs := []string{s.Dir}
	for _, d := range rec.CreatedDirs {
		if d == "/run/netns" {
			dirs = append(dirs, d)
		}
	}
	mounts, _ := mountsUnder(dirs...)
	for _, m := range mounts {
		left = append(left, "mount "+m)
	}
	for _, c := range ownedChainsLeft() {
		left = append(left, "iptables chain "+c)
	}
	if linkExists(BridgeName) {
		left = append(left, "network interface "+BridgeName)
	}
	for _, d := range rec.CgroupDirs {
		if _, err := os.Stat(d); err == nil {
			left = append(left, "cgroup "+d)
		}
	}
	return left
}
