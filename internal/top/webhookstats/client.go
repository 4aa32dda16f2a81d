package webhookstats

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ClientOptions say how top reaches a replica's secured metrics port
// (`leaseguard serve --metrics-secure`, as shipped): HTTPS with the
// webhook's serving certificate, and a bearer token allowed to get
// /debug/leases (ClusterRole leaseguard-debug-reader).
type ClientOptions struct {
	// Token is sent as the bearer token; empty sends the kubeconfig's
	// (a token, a token file or an exec plugin's).
	Token string
	// WebhookConfiguration is leaseguard's validating webhook
	// configuration: its caBundle verifies the certificate, issued to its
	// Service's DNS name (or its URL's host).
	WebhookConfiguration string
	// InsecureSkipVerify does not verify the certificate (the token is
	// still sent: only for a port-forward the user trusts).
	InsecureSkipVerify bool
}

// NewClient returns the HTTP client for the replicas' metrics ports.
func NewClient(ctx context.Context, cfg *rest.Config, o ClientOptions) (*http.Client, error) {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: o.InsecureSkipVerify} //nolint:gosec // the user's explicit choice
	if !o.InsecureSkipVerify {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, o.WebhookConfiguration, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("the metrics port serves the webhook's certificate, verified with the caBundle of %s: %w (--webhook-stats-insecure-skip-tls-verify does not verify it)", o.WebhookConfiguration, err)
		}
		if tlsConfig.RootCAs, tlsConfig.ServerName, err = servingIdentity(vwc); err != nil {
			return nil, fmt.Errorf("%s: %w (--webhook-stats-insecure-skip-tls-verify does not verify the certificate)", o.WebhookConfiguration, err)
		}
	}
	var rt http.RoundTripper = &http.Transport{TLSClientConfig: tlsConfig, Proxy: http.ProxyFromEnvironment}
	if o.Token != "" {
		rt = bearer{token: o.Token, next: rt}
	} else {
		// Only the credentials: the API server's CA and client
		// certificate are not the metrics port's.
		creds := rest.AnonymousClientConfig(cfg)
		creds.BearerToken, creds.BearerTokenFile, creds.ExecProvider, creds.AuthProvider = cfg.BearerToken, cfg.BearerTokenFile, cfg.ExecProvider, cfg.AuthProvider
		var err error
		if rt, err = rest.HTTPWrappersForConfig(creds, rt); err != nil {
			return nil, err
		}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: rt}, nil
}

// servingIdentity is the CA and the name the webhook's certificate is
// issued to, from the first webhook's clientConfig.
func servingIdentity(vwc *admissionregistrationv1.ValidatingWebhookConfiguration) (*x509.CertPool, string, error) {
	if len(vwc.Webhooks) == 0 {
		return nil, "", fmt.Errorf("no webhooks")
	}
	cc := vwc.Webhooks[0].ClientConfig
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(cc.CABundle) {
		return nil, "", fmt.Errorf("webhook %s has no caBundle", vwc.Webhooks[0].Name)
	}
	switch {
	case cc.Service != nil:
		return roots, cc.Service.Name + "." + cc.Service.Namespace + ".svc", nil
	case cc.URL != nil:
		u, err := url.Parse(*cc.URL)
		if err != nil {
			return nil, "", fmt.Errorf("webhook %s: url: %w", vwc.Webhooks[0].Name, err)
		}
		return roots, u.Hostname(), nil
	}
	return nil, "", fmt.Errorf("webhook %s has neither service nor url", vwc.Webhooks[0].Name)
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}
