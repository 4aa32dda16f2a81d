package server

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"math"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"k8s.io/apiserver/pkg/authentication/user"
)

// The budget of the metrics port's TokenReviews (docs/security.md,
// "Unauthenticated input spends no shared budget").
//
// Before it, every uncached token was reviewed through one client with
// client-go's default rate limit (5/s, burst 10) and a 10 s timeout, shared
// with the SubjectAccessReviews: anyone who could reach the port, without
// credentials, sending random tokens faster than 5/s filled that limiter's
// queue beyond the timeout, and every review behind it, a valid Prometheus
// token's included, failed at once ("would exceed context deadline"): 401
// to the scraper, alerts blind. Now a token that cannot be one is refused
// unread, an answer (authenticated or not) is cached, a token that has
// authenticated is re-reviewed in a lane of its own, and reviews of tokens
// the port has not seen authenticate are bounded per source address and in
// number, on a client of their own.
const (
	// UnseenTokenReviewBurst and UnseenTokenReviewsPerSecond bound the
	// TokenReviews one source address can cause with tokens the port has not
	// seen authenticate: a token bucket of this size, refilled at this
	// rate. A scraper needs one such review per new token (its tokens are
	// then known); beyond the bucket the source is answered 429 without a
	// review. The burst leaves room for a person trying a few tokens.
	UnseenTokenReviewBurst      = 10
	UnseenTokenReviewsPerSecond = 1.0

	// unseenReviewSlots is how many reviews of unseen tokens are in flight
	// at once, from all sources; a review waits unseenSlotWait for a slot,
	// then is answered 429. With the unseen client's rate below, this keeps
	// what all unauthenticated sources together cost the API server at
	// unseenQPS, whatever their number.
	unseenReviewSlots = 8

	// The clients, each with its own rate limiter, so that no lane's queue
	// delays another's: unseen tokens' reviews; known tokens' re-reviews;
	// SubjectAccessReviews. The unseen lane's limiter never queues past a
	// review's timeout: at most unseenReviewSlots wait in it, 0.4 s at
	// unseenQPS. The API server's priority and fairness bounds what a
	// replica's reviews cost it.
	unseenQPS, unseenBurst               = 20, 40
	authenticatedQPS, authenticatedBurst = 20, 50

	// maxTrackedSources and maxCachedTokens bound the memory of the source
	// buckets and of the token cache. Both are far above what the rates
	// above let fill them (unseen answers: unseenQPS × tokenCacheTTL).
	maxTrackedSources = 4096
	maxCachedTokens   = 16384
)

// Timings, variables for the tests.
var (
	// tokenCacheTTL is how long an answer is kept: authenticated, or not
	// (a scraper with a stale token costs one review a minute).
	tokenCacheTTL = time.Minute
	// knownTokenTTL is how long after its last successful review a token
	// is re-reviewed in the known lane (a bound token lives an hour by
	// default; the kubelet replaces it at 80% of that).
	knownTokenTTL = time.Hour
	// tokenReviewTimeout bounds one review, retries included: under
	// Prometheus's default 10 s scrape timeout, with room for the
	// SubjectAccessReview.
	tokenReviewTimeout = 5 * time.Second
	// unseenSlotWait is how long a review of an unseen token waits for a
	// slot before the request is answered 429.
	unseenSlotWait = 2 * time.Second
)

// A lane is the budget a review is sent under.
type lane string

const (
	// laneUnseen: a token not seen authenticate within knownTokenTTL, so
	// possibly anyone's random bytes.
	laneUnseen lane = "unseen"
	// laneKnown: a token that authenticated within knownTokenTTL, whose
	// cached answer expired.
	laneKnown lane = "known"
)

// outcome is what authentication of one request came to.
type outcome int

const (
	authenticated outcome = iota
	// rejected: the API server does not authenticate the token (cached).
	rejected
	// noToken: no bearer token at all.
	noToken
	// notAToken: what the header carries cannot be a token; not reviewed.
	notAToken
	// sourceLimited: the source spent its budget of unseen reviews.
	sourceLimited
	// busy: every slot for unseen reviews stayed taken.
	busy
	// reviewFailed: the review could not be made (API server unreachable,
	// timeout); not cached.
	reviewFailed
)

