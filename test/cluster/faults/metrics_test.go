package faults

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leaseguard/leaseguard/test/cluster/clustertest"
)

// scraper reads a replica's metrics port as Prometheus does: HTTPS,
// verified against the CA in leaseguard's webhook configuration (the port
// serves the webhook's certificate), with a bound service account token.
type scraper struct {
	client *http.Client
	// token is bound to ClusterRole leaseguard-metrics-reader (as shipped);
	// stranger's service account is bound to nothing.
	token, stranger string
}

const (
	metricsPort = "8443"
	scraperSA   = "metrics-scraper"
	strangerSA  = "metrics-stranger"
)

// newScraper makes two service accounts in e2eNS, the scraper bound to the
// shipped leaseguard-metrics-reader, and takes their tokens.
func (c *cluster) newScraper(t *testing.T) *scraper {
	t.Helper()
	ctx := context.Background()
	vwc, err := c.admin.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "leaseguard-validating-webhook-configuration", metav1.GetOptions{})
	if err != nil || len(vwc.Webhooks) == 0 {
		t.Fatalf("leaseguard's validating webhook configuration (for the CA of its serving certificate): %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(vwc.Webhooks[0].ClientConfig.CABundle) {
		t.Fatal("leaseguard's validating webhook configuration has no caBundle")
	}
	s := &scraper{client: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, ServerName: "leaseguard-webhook-service." + lgNS + ".svc", MinVersion: tls.VersionTLS12,
	}}}}
	s.token = clustertest.BoundToken(t, c.admin, e2eNS, scraperSA, "leaseguard-metrics-reader")
	s.stranger = clustertest.BoundToken(t, c.admin, e2eNS, strangerSA, "")
	return s
}

// get returns the status code and body of path on a pod's metrics port,
// sent with token (none when empty).
func (s *scraper) get(ip, path, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, "https://"+ip+":"+metricsPort+path, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(data), err
}

// reloads reads leaseguard_policy_reloads_total{result="success"} from a
// pod (-1 when unreadable).
func (s *scraper) reloads(ip string) float64 {
	return s.sum(ip, func(series string) bool { return series == `leaseguard_policy_reloads_total{result="success"}` })
}

// decisions reads the sum of leaseguard_decisions_total over all its
// series from a pod: the reviews it decided (-1 when unreadable).
func (s *scraper) decisions(ip string) float64 {
	return s.sum(ip, func(series string) bool { return strings.HasPrefix(series, "leaseguard_decisions_total{") })
}

// sum adds the samples of the series match accepts on a pod's metrics
// port (-1 when unreadable).
func (s *scraper) sum(ip string, match func(series string) bool) float64 {
	code, body, err := s.get(ip, "/metrics", s.token)
	if err != nil || code != http.StatusOK {
		return -1
	}
	total := 0.0
	for _, line := range strings.Split(body, "\n") {
		if f := strings.Fields(line); len(f) == 2 && match(f[0]) {
			var v float64
			if _, err := fmt.Sscan(f[1], &v); err == nil {
				total += v
			}
		}
	}
	return total
}

// checkMetricsAccess asserts, on every replica, what the shipped metrics
// port answers: 401 without a token, 403 to a token the API server knows
// but RBAC does not allow, the metrics to leaseguard-metrics-reader, and
// /debug/leases (user and lease names) only to leaseguard-debug-reader.
func (c *cluster) checkMetricsAccess(t *testing.T, s *scraper) {
	t.Helper()
	for _, p := range c.pods(t) {
		ip := p.Status.PodIP
		for _, tc := range []struct {
			what, path, token string
			want              int
		}{
			{"no token", "/metrics", "", http.StatusUnauthorized},
			{"a forged token", "/metrics", "not-a-token", http.StatusUnauthorized},
			{"a token bound to nothing", "/metrics", s.stranger, http.StatusForbidden},
			{"a metrics reader's token", "/metrics", s.token, http.StatusOK},
			{"a metrics reader's token", "/debug/leases", s.token, http.StatusForbidden},
			{"no token", "/debug/leases", "", http.StatusUnauthorized},
		} {
			code, body, err := s.get(ip, tc.path, tc.token)
			if err != nil || code != tc.want {
				t.Errorf("pod %s: GET %s with %s: HTTP %d %v, want %d (%.200s)", p.Name, tc.path, tc.what, code, err, tc.want, body)
			}
			if code == http.StatusOK && !strings.Contains(body, "leaseguard_policy_file_valid 1") {
				t.Errorf("pod %s: GET %s: no leaseguard_policy_file_valid 1 in %.300s", p.Name, tc.path, body)
			}
		}
		// Plain HTTP is not served at all.
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + ip + ":" + metricsPort + "/metrics")
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
			resp.Body.Close()
			if strings.Contains(string(body), "leaseguard_") {
				t.Errorf("pod %s: plain HTTP on the metrics port served the metrics", p.Name)
			}
		}
	}
}

