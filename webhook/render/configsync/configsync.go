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
//
// Whose rendering a configuration is must not rest on a marker anyone who
// can edit it can drop or change: the validating configuration carries,
// beside the policy's hash, a seal over that hash and the content the
// policy decides (RenderingAnnotation). Every replica recomputes it, so an
// edit is drift whichever policy a replica holds, and an intact seal is
// some replica's rendering. An operator who must keep an edit (an
// emergency) says so with BypassAnnotation, which is honoured and reported,
// never silently accepted.
package configsync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
	"github.com/leaseguard/leaseguard/webhook/render/namedwatch"
)

// PolicyAnnotation records the SHA-256 of the policy file the configuration
// was last rendered from by leaseguard.
const PolicyAnnotation = "leaseguard.io/policy-sha256"

// RenderingAnnotation seals the validating configuration as leaseguard
// wrote it: the SHA-256 of its PolicyAnnotation, the install's choices
// (manifests.RenderedWith) and its webhooks as stored, clientConfig and
// timeoutSeconds left out (the install's, and the CA injector rewrites
// caBundle). A configuration whose seal does not match was edited by
// someone else, whatever its PolicyAnnotation says. It is a checksum, not
// a signature: it tells edits apart from renderings, not an adversary who
// recomputes it (docs/security.md).
const RenderingAnnotation = "leaseguard.io/rendering-sha256"

// BypassAnnotation is manifests.BypassAnnotation: while it is on the
// validating configuration, no replica writes the admission configuration.
const BypassAnnotation = manifests.BypassAnnotation

// DefaultStaleAfter is how long a replica accepts a configuration sealed
// as the rendering of another policy before it reports it out of sync: a
// ConfigMap edit reaches every replica within about a minute (the
// kubelet's sync) plus the reload interval, and each then writes its own.
const DefaultStaleAfter = 3 * time.Minute

// validatingSuffix is what names the validating configuration after the
// prefix (manifests.Options.Prefix).
// The names of the other objects the install created, after the prefix
// (manifests renders them so).
const (
	validatingSuffix = "-validating-webhook-configuration"
	mutatingSuffix   = "-mutating-webhook-configuration"
	renewalsSuffix   = "-renewals"
	coalescingSuffix = "-coalesce-renewals"
)

// Policies is where the policy in force comes from (policyfile.Store).
type Policies interface {
	InForce() (*policy.Policy, string)
	Changed() <-chan struct{}
}

// Recorder is told the outcome of every sync: whether the configuration is
// a rendering leaseguard stands by, whether an operator bypassed it, how
// many objects were written and how many of those writes undid someone
// else's edit.
type Recorder interface {
	AdmissionConfigurationSync(inSync, bypassed bool, updated, repaired int)
}

// Syncer keeps the configuration named by Prefix equal to the rendering of
// the policy in force.
type Syncer struct {
	Client kubernetes.Interface
	// Config reaches the same API server as Client, for the watches.
	Config *rest.Config
	// Prefix names the objects as manifests.Options.Prefix does.
	Prefix string
	// Namespace is leaseguard's own namespace, never intercepted.
	Namespace string
	Policies  Policies
	Recorder  Recorder
	Log       logr.Logger
	// Resync is how often a configuration already rendered from the policy
	// in force is checked for drift without a watch event (a safety net),
	// and how long an edit that names another policy is left for a replica
	// holding that policy; one minute when zero.
	Resync time.Duration
	// StaleAfter is how long a configuration sealed as another policy's
	// rendering is left alone before it is reported out of sync
	// (DefaultStaleAfter when zero; at least two resyncs).
	StaleAfter time.Duration

	// now is the clock (time.Now when nil), for tests.
	now func() time.Time
	// What earlier syncs saw, kept by Run's goroutine alone: since when
	// the configuration has been edited under another policy's name
	// (repaired one resync later), since when it has been another
	// policy's rendering, and the bypass in force ("" for none).
	editedSince, foreignSince time.Time
	bypassed                  bool
	bypassReason              string
	// limitsNoted is the policy whose broader rendering was last logged.
	limitsNoted string
	// written is the policy the last sync that was not bypassed rendered
	// (or stood by): until it is the policy in force, syncs are forced.
	written string
}

