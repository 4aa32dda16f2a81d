// Package configsync keeps leaseguard's own admission configuration equal to
// the rendering of the policy in force, the way Gatekeeper and
// cert-manager's CA injector keep theirs: the webhook configurations'
// matchConditions route each lease write by the policy, so after a policy
// change that the configuration does not follow, the API server keeps
// routing by the old policy (docs/design.md §5, "The configuration follows
// the policy").
//
// It only updates (and, for the coalescing policy, deletes) the objects the
// install created, by name: creating admission configuration cannot be
// limited by name in RBAC, and an install owns the lifecycle of what it
// installs (helm uninstall, make undeploy leave nothing behind). What the
// install chose stays: each webhook's clientConfig (service, path, caBundle
// that cert-manager or the self-managed CA fills) and timeoutSeconds, and
// the coalescing and failure modes recorded in the validating
// configuration's annotations (manifests.RenderedWith). Everything derived
// from the policy (rules, namespaceSelector, matchConditions, which
// webhooks exist, their failure policies) is the generator's.
package configsync

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/leaseguard/leaseguard/webhook/manifests"
	"github.com/leaseguard/leaseguard/webhook/policy"
)

// PolicyAnnotation records the SHA-256 of the policy file the configuration
// was last rendered from by leaseguard.
const PolicyAnnotation = "leaseguard.io/policy-sha256"

// validatingSuffix is what names the validating configuration after the
// prefix (manifests.Options.Prefix).
const validatingSuffix = "-validating-webhook-configuration"

// Policies is where the policy in force comes from (policyfile.Store).
type Policies interface {
	InForce() (*policy.Policy, string)
	Changed() <-chan struct{}
}

// Recorder is told the outcome of every sync.
type Recorder interface {
	AdmissionConfigurationSync(inSync bool, updated int)
}

// Syncer keeps the configuration named by Prefix equal to the rendering of
// the policy in force.
type Syncer struct {
	Client kubernetes.Interface
	// Prefix names the objects as manifests.Options.Prefix does.
	Prefix string
	// Namespace is leaseguard's own namespace, never intercepted.
	Namespace string
	Policies  Policies
	Recorder  Recorder
	Log       logr.Logger
	// Resync is how often a configuration already rendered from the policy
	// in force is checked for drift (someone edited it); one minute when
	// zero.
	Resync time.Duration
}

// PrefixOf returns the prefix of a validating configuration's name, or an
// error when it is not a name manifests renders.
func PrefixOf(validatingName string) (string, error) {
	prefix, ok := strings.CutSuffix(validatingName, validatingSuffix)
	if !ok || prefix == "" {
		return "", fmt.Errorf("validating webhook configuration %q: leaseguard keeps only configurations named <prefix>%s, as leaseguard manifests renders them", validatingName, validatingSuffix)
	}
	return prefix, nil
}

// Run syncs at once, on every policy change and at every resync, until ctx
// ends. A replica writes on its start and when it swaps a policy in; at a
// resync it only repairs a configuration rendered from the same policy as
// its own. So while a ConfigMap edit reaches replicas at different times,
// a replica still holding the old policy does not undo the new rendering.
func (s *Syncer) Run(ctx context.Context) error {
	resync := s.Resync
	if resync <= 0 {
		resync = time.Minute
	}
	force := true
	for {
		changed := s.Policies.Changed()
		err := s.sync(ctx, force)
		if err != nil {
			s.Log.Error(err, "keeping the webhook configurations equal to the policy; retrying")
			s.Recorder.AdmissionConfigurationSync(false, 0)
		}
		wait := resync
		if err != nil {
			// Keep the pending forced write; retry sooner.
			wait = 5 * time.Second
		} else {
			force = false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			force = true
		case <-time.After(wait):
		}
	}
}

// errNotInstalled says an object the policy needs is not installed: only
// the install can create it.
var errNotInstalled = errors.New("not installed")

