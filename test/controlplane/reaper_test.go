package controlplane

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A test process that panics with a child running (as kube-apiserver runs
// under the integration tests) leaves no orphan: the reaper kills it.
func TestReaperKillsWhatAPanickingTestLeft(t *testing.T) {
	if os.Getenv("REAPER_CHILD") == "1" {
		ReapChildrenOnExit()
		orphan := exec.Command("sleep", "300")
		if err := orphan.Start(); err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("orphan " + strconv.Itoa(orphan.Process.Pid) + "\n")
		time.Sleep(3 * time.Second) // the reaper notes it (it looks every second)
		panic("a test that panics ends the process without its deferred stops")
	}
	child := exec.Command(os.Args[0], "-test.run", "^TestReaperKillsWhatAPanickingTestLeft$")
	child.Env = append(os.Environ(), "REAPER_CHILD=1")
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	pid := 0
	for sc := bufio.NewScanner(out); sc.Scan(); {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "orphan" {
			pid, _ = strconv.Atoi(f[1])
		}
	}
	if err := child.Wait(); err == nil {
		t.Fatal("the child test did not fail")
	}
	if pid == 0 {
		t.Fatal("the child test named no orphan")
	}
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		if !running(pid) {
			return
		}
		if time.Since(start) > 10*time.Second {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d outlived the panicking test by 10 s: orphaned", pid)
		}
	}
}

// running says whether pid is a live process: a zombie (killed, not yet
// reaped by whoever inherited it) is not.
func running(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