// Outcome is what one sync found and did.
type Outcome struct {
	// InSync: the configuration is this replica's rendering, or for less
	// than StaleAfter another replica's.
	InSync bool
	// Bypassed: the validating configuration carries BypassAnnotation;
	// nothing was written.
	Bypassed bool
	// Updated objects, Repaired of them undoing someone else's edit.
	Updated, Repaired int
	// policy is the SHA-256 of the policy the sync judged by.
	policy string
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

// Run syncs at once, on every policy change, whenever one of the objects
// it keeps changes (a watch on each, by name: webhook/render/namedwatch), and at
// every resync, until ctx ends. A replica writes on its start and when it
// swaps a policy in. Otherwise it repairs its own rendering, and an edited
// configuration (its seal broken) at once when it names this replica's
// policy or none, else one resync later, so that a replica holding the
// policy it names repairs it first. It leaves alone a configuration sealed
// as the rendering of another policy: while a ConfigMap edit reaches
// replicas at different times, a replica still holding the old policy does
// not undo the new rendering; after StaleAfter it reports it. While the
// validating configuration carries BypassAnnotation nothing is written,
// and a write a policy change asked for waits until the bypass is lifted.
// A failed sync is retried with back-off (1 s doubling to 1 min).
func (s *Syncer) Run(ctx context.Context) error {
	kind := func(k string) schema.GroupVersionKind {
		return admissionregistrationv1.SchemeGroupVersion.WithKind(k)
	}
	return namedwatch.Run(ctx, namedwatch.Options{
		Name:   "admission-configuration",
		Config: s.Config,
		Objects: []namedwatch.Object{
			{Kind: kind("ValidatingWebhookConfiguration"), Name: s.Prefix + validatingSuffix},
			{Kind: kind("MutatingWebhookConfiguration"), Name: s.Prefix + mutatingSuffix},
			{Kind: kind("ValidatingAdmissionPolicy"), Name: s.Prefix + renewalsSuffix},
			{Kind: kind("ValidatingAdmissionPolicyBinding"), Name: s.Prefix + renewalsSuffix},
			{Kind: kind("MutatingAdmissionPolicy"), Name: s.Prefix + coalescingSuffix},
			{Kind: kind("MutatingAdmissionPolicyBinding"), Name: s.Prefix + coalescingSuffix},
		},
		Changed:   s.Policies.Changed,
		Reconcile: s.reconcile,
		Log:       s.Log,
	})
}

// reconcile is one sync: forced when the policy in force is not the one
// last written (at start, after a policy change, and while a bypass held a
// policy change back).
func (s *Syncer) reconcile(ctx context.Context) (time.Duration, error) {
	_, sha := s.Policies.InForce()
	out, err := s.sync(ctx, sha != s.written)
	if err != nil {
		s.Recorder.AdmissionConfigurationSync(false, s.bypassed, out.Updated, out.Repaired)
		return 0, fmt.Errorf("keeping the webhook configurations equal to the policy: %w", err)
	}
	s.Recorder.AdmissionConfigurationSync(out.InSync, out.Bypassed, out.Updated, out.Repaired)
	if !out.Bypassed {
		s.written = out.policy
	}
	return s.resync(), nil
}

func (s *Syncer) resync() time.Duration {
	if s.Resync <= 0 {
		return time.Minute
	}
	return s.Resync
}

func (s *Syncer) staleAfter() time.Duration {
	d := s.StaleAfter
	if d <= 0 {
		d = DefaultStaleAfter
	}
	return max(d, 2*s.resync())
}

func (s *Syncer) clock() time.Time {
	if s.now == nil {
		return time.Now()
	}
	return s.now()
}

// errNotInstalled says an object the policy needs is not installed: only
// the install can create it.
var errNotInstalled = errors.New("not installed")

// sync renders the policy in force and writes what differs. force writes
// even when the live configuration is another policy's rendering.
func (s *Syncer) sync(ctx context.Context, force bool) (Outcome, error) {
	p, sha := s.Policies.InForce()
	api := s.Client.AdmissionregistrationV1()
	out := Outcome{policy: sha}
	var notInstalled []string
	rendered := false
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		out, notInstalled, rendered = Outcome{policy: sha}, nil, false
		live, err := api.ValidatingWebhookConfigurations().Get(ctx, s.Prefix+validatingSuffix, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("validatingwebhookconfiguration %s%s: %w", s.Prefix, validatingSuffix, err)
		}
		named := live.Annotations[PolicyAnnotation]
		intact := live.Annotations[RenderingAnnotation] == seal(named, live)
		reason, bypassed := live.Annotations[BypassAnnotation]
		s.noteBypass(live.Name, bypassed, reason)
		if bypassed {
			// What the operator does meanwhile is theirs: once the bypass
			// is lifted, an edit is judged afresh.
			s.editedSince, s.foreignSince = time.Time{}, time.Time{}
			out.Bypassed = true
			out.InSync = intact && named == sha
			return nil
		}
		if !force {
			write, inSync := s.judge(live.Name, intact, named, sha)
			if !write {
				out.InSync = inSync
				return nil
			}
		}
		s.editedSince, s.foreignSince = time.Time{}, time.Time{}
		rendered = true
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
		s.noteLimits(sha, want.Limits)
		// At a resync the policy has not changed: whatever content a
		// write changes, someone else had changed.
		count := func(w writes) {
			out.Updated += w.updated
			if !force {
				out.Repaired += w.content
			}
		}
		w, err := s.syncRenewals(ctx, want)
		count(w)
		if errors.Is(err, errNotInstalled) {
			notInstalled = append(notInstalled, "validatingadmissionpolicy "+s.Prefix+renewalsSuffix)
		} else if err != nil {
			return err
		}
		w, err = s.syncValidating(ctx, live, want.Validating, sha)
		if err != nil {
			return err
		}
		count(w)
		w, err = s.syncMutating(ctx, live, want.Mutating, sha)
		if errors.Is(err, errNotInstalled) {
			notInstalled = append(notInstalled, "mutatingwebhookconfiguration "+s.Prefix+mutatingSuffix)
		} else if err != nil {
			return err
		}
		count(w)
		w, err = s.syncCoalescing(ctx, want)
		count(w)
		if errors.Is(err, errNotInstalled) {
			notInstalled = append(notInstalled, "mutatingadmissionpolicy "+s.Prefix+coalescingSuffix)
		} else if err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return out, refused(err)
	}
	if !rendered {
		return out, nil
	}
	if len(notInstalled) > 0 {
		return out, fmt.Errorf("the policy needs %s, which the install did not create: re-render and re-apply the install (make manifests and make deploy, or helm upgrade)", strings.Join(notInstalled, " and "))
	}
	if out.Repaired > 0 {
		s.Log.Info("repaired an edit of the admission configuration by someone else: it is the rendering of the policy in force again", "objects", out.Repaired, "policy", sha)
	}
	out.InSync = true
	return out, nil
}