// sync renders the policy in force and writes what differs. force writes
// even when the live configuration was rendered from another policy.
func (s *Syncer) sync(ctx context.Context, force bool) error {
	p, sha := s.Policies.InForce()
	api := s.Client.AdmissionregistrationV1()
	updated := 0
	var notInstalled []string
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		updated, notInstalled = 0, nil
		live, err := api.ValidatingWebhookConfigurations().Get(ctx, s.Prefix+validatingSuffix, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("validatingwebhookconfiguration %s%s: %w", s.Prefix, validatingSuffix, err)
		}
		if !force && live.Annotations[PolicyAnnotation] != sha {
			// Rendered from another policy: its replica (or the install)
			// owns it until this replica swaps in a policy.
			return nil
		}
		coalescing, failOpen, err := manifests.RenderedWith(live.Annotations)
		if err != nil {
			return fmt.Errorf("validatingwebhookconfiguration %s: %w", live.Name, err)
		}
		want, err := manifests.Render(p, manifests.Options{
			Namespace: s.Namespace, ServiceName: "leaseguard-webhook-service", Prefix: s.Prefix,
			FailOpen: failOpen, Coalescing: coalescing,
		})
		if err != nil {
			return err
		}
		n, err := s.syncValidating(ctx, live, want.Validating, sha)
		if err != nil {
			return err
		}
		updated += n
		n, err = s.syncMutating(ctx, live, want.Mutating, sha)
		if errors.Is(err, errNotInstalled) {
			notInstalled = append(notInstalled, "mutatingwebhookconfiguration "+s.Prefix+"-mutating-webhook-configuration")
		} else if err != nil {
			return err
		}
		updated += n
		n, err = s.syncCoalescing(ctx, want)
		if errors.Is(err, errNotInstalled) {
			notInstalled = append(notInstalled, "mutatingadmissionpolicy "+s.Prefix+"-coalesce-renewals")
		} else if err != nil {
			return err
		}
		updated += n
		return nil
	})
	if err != nil {
		return err
	}
	if len(notInstalled) > 0 {
		return fmt.Errorf("the policy needs %s, which the install did not create: re-render and re-apply the install (make manifests and make deploy, or helm upgrade)", strings.Join(notInstalled, " and "))
	}
	s.Recorder.AdmissionConfigurationSync(true, updated)
	return nil
}

func (s *Syncer) syncValidating(ctx context.Context, live, want *admissionregistrationv1.ValidatingWebhookConfiguration, sha string) (int, error) {
	webhooks, err := merge(live.Webhooks, want.Webhooks, nil, validatingAccess)
	if err != nil {
		return 0, fmt.Errorf("validatingwebhookconfiguration %s: %w", live.Name, err)
	}
	next := live.DeepCopy()
	next.Webhooks = webhooks
	setPolicy(&next.ObjectMeta, sha)
	api := s.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	return writeIfChanged(ctx, s.Log, "validatingwebhookconfiguration", live, next,
		func(ctx context.Context, o metav1.UpdateOptions) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
			return api.Update(ctx, next, o)
		},
		func(a, b *admissionregistrationv1.ValidatingWebhookConfiguration) bool {
			return equality.Semantic.DeepEqual(a.Webhooks, b.Webhooks) && a.Annotations[PolicyAnnotation] == b.Annotations[PolicyAnnotation]
		})
}

