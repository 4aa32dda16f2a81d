package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

// forgedReview is a review of a release of it-hard/<name> by a stranger:
// one rule hard-leases denies, so that a decided copy shows in the deny
// counter and in /debug/leases.
func forgedReview(uid, name string) string {
	now := time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")
	lease := func(holder string) string {
		return `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"` + name + `","namespace":"` + hardNS + `",` +
			`"resourceVersion":"1","uid":"00000000-0000-0000-0000-0000000000aa"},"spec":{"holderIdentity":"` + holder + `",` +
			`"leaseDurationSeconds":15,"acquireTime":"` + now + `","renewTime":"` + now + `","leaseTransitions":0}}`
	}
	return `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"` + uid + `",` +
		`"kind":{"group":"coordination.k8s.io","version":"v1","kind":"Lease"},"resource":{"group":"coordination.k8s.io","version":"v1","resource":"leases"},` +
		`"requestKind":{"group":"coordination.k8s.io","version":"v1","kind":"Lease"},"requestResource":{"group":"coordination.k8s.io","version":"v1","resource":"leases"},` +
		`"operation":"UPDATE","userInfo":{"username":"system:serviceaccount:default:stranger"},"namespace":"` + hardNS + `","name":"` + name + `",` +
		`"object":` + lease("") + `,"oldObject":` + lease("a-0_1") + `,"options":{"apiVersion":"meta.k8s.io/v1","kind":"UpdateOptions"}}}`
}

// webhookClient posts to the harness's leaseguard presenting cert (none
// when nil), trusting its serving CA.
func webhookClient(cert *tls.Certificate) *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cp.CAData())
	cfg := &tls.Config{RootCAs: roots, ServerName: cp.WebhookHost, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
}