// judge decides at a resync whether to render and write, and, when not,
// whether the configuration is in sync. This replica's own rendering is
// always compared (the mutating configuration and the coalescing policy
// carry no seal); an edit is repaired at once when it names this policy or
// none, else once it has lasted a resync; another policy's intact
// rendering is never written, and is in sync only until StaleAfter.
func (s *Syncer) judge(name string, intact bool, named, sha string) (write, inSync bool) {
	now := s.clock()
	log := s.Log.WithValues("validatingwebhookconfiguration", name, "policy", sha, "renderedFrom", named)
	switch {
	case intact && named == sha:
		return true, true
	case intact:
		s.editedSince = time.Time{}
		if s.foreignSince.IsZero() {
			s.foreignSince = now
		}
		if since := now.Sub(s.foreignSince); since >= s.staleAfter() {
			log.Info("the configuration has been the rendering of another policy for too long: this replica's policy or the configuration is stale; not writing it (a replica may hold a newer policy), reporting it out of sync",
				"for", since.Round(time.Second).String())
			return false, false
		}
		return false, true
	case named == sha || named == "":
		log.Info("the configuration was edited by someone else (its content does not match " + RenderingAnnotation + "): repairing")
		return true, false
	default:
		s.foreignSince = time.Time{}
		if s.editedSince.IsZero() {
			s.editedSince = now
		}
		if now.Sub(s.editedSince) < s.resync() {
			log.Info("the configuration was edited by someone else and names another policy: repairing it at the next resync unless a replica holding that policy does first")
			return false, false
		}
		log.Info("the configuration is still edited a resync later: repairing")
		return true, false
	}
}

