package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// fakeReviews answers TokenReviews from a table of valid tokens and counts
// them.
type fakeReviews struct {
	valid map[string]string // token -> username
	err   error
	calls atomic.Int64
	// gate, when set, holds every review until it is closed.
	gate chan struct{}
}

func (f *fakeReviews) review(ctx context.Context, token string) (user.Info, bool, error) {
	f.calls.Add(1)
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
	if f.err != nil {
		return nil, false, f.err
	}
	if name, ok := f.valid[token]; ok {
		return &user.DefaultInfo{Name: name}, true, nil
	}
	return nil, false, nil
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type countingRecorder struct {
	mu       sync.Mutex
	reviews  map[string]int
	refusals map[string]int
}

func (c *countingRecorder) MetricsTokenReview(lane, result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reviews[lane+"/"+result]++
}

func (c *countingRecorder) MetricsTokenRefused(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refusals[reason]++
}

func newTestAuthenticator(unseen, known *fakeReviews) (*tokenAuthenticator, *fakeClock, *countingRecorder) {
	rec := &countingRecorder{reviews: map[string]int{}, refusals: map[string]int{}}
	a := newTokenAuthenticator(unseen.review, known.review, rec)
	clock := &fakeClock{t: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)}
	a.now = clock.now
	return a, clock, rec
}

const validJWT = "eyJhbGciOiJSUzI1NiIsImtpZCI6IngifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6bW9uaXRvcmluZzpwcm9tZXRoZXVzIn0.c2lnbmF0dXJl"

func TestPlausibleTokenRefusesOnlyWhatNoAuthenticatorTakes(t *testing.T) {
	for _, tok := range []string{
		validJWT,
		"abcdef.0123456789abcdef", // a bootstrap token
		"k8s-aws-v1.aHR0cHM6Ly9zdHMuYW1hem9uYXdzLmNvbS8_QWN0aW9uPUdldENhbGxlcklkZW50aXR5", // a cloud webhook's opaque token
		"s3cr3t!#$%&'*+-.^_`|~=/:;<>?@[]{}()\"\\,",                                        // a static token of any visible ASCII
		"x",
	} {
		if !plausibleToken(tok) {
			t.Errorf("plausibleToken(%q) = false: a token the API server may authenticate would be refused unreviewed", tok)
		}
	}
	for _, tok := range []string{"", "caf\u00e9", "a\tb", "a\x00b", "a\x7fb", "\u202etoken"} {
		if plausibleToken(tok) {
			t.Errorf("plausibleToken(%q) = true, want refused before any review", tok)
		}
	}
}

func TestBearerTokenIsReadAsKubeAPIServerReadsIt(t *testing.T) {
	for header, want := range map[string]string{
		"Bearer abc":          "abc",
		"bearer abc":          "abc",
		"BEARER abc":          "abc",
		"  Bearer abc  ":      "abc",
		"Bearer abc trailing": "abc", // kube-apiserver takes the second field
		"Bearer  abc":         "",    // an empty second field: no token
		"Bearer":              "",
		"Basic dXNlcjpwYXNz":  "",
		"":                    "",
	} {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if header != "" {
			r.Header.Set("Authorization", header)
		}
		got, ok := bearerToken(r)
		if got != want || ok != (want != "") {
			t.Errorf("Authorization %q: token %q %v, want %q", header, got, ok, want)
		}
	}
}

func TestSourceOfIgnoresThePort(t *testing.T) {
	for addr, want := range map[string]string{
		"10.0.0.7:41234":            "10.0.0.7",
		"[::ffff:10.0.0.7]:41234":   "10.0.0.7",
		"[fd00::1]:8443":            "fd00::1",
		"[fe80::1%eth0]:8443":       "fe80::1",
		"not an address":            "not an address",
		"@":                         "@",
		"10.0.0.7":                  "10.0.0.7",
		"[2001:db8::a:b:c:d]:65535": "2001:db8::a:b:c:d",
	} {
		if got := sourceOf(addr); got != want {
			t.Errorf("sourceOf(%q) = %q, want %q", addr, got, want)
		}
	}
}

