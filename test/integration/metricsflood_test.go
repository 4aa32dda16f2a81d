package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/webhook/serve/server"
)

// Issue 36 item 6, an authentication flood: the metrics port reviewed every
// uncached token through one client with client-go's default rate limit
// (5/s, burst 10) and a 10 s timeout, so anyone who could reach the port,
// with no credentials, sending random tokens faster than 5/s made every
// review fail at once ("would exceed context deadline"), a valid Prometheus
// token's included: 401 to the scraper, alerts blind.
//
// The real binary, as shipped (--metrics-secure, running as its own service
// account with client-go's default rate limit), is flooded for 10 s with
// random JWT-shaped tokens on 80 keep-alive connections from 8 loopback
// addresses (127.0.0.2-9: 8 attacking pods), 320 requests a second, while
// Prometheus's service account scrapes from 127.0.0.1 with a token
// already cached and with new ones from the TokenRequest API, never seen
// before. Every scrape must get its metrics within scrapeBound; the flood
// only 401 and 429, and no more TokenReviews than each source's budget.
func TestTokenFloodDoesNotLockOutScrapers(t *testing.T) {
	if testing.Short() {
		t.Skip("floods the metrics port for 10 seconds")
	}
	const (
		ns = "it-metrics-flood"
		// scrapeBound: a scrape costs one TokenReview and one
		// SubjectAccessReview on a loopback API server, milliseconds;
		// 5 s leaves room for a loaded CI machine and is still half
		// Prometheus's default 10 s scrape timeout. Before the fix the new
		// token was answered 401 at once.
		scrapeBound  = 5 * time.Second
		sources      = 8
		connsPerSrc  = 10
		floodFor     = 10 * time.Second
		requestEvery = 250 * time.Millisecond // per connection: 320 requests/s in all
	)
	ctx := context.Background()
	createNamespace(t, ns)
	applyShippedRBAC(t, ns, "config/rbac/metrics_auth.yaml", "config/rbac/metrics_reader.yaml")
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "it-metrics-flood-prometheus"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "leaseguard-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: ns}},
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
	})
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "prometheus"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// Each call is a new bound token: one leaseguard has never seen.
	newToken := func() string {
		t.Helper()
		tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "prometheus", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("a bound token for %s/prometheus: %v", ns, err)
		}
		return tr.Status.Token
	}

	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.WriteKubeconfigFor(kc, "system:serviceaccount:"+ns+":leaseguard"); err != nil {
		t.Fatal(err)
	}
	_, webhookPort, _ := net.SplitHostPort(freeAddr(t))
	lg, err := cp.StartLeaseguard(binary, policyPath, "--metrics-secure", "--kubeconfig", kc, "--webhook-port", webhookPort)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lg.Stop)
	target := strings.TrimPrefix(strings.TrimSuffix(lg.MetricsURL, "/metrics"), "https://")

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cp.CAData())
	clientFrom := func(source string, conns int) *http.Client {
		d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}
		return &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
			DialContext:     d.DialContext,
			TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
			MaxConnsPerHost: conns, MaxIdleConnsPerHost: conns,
		}}
	}
	get := func(client *http.Client, token string) (int, string, error) {
		req, _ := http.NewRequest(http.MethodGet, "https://"+target+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		return resp.StatusCode, string(body), nil
	}
	prometheus := clientFrom("127.0.0.1", 1)
	scrape := func(what, token string) string {
		t.Helper()
		start := time.Now()
		code, body, err := get(prometheus, token)
		took := time.Since(start)
		if err != nil || code != http.StatusOK || !strings.Contains(body, "leaseguard_policy_file_valid 1") {
			t.Errorf("%s: HTTP %d %v after %v: %.200q; want the metrics", what, code, err, took, body)
		} else if took > scrapeBound {
			t.Errorf("%s: the metrics after %v, past %v", what, took, scrapeBound)
		} else {
			t.Logf("%s: HTTP 200 after %v", what, took.Round(time.Millisecond))
		}
		return body
	}
	cached := newToken()
	scrape("before the flood", cached)
	reviewsBefore := apiServerTokenReviews(t)

	// The flood: bounded in count and time, loopback only, self-stopping.
	floodCtx, stopFlood := context.WithTimeout(ctx, floodFor)
	defer stopFlood()
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	var failures atomic.Int64
	floodStart := time.Now()
	for s := range sources {
		client := clientFrom(fmt.Sprintf("127.0.0.%d", s+2), connsPerSrc)
		for range connsPerSrc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(requestEvery)
				defer tick.Stop()
				for floodCtx.Err() == nil {
					code, _, err := get(client, randomJWT())
					mu.Lock()
					if err != nil {
						failures.Add(1)
					} else {
						codes[code]++
					}
					mu.Unlock()
					select {
					case <-tick.C:
					case <-floodCtx.Done():
					}
				}
			}()
		}
	}
	// Prometheus scrapes while the flood runs: its cached token, and new
	// tokens, each reviewed for the first time under the flood.
	for i := range 3 {
		time.Sleep(floodFor / 4)
		scrape(fmt.Sprintf("a new token under the flood (%d)", i+1), newToken())
		scrape(fmt.Sprintf("the cached token under the flood (%d)", i+1), cached)
	}
	wg.Wait()
	flooded := time.Since(floodStart)
	reviews := apiServerTokenReviews(t) - reviewsBefore

	mu.Lock()
	defer mu.Unlock()
	total := 0
	for code, n := range codes {
		total += n
		if code != http.StatusUnauthorized && code != http.StatusTooManyRequests {
			t.Errorf("%d flood requests answered HTTP %d, want only 401 and 429", n, code)
		}
	}
	// Each source's budget of reviews of unseen tokens, and the scraper's
	// three new tokens, and one for luck (a retry of a review the API
	// server answered 429).
	budget := float64(sources)*(server.UnseenTokenReviewBurst+server.UnseenTokenReviewsPerSecond*flooded.Seconds()) + 3 + 1
	t.Logf("flood: %d requests in %v (401: %d, 429: %d, failed: %d); TokenReviews at the API server: %v (budget %.0f)",
		total, flooded.Round(time.Millisecond), codes[http.StatusUnauthorized], codes[http.StatusTooManyRequests], failures.Load(), reviews, budget)
	if total < 2*sources*connsPerSrc {
		t.Errorf("the flood sent %d requests: it did not run", total)
	}
	if reviews > budget {
		t.Errorf("the flood cost %v TokenReviews, past the per-source budget of %.0f", reviews, budget)
	}
	if codes[http.StatusTooManyRequests] == 0 {
		t.Error("no flood request was answered 429: the per-source budget never applied")
	}

	// leaseguard's own count agrees: what it refused unreviewed.
	fams := parseMetrics(t, scrape("after the flood", cached))
	refused := controlplane.Counter(fams, "leaseguard_metrics_tokens_refused_total", map[string]string{"reason": "source_limit"}) +
		controlplane.Counter(fams, "leaseguard_metrics_tokens_refused_total", map[string]string{"reason": "busy"})
	unseen := controlplane.Counter(fams, "leaseguard_metrics_token_reviews_total", map[string]string{"lane": "unseen"})
	if refused != float64(codes[http.StatusTooManyRequests]) {
		t.Errorf("leaseguard_metrics_tokens_refused_total{reason=source_limit|busy} = %v, want the %d answers 429", refused, codes[http.StatusTooManyRequests])
	}
	if unseen > budget+1 { // and the token cached before the flood
		t.Errorf("leaseguard_metrics_token_reviews_total{lane=unseen} = %v, past the budget of %.0f", unseen, budget)
	}
}

// randomJWT is a token shaped as a bound service-account token (about
// 1 KiB, three base64url parts) that nobody issued.
func randomJWT() string {
	part := func(n int) string {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return "eyJhbGciOiJSUzI1NiIsImtpZCI6ImZsb29kIn0." + part(560) + "." + part(256)
}

// apiServerTokenReviews is the API server's count of TokenReview requests
// it has served (apiserver_request_total{resource="tokenreviews"}), every
// code included.
func apiServerTokenReviews(t *testing.T) float64 {
	t.Helper()
	raw, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("the API server's metrics: %v", err)
	}
	return controlplane.Counter(parseMetrics(t, string(raw)), "apiserver_request_total", map[string]string{"resource": "tokenreviews"})
}

func parseMetrics(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader([]byte(text)))
	if err != nil {
		t.Fatalf("parsing metrics: %v", err)
	}
	return fams
}
