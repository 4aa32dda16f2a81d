package integration

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// `make run` is `leaseguard dev`: it must reach "ready", a dry-run write by a
// manager that is not the designated one must be denied with the rule's
// message, exactly as the README shows, and every kubectl example dev prints
// and the README's "Try it" shows must get the verdict its comment says.
func TestDevReachesReadyAndDeniesANonDesignatedManager(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "dev.kubeconfig")
	cmd := exec.Command(binary, "dev", "--kubeconfig-out", kc,
		"--metrics-bind-address", freeAddr(t), "--health-probe-bind-address", freeAddr(t))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	readyLine := make(chan struct{})
	var printed strings.Builder
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			printed.WriteString(sc.Text() + "\n")
			if sc.Text() == "ready" {
				close(readyLine)
			}
		}
		exited <- cmd.Wait()
	}()
	select {
	case <-readyLine:
	case err := <-exited:
		t.Fatalf("leaseguard dev exited before ready: %v\n%s\n%s", err, printed.String(), stderr.String())
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("leaseguard dev not ready within 2m\n%s\n%s", printed.String(), stderr.String())
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

	out, err := cp.Kubectl(kc, "--as", "system:serviceaccount:cnrm-system:cnrm-controller-manager-team-b",
		"-n", "cnrm-system", "patch", "multiclusterlease", "kcc-leader", "--type", "merge",
		"-p", `{"spec":{"leaseDurationSeconds":30}}`, "--dry-run=server").CombinedOutput()
	if err == nil {
		t.Fatalf("dry-run as team-b admitted:\n%s", out)
	}
	want := regexp.MustCompile(`^Error from server \(Forbidden\): admission webhook "validate.leases.leaseguard.io" denied the request: ` +
		regexp.QuoteMeta("leaseguard: rule kcc-mcl: system:serviceaccount:cnrm-system:cnrm-controller-manager-team-b is not the designated manager of multiclusterlease cnrm-system/kcc-leader (designated: ...cnrm-controller-manager-team-a, stale in ") +
		`\d+s\)$`)
	if got := strings.TrimSpace(string(out)); !want.MatchString(got) {
		t.Fatalf("kubectl printed:\n%s\nwant to match:\n%s", got, want)
	}

	// Every example dev prints and the README shows does what it says.
	printedExamples := kubectlExamples(t, printed.String(), "kubectl")
	if len(printedExamples) < 3 {
		t.Fatalf("leaseguard dev printed %d kubectl examples, want 3 or more:\n%s", len(printedExamples), printed.String())
	}
	runExamples(t, "leaseguard dev", printedExamples, kc)
	readmeExamples := kubectlExamples(t, readmeTryIt(t), "$kubectl")
	if len(readmeExamples) < 4 {
		t.Fatalf("README's Try it has %d kubectl examples, want 4 or more", len(readmeExamples))
	}
	runExamples(t, "README.md", readmeExamples, kc)
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