// noteBypass logs a bypass when it appears, changes or is lifted.
func (s *Syncer) noteBypass(name string, bypassed bool, reason string) {
	if bypassed == s.bypassed && reason == s.bypassReason {
		return
	}
	s.bypassed, s.bypassReason = bypassed, reason
	if bypassed {
		s.Log.Info("bypassed: leaseguard does not write its admission configuration while the annotation is there, whatever it is edited to",
			"validatingwebhookconfiguration", name, "annotation", BypassAnnotation, "reason", reason)
		return
	}
	s.Log.Info("bypass lifted: the admission configuration is kept the rendering of the policy again", "validatingwebhookconfiguration", name)
}

// seal is RenderingAnnotation's value for a validating configuration that
// names policy sha.
func seal(sha string, cfg *admissionregistrationv1.ValidatingWebhookConfiguration) string {
	hooks := make([]admissionregistrationv1.ValidatingWebhook, len(cfg.Webhooks))
	for i, w := range cfg.Webhooks {
		w.ClientConfig = admissionregistrationv1.WebhookClientConfig{}
		w.TimeoutSeconds = nil
		hooks[i] = w
	}
	data, err := json.Marshal(struct {
		Policy, Coalesce, FailOpen string
		Webhooks                   []admissionregistrationv1.ValidatingWebhook
	}{sha, cfg.Annotations[manifests.CoalesceAnnotation], cfg.Annotations[manifests.FailOpenAnnotation], hooks})
	if err != nil {
		// Typed API structs always marshal; never a seal anything matches.
		return "unsealable: " + err.Error()
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// writes counts the objects a sync wrote, and those of them whose content
// (not only leaseguard's annotations) it changed.
type writes struct{ updated, content int }

func (s *Syncer) syncValidating(ctx context.Context, live, want *admissionregistrationv1.ValidatingWebhookConfiguration, sha string) (writes, error) {
	webhooks, err := merge(live.Webhooks, want.Webhooks, nil, validatingAccess)
	if err != nil {
		return writes{}, fmt.Errorf("validatingwebhookconfiguration %s: %w", live.Name, err)
	}
	next := live.DeepCopy()
	next.Webhooks = webhooks
	setPolicy(&next.ObjectMeta, sha)
	api := s.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	return writeIfChanged(ctx, s.Log, "validatingwebhookconfiguration", live, next,
		func(ctx context.Context, o metav1.UpdateOptions) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
			return api.Update(ctx, next, o)
		},
		// Sealed as stored: the API server's defaulting included.
		func(defaulted *admissionregistrationv1.ValidatingWebhookConfiguration) {
			v := seal(sha, defaulted)
			setAnnotation(&next.ObjectMeta, RenderingAnnotation, v)
			setAnnotation(&defaulted.ObjectMeta, RenderingAnnotation, v)
		},
		func(a, b *admissionregistrationv1.ValidatingWebhookConfiguration) bool {
			return equality.Semantic.DeepEqual(a.Webhooks, b.Webhooks)
		},
		func(a, b *admissionregistrationv1.ValidatingWebhookConfiguration) bool {
			return a.Annotations[PolicyAnnotation] == b.Annotations[PolicyAnnotation] && a.Annotations[RenderingAnnotation] == b.Annotations[RenderingAnnotation]
		})
}

// syncMutating keeps the mutating configuration: a policy that needs no
// mutating webhook leaves it without webhooks (deleting it would need the
// install to create it again). A webhook it gains is served where the
// validating configuration's are.
func (s *Syncer) syncMutating(ctx context.Context, validating *admissionregistrationv1.ValidatingWebhookConfiguration, want *admissionregistrationv1.MutatingWebhookConfiguration, sha string) (writes, error) {
	api := s.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	name := s.Prefix + mutatingSuffix
	live, err := api.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if want == nil {
			return writes{}, nil
		}
		return writes{}, errNotInstalled
	}
	if err != nil {
		return writes{}, fmt.Errorf("mutatingwebhookconfiguration %s: %w", name, err)
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
		return writes{}, fmt.Errorf("mutatingwebhookconfiguration %s: %w", name, err)
	}
	next := live.DeepCopy()
	next.Webhooks = webhooks
	setPolicy(&next.ObjectMeta, sha)
	return writeIfChanged(ctx, s.Log, "mutatingwebhookconfiguration", live, next,
		func(ctx context.Context, o metav1.UpdateOptions) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
			return api.Update(ctx, next, o)
		}, nil,
		func(a, b *admissionregistrationv1.MutatingWebhookConfiguration) bool {
			return equality.Semantic.DeepEqual(a.Webhooks, b.Webhooks)
		},
		func(a, b *admissionregistrationv1.MutatingWebhookConfiguration) bool {
			return a.Annotations[PolicyAnnotation] == b.Annotations[PolicyAnnotation]
		})
}

