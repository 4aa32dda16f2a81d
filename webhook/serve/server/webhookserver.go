package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/net/netutil"

	"github.com/leaseguard/leaseguard/webhook/serve/metrics"
)

// Bounds of the webhook port (docs/security.md). The API server sends one
// AdmissionReview per request on connections it keeps alive; reviews are
// read and answered within deadlines the handlers set per request
// (webhook/serve/admission), and these bound what a connection holds around
// them. controller-runtime's webhook.Server sets none of them, so
// leaseguard serves its handlers from its own http.Server.
var (
	// webhookReadHeaderTimeout bounds the TLS handshake and the request
	// line and headers: a client that opens connections and sends nothing
	// holds one for at most this long.
	webhookReadHeaderTimeout = 5 * time.Second
	// webhookIdleTimeout must outlast the API server's own idle timeout
	// for pooled connections (90 s, client-go's transport default):
	// closing an idle connection under the API server races its next POST,
	// which it does not retry, and a fail-open webhook then admits the
	// write unseen (Options.ShutdownDrain says the same of shutdown).
	webhookIdleTimeout = 120 * time.Second
	// webhookReadTimeout and webhookWriteTimeout are backstops for the
	// handlers' own per-request deadlines (30 s to read a body, 10 s to
	// write an answer; the API server gives up after at most 30 s).
	webhookReadTimeout  = 40 * time.Second
	webhookWriteTimeout = 60 * time.Second
)

const (
	// webhookMaxHeaderBytes: the API server's headers are a few hundred
	// bytes (a bearer token, when its kubeconfig has one, a few KiB).
	webhookMaxHeaderBytes = 16 << 10
	// webhookMaxConnections bounds the connections held at once. The API
	// server opens one per concurrent call and keeps them alive; at a
	// millisecond a review, hundreds of lease writes a second need a few.
	// Past the bound a new connection waits in the kernel's accept queue,
	// while kept-alive ones are answered as before. The worst case is 256
	// connections each holding a 64 KiB body being read (large bodies
	// share the 48 MiB budget of webhook/serve/admission): measured 1,700
	// trickling clients against the binary, peak RSS in docs/security.md,
	// well under a replica's 256 MiB.
	webhookMaxConnections = 256
)

// webhookServer serves the admission handlers over TLS with the bounds
// above, HTTP/1.1 unless HTTP/2 is asked for.
type webhookServer struct {
	addr     string
	tls      *tls.Config
	handler  http.Handler
	log      logr.Logger
	recorder *metrics.Recorder
	started  atomic.Bool
}

// serve listens and serves until ctx ends, then shuts down gracefully:
// requests in flight are answered, idle connections closed.
func (s *webhookServer) serve(ctx context.Context, enableHTTP2 bool) error {
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: webhookReadHeaderTimeout,
		ReadTimeout:       webhookReadTimeout,
		WriteTimeout:      webhookWriteTimeout,
		IdleTimeout:       webhookIdleTimeout,
		MaxHeaderBytes:    webhookMaxHeaderBytes,
		// net/http logs a line for every failed handshake: with
		// --client-ca, one for every client that is not the API server.
		// They are counted, and logged at V(1).
		ErrorLog: log.New(&serverErrorLog{log: s.log, recorder: s.recorder}, "", 0),
		BaseContext: func(net.Listener) context.Context {
			return logr.NewContext(context.WithoutCancel(ctx), s.log)
		},
	}
	cfg := s.tls.Clone()
	if enableHTTP2 {
		cfg.NextProtos = []string{"h2", "http/1.1"}
	} else {
		// An empty TLSNextProto turns HTTP/2 off (the rapid-reset and
		// stream cancellation CVEs); the API server speaks HTTP/1.1.
		cfg.NextProtos = []string{"http/1.1"}
		hs.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("webhook port: %w", err)
	}
	ln = tls.NewListener(netutil.LimitListener(ln, webhookMaxConnections), cfg)
	s.started.Store(true)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
			return
		}
		s.started.Store(false)
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = hs.Shutdown(shutdownCtx)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ready reports whether the port is open and a serving certificate is
// there to present (readiness: a replica without one would fail every
// call).
func (s *webhookServer) ready(*http.Request) error {
	if !s.started.Load() {
		return errors.New("the webhook port is not serving")
	}
	if _, err := s.tls.GetCertificate(&tls.ClientHelloInfo{}); err != nil {
		return fmt.Errorf("no serving certificate: %w", err)
	}
	return nil
}

// serverErrorLog takes net/http's error lines: failed TLS handshakes are
// counted and logged at V(1), anything else logged.
type serverErrorLog struct {
	log      logr.Logger
	recorder *metrics.Recorder
}

func (w *serverErrorLog) Write(p []byte) (int, error) {
	line := string(bytes.TrimSpace(p))
	if bytes.Contains(p, []byte("TLS handshake error")) {
		w.recorder.TLSHandshakeError()
		w.log.V(1).Info("webhook port: refused a connection", "error", line)
		return len(p), nil
	}
	w.log.Info("webhook port", "error", line)
	return len(p), nil
}
