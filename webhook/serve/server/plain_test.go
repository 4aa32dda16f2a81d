package server

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The metrics and probe servers close idle keep-alive connections and
// refuse oversized headers (third attack round: 1,000 idle connections
// were all still held after 95 s).
func TestPlainServersBoundWhatClientsHold(t *testing.T) {
	idle := plainIdleTimeout
	plainIdleTimeout = 300 * time.Millisecond
	defer func() { plainIdleTimeout = idle }()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serveHTTP(ctx, addr, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }), nil)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serveHTTP: %v", err)
		}
	}()
	var conn net.Conn
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if conn, err = net.Dial("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	// One request on a keep-alive connection, then silence: closed after
	// the idle timeout.
	if _, err := io.WriteString(conn, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("response %v, %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: read %v, want EOF (closed by the server)", err)
	}
	if held := time.Since(start); held > 3*time.Second {
		t.Errorf("idle connection held %s, idle timeout %s", held, plainIdleTimeout)
	}

	// A header of a mebibyte is refused (431), not read.
	big, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	go func() {
		_, _ = io.WriteString(big, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: "+strings.Repeat("a", 1<<20)+"\r\n\r\n")
	}()
	resp, err = http.ReadResponse(bufio.NewReader(big), nil)
	if err != nil {
		t.Fatalf("a 1 MiB header: %v; want 431", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a 1 MiB header: HTTP %d, want 431", resp.StatusCode)
	}
}