// syncCoalescing keeps the MutatingAdmissionPolicy that coalesces early
// renewals in the API server, and its binding: updated while the policy
// coalesces, deleted when it no longer does.
func (s *Syncer) syncCoalescing(ctx context.Context, want *manifests.Rendered) (writes, error) {
	api := s.Client.AdmissionregistrationV1()
	return syncPolicyPair(ctx, s, s.Prefix+coalescingSuffix, policyPair[*admissionregistrationv1.MutatingAdmissionPolicy, *admissionregistrationv1.MutatingAdmissionPolicyBinding]{
		kind: "mutatingadmissionpolicy", why: "the policy no longer coalesces renewals",
		getPolicy: func(ctx context.Context, n string) (*admissionregistrationv1.MutatingAdmissionPolicy, error) {
			return api.MutatingAdmissionPolicies().Get(ctx, n, metav1.GetOptions{})
		},
		getBinding: func(ctx context.Context, n string) (*admissionregistrationv1.MutatingAdmissionPolicyBinding, error) {
			return api.MutatingAdmissionPolicyBindings().Get(ctx, n, metav1.GetOptions{})
		},
		updatePolicy: func(ctx context.Context, p *admissionregistrationv1.MutatingAdmissionPolicy, o metav1.UpdateOptions) (*admissionregistrationv1.MutatingAdmissionPolicy, error) {
			return api.MutatingAdmissionPolicies().Update(ctx, p, o)
		},
		updateBinding: func(ctx context.Context, b *admissionregistrationv1.MutatingAdmissionPolicyBinding, o metav1.UpdateOptions) (*admissionregistrationv1.MutatingAdmissionPolicyBinding, error) {
			return api.MutatingAdmissionPolicyBindings().Update(ctx, b, o)
		},
		deletePolicy: func(ctx context.Context, n string) error {
			return api.MutatingAdmissionPolicies().Delete(ctx, n, metav1.DeleteOptions{})
		},
		deleteBinding: func(ctx context.Context, n string) error {
			return api.MutatingAdmissionPolicyBindings().Delete(ctx, n, metav1.DeleteOptions{})
		},
		withSpec: func(live, want *admissionregistrationv1.MutatingAdmissionPolicy) *admissionregistrationv1.MutatingAdmissionPolicy {
			next := live.DeepCopy()
			next.Spec = want.Spec
			return next
		},
		bindingWithSpec: func(live, want *admissionregistrationv1.MutatingAdmissionPolicyBinding) *admissionregistrationv1.MutatingAdmissionPolicyBinding {
			next := live.DeepCopy()
			next.Spec = want.Spec
			return next
		},
		samePolicy: func(a, b *admissionregistrationv1.MutatingAdmissionPolicy) bool {
			return equality.Semantic.DeepEqual(a.Spec, b.Spec)
		},
		sameBinding: func(a, b *admissionregistrationv1.MutatingAdmissionPolicyBinding) bool {
			return equality.Semantic.DeepEqual(a.Spec, b.Spec)
		},
	}, want.Coalescing, want.CoalescingBinding, want.Coalescing != nil)
}

