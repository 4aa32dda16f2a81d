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
// itself out. A test process that has ended but not yet been waited for
// is a zombie: kill -0 still reaches it while its children have already
// moved to another parent, so a list taken then would be empty; the
// list is kept only if the process still ran after it was taken.
const reaperScript = `t=$1; kids=""
while :; do
	k=$(ps -o pid= --ppid "$t" | grep -vw "$$")
	case $(ps -o stat= -p "$t" 2>/dev/null) in ""|Z*) break;; esac
	kids=$k
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
