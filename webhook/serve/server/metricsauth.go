package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/util/webhook"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
)

// withTokenAuth serves h at paths, to GET requests only, and only to
// requests whose bearer token the API server authenticates (TokenReview)
// and whose user it authorizes to get the path (SubjectAccessReview on the
// non-resource URL), results cached as controller-runtime's metrics filter
// caches them: a minute for tokens, 5 minutes for an allow, 30 s for a deny.
//
// Authentication is leaseguard's own (tokenreview.go), so that
// unauthenticated callers cannot spend the budget authenticated ones need:
// controller-runtime's filter and k8s.io/apiserver's delegating
// authenticator review every uncached token through one client with
// client-go's default rate limit, which random tokens at more than 5/s
// exhausted for everyone. Authorization is k8s.io/apiserver's delegating
// authorizer, on a client of its own; its reviews are bounded by the
// authenticated users, as only the paths served and GET are authorized
// (each distinct path or verb would be a review of its own).
//
// As kube-apiserver answers: 401 for any token that does not authenticate,
// 403 for a user not allowed, each logged at V(1) without the token; 429
// when the source has spent its budget of reviews for new tokens (not the
// old controller-runtime filter's 500 for every rejected token, which read
// as a broken leaseguard).
func withTokenAuth(cfg *rest.Config, h http.Handler, paths []string, rec reviewRecorder, log logr.Logger) (http.Handler, error) {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	// One connection pool, a rate limiter per lane.
	laneConfig := func(qps float32, burst int) *rest.Config {
		c := rest.CopyConfig(cfg)
		c.QPS, c.Burst, c.RateLimiter = qps, burst, nil
		return c
	}
	unseen, err := authenticationv1.NewForConfigAndClient(laneConfig(unseenQPS, unseenBurst), client)
	if err != nil {
		return nil, err
	}
	known, err := authenticationv1.NewForConfigAndClient(laneConfig(authenticatedQPS, authenticatedBurst), client)
	if err != nil {
		return nil, err
	}
	authz, err := authorizationv1.NewForConfigAndClient(laneConfig(authenticatedQPS, authenticatedBurst), client)
	if err != nil {
		return nil, err
	}
	authorize, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: authz,
		AllowCacheTTL:             5 * time.Minute,
		DenyCacheTTL:              30 * time.Second,
		WebhookRetryBackoff:       &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5},
	}.New()
	if err != nil {
		return nil, fmt.Errorf("access authorization: %w", err)
	}
	tokens := newTokenAuthenticator(tokenReviewer(unseen.TokenReviews()), tokenReviewer(known.TokenReviews()), rec)
	return tokenAuthHandler(tokens, authorize, paths, h, log), nil
}

// tokenReviewer sends TokenReviews with client, retrying what the API
// server says is transient (a 429 of its priority and fairness, a 5xx)
// within the caller's deadline.
func tokenReviewer(client authenticationv1.TokenReviewInterface) reviewFunc {
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 4}
	return func(ctx context.Context, token string) (user.Info, bool, error) {
		var review *authnv1.TokenReview
		err := webhook.WithExponentialBackoff(ctx, backoff, func() error {
			var err error
			review, err = client.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
			return err
		}, webhook.DefaultShouldRetry)
		if err != nil {
			return nil, false, err
		}
		// Not authenticated is an answer (status.error only says why), not
		// a failure to ask.
		if !review.Status.Authenticated {
			return nil, false, nil
		}
		u := review.Status.User
		var extra map[string][]string
		if len(u.Extra) > 0 {
			extra = make(map[string][]string, len(u.Extra))
			for k, v := range u.Extra {
				extra[k] = v
			}
		}
		return &user.DefaultInfo{Name: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra}, true, nil
	}
}

// tokenAuthHandler is withTokenAuth's handler, on any authenticator and
// authorizer.
func tokenAuthHandler(tokens *tokenAuthenticator, authorize authorizer.UnconditionalAuthorizer, paths []string, h http.Handler, log logr.Logger) http.Handler {
	served := map[string]bool{}
	for _, p := range paths {
		served[p] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Before any review: what is not served costs nothing.
		if !served[r.URL.Path] {
			http.Error(w, "Not Found: this port serves "+strings.Join(paths, " and "), http.StatusNotFound)
			return
		}
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "Method Not Allowed: "+r.URL.Path+" is read with GET", http.StatusMethodNotAllowed)
			return
		}
		res := result{outcome: noToken}
		if token, ok := bearerToken(r); ok {
			res = tokens.authenticate(r.Context(), token, r.RemoteAddr)
		}
		switch res.outcome {
		case authenticated:
		case sourceLimited, busy:
			reason := "too many new tokens from " + sourceOf(r.RemoteAddr)
			if res.outcome == busy {
				reason = "too many new tokens under review"
			}
			log.V(1).Info("refused: token not reviewed", "path", r.URL.Path, "remote", r.RemoteAddr, "reason", reason)
			w.Header().Set("Retry-After", strconv.Itoa(int(max(1, (res.retryAfter+time.Second-1)/time.Second))))
			http.Error(w, "Too Many Requests: "+reason+"; retry later", http.StatusTooManyRequests)
			return
		case reviewFailed:
			log.V(1).Info("refused: token review failed", "path", r.URL.Path, "remote", r.RemoteAddr, "reason", errString(res.err, "unknown"))
			http.Error(w, "Service Unavailable: the API server's TokenReview failed; retry later", http.StatusServiceUnavailable)
			return
		default:
			why := map[outcome]string{noToken: "no bearer token", notAToken: "not a token", rejected: "the API server does not authenticate the token"}[res.outcome]
			log.V(1).Info("refused: not authenticated", "path", r.URL.Path, "remote", r.RemoteAddr, "reason", why)
			http.Error(w, "Unauthorized: send a bearer token the API server authenticates", http.StatusUnauthorized)
			return
		}
		// The header carried the token: it must not reach h.
		r.Header.Del("Authorization")
		name := res.user.GetName()
		ctx, cancel := context.WithTimeout(r.Context(), tokenReviewTimeout)
		decision, reason, err := authorize.Authorize(ctx, authorizer.AttributesRecord{
			User: res.user, Verb: "get", Path: r.URL.Path,
		})
		cancel()
		if err != nil {
			log.Error(err, "cannot authorize a metrics request", "user", name, "path", r.URL.Path)
			http.Error(w, "cannot authorize "+name+": the API server's SubjectAccessReview failed", http.StatusServiceUnavailable)
			return
		}
		if decision != authorizer.DecisionAllow {
			log.V(1).Info("refused: not authorized", "user", name, "path", r.URL.Path, "reason", reason)
			http.Error(w, "Forbidden: user "+name+" may not get "+r.URL.Path, http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// bearerToken reads the token of an "Authorization: Bearer <token>" header
// as kube-apiserver reads it (k8s.io/apiserver's bearertoken), so that no
// token it would take is refused here.
func bearerToken(r *http.Request) (string, bool) {
	auth := strings.TrimSpace(r.Header.Get("Authorization"))
	parts := strings.SplitN(auth, " ", 3)
	if len(parts) < 2 || !strings.EqualFold(parts[0], "bearer") || parts[1] == "" {
		return "", false
	}
	return parts[1], true
}

func errString(err error, none string) string {
	if err == nil {
		return none
	}
	return err.Error()
}
