package certs

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	cmtls "github.com/cert-manager/cert-manager/pkg/server/tls"
	"github.com/cert-manager/cert-manager/pkg/server/tls/authority"
	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"
)

// SelfManaged keeps a CA in a Secret of leaseguard's namespace, issues and
// renews the serving certificate from it in memory, and keeps the caBundle of
// leaseguard's own webhook configurations current (with Alongside), for
// clusters without cert-manager. The PKI is cert-manager's (its webhook's dynamic authority
// and source). Every replica may run it at once: the CA Secret is created
// once and then shared, and the caBundle updates are idempotent, so no leader
// election is needed (docs/design.md §5).
type SelfManaged struct {
	// Namespace and SecretName locate the CA Secret.
	Namespace  string
	SecretName string
	// DNSNames of the serving certificate (the webhook Service's names).
	DNSNames []string
	// Alongside runs with the certificate source until ctx ends: what
	// keeps the caBundle of leaseguard's webhook configurations the CA's
	// (configsync.CABundleKeeper.Run, which writes the rest of those
	// objects too); nil runs nothing. An error from it stops Start.
	Alongside func(context.Context) error
	// CADuration and LeafDuration default to one year and one week.
	CADuration   time.Duration
	LeafDuration time.Duration
	// Clients is the API server's client certificate, when required.
	Clients ClientAuth
	Config  *rest.Config
	Log     logr.Logger

	authority *authority.DynamicAuthority
	source    *cmtls.DynamicSource
}

// Files is unused: certificates live in memory.
func (s *SelfManaged) Files() (string, string, string) { return "", "", "" }

func (s *SelfManaged) init() error {
	if s.source != nil {
		return nil
	}
	switch {
	case s.Namespace == "" || s.SecretName == "":
		return fmt.Errorf("self-managed certificates need the CA Secret's namespace and name")
	case len(s.DNSNames) == 0:
		return fmt.Errorf("self-managed certificates need the webhook Service's DNS names")
	case s.Config == nil:
		return fmt.Errorf("self-managed certificates need access to the API server")
	}
	s.authority = &authority.DynamicAuthority{
		SecretNamespace: s.Namespace,
		SecretName:      s.SecretName,
		SecretLabels:    map[string]string{"app.kubernetes.io/name": "leaseguard"},
		RESTConfig:      s.Config,
		CommonName:      "leaseguard-webhook-ca",
		CADuration:      s.CADuration,
		LeafDuration:    s.LeafDuration,
	}
	s.source = &cmtls.DynamicSource{DNSNames: s.DNSNames, Authority: s.authority, RetryInterval: 5 * time.Second}
	return nil
}

// TLSOptions serves the in-memory certificate.
func (s *SelfManaged) TLSOptions() ([]func(*tls.Config), error) {
	if err := s.init(); err != nil {
		return nil, err
	}
	opts, err := baseOptions(s.Clients)
	if err != nil {
		return nil, err
	}
	return append(opts, func(c *tls.Config) { c.GetCertificate = s.source.GetCertificate }), nil
}

// Start runs the certificate source (and through it the authority) and
// Alongside until ctx ends.
func (s *SelfManaged) Start(ctx context.Context) error {
	if err := s.init(); err != nil {
		return err
	}
	ctx = logr.NewContext(ctx, s.Log)
	g, ctx := errgroup.WithContext(ctx)
	// The source runs the authority itself (cert-manager's DynamicSource.Start
	// calls Authority.Run): starting it here too would run two Secret
	// informers and race on the authority's fields.
	g.Go(func() error { return s.source.Start(ctx) })
	if s.Alongside != nil {
		g.Go(func() error { return s.Alongside(ctx) })
	}
	return g.Wait()
}