// syncMutating keeps the mutating configuration: a policy that needs no
// mutating webhook leaves it without webhooks (deleting it would need the
// install to create it again). A webhook it gains is served where the
// validating configuration's are.
func (s *Syncer) syncMutating(ctx context.Context, validating *admissionregistrationv1.ValidatingWebhookConfiguration, want *admissionregistrationv1.MutatingWebhookConfiguration, sha string) (int, error) {
	api := s.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	name := s.Prefix + "-mutating-webhook-configuration"
	live, err := api.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if want == nil {
			return 0, nil
		}
		return 0, errNotInstalled
	}
	if err != nil {
		return 0, fmt.Errorf("mutatingwebhookconfiguration %s: %w", name, err)
	}
	var wantHooks []admissionregistrationv1.MutatingWebhook
	if want != nil {
		wantHooks = want.Webhooks
	}
	var fallback *admissionregistrationv1.WebhookClientConfig
	if len(validating.Webhooks) > 0 {
		fallback = &validating.Webhooks[0].ClientConfig
	}
	webhooks, err := merge(live.Webhooks, wantHooks, fallback, mutatingAccess)
	if err != nil {
		return 0, fmt.Errorf("mutatingwebhookconfiguration %s: %w", name, err)
	}
	next := live.DeepCopy()
	next.Webhooks = webhooks
	setPolicy(&next.ObjectMeta, sha)
	return writeIfChanged(ctx, s.Log, "mutatingwebhookconfiguration", live, next,
		func(ctx context.Context, o metav1.UpdateOptions) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
			return api.Update(ctx, next, o)
		},
		func(a, b *admissionregistrationv1.MutatingWebhookConfiguration) bool {
			return equality.Semantic.DeepEqual(a.Webhooks, b.Webhooks) && a.Annotations[PolicyAnnotation] == b.Annotations[PolicyAnnotation]
		})
}

// syncCoalescing keeps the MutatingAdmissionPolicy that coalesces early
// renewals in the API server, and its binding: updated while the policy
// coalesces, deleted when it no longer does.
func (s *Syncer) syncCoalescing(ctx context.Context, want *manifests.Rendered) (int, error) {
	api := s.Client.AdmissionregistrationV1()
	name := s.Prefix + "-coalesce-renewals"
	live, err := api.MutatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if want.Coalescing == nil {
			return 0, nil
		}
		return 0, errNotInstalled
	}
	if err != nil {
		return 0, fmt.Errorf("mutatingadmissionpolicy %s: %w", name, err)
	}
	if want.Coalescing == nil {
		// The binding first: a binding without its policy is an error the
		// API server reports on every write it matches.
		if err := api.MutatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("mutatingadmissionpolicybinding %s: %w", name, err)
		}
		if err := api.MutatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("mutatingadmissionpolicy %s: %w", name, err)
		}
		s.Log.Info("deleted: the policy no longer coalesces renewals", "mutatingadmissionpolicy", name)
		return 1, nil
	}
	next := live.DeepCopy()
	next.Spec = want.Coalescing.Spec
	n, err := writeIfChanged(ctx, s.Log, "mutatingadmissionpolicy", live, next,
		func(ctx context.Context, o metav1.UpdateOptions) (*admissionregistrationv1.MutatingAdmissionPolicy, error) {
			return api.MutatingAdmissionPolicies().Update(ctx, next, o)
		},
		func(a, b *admissionregistrationv1.MutatingAdmissionPolicy) bool {
			return equality.Semantic.DeepEqual(a.Spec, b.Spec)
		})
	if err != nil {
		return 0, err
	}
	liveBinding, err := api.MutatingAdmissionPolicyBindings().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return n, errNotInstalled
	}
	if err != nil {
		return n, fmt.Errorf("mutatingadmissionpolicybinding %s: %w", name, err)
	}
	nextBinding := liveBinding.DeepCopy()
	nextBinding.Spec = want.CoalescingBinding.Spec
	m, err := writeIfChanged(ctx, s.Log, "mutatingadmissionpolicybinding", liveBinding, nextBinding,
		func(ctx context.Context, o metav1.UpdateOptions) (*admissionregistrationv1.MutatingAdmissionPolicyBinding, error) {
			return api.MutatingAdmissionPolicyBindings().Update(ctx, nextBinding, o)
		},
		func(a, b *admissionregistrationv1.MutatingAdmissionPolicyBinding) bool {
			return equality.Semantic.DeepEqual(a.Spec, b.Spec)
		})
	return n + m, err
}

func setPolicy(meta *metav1.ObjectMeta, sha string) {
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	meta.Annotations[PolicyAnnotation] = sha
}