// syncRenewals keeps the ValidatingAdmissionPolicy that decides plain
// renewals in the API server (manifests' renewals.go), and its binding.
// It is synced before the validating webhooks: while the two differ, a
// renewal either policy's new rendering takes is decided in process at
// once, and one the webhook's old condition still takes as well is decided
// twice, alike, never by neither.
func (s *Syncer) syncRenewals(ctx context.Context, want *manifests.Rendered) (writes, error) {
	api := s.Client.AdmissionregistrationV1()
	return syncPolicyPair(ctx, s, s.Prefix+renewalsSuffix, policyPair[*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding]{
		kind: "validatingadmissionpolicy", why: "the install no longer decides renewals in the API server",
		getPolicy: func(ctx context.Context, n string) (*admissionregistrationv1.ValidatingAdmissionPolicy, error) {
			return api.ValidatingAdmissionPolicies().Get(ctx, n, metav1.GetOptions{})
		},
		getBinding: func(ctx context.Context, n string) (*admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
			return api.ValidatingAdmissionPolicyBindings().Get(ctx, n, metav1.GetOptions{})
		},
		updatePolicy: func(ctx context.Context, p *admissionregistrationv1.ValidatingAdmissionPolicy, o metav1.UpdateOptions) (*admissionregistrationv1.ValidatingAdmissionPolicy, error) {
			return api.ValidatingAdmissionPolicies().Update(ctx, p, o)
		},
		updateBinding: func(ctx context.Context, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding, o metav1.UpdateOptions) (*admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
			return api.ValidatingAdmissionPolicyBindings().Update(ctx, b, o)
		},
		deletePolicy: func(ctx context.Context, n string) error {
			return api.ValidatingAdmissionPolicies().Delete(ctx, n, metav1.DeleteOptions{})
		},
		deleteBinding: func(ctx context.Context, n string) error {
			return api.ValidatingAdmissionPolicyBindings().Delete(ctx, n, metav1.DeleteOptions{})
		},
		withSpec: func(live, want *admissionregistrationv1.ValidatingAdmissionPolicy) *admissionregistrationv1.ValidatingAdmissionPolicy {
			next := live.DeepCopy()
			next.Spec = want.Spec
			return next
		},
		bindingWithSpec: func(live, want *admissionregistrationv1.ValidatingAdmissionPolicyBinding) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
			next := live.DeepCopy()
			next.Spec = want.Spec
			return next
		},
		samePolicy: func(a, b *admissionregistrationv1.ValidatingAdmissionPolicy) bool {
			return equality.Semantic.DeepEqual(a.Spec, b.Spec)
		},
		sameBinding: func(a, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) bool {
			return equality.Semantic.DeepEqual(a.Spec, b.Spec)
		},
	}, want.Renewals, want.RenewalsBinding, want.Renewals != nil)
}

// policyPair is what syncPolicyPair needs of one kind of admission policy
// and its binding: their typed clients, and how a rendering's spec is laid
// on what is stored.
type policyPair[P, B interface{ GetName() string }] struct {
	kind, why                   string
	getPolicy                   func(context.Context, string) (P, error)
	getBinding                  func(context.Context, string) (B, error)
	updatePolicy                func(context.Context, P, metav1.UpdateOptions) (P, error)
	updateBinding               func(context.Context, B, metav1.UpdateOptions) (B, error)
	deletePolicy, deleteBinding func(context.Context, string) error
	withSpec                    func(live, want P) P
	bindingWithSpec             func(live, want B) B
	samePolicy                  func(a, b P) bool
	sameBinding                 func(a, b B) bool
}

