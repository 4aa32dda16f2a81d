package integration

import (
	"debug/elf"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaseguard/leaseguard/test/controlplane"
)

// The image cannot be built here (no Docker engine), so this checks what it
// would run: the binary built with the Dockerfile's flags is static and
// serves as the image's non-root user without writing anywhere.
func TestImageBinaryIsStaticAndServesAsNonRoot(t *testing.T) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FROM scratch", "USER 65532:65532", "CGO_ENABLED=0", "-trimpath", `-ldflags "-s -w -buildid=`} {
		if !strings.Contains(string(dockerfile), want) {
			t.Fatalf("Dockerfile lacks %q; keep this test's build in step with it", want)
		}
	}

	dir := t.TempDir()
	bin := filepath.Join(dir, "leaseguard")
	// With the test's context: a build still running when the test ends (a
	// timeout) is killed, not left compiling.
	build := exec.CommandContext(t.Context(), "go", "build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w -buildid= -X main.version=image-test", "-o", bin, "./cmd/leaseguard")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Fatalf("binary is dynamically linked (program header %v): it cannot run FROM scratch", p.Type)
		}
	}
	f.Close()

	if os.Geteuid() != 0 {
		t.Skip("running as uid 65532 needs root to switch users")
	}
	// Everything the process may read is world-readable; nothing is
	// writable by it, as with a read-only root filesystem.
	for _, p := range []string{filepath.Dir(dir), dir, bin} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	certDir := filepath.Join(dir, "certs")
	if err := os.Mkdir(certDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tls.crt", "tls.key"} {
		data, err := os.ReadFile(filepath.Join(cp.WebhookCertDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(certDir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(basePolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	probe := freeAddr(t)
	cmd := exec.Command(bin, "serve", "--config", policy, "--cert-dir", certDir, "--webhook-host", "127.0.0.1", "--webhook-port", "0",
		"--metrics-bind-address", "0", "--health-probe-bind-address", probe)
	cmd.Dir = "/"
	cmd.Env = []string{"TMPDIR=/nonexistent", "HOME=/nonexistent"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	out := &controlplane.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + probe + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve as uid 65532 not ready (state %v):\n%s", cmd.ProcessState, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
