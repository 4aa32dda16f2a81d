package configsync

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/leaseguard/leaseguard/webhook/render/namedwatch"
)

// caKey is where cert-manager's dynamic authority keeps the CA certificate.
const caKey = "ca.crt"

// CABundleKeeper copies the CA of the self-managed authority's Secret
// (certs.SelfManaged) into the caBundle of leaseguard's webhook
// configurations: the one part of those objects the Syncer leaves alone,
// kept here beside it. It watches the Secret and both configurations
// (webhook/render/namedwatch), so a CA rotation, and an apply that resets
// a caBundle (an install re-applied, a helm upgrade), are followed within
// seconds; before, a poll once a minute left the API server unable to
// call the webhooks for up to a minute. Every replica may run it: the
// writes are idempotent.
type CABundleKeeper struct {
	// Config reaches the API server.
	Config *rest.Config
	// Namespace and SecretName locate the CA Secret.
	Namespace, SecretName string
	// Validating and Mutating name the configurations whose caBundle is
	// kept; an empty name is skipped.
	Validating, Mutating string
	Log                  logr.Logger

	client kubernetes.Interface
}

// bundleResync is how often the keeper looks without a watch event: a
// safety net only.
const bundleResync = 10 * time.Minute

// Run keeps the caBundles until ctx ends.
func (k *CABundleKeeper) Run(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(k.Config)
	if err != nil {
		return err
	}
	k.client = cs
	kind := func(k string) schema.GroupVersionKind {
		return admissionregistrationv1.SchemeGroupVersion.WithKind(k)
	}
	objects := []namedwatch.Object{{Kind: corev1.SchemeGroupVersion.WithKind("Secret"), Namespace: k.Namespace, Name: k.SecretName}}
	if k.Validating != "" {
		objects = append(objects, namedwatch.Object{Kind: kind("ValidatingWebhookConfiguration"), Name: k.Validating})
	}
	if k.Mutating != "" {
		objects = append(objects, namedwatch.Object{Kind: kind("MutatingWebhookConfiguration"), Name: k.Mutating})
	}
	return namedwatch.Run(ctx, namedwatch.Options{
		Name: "cabundle", Config: k.Config, Objects: objects, Log: k.Log,
		Reconcile: func(ctx context.Context) (time.Duration, error) {
			if err := k.sync(ctx); err != nil {
				return 0, fmt.Errorf("updating the webhook configurations' caBundle: %w", err)
			}
			return bundleResync, nil
		},
	})
}

// sync sets the caBundle of every webhook of both configurations to the
// current CA. Concurrent replicas write the same value, so conflicts are
// simply retried.
func (k *CABundleKeeper) sync(ctx context.Context) error {
	secret, err := k.client.CoreV1().Secrets(k.Namespace).Get(ctx, k.SecretName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("CA Secret %s/%s: %w", k.Namespace, k.SecretName, err)
	}
	ca := secret.Data[caKey]
	if len(ca) == 0 {
		return fmt.Errorf("CA Secret %s/%s has no %s yet", k.Namespace, k.SecretName, caKey)
	}
	for _, target := range k.targets() {
		if target.name == "" {
			continue
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			configs, store, err := target.load(ctx)
			if err != nil {
				return err
			}
			changed := false
			for _, cc := range configs {
				if !bytes.Equal(cc.CABundle, ca) {
					cc.CABundle, changed = ca, true
				}
			}
			if !changed {
				return nil
			}
			if err := store(ctx); err != nil {
				return err
			}
			k.Log.Info("updated caBundle", target.kind, target.name)
			return nil
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("%s %s: %w", target.kind, target.name, err)
		}
	}
	return nil
}

// webhookTarget is one of leaseguard's webhook configurations: load returns
// its webhooks' client configs, to edit in place, and a function storing them.
type webhookTarget struct {
	kind, name string
	load       func(context.Context) ([]*admissionregistrationv1.WebhookClientConfig, func(context.Context) error, error)
}

func (k *CABundleKeeper) targets() []webhookTarget {
	api := k.client.AdmissionregistrationV1()
	return []webhookTarget{
		{"validatingwebhookconfiguration", k.Validating, loader(api.ValidatingWebhookConfigurations(), k.Validating,
			func(c *admissionregistrationv1.ValidatingWebhookConfiguration) []*admissionregistrationv1.WebhookClientConfig {
				var ccs []*admissionregistrationv1.WebhookClientConfig
				for i := range c.Webhooks {
					ccs = append(ccs, &c.Webhooks[i].ClientConfig)
				}
				return ccs
			})},
		{"mutatingwebhookconfiguration", k.Mutating, loader(api.MutatingWebhookConfigurations(), k.Mutating,
			func(c *admissionregistrationv1.MutatingWebhookConfiguration) []*admissionregistrationv1.WebhookClientConfig {
				var ccs []*admissionregistrationv1.WebhookClientConfig
				for i := range c.Webhooks {
					ccs = append(ccs, &c.Webhooks[i].ClientConfig)
				}
				return ccs
			})},
	}
}

// getUpdater is the part of a typed client the keeper uses.
type getUpdater[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// loader reads one configuration and returns its client configs, to edit
// in place, and a function writing the edited object back.
func loader[T any](client getUpdater[T], name string, configs func(T) []*admissionregistrationv1.WebhookClientConfig) func(context.Context) ([]*admissionregistrationv1.WebhookClientConfig, func(context.Context) error, error) {
	return func(ctx context.Context) ([]*admissionregistrationv1.WebhookClientConfig, func(context.Context) error, error) {
		obj, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, nil, err
		}
		return configs(obj), func(ctx context.Context) error {
			_, err := client.Update(ctx, obj, metav1.UpdateOptions{})
			return err
		}, nil
	}
}