// syncPolicyPair keeps an admission policy the install created, and its
// binding, the rendering want (unless wanted, deleted: the binding first). One the
// install did not create is reported, never created.
func syncPolicyPair[P, B interface{ GetName() string }](ctx context.Context, s *Syncer, name string, c policyPair[P, B], want P, wantBinding B, wanted bool) (writes, error) {
	live, err := c.getPolicy(ctx, name)
	if apierrors.IsNotFound(err) {
		if !wanted {
			return writes{}, nil
		}
		return writes{}, errNotInstalled
	}
	if err != nil {
		return writes{}, fmt.Errorf("%s %s: %w", c.kind, name, err)
	}
	if !wanted {
		// The binding first: a binding without its policy is an error the
		// API server reports on every write it matches.
		if err := c.deleteBinding(ctx, name); err != nil && !apierrors.IsNotFound(err) {
			return writes{}, fmt.Errorf("%sbinding %s: %w", c.kind, name, err)
		}
		if err := c.deletePolicy(ctx, name); err != nil && !apierrors.IsNotFound(err) {
			return writes{}, fmt.Errorf("%s %s: %w", c.kind, name, err)
		}
		s.Log.Info("deleted: "+c.why, c.kind, name)
		return writes{updated: 1, content: 1}, nil
	}
	next := c.withSpec(live, want)
	w, err := writeIfChanged(ctx, s.Log, c.kind, live, next,
		func(ctx context.Context, o metav1.UpdateOptions) (P, error) { return c.updatePolicy(ctx, next, o) }, nil, c.samePolicy, nil)
	if err != nil {
		return writes{}, err
	}
	liveBinding, err := c.getBinding(ctx, name)
	if apierrors.IsNotFound(err) {
		return w, errNotInstalled
	}
	if err != nil {
		return w, fmt.Errorf("%sbinding %s: %w", c.kind, name, err)
	}
	nextBinding := c.bindingWithSpec(liveBinding, wantBinding)
	b, err := writeIfChanged(ctx, s.Log, c.kind+"binding", liveBinding, nextBinding,
		func(ctx context.Context, o metav1.UpdateOptions) (B, error) {
			return c.updateBinding(ctx, nextBinding, o)
		}, nil, c.sameBinding, nil)
	return writes{updated: w.updated + b.updated, content: w.content + b.content}, err
}

func setPolicy(meta *metav1.ObjectMeta, sha string) { setAnnotation(meta, PolicyAnnotation, sha) }

func setAnnotation(meta *metav1.ObjectMeta, key, value string) {
	if meta.Annotations == nil {
		meta.Annotations = map[string]string{}
	}
	meta.Annotations[key] = value
}

// writeIfChanged writes next when, defaulted by the API server (a dry run
// of the update), it differs from live: the rendering leaves defaulted
// fields unset, so comparing it with the stored object directly would see a
// change every time. seal, when set, stamps next and the defaulted object
// from what will be stored; sameContent compares what the policy decides,
// sameMeta (when set) leaseguard's annotations.
func writeIfChanged[T interface{ GetName() string }](ctx context.Context, log logr.Logger, kind string, live, next T,
	update func(context.Context, metav1.UpdateOptions) (T, error), seal func(defaulted T), sameContent, sameMeta func(a, b T) bool) (writes, error) {
	defaulted, err := update(ctx, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: "leaseguard"})
	if err != nil {
		return writes{}, fmt.Errorf("%s %s: %w", kind, live.GetName(), err)
	}
	if seal != nil {
		seal(defaulted)
	}
	content := sameContent(live, defaulted)
	if content && (sameMeta == nil || sameMeta(live, defaulted)) {
		return writes{}, nil
	}
	if _, err := update(ctx, metav1.UpdateOptions{FieldManager: "leaseguard"}); err != nil {
		return writes{}, fmt.Errorf("%s %s: %w", kind, live.GetName(), err)
	}
	log.Info("updated to the rendering of the policy in force", kind, live.GetName())
	if content {
		return writes{updated: 1}, nil
	}
	return writes{updated: 1, content: 1}, nil
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

// refused says, of an error the API server gave a write of the rendering,
// what it means: the API server keeps routing by the configuration it
// has, which may not send leaseguard the writes the policy in force newly
// selects (manifests.Render keeps within the API server's limits, so this
// is a limit it did not know, or a bug: docs/design.md §5, "Limits").
func refused(err error) error {
	if apierrors.IsInvalid(err) || apierrors.IsRequestEntityTooLargeError(err) {
		return fmt.Errorf("the API server refuses the rendering of the policy in force and keeps routing by the configuration it has: "+
			"writes only the policy in force selects do not reach leaseguard until it is fixed: %w", err)
	}
	return err
}

// noteLimits logs, once for each policy, where its rendering is broader
// than the policy to stay within the API server's limits.
func (s *Syncer) noteLimits(sha string, limits []string) {
	if len(limits) == 0 || s.limitsNoted == sha {
		return
	}
	s.limitsNoted = sha
	for _, n := range limits {
		s.Log.Info("the policy does not fit the API server's limits: the routing is broader than the policy", "policy", sha, "note", n)
	}
}