// checkWebhookHearsOnlyTheAPIServer asserts, on every replica, that the
// webhook port answers the API server's client certificate only (the chart's
// apiServerAuthentication): a review posted from inside the cluster without
// a certificate, or with the kubelet's (the same cluster CA, another name),
// fails the TLS handshake, undecided and uncounted.
func (c *cluster) checkWebhookHearsOnlyTheAPIServer(t *testing.T, s *scraper, pki string) {
	t.Helper()
	load := func(name string) *tls.Certificate {
		cert, err := tls.LoadX509KeyPair(filepath.Join(pki, name+".crt"), filepath.Join(pki, name+".key"))
		if err != nil {
			t.Fatalf("the cluster's %s certificate: %v", name, err)
		}
		return &cert
	}
	review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"forged",` +
		`"kind":{"group":"coordination.k8s.io","version":"v1","kind":"Lease"},"resource":{"group":"coordination.k8s.io","version":"v1","resource":"leases"},` +
		`"operation":"CREATE","userInfo":{"username":"system:serviceaccount:default:intruder"},"namespace":"` + e2eNS + `","name":"forged",` +
		`"object":{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"forged","namespace":"` + e2eNS + `"},"spec":{}}}}`
	base := s.client.Transport.(*http.Transport).TLSClientConfig
	for _, p := range c.pods(t) {
		for _, tc := range []struct {
			what    string
			cert    *tls.Certificate
			wantErr string
		}{
			{"no client certificate", nil, "certificate required"},
			{"the kubelet's certificate", load("kubelet-client"), "bad certificate"},
			{"the API server's certificate", load("apiserver-admission-client"), ""},
		} {
			cfg := base.Clone()
			cfg.NextProtos = []string{"http/1.1"}
			if tc.cert != nil {
				cfg.Certificates = []tls.Certificate{*tc.cert}
			}
			addr := net.JoinHostPort(p.Status.PodIP, "9443")
			if tc.wantErr != "" {
				// With TLS 1.3 the client's handshake completes before the
				// server checks its certificate; the server's refusal is
				// the alert it then sends. Read it on a connection of our
				// own: through net/http the request could meet the
				// connection already closed instead ("use of closed
				// network connection"), which says less.
				if err := refusedHandshake(addr, cfg); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("pod %s, %s: error %v; want the handshake refused (%s)", p.Name, tc.what, err, tc.wantErr)
				}
				continue
			}
			client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
			resp, err := client.Post("https://"+addr+"/validate-leases", "application/json", strings.NewReader(review))
			var body []byte
			if err == nil {
				body, _ = io.ReadAll(io.LimitReader(resp.Body, 4<<10))
				resp.Body.Close()
			}
			switch {
			case tc.wantErr == "" && (err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"uid":"forged"`)):
				t.Errorf("pod %s, %s: %v %.300s; want the review answered", p.Name, tc.what, err, body)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("pod %s, %s: error %v %.300s; want the handshake refused (%s)", p.Name, tc.what, err, body, tc.wantErr)
			}
		}
	}
}

// refusedHandshake sends a request over a TLS connection of its own and
// returns the error reading the answer: the server's alert when it refuses
// the client's certificate, nil when it answers.
func refusedHandshake(addr string, cfg *tls.Config) error {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	if _, err := conn.Write([]byte("POST /validate-leases HTTP/1.1\r\nHost: leaseguard\r\nContent-Length: 0\r\n\r\n")); err != nil {
		return err
	}
	_, err = conn.Read(make([]byte, 1))
	return err
}