func TestSourceLimiterBoundsEachSource(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	l := newSourceLimiter(1, 10, 3)
	for i := range 10 {
		if ok, _ := l.allow("a", now); !ok {
			t.Fatalf("review %d of source a refused within its burst of 10", i+1)
		}
	}
	ok, wait := l.allow("a", now)
	if ok || wait != time.Second {
		t.Fatalf("review 11 of source a: allowed %v, retry after %v; want refused, retry after 1s", ok, wait)
	}
	if ok, _ := l.allow("b", now); !ok {
		t.Fatal("source b refused while only source a spent its budget")
	}
	if ok, _ := l.allow("a", now.Add(500*time.Millisecond)); ok {
		t.Fatal("source a allowed again after half a refill")
	}
	if ok, _ := l.allow("a", now.Add(1500*time.Millisecond)); !ok {
		t.Fatal("source a refused after a full refill")
	}

	// The bound on tracked sources: a, b and c spend their whole budget; a
	// newcomer is refused rather than grow the map or forget a spender's
	// debt...
	for _, s := range []string{"b", "c"} {
		for range 10 {
			l.allow(s, now.Add(1500*time.Millisecond))
		}
	}
	if ok, _ := l.allow("d", now.Add(2*time.Second)); ok {
		t.Error("a fourth source was tracked past the bound of 3 while the others spend")
	}
	if len(l.buckets) != 3 {
		t.Errorf("%d sources tracked, want 3", len(l.buckets))
	}
	// ... and once the others are idle long enough to be full again, they
	// are forgotten and the newcomer is heard.
	if ok, _ := l.allow("d", now.Add(20*time.Second)); !ok {
		t.Error("a new source refused once every tracked one was idle")
	}
	if len(l.buckets) != 1 {
		t.Errorf("%d sources tracked after the idle ones were forgotten, want 1", len(l.buckets))
	}
}

func TestTokenAnswersAreCachedAndUnseenReviewsBudgetedPerSource(t *testing.T) {
	unseen := &fakeReviews{valid: map[string]string{validJWT: "system:serviceaccount:monitoring:prometheus"}}
	known := &fakeReviews{valid: unseen.valid}
	a, clock, rec := newTestAuthenticator(unseen, known)
	ctx := context.Background()

	// A valid token is reviewed once, then answered from the cache.
	for i := range 3 {
		if r := a.authenticate(ctx, validJWT, "10.0.0.1:5000"); r.outcome != authenticated || r.user.GetName() != "system:serviceaccount:monitoring:prometheus" {
			t.Fatalf("scrape %d: %+v, want authenticated", i+1, r)
		}
	}
	if n := unseen.calls.Load(); n != 1 {
		t.Fatalf("%d reviews of one valid token, want 1", n)
	}

	// Random tokens from one source: its burst is reviewed, the rest is
	// refused without a review.
	var limited int
	for i := range 50 {
		r := a.authenticate(ctx, fmt.Sprintf("random-%d", i), "10.0.0.66:1234")
		switch r.outcome {
		case rejected:
		case sourceLimited:
			limited++
			if r.retryAfter <= 0 {
				t.Errorf("refused without a retry time: %+v", r)
			}
		default:
			t.Fatalf("random token %d: %+v", i, r)
		}
	}
	if got := unseen.calls.Load() - 1; got != UnseenTokenReviewBurst {
		t.Errorf("50 random tokens from one source cost %d reviews, want the burst of %d", got, UnseenTokenReviewBurst)
	}
	if limited != 50-UnseenTokenReviewBurst || rec.refusals["source_limit"] != limited {
		t.Errorf("%d refused, %d counted as source_limit; want %d", limited, rec.refusals["source_limit"], 50-UnseenTokenReviewBurst)
	}
	// A rejected token is answered from the cache too (a stale scraper).
	calls := unseen.calls.Load()
	if r := a.authenticate(ctx, "random-0", "10.0.0.66:1234"); r.outcome != rejected {
		t.Errorf("a rejected token again: %+v, want rejected from the cache", r)
	}
	if unseen.calls.Load() != calls {
		t.Error("a cached rejection was reviewed again")
	}
	// Another source is not affected by the first one's flood.
	if r := a.authenticate(ctx, "another", "[::ffff:10.0.0.2]:9"); r.outcome != rejected {
		t.Errorf("another source's token: %+v, want reviewed and rejected", r)
	}
	// The valid token's answer expires: it is re-reviewed in the known lane,
	// whatever the budget of the source it now comes from.
	clock.add(tokenCacheTTL + time.Second)
	if r := a.authenticate(ctx, validJWT, "10.0.0.66:1234"); r.outcome != authenticated {
		t.Errorf("a known token from a source out of budget: %+v, want authenticated", r)
	}
	if known.calls.Load() != 1 {
		t.Errorf("%d known-lane reviews, want 1", known.calls.Load())
	}
	// Once the API server rejects it (its pod deleted), it is unseen again.
	delete(known.valid, validJWT)
	clock.add(tokenCacheTTL + time.Second)
	if r := a.authenticate(ctx, validJWT, "10.0.0.1:5000"); r.outcome != rejected {
		t.Errorf("a revoked token: %+v, want rejected", r)
	}
	clock.add(tokenCacheTTL + time.Second)
	before := unseen.calls.Load()
	a.authenticate(ctx, validJWT, "10.0.0.1:5000")
	if unseen.calls.Load() != before+1 {
		t.Error("a revoked token was re-reviewed in the known lane")
	}
	if rec.reviews["unseen/authenticated"] != 1 || rec.reviews["known/authenticated"] != 1 || rec.reviews["known/rejected"] != 1 {
		t.Errorf("reviews counted %v", rec.reviews)
	}
}

