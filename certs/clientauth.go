package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// ClientAuth is how leaseguard knows the API server: the client
// certificate the API server presents to webhooks when its
// AdmissionConfiguration gives it one (WebhookAdmissionConfiguration's
// kubeConfigFile). Without it anyone who reaches the webhook port can post
// reviews: they are decided like the API server's and counted in the
// decision metrics and /debug/leases, and large ones take room the API
// server's reviews then wait for (docs/security.md).
type ClientAuth struct {
	// CAFile is the PEM bundle the client certificate must chain to; empty
	// asks for no certificate.
	CAFile string
	// Names, when set, are the only certificate subjects accepted: the
	// Common Name or a DNS name of the leaf, as kube-apiserver's
	// --requestheader-allowed-names. A CA that also signs other clients
	// (a cluster CA signs every kubelet's) needs it.
	Names []string
}

// options returns the tls.Config setting that requires and verifies the
// client certificate, nil when no CA is set.
func (c ClientAuth) options() (func(*tls.Config), error) {
	if c.CAFile == "" {
		if len(c.Names) > 0 {
			return nil, errors.New("client certificate names are set, but no client CA to verify them with")
		}
		return nil, nil
	}
	pem, err := os.ReadFile(c.CAFile)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("client CA %s: no PEM certificate found", c.CAFile)
	}
	for _, n := range c.Names {
		if strings.TrimSpace(n) == "" {
			return nil, errors.New("client certificate names: an empty name would accept no certificate")
		}
	}
	names := slices.Clone(c.Names)
	return func(cfg *tls.Config) {
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		if len(names) > 0 {
			cfg.VerifyConnection = func(cs tls.ConnectionState) error {
				return allowedName(cs.PeerCertificates, names)
			}
		}
	}, nil
}

// allowedName accepts a verified leaf whose Common Name or a DNS name is
// one of names.
func allowedName(chain []*x509.Certificate, names []string) error {
	if len(chain) == 0 {
		return errors.New("leaseguard: no client certificate")
	}
	leaf := chain[0]
	if slices.Contains(names, leaf.Subject.CommonName) {
		return nil
	}
	for _, d := range leaf.DNSNames {
		if slices.Contains(names, d) {
			return nil
		}
	}
	return fmt.Errorf("leaseguard: client certificate %q is not one of the allowed names %s", leaf.Subject.CommonName, strings.Join(names, ", "))
}