// handshakeRefusal completes a TLS handshake with the harness's leaseguard
// presenting cert and returns what the first read brings. Under TLS 1.3 the
// server checks the client's certificate after the client's side of the
// handshake is done, so its refusal arrives as an alert on the first read,
// never as an error of Handshake itself; reading without writing makes sure
// the alert is what is read (a request written at the same time can meet the
// closed socket first and break as a "broken pipe").
func handshakeRefusal(cert *tls.Certificate) error {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(cp.CAData())
	cfg := &tls.Config{RootCAs: roots, ServerName: cp.WebhookHost, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp",
		net.JoinHostPort(cp.WebhookHost, strconv.Itoa(cp.WebhookPort)), cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	return err
}

func webhookURL() string {
	return "https://" + net.JoinHostPort(cp.WebhookHost, strconv.Itoa(cp.WebhookPort)) + manifests.ValidatePath
}

func hardDenials(t *testing.T) float64 {
	t.Helper()
	fams, err := guard.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return controlplane.Counter(fams, "leaseguard_decisions_total", map[string]string{"rule": "hard-leases", "verdict": "deny"})
}

// As shipped clusters should be set up, the API server presents a client
// certificate to webhooks (its AdmissionConfiguration) and leaseguard
// accepts no other (--client-ca, --client-name): a review posted by anyone
// else who reaches the webhook port fails the TLS handshake, so it is never
// decided, never counted in leaseguard_decisions_total and never listed by
// /debug/leases, where it would fake what operators see.
func TestOnlyTheAPIServersReviewsAreHeard(t *testing.T) {
	impostor, err := cp.AdmissionClient.Sign("kubelet") // the right CA, not the API server's name
	if err != nil {
		t.Fatal(err)
	}
	apiServer := cp.AdmissionClient.Certificate()
	post := func(cert *tls.Certificate, uid, name string) (int, string, error) {
		req, _ := http.NewRequest(http.MethodPost, webhookURL(), strings.NewReader(forgedReview(uid, name)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := webhookClient(cert).Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), nil
	}

	before := hardDenials(t)
	for _, tc := range []struct {
		name, lease, wantErr string
		cert                 *tls.Certificate
	}{
		{"no client certificate", "forged-without-certificate", "certificate required", nil},
		{"a certificate of the right CA with another name", "forged-by-impostor", "bad certificate", &impostor},
	} {
		if err := handshakeRefusal(tc.cert); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: the handshake ended with %v; want it refused (%q)", tc.name, err, tc.wantErr)
		}
		// The forged review itself: whichever way the connection breaks
		// (the alert, or a broken pipe when the request races it), no
		// answer comes back and nothing is counted (below).
		if code, body, err := post(tc.cert, "forged-"+tc.lease, tc.lease); err == nil {
			t.Errorf("%s: the forged review was answered HTTP %d %s; want the connection refused", tc.name, code, body)
		}
	}
	if after := hardDenials(t); after != before {
		t.Errorf("refused connections were counted: hard-leases denials %v -> %v", before, after)
	}
	snap := debugLeases(t)
	for _, l := range snap.Leases {
		if strings.HasPrefix(l.Name, "forged-") && l.Name != "forged-by-apiserver" {
			t.Errorf("/debug/leases lists %s/%s, which only an unauthenticated client wrote", l.Namespace, l.Name)
		}
	}

	// The same review with the API server's certificate is decided: the
	// test would see a counted forgery.
	code, body, err := post(&apiServer, "u-apiserver", "forged-by-apiserver")
	if err != nil || code != http.StatusOK || !strings.Contains(body, `"allowed":false`) {
		t.Fatalf("with the API server's certificate: HTTP %d %s %v; want a denial", code, body, err)
	}
	if after := hardDenials(t); after != before+1 {
		t.Errorf("the API server's review was not counted: hard-leases denials %v -> %v", before, after)
	}
}

// The third round's "busy on demand": clients without the API server's
// certificate that declare 32 MiB bodies and send them as fast and as slowly
// as they like take no room from the API server's reviews, because they are
// refused at the handshake, before a byte of their request is read. The
// holder's renewal of a Lease carrying a 150 KB annotation (a review over
// 300 KB, read as a large body) is admitted all through the flood. (Without
// --client-ca the same flood filled the large-body budget and the renewal
// was answered 503: docs/security.md.)
func TestUnauthenticatedFloodNeverMakesAGuardedWriteBusy(t *testing.T) {
	ctx := context.Background()
	stored := hardLease(t, "leader-a")
	padded := stored.DeepCopy()
	padded.Annotations = map[string]string{"example.com/notes": strings.Repeat("n", 150_000)}
	stored, err := admin.CoordinationV1().Leases(hardNS).Update(ctx, padded, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("the operator's annotation: %v", err)
	}

	// The flood: bounded in count and time, loopback only, self-stopping.
	floodCtx, stopFlood := context.WithTimeout(ctx, 20*time.Second)
	defer stopFlood()
	var wg sync.WaitGroup
	var dials, answered, bytesSent atomic.Int64
	addr := net.JoinHostPort(cp.WebhookHost, strconv.Itoa(cp.WebhookPort))
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			chunk := []byte(strings.Repeat("x", 64<<10))
			for floodCtx.Err() == nil {
				dials.Add(1)
				d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}} //nolint:gosec // the flood does not care who answers
				conn, err := d.DialContext(floodCtx, "tcp", addr)
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				stop := context.AfterFunc(floodCtx, func() { conn.Close() })
				_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"x\":\"", manifests.ValidatePath, addr, 32<<20)
				for err == nil && floodCtx.Err() == nil {
					var n int
					n, err = conn.Write(chunk)
					bytesSent.Add(int64(n))
				}
				// Whatever came back: an HTTP answer would mean the
				// request was read.
				_ = conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
				if b, _ := io.ReadAll(io.LimitReader(conn, 16)); strings.HasPrefix(string(b), "HTTP/") {
					answered.Add(1)
				}
				stop()
				conn.Close()
			}
		}()
	}

	// The holder renews every second for ten seconds while the flood runs.
	for i := range 10 {
		time.Sleep(time.Second)
		renewal := stored.DeepCopy()
		renewal.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
		code, msg, _ := put(t, hardManagerA, "a-0", renewal)
		switch {
		case code == http.StatusOK:
		case code == http.StatusTooManyRequests && strings.Contains(msg, "renews too often"):
			// minRenewInterval 5s: a decided answer, not a busy one.
		default:
			t.Errorf("renewal %d during the flood: HTTP %d %s", i, code, msg)
		}
		if code == http.StatusOK {
			if stored, err = admin.CoordinationV1().Leases(hardNS).Get(ctx, "leader-a", metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	stopFlood()
	wg.Wait()
	t.Logf("flood: %d connections, %d bytes sent, %d answered with HTTP", dials.Load(), bytesSent.Load(), answered.Load())
	if dials.Load() < 8 {
		t.Errorf("the flood made %d connections: it did not run", dials.Load())
	}
	if answered.Load() != 0 {
		t.Errorf("%d flood connections got an HTTP answer: leaseguard read requests of clients without the API server's certificate", answered.Load())
	}
	if busy := badRequestsFor(t, "busy"); busy != 0 {
		t.Errorf("leaseguard_bad_requests_total{reason=busy} = %v: some review was answered busy", busy)
	}
}

func badRequestsFor(t *testing.T, reason string) float64 {
	t.Helper()
	fams, err := guard.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return controlplane.Counter(fams, "leaseguard_bad_requests_total", map[string]string{"reason": reason})
}
