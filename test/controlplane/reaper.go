package controlplane

import (
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// reaperScript notes, every second while the test process (its $1) lives,
// the processes it started, and kills those it noted last, by PID, once it
// is gone. The reaper is itself a child of the test process: it leaves
// itself out.
const reaperScript = `t=$1; kids=""
while kill -0 "$t" 2>/dev/null; do
	kids=$(ps -o pid= --ppid "$t" | grep -vw "$$")
	sleep 1
done
[ -n "$kids" ] && kill -9 $kids 2>/dev/null
exit 0`

// ReapChildrenOnExit starts a watcher that kills the processes this test
// process started (kube-apiserver, etcd, leaseguard) if it ends without
// stopping them: a test that panics ends the process at once, TestMain's
// deferred stops never run, and the control plane would run on, orphaned,
// taking CPU from everything after it. TestMain calls the returned
// function once its own stops have run, which ends the watcher.
func ReapChildrenOnExit() (done func()) {
	cmd := exec.Command("/bin/sh", "-c", reaperScript, "leaseguard-test-reaper", strconv.Itoa(os.Getpid()))
	// Its own process group: a Ctrl-C to the test's group must leave it
	// to clean up after the test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return func() {} // no sh or no ps: nothing is reaped, the tests still run
	}
	return func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}
