package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// BuildLeaseguard builds the leaseguard binary into dir and returns its path,
// so tests run the real binary, not an in-process copy. It is built with the
// dev command (-tags dev), which `make run` uses too.
func BuildLeaseguard(dir string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "leaseguard")
	cmd := exec.Command("go", "build", "-tags", "dev", "-o", out, "./cmd/leaseguard")
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/leaseguard: %v\n%s", err, msg)
	}
	return out, nil
}

// BuildPlugin builds the kubectl plugin, kubectl-leaseguard (top, check,
// vap, manifests), into dir and returns its path, so tests run the real
// `kubectl leaseguard top`.
func BuildPlugin(dir string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "kubectl-leaseguard")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/kubectl-leaseguard")
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/kubectl-leaseguard: %v\n%s", err, msg)
	}
	return out, nil
}

// Leaseguard is a running `leaseguard serve` process.
type Leaseguard struct {
	cmd        *exec.Cmd
	done       chan struct{}
	log        *SyncBuffer
	MetricsURL string
	ReadyURL   string
}

// StartLeaseguard runs `leaseguard serve` where the control plane's webhook
// configurations point, and waits until it is ready.
func (c *ControlPlane) StartLeaseguard(binary, policyPath string, extraArgs ...string) (*Leaseguard, error) {
	metricsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	probeAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := append([]string{"serve",
		"--config", policyPath,
		"--webhook-host", c.WebhookHost,
		"--webhook-port", strconv.Itoa(c.WebhookPort),
		"--cert-dir", c.WebhookCertDir,
		"--metrics-bind-address", metricsAddr,
		"--health-probe-bind-address", probeAddr,
		"--policy-reload-interval", "200ms",
	}, extraArgs...)
	// Only the API server's reviews, as shipped clusters should be set up,
	// unless the test chooses the client CA itself.
	if !slices.Contains(extraArgs, "--client-ca") {
		args = append(args, c.AdmissionClient.LeaseguardArgs()...)
	}
	// Plain metrics unless the test asks for the shipped, secured port
	// (which it then reads with a token of its own).
	scheme := "http"
	if slices.Contains(extraArgs, "--metrics-secure") || slices.Contains(extraArgs, "--metrics-secure=true") {
		scheme = "https"
	} else {
		args = append(args[:1], append([]string{"--metrics-secure=false"}, args[1:]...)...)
	}
	l := &Leaseguard{
		cmd:        exec.Command(binary, args...),
		done:       make(chan struct{}),
		log:        &SyncBuffer{},
		MetricsURL: scheme + "://" + metricsAddr + "/metrics",
		ReadyURL:   "http://" + probeAddr + "/readyz",
	}
	l.cmd.Stdout, l.cmd.Stderr = l.log, l.log
	if err := l.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = l.cmd.Wait(); close(l.done) }()

	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-l.done:
			return nil, fmt.Errorf("leaseguard serve exited: %s\n%s", l.cmd.ProcessState, l.Log())
		default:
		}
		if resp, err := http.Get(l.ReadyURL); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return l, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	l.Stop()
	return nil, fmt.Errorf("leaseguard serve not ready within 30s:\n%s", l.Log())
}

// Log returns what the process has printed.
func (l *Leaseguard) Log() string { return l.log.String() }

// Exited reports whether the process has ended.
func (l *Leaseguard) Exited() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// Stop interrupts the process and waits for it.
func (l *Leaseguard) Stop() {
	if l.Exited() {
		return
	}
	_ = l.cmd.Process.Signal(os.Interrupt)
	select {
	case <-l.done:
	case <-time.After(10 * time.Second):
		_ = l.cmd.Process.Kill()
		<-l.done
	}
}

// Metrics scrapes /metrics.
func (l *Leaseguard) Metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.MetricsURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

// Counter sums the samples of a counter family whose labels include all of
// the given ones.
func Counter(families map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	fam, ok := families[name]
	if !ok {
		return 0
	}
	var sum float64
	for _, m := range fam.GetMetric() {
		if matchLabels(m, labels) && m.GetCounter() != nil {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func matchLabels(m *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// SyncBuffer collects a process's output safely from several goroutines.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var _ io.Writer = (*SyncBuffer)(nil)

// Gauge returns the value of an unlabelled gauge, or -1 when absent.
func Gauge(families map[string]*dto.MetricFamily, name string) float64 {
	fam, ok := families[name]
	if !ok || len(fam.GetMetric()) == 0 || fam.GetMetric()[0].GetGauge() == nil {
		return -1
	}
	return fam.GetMetric()[0].GetGauge().GetValue()
}
