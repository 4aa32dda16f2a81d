// Package gcsemulator runs a GCS-protocol server in-process
// (github.com/fsouza/fake-gcs-server) on the loopback interface, so that the
// MultiClusterLease controllers of the tests reach their global lock over
// the same JSON API, with the same generation preconditions, as against
// Google Cloud Storage.
package gcsemulator

import (
	"context"
	"fmt"
	"io"

	"cloud.google.com/go/storage"
	"github.com/fsouza/fake-gcs-server/fakestorage"
	"google.golang.org/api/option"
)

// Server is a running GCS emulator with one bucket.
type Server struct {
	srv    *fakestorage.Server
	Bucket string
}

// Start serves the GCS JSON API over plain HTTP on 127.0.0.1 (a free port),
// with bucket created. log receives the server's request log when set.
func Start(bucket string, log io.Writer) (*Server, error) {
	return Listen(bucket, "127.0.0.1", 0, log)
}

// Listen is Start on host:port (port 0: a free one); in a Pod, the
// emulator that a cluster's controllers reach through a Service.
func Listen(bucket, host string, port uint16, log io.Writer) (*Server, error) {
	srv, err := fakestorage.NewServerWithOptions(fakestorage.Options{
		Scheme: "http",
		Host:   host,
		Port:   port,
		Writer: log,
	})
	if err != nil {
		return nil, fmt.Errorf("starting the GCS emulator: %w", err)
	}
	srv.CreateBucketWithOpts(fakestorage.CreateBucketOpts{Name: bucket})
	return &Server{srv: srv, Bucket: bucket}, nil
}

// URL is the server's base URL.
func (s *Server) URL() string { return s.srv.URL() }

// NewClient returns a GCS client of its own talking to the emulator through
// its HTTP endpoint, as a controller configured with a storage endpoint
// would; each caller gets its own connection pool. Reads go through the JSON
// API (GCS serves both it and the XML API; the emulator serves XML downloads
// only under the public host name, which a loopback server does not have).
func (s *Server) NewClient(ctx context.Context) (*storage.Client, error) {
	return storage.NewClient(ctx, option.WithEndpoint(s.srv.URL()+"/storage/v1/"), option.WithoutAuthentication(), storage.WithJSONReads())
}

// Stop stops the server.
func (s *Server) Stop() { s.srv.Stop() }