// reviewFunc sends one TokenReview: the user when the API server
// authenticates token, ok false when it does not, an error when it could
// not be asked.
type reviewFunc func(ctx context.Context, token string) (u user.Info, ok bool, err error)

// reviewRecorder counts reviews and refusals (webhook/serve/metrics).
type reviewRecorder interface {
	MetricsTokenReview(lane, result string)
	MetricsTokenRefused(reason string)
}

// tokenAuthenticator answers bearer tokens from its cache, and otherwise by
// a TokenReview in the token's lane.
type tokenAuthenticator struct {
	review  map[lane]reviewFunc
	sources *sourceLimiter
	slots   chan struct{}
	rec     reviewRecorder
	now     func() time.Time

	// hmacKey keys the cache: tokens are not kept, and a memory dump does
	// not let anyone test guesses against the keys.
	hmacKey []byte
	flights singleflight.Group

	mu      sync.Mutex
	entries map[[sha256.Size]byte]*tokenEntry
}

type tokenEntry struct {
	user user.Info // nil when the API server did not authenticate the token
	// expires ends the cached answer; knownUntil (zero for a token that never
	// authenticated) ends the known lane.
	expires, knownUntil time.Time
}

// result is one authentication's answer.
type result struct {
	outcome outcome
	user    user.Info
	// retryAfter, for sourceLimited and busy.
	retryAfter time.Duration
	err        error
}

func newTokenAuthenticator(unseen, known reviewFunc, rec reviewRecorder) *tokenAuthenticator {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		panic(err) // crypto/rand does not fail
	}
	return &tokenAuthenticator{
		review:  map[lane]reviewFunc{laneUnseen: unseen, laneKnown: known},
		sources: newSourceLimiter(UnseenTokenReviewsPerSecond, UnseenTokenReviewBurst, maxTrackedSources),
		slots:   make(chan struct{}, unseenReviewSlots),
		rec:     rec,
		now:     time.Now,
		hmacKey: key,
		entries: map[[sha256.Size]byte]*tokenEntry{},
	}
}

// authenticate answers token, sent from source (a remote address). A cached
// answer costs nothing; a token that cannot be one is refused unreviewed; a
// known token is re-reviewed in its lane; any other token is reviewed only
// within source's budget and a free slot.
func (a *tokenAuthenticator) authenticate(ctx context.Context, token, source string) result {
	if !plausibleToken(token) {
		a.refused(notAToken)
		return result{outcome: notAToken}
	}
	key := a.key(token)
	now := a.now()
	a.mu.Lock()
	e := a.entries[key]
	if e != nil && now.Before(e.expires) {
		u := e.user
		a.mu.Unlock()
		if u == nil {
			return result{outcome: rejected}
		}
		return result{outcome: authenticated, user: u}
	}
	l := laneUnseen
	if e != nil && now.Before(e.knownUntil) {
		l = laneKnown
	}
	a.mu.Unlock()
	if l == laneUnseen {
		if ok, wait := a.sources.allow(sourceOf(source), now); !ok {
			a.refused(sourceLimited)
			return result{outcome: sourceLimited, retryAfter: wait}
		}
	}
	// One review per token however many requests carry it; it runs detached
	// from the request that started it, which may go away.
	ch := a.flights.DoChan(string(key[:]), func() (any, error) { return a.reviewToken(l, key, token), nil })
	select {
	case r := <-ch:
		return r.Val.(result)
	case <-ctx.Done():
		return result{outcome: reviewFailed, err: ctx.Err()}
	}
}

func (a *tokenAuthenticator) reviewToken(l lane, key [sha256.Size]byte, token string) result {
	if l == laneUnseen {
		timer := time.NewTimer(unseenSlotWait)
		defer timer.Stop()
		select {
		case a.slots <- struct{}{}:
			defer func() { <-a.slots }()
		case <-timer.C:
			a.refused(busy)
			return result{outcome: busy, retryAfter: time.Second}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), tokenReviewTimeout)
	defer cancel()
	u, ok, err := a.review[l](ctx, token)
	switch {
	case err != nil:
		a.reviewed(l, "error")
		return result{outcome: reviewFailed, err: err}
	case ok:
		a.reviewed(l, "authenticated")
	default:
		a.reviewed(l, "rejected")
		u = nil
	}
	a.store(key, u)
	if u == nil {
		return result{outcome: rejected}
	}
	return result{outcome: authenticated, user: u}
}