func TestNotATokenAndFailedReviews(t *testing.T) {
	unseen := &fakeReviews{err: errors.New("connection refused")}
	a, _, rec := newTestAuthenticator(unseen, &fakeReviews{})
	ctx := context.Background()
	if r := a.authenticate(ctx, "caf\u00e9", "10.0.0.1:1"); r.outcome != notAToken {
		t.Errorf("a non-ASCII token: %+v, want not a token", r)
	}
	if unseen.calls.Load() != 0 || rec.refusals["not_a_token"] != 1 {
		t.Errorf("a token that cannot be one: %d reviews, %v refusals", unseen.calls.Load(), rec.refusals)
	}
	// A review that fails is not an answer: not cached, tried again.
	for i := range 2 {
		if r := a.authenticate(ctx, validJWT, "10.0.0.1:1"); r.outcome != reviewFailed || r.err == nil {
			t.Errorf("try %d while the API server is unreachable: %+v, want reviewFailed", i+1, r)
		}
	}
	if unseen.calls.Load() != 2 || rec.reviews["unseen/error"] != 2 {
		t.Errorf("%d reviews (%v), want 2: a failure must not be cached", unseen.calls.Load(), rec.reviews)
	}
}

// The lanes: while every slot for unseen tokens is held (a flood from many
// sources, a slow API server), a cached token is answered at once, a known
// token is re-reviewed on its own client, and a further unseen token waits
// at most unseenSlotWait before a 429.
func TestUnseenReviewsCannotStarveCachedOrKnownTokens(t *testing.T) {
	wait := unseenSlotWait
	// Long enough that "no wait" and "waited for a slot" stay apart on a
	// loaded machine under -race (100 ms against 200 ms did not always).
	unseenSlotWait = 2 * time.Second
	defer func() { unseenSlotWait = wait }()

	valid := map[string]string{"cached": "prometheus", "known": "operator"}
	unseen := &fakeReviews{valid: valid}
	known := &fakeReviews{valid: valid}
	a, clock, rec := newTestAuthenticator(unseen, known)
	ctx := context.Background()
	for _, tok := range []string{"cached", "known"} {
		if r := a.authenticate(ctx, tok, "10.0.0.1:1"); r.outcome != authenticated {
			t.Fatalf("%s: %+v", tok, r)
		}
	}
	clock.add(tokenCacheTTL / 2)
	a.authenticate(ctx, "cached", "10.0.0.1:1") // still cached
	clock.add(tokenCacheTTL/2 + time.Second)    // "known" expired, "cached" refreshed below
	a.store(a.key("cached"), &user.DefaultInfo{Name: "prometheus"})

	// Hold every unseen slot with reviews that do not return.
	unseen.gate = make(chan struct{})
	var flood sync.WaitGroup
	for i := range unseenReviewSlots {
		flood.Add(1)
		go func() {
			defer flood.Done()
			a.authenticate(ctx, fmt.Sprintf("flood-%d", i), fmt.Sprintf("10.1.0.%d:1", i))
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(a.slots) < unseenReviewSlots && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if len(a.slots) != unseenReviewSlots {
		t.Fatalf("%d slots held, want %d", len(a.slots), unseenReviewSlots)
	}

	start := time.Now()
	if r := a.authenticate(ctx, "cached", "10.1.0.1:1"); r.outcome != authenticated {
		t.Errorf("a cached token during the flood: %+v", r)
	}
	if r := a.authenticate(ctx, "known", "10.1.0.1:1"); r.outcome != authenticated {
		t.Errorf("a known token during the flood: %+v", r)
	}
	if took := time.Since(start); took >= unseenSlotWait/2 {
		t.Errorf("cached and known tokens took %v during the flood, want no wait", took)
	}
	start = time.Now()
	r := a.authenticate(ctx, "one-more", "10.2.0.1:1")
	if took := time.Since(start); r.outcome != busy || took < unseenSlotWait || took > unseenSlotWait+time.Second {
		t.Errorf("an unseen token with every slot held: %+v after %v, want busy after %v", r, took, unseenSlotWait)
	}
	if rec.refusals["busy"] != 1 {
		t.Errorf("busy refusals %v, want 1", rec.refusals)
	}
	close(unseen.gate)
	flood.Wait()
}

type fakeAuthorizer struct {
	allow map[string]string // user -> path
	calls atomic.Int64
	last  authorizer.Attributes
}

func (f *fakeAuthorizer) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	f.calls.Add(1)
	f.last = a
	if f.allow[a.GetUser().GetName()] == a.GetPath() && a.GetVerb() == "get" {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "no rule", nil
}

// What a client of the secured metrics port sees: the codes and one-line
// messages, and that nothing unauthenticated, unserved or of another
// method costs a review or a SubjectAccessReview.
func TestTokenAuthHandlerAnswers(t *testing.T) {
	unseen := &fakeReviews{valid: map[string]string{validJWT: "prometheus", "stranger-token": "stranger"}}
	a, _, _ := newTestAuthenticator(unseen, &fakeReviews{valid: unseen.valid})
	authz := &fakeAuthorizer{allow: map[string]string{"prometheus": "/metrics"}}
	var sawAuthorization atomic.Bool
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			sawAuthorization.Store(true)
		}
		_, _ = io.WriteString(w, "leaseguard_policy_file_valid 1\n")
	})
	h := tokenAuthHandler(a, authz, []string{"/metrics", "/debug/leases"}, inner, logr.Discard())
	do := func(method, path, auth, remote string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, nil)
		r.RemoteAddr = remote
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for _, tc := range []struct {
		what, method, path, auth string
		code                     int
		body                     string
	}{
		{"an unserved path", "GET", "/", "Bearer " + validJWT, 404, "Not Found: this port serves /metrics and /debug/leases"},
		{"a path a mux would clean", "GET", "//metrics", "Bearer " + validJWT, 404, "Not Found"},
		{"another method", "POST", "/metrics", "Bearer " + validJWT, 405, "Method Not Allowed: /metrics is read with GET"},
		{"no token", "GET", "/metrics", "", 401, "Unauthorized: send a bearer token the API server authenticates"},
		{"not a token", "GET", "/metrics", "Bearer caf\u00e9", 401, "Unauthorized"},
	} {
		w := do(tc.method, tc.path, tc.auth, "10.0.0.1:1")
		if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.body) {
			t.Errorf("%s: HTTP %d %q, want %d %q", tc.what, w.Code, w.Body.String(), tc.code, tc.body)
		}
	}
	if unseen.calls.Load() != 0 || authz.calls.Load() != 0 {
		t.Fatalf("refusals before authentication cost %d TokenReviews and %d SubjectAccessReviews, want none", unseen.calls.Load(), authz.calls.Load())
	}
	if w := do("GET", "/metrics", "Bearer "+validJWT, "10.0.0.1:1"); w.Code != 200 || !strings.Contains(w.Body.String(), "leaseguard_policy_file_valid") {
		t.Errorf("the metrics reader: HTTP %d %q", w.Code, w.Body.String())
	}
	if sawAuthorization.Load() {
		t.Error("the bearer token reached the metrics handler")
	}
	if authz.last.GetVerb() != "get" || authz.last.GetPath() != "/metrics" {
		t.Errorf("authorized %s %s, want get /metrics", authz.last.GetVerb(), authz.last.GetPath())
	}
	if w := do("GET", "/debug/leases", "Bearer "+validJWT, "10.0.0.1:1"); w.Code != 403 || strings.TrimSpace(w.Body.String()) != "Forbidden: user prometheus may not get /debug/leases" {
		t.Errorf("the metrics reader on /debug/leases: HTTP %d %q", w.Code, w.Body.String())
	}
	// A flood of random tokens from one address: its burst is reviewed and
	// answered 401, the rest 429 with Retry-After, unreviewed.
	var unauthorized, limited int
	for i := range 30 {
		w := do("GET", "/metrics", fmt.Sprintf("Bearer random-%d", i), "10.9.9.9:4242")
		switch w.Code {
		case 401:
			unauthorized++
		case 429:
			limited++
			if w.Header().Get("Retry-After") != "1" || strings.TrimSpace(w.Body.String()) != "Too Many Requests: too many new tokens from 10.9.9.9; retry later" {
				t.Errorf("a flooding source: Retry-After %q, %q", w.Header().Get("Retry-After"), w.Body.String())
			}
		default:
			t.Errorf("random token %d: HTTP %d %q", i, w.Code, w.Body.String())
		}
	}
	if unauthorized != UnseenTokenReviewBurst || limited != 30-UnseenTokenReviewBurst {
		t.Errorf("the flood: %d answered 401, %d 429; want %d and %d", unauthorized, limited, UnseenTokenReviewBurst, 30-UnseenTokenReviewBurst)
	}
	// The scraper, from its own address, still gets its metrics; a new
	// token of a stranger from it is reviewed and forbidden.
	if w := do("GET", "/metrics", "Bearer "+validJWT, "10.0.0.1:1"); w.Code != 200 {
		t.Errorf("the metrics reader after the flood: HTTP %d %q", w.Code, w.Body.String())
	}
	if w := do("GET", "/metrics", "Bearer stranger-token", "10.0.0.1:1"); w.Code != 403 {
		t.Errorf("a stranger: HTTP %d %q", w.Code, w.Body.String())
	}
	// The API server unreachable: 503, not a verdict on the token.
	a2, _, _ := newTestAuthenticator(&fakeReviews{err: errors.New("dial tcp: connection refused")}, &fakeReviews{})
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/metrics", nil)
	r.Header.Set("Authorization", "Bearer "+validJWT)
	tokenAuthHandler(a2, authz, []string{"/metrics"}, inner, logr.Discard()).ServeHTTP(w, r)
	if w.Code != 503 || strings.TrimSpace(w.Body.String()) != "Service Unavailable: the API server's TokenReview failed; retry later" {
		t.Errorf("the API server unreachable: HTTP %d %q", w.Code, w.Body.String())
	}
}
