package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

// noopServerEnv, when set ("<TLS port>,<count port>,<cert dir>"), makes this
// program the no-op webhook's own process instead of the bench.
const noopServerEnv = "LEASEGUARD_BENCH_NOOP_SERVER"

// noopHandler allows everything without reading the objects.
type noopHandler struct{ calls *atomic.Int64 }

func (h noopHandler) Handle(context.Context, cradmission.Request) cradmission.Response {
	h.calls.Add(1)
	return cradmission.Allowed("")
}

// serveNoop serves the no-op webhook on 127.0.0.1:port with the key pair in
// certDir, under every path the setups name, until ctx ends.
func serveNoop(ctx context.Context, port int, certDir string, calls *atomic.Int64) (started func() bool) {
	// HTTP/1.1, as kubebuilder scaffolds a webhook server and as leaseguard
	// serves (HTTP/2 off since the rapid-reset CVEs).
	http1 := func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }
	srv := webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: certDir, TLSOpts: []func(*tls.Config){http1}})
	// Under every path the generated configuration names too (noop-routed).
	for _, path := range []string{"/noop", manifests.ValidatePath, manifests.RenewalsPath, manifests.MutatePath} {
		srv.Register(path, &cradmission.Webhook{Handler: noopHandler{calls: calls}})
	}
	go func() { _ = srv.Start(ctx) }()
	return func() bool { return srv.StartedChecker()(&http.Request{}) == nil }
}

// runNoopServer is the no-op webhook's process: the webhook on the TLS port,
// its call count as text on http://127.0.0.1:<count port>/calls. It ends
// when its standard input closes, so it never outlives the bench.
func runNoopServer(spec string) error {
	parts := strings.SplitN(spec, ",", 3)
	if len(parts) != 3 {
		return fmt.Errorf("%s=%q: want <TLS port>,<count port>,<cert dir>", noopServerEnv, spec)
	}
	port, err1 := strconv.Atoi(parts[0])
	countPort, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return fmt.Errorf("%s=%q: the ports are not numbers", noopServerEnv, spec)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int64
	serveNoop(ctx, port, parts[2], &calls)
	count := &http.Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(countPort)), ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, calls.Load()) })}
	go func() { _ = count.ListenAndServe() }()
	_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin))
	return nil
}

// freePort returns a loopback port nobody listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startNoopProcess starts the no-op webhook as a process of its own, as any
// deployed webhook runs (its own runtime, threads and GC), with the control
// plane's serving key pair, and returns its base URL. Its CPU is reported
// as "noop".
func (b *bench) startNoopProcess(ctx context.Context) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	countPort, err := freePort()
	if err != nil {
		return "", err
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d,%d,%s", noopServerEnv, port, countPort, b.cp.WebhookCertDir))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	go func() {
		<-ctx.Done()
		_ = stdin.Close()
		_ = cmd.Wait()
	}()
	b.procs["noop"] = cmd.Process.Pid
	countURL := fmt.Sprintf("http://127.0.0.1:%d/calls", countPort)
	client := &http.Client{Timeout: 5 * time.Second}
	b.noopCalls = func() int64 {
		n := b.inProcessNoop.Load()
		resp, err := client.Get(countURL)
		if err != nil {
			return n
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		c, _ := strconv.ParseInt(string(body), 10, 64)
		return n + c
	}
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		conn, err := tls.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only asks whether the no-op listens yet
		if err != nil {
			continue
		}
		_ = conn.Close()
		if resp, err := client.Get(countURL); err == nil {
			_ = resp.Body.Close()
			return base, nil
		}
	}
	return "", fmt.Errorf("the no-op webhook's process did not start")
}

// startInProcessNoop serves the no-op webhook from inside this process
// (setup noop-plain-inprocess, BENCH_DIAG=1) and returns its base URL.
func (b *bench) startInProcessNoop(ctx context.Context) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	started := serveNoop(ctx, port, b.cp.WebhookCertDir, &b.inProcessNoop)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if started() {
			return fmt.Sprintf("https://127.0.0.1:%d", port), nil
		}
	}
	return "", fmt.Errorf("the in-process no-op webhook did not start")
}