// store caches an answer: u nil for a token the API server rejected, which
// also ends its known lane (a deleted pod's token).
func (a *tokenAuthenticator) store(key [sha256.Size]byte, u user.Info) {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.entries[key]
	if e == nil {
		if len(a.entries) >= maxCachedTokens {
			for k, old := range a.entries {
				if !now.Before(old.expires) && !now.Before(old.knownUntil) {
					delete(a.entries, k)
				}
			}
		}
		if len(a.entries) >= maxCachedTokens {
			// Full of live answers: answer without caching rather than
			// grow (unreachable at the rates above).
			return
		}
		e = &tokenEntry{}
		a.entries[key] = e
	}
	e.user, e.expires = u, now.Add(tokenCacheTTL)
	if u != nil {
		e.knownUntil = now.Add(knownTokenTTL)
	} else {
		e.knownUntil = time.Time{}
	}
}

func (a *tokenAuthenticator) key(token string) [sha256.Size]byte {
	h := hmac.New(sha256.New, a.hmacKey)
	_, _ = h.Write([]byte(token))
	var k [sha256.Size]byte
	copy(k[:], h.Sum(nil))
	return k
}

func (a *tokenAuthenticator) refused(o outcome) {
	if a.rec == nil {
		return
	}
	switch o {
	case notAToken:
		a.rec.MetricsTokenRefused("not_a_token")
	case sourceLimited:
		a.rec.MetricsTokenRefused("source_limit")
	case busy:
		a.rec.MetricsTokenRefused("busy")
	}
}

func (a *tokenAuthenticator) reviewed(l lane, res string) {
	if a.rec != nil {
		a.rec.MetricsTokenReview(string(l), res)
	}
}

// plausibleToken reports whether token could be a credential the API
// server authenticates, conservatively: it must be visible ASCII (RFC 7235's
// token68 and RFC 6750's b64token are narrower still). Every Kubernetes
// token is: service-account and OIDC tokens are JWTs (base64url and dots),
// bootstrap tokens [a-z0-9.], webhook and static tokens are written into
// HTTP headers and files by tools that use the same characters. Its shape
// is not checked further: the API server's token authenticators include
// webhooks with opaque tokens of any form. Its size is bounded by the
// port's 16 KiB of headers.
func plausibleToken(token string) bool {
	if token == "" {
		return false
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// sourceOf is the address a request came from, without its port: the key
// of its budget. An IPv4 address in IPv6 form is the IPv4 address.
func sourceOf(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().WithZone("").String()
	}
	return host
}

// sourceLimiter keeps one token bucket per source.
type sourceLimiter struct {
	rate, burst float64
	max         int

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newSourceLimiter(rate, burst float64, maxSources int) *sourceLimiter {
	return &sourceLimiter{rate: rate, burst: burst, max: maxSources, buckets: map[string]*bucket{}}
}

// allow takes one review from source's bucket at now; when it is empty, it
// says how long until the next one.
func (l *sourceLimiter) allow(source string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[source]
	if b == nil {
		if len(l.buckets) >= l.max {
			// A full bucket is a source idle for burst/rate seconds: it
			// starts full again when it comes back, so forgetting it
			// changes nothing.
			for s, old := range l.buckets {
				if old.tokens+now.Sub(old.last).Seconds()*l.rate >= l.burst {
					delete(l.buckets, s)
				}
			}
		}
		if len(l.buckets) >= l.max {
			// That many sources all spending their budget at once: refuse
			// newcomers rather than grow, or forget a spender's debt.
			return false, time.Duration(float64(time.Second) / l.rate)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[source] = b
	}
	if elapsed := now.Sub(b.last).Seconds(); elapsed > 0 {
		b.tokens = math.Min(l.burst, b.tokens+elapsed*l.rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration(math.Ceil((1 - b.tokens) / l.rate * float64(time.Second)))
}
