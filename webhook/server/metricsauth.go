package server

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	authenticationv1 "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1 "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
)

// withTokenAuth serves h only to requests whose bearer token the API server
// authenticates (TokenReview) and whose user it authorizes to get the path
// (SubjectAccessReview on the non-resource URL): the delegating
// authenticator and authorizer of k8s.io/apiserver, configured as
// controller-runtime's metrics filter configures them (results cached: a
// minute for tokens, 5 minutes for an allow, 30 s for a deny).
//
// It is not controller-runtime's filter itself because that one answers 500
// "Authentication failed" to every token the API server rejects (the
// TokenReview's "invalid bearer token" comes back as an error) and logs it
// as an error: a scraper with a stale token would read as a broken
// leaseguard, and anyone able to reach the port could fill the log. Here,
// as kube-apiserver answers: 401 for any token that does not authenticate,
// 403 for a user not allowed, each logged at V(1) without the token.
func withTokenAuth(cfg *rest.Config, h http.Handler, log logr.Logger) (http.Handler, error) {
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	authn, err := authenticationv1.NewForConfigAndClient(cfg, client)
	if err != nil {
		return nil, err
	}
	authz, err := authorizationv1.NewForConfigAndClient(cfg, client)
	if err != nil {
		return nil, err
	}
	backoff := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	authenticator, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserver.AnonymousAuthConfig{Enabled: false},
		CacheTTL:                 time.Minute,
		TokenAccessReviewClient:  authn,
		TokenAccessReviewTimeout: 10 * time.Second,
		WebhookRetryBackoff:      backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("token authentication: %w", err)
	}
	authorize, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: authz,
		AllowCacheTTL:             5 * time.Minute,
		DenyCacheTTL:              30 * time.Second,
		WebhookRetryBackoff:       backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("access authorization: %w", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, ok, err := authenticator.AuthenticateRequest(r)
		if err != nil || !ok {
			log.V(1).Info("refused: not authenticated", "path", r.URL.Path, "remote", r.RemoteAddr, "reason", errString(err, "no bearer token"))
			http.Error(w, "Unauthorized: send a bearer token the API server authenticates", http.StatusUnauthorized)
			return
		}
		// The header carried the token: it must not reach h.
		r.Header.Del("Authorization")
		user := res.User.GetName()
		decision, reason, err := authorize.Authorize(r.Context(), authorizer.AttributesRecord{
			User: res.User, Verb: strings.ToLower(r.Method), Path: r.URL.Path,
		})
		if err != nil {
			log.Error(err, "cannot authorize a metrics request", "user", user, "path", r.URL.Path)
			http.Error(w, "cannot authorize "+user+": the API server's SubjectAccessReview failed", http.StatusServiceUnavailable)
			return
		}
		if decision != authorizer.DecisionAllow {
			log.V(1).Info("refused: not authorized", "user", user, "path", r.URL.Path, "reason", reason)
			http.Error(w, "Forbidden: user "+user+" may not "+strings.ToLower(r.Method)+" "+r.URL.Path, http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	}), nil
}

func errString(err error, none string) string {
	if err == nil {
		return none
	}
	return err.Error()
}
