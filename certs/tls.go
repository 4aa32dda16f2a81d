// Package certs is where leaseguard's serving certificates come from and how
// its TLS is configured. The webhook server sees only the small Source
// interface, so how a certificate is obtained and rotated stays here.
package certs

import (
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// Source configures the serving TLS of the webhook server.
type Source interface {
	// TLSOptions returns the options to apply to the server's tls.Config.
	// A source that sets GetCertificate serves its own certificates;
	// otherwise controller-runtime's certificate watcher serves Files().
	TLSOptions() ([]func(*tls.Config), error)
	// Files are where controller-runtime's certificate watcher reads (and
	// re-reads on change) the key pair, for sources that use files.
	Files() (dir, certName, keyName string)
	// Start keeps the certificate current until ctx ends.
	Start(ctx context.Context) error
}

// FileSource serves a key pair from files, reloaded when they change (the
// watcher is controller-runtime's). It suits cert-manager's mounted Secret,
// local development and any other issuer that writes files.
type FileSource struct {
	Dir      string
	CertName string
	KeyName  string
	// Clients, when its CA file is set, makes the server require and
	// verify the API server's client certificate.
	Clients ClientAuth
}

// Files returns the key pair location.
func (f *FileSource) Files() (string, string, string) {
	cert, key := f.CertName, f.KeyName
	if cert == "" {
		cert = "tls.crt"
	}
	if key == "" {
		key = "tls.key"
	}
	return f.Dir, cert, key
}

// Start does nothing: controller-runtime's watcher re-reads the files.
func (f *FileSource) Start(context.Context) error { return nil }

// TLSOptions checks that the key pair is readable (naming the file that is
// not) and sets the TLS floor and client verification.
func (f *FileSource) TLSOptions() ([]func(*tls.Config), error) {
	dir, certName, keyName := f.Files()
	certPath, keyPath := filepath.Join(dir, certName), filepath.Join(dir, keyName)
	if _, err := tls.LoadX509KeyPair(certPath, keyPath); err != nil {
		return nil, fmt.Errorf("serving certificate %s / key %s: %w", certPath, keyPath, err)
	}
	return baseOptions(f.Clients)
}

// baseOptions are the TLS settings of every mode: TLS 1.2 at least, and
// client certificate verification when a client CA is given.
func baseOptions(clients ClientAuth) ([]func(*tls.Config), error) {
	opts := []func(*tls.Config){minimumVersion}
	verify, err := clients.options()
	if err != nil {
		return nil, err
	}
	if verify != nil {
		opts = append(opts, verify)
	}
	return opts, nil
}

// minimumVersion allows TLS 1.2 and up; Go prefers 1.3 when both sides can.
func minimumVersion(c *tls.Config) { c.MinVersion = tls.VersionTLS12 }

// ServingTLS is the TLS of the webhook port: the source's certificate (for
// files, re-read on change by controller-runtime's certificate watcher, the
// returned function, to run until the server stops), TLS 1.2 at least, and
// the API server's client certificate when the source requires it.
func ServingTLS(src Source) (*tls.Config, func(context.Context) error, error) {
	opts, err := src.TLSOptions()
	if err != nil {
		return nil, nil, err
	}
	cfg := &tls.Config{}
	for _, o := range opts {
		o(cfg)
	}
	if cfg.GetCertificate != nil {
		return cfg, func(context.Context) error { return nil }, nil
	}
	dir, certName, keyName := src.Files()
	w, err := certwatcher.New(filepath.Join(dir, certName), filepath.Join(dir, keyName))
	if err != nil {
		return nil, nil, fmt.Errorf("serving certificate: %w", err)
	}
	cfg.GetCertificate = w.GetCertificate
	return cfg, w.Start, nil
}

// ScrapeTLS is the TLS of leaseguard's metrics and debug port: the
// webhook's own serving certificate (the same source, rotated alike), TLS
// 1.2 at least, HTTP/1.1 only, and no client certificate asked for, since
// scrapers authenticate with a bearer token the API server reviews. Run
// the returned function until the server stops.
func ScrapeTLS(src Source) (*tls.Config, func(context.Context) error, error) {
	cfg, watch, err := ServingTLS(src)
	if err != nil {
		return nil, nil, err
	}
	cfg.ClientAuth, cfg.ClientCAs, cfg.VerifyConnection = tls.NoClientCert, nil, nil
	cfg.NextProtos = []string{"http/1.1"}
	return cfg, watch, nil
}
