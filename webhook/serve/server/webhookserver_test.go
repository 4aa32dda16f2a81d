package server

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leaseguard/leaseguard/webhook/serve/metrics"
)

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "webhook"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// The webhook port, served by leaseguard's own http.Server: HTTP/1.1
// only, oversized headers refused, silent and idle connections closed,
// failed handshakes counted, not ready before it listens.
func TestWebhookServerBoundsWhatClientsHold(t *testing.T) {
	// Short enough to wait out below, long enough for a TLS handshake on a
	// loaded machine: http.Server bounds the handshake by the read-header
	// timeout too, and at 300 ms a handshake cut short by it under make
	// test's load closed without the alert this test looks for (EOF).
	header, idle := webhookReadHeaderTimeout, webhookIdleTimeout
	webhookReadHeaderTimeout, webhookIdleTimeout = time.Second, time.Second
	defer func() { webhookReadHeaderTimeout, webhookIdleTimeout = header, idle }()

	cert := selfSigned(t)
	reg := prometheus.NewRegistry()
	rec, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(must(x509.ParseCertificate(cert.Certificate[0])))
	s := &webhookServer{
		addr: addr,
		tls: &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }},
		handler:  http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }),
		log:      logr.Discard(),
		recorder: rec,
	}
	if err := s.ready(nil); err == nil {
		t.Error("ready before serving")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.serve(ctx, false) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	for deadline := time.Now().Add(5 * time.Second); s.ready(nil) != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %v", s.ready(nil))
		}
	}

	// A client that is not the API server: no certificate, refused and counted.
	client := func(certs ...tls.Certificate) *tls.Config {
		return &tls.Config{InsecureSkipVerify: true, Certificates: certs, NextProtos: []string{"h2", "http/1.1"}} //nolint:gosec // a test server
	}
	// In TLS 1.3 the client's side of the handshake completes before the
	// server has checked its certificate; the refusal comes as an alert on
	// the first read. Nothing is written first: a request the server never
	// read would make its close a reset, which can overtake the alert (a
	// run saw EOF).
	//
	// On a loaded machine a connection may also end bare (EOF: the
	// handshake outlived the server's bound on it), which says nothing
	// either way; so may a server that asks no certificate and closes the
	// silent connection. Up to three tries: only the refusal passes.
	for try := 0; try < 3; try++ {
		var conn *tls.Conn
		conn, err = tls.Dial("tcp", addr, client())
		if err == nil {
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		if !errors.Is(err, io.EOF) {
			break
		}
	}
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("without a client certificate: %v, want the handshake refused", err)
	}
	waitCount(t, "the refused handshake counted", func() float64 { return counter(t, reg, "leaseguard_webhook_tls_handshake_errors_total") }, 1)

	// The API server (here: the right certificate) gets HTTP/1.1, never h2,
	// and headers past the bound are refused. The server closes after its
	// 431 with the rest of the headers unread: the reset that sends can
	// overtake the answer on a loaded machine (an empty line), which a
	// server that cut the connection some other way gives too. Up to three
	// tries: only a 431 passes, and any other answer fails at once.
	var line string
	for try := 0; try < 3; try++ {
		conn, err := tls.Dial("tcp", addr, client(cert))
		if err != nil {
			t.Fatal(err)
		}
		if p := conn.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
			t.Errorf("negotiated %q, want http/1.1", p)
		}
		_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\nX-Pad: "+strings.Repeat("a", webhookMaxHeaderBytes+8<<10)+"\r\n\r\n")
		line, _ = bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if line != "" {
			break
		}
	}
	if !strings.Contains(line, "431") {
		t.Errorf("oversized headers: %q, want 431", line)
	}

	// A connection that sends nothing, and one gone idle after a request,
	// are closed by the server.
	for _, request := range []string{"", "GET / HTTP/1.1\r\nHost: x\r\n\r\n"} {
		conn, err := tls.Dial("tcp", addr, client(cert))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(conn, request)
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		_, err = io.ReadAll(conn)
		if took := time.Since(start); err != nil || took > 5*time.Second {
			t.Errorf("request %q: connection held for %v (%v), want it closed after about %v", request, took, err, webhookReadHeaderTimeout)
		}
		conn.Close()
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

func waitCount(t *testing.T, what string, get func() float64, want float64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); get() < want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v, want %v", what, get(), want)
		}
	}
}
