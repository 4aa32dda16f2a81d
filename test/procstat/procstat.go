// Package procstat reads what the measuring programs report of a process
// from /proc: CPU seconds and resident memory, and the whole machine's busy
// CPU (this machine is shared: the reports show it beside the processes').
package procstat

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat
// (100 on Linux, whatever the kernel's HZ).
const clockTicks = 100

// NumCPU is the number of CPUs the machine has.
func NumCPU() int { return runtime.NumCPU() }

// statFields returns the fields of /proc/<pid>/stat after "(comm)", so that
// field k of proc(5) is at index k-3, and the command name.
func statFields(pid int) (string, []string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", nil, err
	}
	s := string(data)
	open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return "", nil, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return s[open+1 : closing], strings.Fields(s[closing+1:]), nil
}

// FindChildren finds the direct child processes of this one by command name
// (kube-apiserver and etcd started by envtest, leaseguard by the harness).
func FindChildren(names map[string]bool) (map[string]int, error) {
	self := os.Getpid()
	entries, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return nil, err
	}
	found := map[string]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(e)))
		if err != nil {
			continue
		}
		comm, f, err := statFields(pid)
		if err != nil || len(f) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == self && names[comm] {
			found[comm] = pid
		}
	}
	for n := range names {
		if _, ok := found[n]; !ok {
			return nil, fmt.Errorf("no child process %q found", n)
		}
	}
	return found, nil
}

// ChildrenCPU returns the user+system CPU seconds of every direct child of
// this process named name, summed (two clusters run two kube-apiservers).
func ChildrenCPU(name string) (float64, error) {
	self := os.Getpid()
	entries, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return 0, err
	}
	var total float64
	found := false
	for _, e := range entries {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(e)))
		if err != nil {
			continue
		}
		comm, f, err := statFields(pid)
		if err != nil || len(f) < 13 || comm != name {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid != self {
			continue
		}
		utime, _ := strconv.ParseFloat(f[11], 64) // field 14
		stime, _ := strconv.ParseFloat(f[12], 64) // field 15
		total += (utime + stime) / clockTicks
		found = true
	}
	if !found {
		return 0, fmt.Errorf("no child process %q found", name)
	}
	return total, nil
}

// ReadCPU returns user+system CPU seconds per named process.
func ReadCPU(procs map[string]int) map[string]float64 {
	out := map[string]float64{}
	for name, pid := range procs {
		_, f, err := statFields(pid)
		if err != nil || len(f) < 13 {
			continue
		}
		utime, _ := strconv.ParseFloat(f[11], 64) // field 14
		stime, _ := strconv.ParseFloat(f[12], 64) // field 15
		out[name] = (utime + stime) / clockTicks
	}
	out[Machine] = machineCPU()
	return out
}

// Machine is the pseudo-process name under which ReadCPU reports the whole
// machine's busy CPU (every process, this run's and others').
const Machine = "machine (all processes)"

// machineCPU returns the CPU seconds the whole machine has been busy, from
// the first line of /proc/stat (idle and iowait excluded).
func machineCPU() float64 {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy float64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		x, _ := strconv.ParseFloat(v, 64)
		busy += x
	}
	return busy / clockTicks
}

// ReadRSS returns VmRSS in KiB per named process.
func ReadRSS(procs map[string]int) map[string]int64 {
	out := map[string]int64{}
	for name, pid := range procs {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				f := strings.Fields(rest)
				if len(f) > 0 {
					out[name], _ = strconv.ParseInt(f[0], 10, 64)
				}
			}
		}
	}
	return out
}
