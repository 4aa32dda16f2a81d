package integration

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaseguard/leaseguard/internal/devexamples"
	"github.com/leaseguard/leaseguard/test/controlplane"
)

// `make run` is `leaseguard dev`: it must reach "ready", and every example it
// prints, which the README shows too, must do what it says.
func TestDevReachesReadyAndItsExamplesDoWhatTheySay(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "dev.kubeconfig")
	// The metrics and probe ports are chosen free here and bound by dev
	// later, and another process of a busy machine may take one between:
	// only that, as dev reports it, is tried again (twice).
	var (
		cmd     *exec.Cmd
		exited  chan error
		printed *controlplane.SyncBuffer
		stderr  *strings.Builder
	)
	for attempt := 1; ; attempt++ {
		var ready bool
		var err error
		cmd, exited, printed, stderr, ready, err = startDev(t, kc)
		if ready {
			break
		}
		if attempt < 3 && strings.Contains(stderr.String(), "address already in use") {
			t.Logf("attempt %d: a chosen port was taken before dev bound it; again", attempt)
			continue
		}
		t.Fatalf("leaseguard dev exited before ready: %v\n%s\n%s", err, printed.String(), stderr.String())
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("leaseguard dev exited with %v after interrupt\n%s", err, stderr.String())
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			t.Error("leaseguard dev did not stop within 1m of an interrupt")
		}
		if _, err := os.Stat(kc); !os.IsNotExist(err) {
			t.Errorf("kubeconfig %s left behind after stop", kc)
		}
	}()
	if !strings.Contains(printed.String(), "--kubeconfig "+kc) {
		t.Errorf("dev does not tell where its kubeconfig is:\n%s", printed.String())
	}

	// Every example dev prints (and the README shows) does what it says.
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range devexamples.Examples() {
		if !strings.Contains(printed.String(), "# "+e.Comment) {
			t.Errorf("dev does not print the example %q", e.Comment)
		}
		cmd := cp.Kubectl(kc, e.Args...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if (err != nil) != e.Denied {
			t.Errorf("%s: kubectl exited with %v:\n%s", e.Comment, err, out)
		}
		if !e.Want.Match(out) {
			t.Errorf("%s: kubectl printed:\n%s\nwant to match:\n%s", e.Comment, out, e.Want)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return fmt.Sprint(ln.Addr())
}

// startDev starts leaseguard dev and waits for its "ready" line. It reports
// whether dev got there; if not, dev has exited (err) or been killed after
// two minutes.
func startDev(t *testing.T, kc string) (cmd *exec.Cmd, exited chan error, printed *controlplane.SyncBuffer, stderr *strings.Builder, ready bool, err error) {
	t.Helper()
	cmd = exec.Command(binary, "dev", "--kubeconfig-out", kc,
		"--metrics-bind-address", freeAddr(t), "--health-probe-bind-address", freeAddr(t))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr = &strings.Builder{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan error, 1)
	readyLine := make(chan struct{})
	printed = &controlplane.SyncBuffer{}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			_, _ = printed.Write([]byte(sc.Text() + "\n"))
			if sc.Text() == "ready" {
				close(readyLine)
			}
		}
		exited <- cmd.Wait()
	}()
	select {
	case <-readyLine:
		return cmd, exited, printed, stderr, true, nil
	case err := <-exited:
		return cmd, exited, printed, stderr, false, err
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		return cmd, exited, printed, stderr, false, fmt.Errorf("not ready within 2m")
	}
}