// writeIfChanged writes next when, defaulted by the API server (a dry run
// of the update), it differs from live: the rendering leaves defaulted
// fields unset, so comparing it with the stored object directly would see a
// change every time.
func writeIfChanged[T interface{ GetName() string }](ctx context.Context, log logr.Logger, kind string, live, next T,
	update func(context.Context, metav1.UpdateOptions) (T, error), same func(a, b T) bool) (int, error) {
	defaulted, err := update(ctx, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: "leaseguard"})
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", kind, live.GetName(), err)
	}
	if same(live, defaulted) {
		return 0, nil
	}
	if _, err := update(ctx, metav1.UpdateOptions{FieldManager: "leaseguard"}); err != nil {
		return 0, fmt.Errorf("%s %s: %w", kind, live.GetName(), err)
	}
	log.Info("updated to the rendering of the policy in force", kind, live.GetName())
	return 1, nil
}

// access reaches the fields of one webhook type that merge keeps.
type access[W any] struct {
	name         func(*W) string
	clientConfig func(*W) *admissionregistrationv1.WebhookClientConfig
	timeout      func(*W) **int32
}

var validatingAccess = access[admissionregistrationv1.ValidatingWebhook]{
	name: func(w *admissionregistrationv1.ValidatingWebhook) string { return w.Name },
	clientConfig: func(w *admissionregistrationv1.ValidatingWebhook) *admissionregistrationv1.WebhookClientConfig {
		return &w.ClientConfig
	},
	timeout: func(w *admissionregistrationv1.ValidatingWebhook) **int32 { return &w.TimeoutSeconds },
}

var mutatingAccess = access[admissionregistrationv1.MutatingWebhook]{
	name: func(w *admissionregistrationv1.MutatingWebhook) string { return w.Name },
	clientConfig: func(w *admissionregistrationv1.MutatingWebhook) *admissionregistrationv1.WebhookClientConfig {
		return &w.ClientConfig
	},
	timeout: func(w *admissionregistrationv1.MutatingWebhook) **int32 { return &w.TimeoutSeconds },
}

// merge returns the rendered webhooks with what the install chose: a webhook
// the live configuration has keeps its clientConfig and timeoutSeconds; a
// new one is served where a live webhook of the configuration (or fallback)
// is, at its own path.
func merge[W any](live, want []W, fallback *admissionregistrationv1.WebhookClientConfig, a access[W]) ([]W, error) {
	byName := map[string]*W{}
	for i := range live {
		byName[a.name(&live[i])] = &live[i]
	}
	base := fallback
	if len(live) > 0 {
		base = a.clientConfig(&live[0])
	}
	out := make([]W, len(want))
	for i := range want {
		w := want[i]
		if l, ok := byName[a.name(&w)]; ok {
			*a.clientConfig(&w) = *a.clientConfig(l).DeepCopy()
			if t := *a.timeout(l); t != nil {
				v := *t
				*a.timeout(&w) = &v
			}
		} else {
			if base == nil {
				return nil, fmt.Errorf("webhook %s: the configuration has no webhook to tell where leaseguard is served", a.name(&w))
			}
			cc, err := servedAt(base, a.clientConfig(&w))
			if err != nil {
				return nil, fmt.Errorf("webhook %s: %w", a.name(&w), err)
			}
			*a.clientConfig(&w) = cc
		}
		out[i] = w
	}
	return out, nil
}

// servedAt is base's clientConfig (service or URL, caBundle) at the path of
// rendered's.
func servedAt(base, rendered *admissionregistrationv1.WebhookClientConfig) (admissionregistrationv1.WebhookClientConfig, error) {
	cc := *base.DeepCopy()
	path := ""
	if rendered.Service != nil && rendered.Service.Path != nil {
		path = *rendered.Service.Path
	}
	switch {
	case cc.Service != nil:
		cc.Service.Path = &path
	case cc.URL != nil:
		u, err := url.Parse(*cc.URL)
		if err != nil {
			return cc, fmt.Errorf("clientConfig.url %q: %w", *cc.URL, err)
		}
		u.Path = path
		s := u.String()
		cc.URL = &s
	default:
		return cc, fmt.Errorf("clientConfig has neither service nor url")
	}
	return cc, nil
}
