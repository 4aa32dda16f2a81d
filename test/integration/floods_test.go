package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

// peakRSS is a process's peak resident set (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// The connection-level floods of docs/security.md, against the real binary
// in its worst case: no --client-ca (a managed cluster, where anyone who
// reaches the port can connect), GOMEMLIMIT at a replica's 256 MiB limit.
// Each flood is bounded in count and time, on loopback, and stops itself.
// While it runs, the API server's kind of call (a review on a connection
// kept alive from before, as the API server pools them) is answered within
// the webhook timeout, and the replica's peak RSS stays under its limit.
// (Before leaseguard served the port itself, ~1,700 connections trickling
// 64 KiB bodies or ~130 sending 1 MiB of headers reached the limit.)
func TestConnectionFloodsStayBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("floods a replica for about 30 seconds")
	}
	const memoryLimit = 256 << 20
	addr := freeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(binary, "serve", "--config", policyPath, "--webhook-host", host, "--webhook-port", port,
		"--cert-dir", cp.WebhookCertDir, "--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--shutdown-drain", "0s")
	cmd.Env = append(os.Environ(), "GOMEMLIMIT="+strconv.Itoa(memoryLimit))
	var log controlplane.SyncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cp.CAData())
	tlsConfig := &tls.Config{RootCAs: roots, ServerName: host, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}
	// The API server's pooled connection.
	pooled := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig, MaxIdleConnsPerHost: 1}}
	review := func(client *http.Client) (time.Duration, error) {
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, "https://"+addr+manifests.ValidatePath, strings.NewReader(forgedReview("u-flood", "leader-flood")))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return time.Since(start), err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"uid":"u-flood"`) {
			return time.Since(start), fmt.Errorf("HTTP %d %.200s", resp.StatusCode, body)
		}
		return time.Since(start), nil
	}
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err = review(pooled); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("leaseguard never answered: %v\n%s", err, log.String())
	}

	floods := []struct {
		name    string
		clients int
		// send writes what one flooding connection sends, then holds it.
		send func(conn net.Conn) error
	}{
		{"1,700 connections trickling 64 KiB bodies", 1700, func(conn net.Conn) error {
			_, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
				manifests.ValidatePath, addr, 64<<10, strings.Repeat(" ", 64<<10-1))
			return err
		}},
		{"130 connections sending 1 MiB of headers", 130, func(conn net.Conn) error {
			_, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nX-Pad: %s", manifests.ValidatePath, addr, strings.Repeat("h", 1<<20))
			return err
		}},
	}
	for _, f := range floods {
		ctx, stop := context.WithTimeout(context.Background(), 12*time.Second)
		var wg sync.WaitGroup
		var connected atomic.Int64
		for range f.clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 3 * time.Second}, Config: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}} //nolint:gosec // the flood does not care who answers
				conn, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					return
				}
				defer conn.Close()
				connected.Add(1)
				_ = f.send(conn)
				<-ctx.Done()
			}()
		}
		// The API server's calls while the flood holds its connections.
		time.Sleep(3 * time.Second)
		var latencies []time.Duration
		for range 5 {
			took, err := review(pooled)
			if err != nil {
				t.Errorf("%s: the pooled review: %v after %v", f.name, err, took)
			}
			latencies = append(latencies, took)
			time.Sleep(500 * time.Millisecond)
		}
		fresh, freshErr := review(&http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true}})
		stop()
		wg.Wait()
		sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
		peak := peakRSS(t, cmd.Process.Pid)
		t.Logf("%s: %d connected; pooled reviews %v (max %v); a new connection: %v (%v); leaseguard peak RSS %.1f MiB",
			f.name, connected.Load(), latencies, latencies[len(latencies)-1], fresh, freshErr, float64(peak)/(1<<20))
		if max := latencies[len(latencies)-1]; max > 10*time.Second {
			t.Errorf("%s: a pooled review took %v, past the webhook timeout", f.name, max)
		}
		if peak > memoryLimit {
			t.Errorf("%s: peak RSS %.1f MiB, past the %d MiB limit", f.name, float64(peak)/(1<<20), memoryLimit>>20)
		}
	}
	if _, err := review(pooled); err != nil {
		t.Errorf("after the floods: %v", err)
	}
}
