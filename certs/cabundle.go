package certs

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

	"github.com/leaseguard/leaseguard/internal/namedwatch"
)

// caKey is where cert-manager's dynamic authority keeps the CA certificate.
const caKey = "ca.crt"

// bundleKeeper copies the CA of the authority's Secret into the caBundle of
// leaseguard's webhook configurations. It watches the Secret and both
// configurations (internal/namedwatch), so a CA rotation, and an apply that
// resets a caBundle (an install re-applied, a helm upgrade), are followed
// within seconds; before, a poll once a minute left the API server unable
// to call the webhooks for up to a minute.
type bundleKeeper struct {
	client                kubernetes.Interface
	config                *rest.Config
	namespace, secretName string
	validating, mutating  string
	log                   logr.Logger
}

// bundleResync is how often the keeper looks without a watch event: a
// safety net only.
const bundleResync = 10 * time.Minute

func (k *bundleKeeper) run(ctx context.Context) error {
	kind := func(k string) schema.GroupVersionKind {
		return admissionregistrationv1.SchemeGroupVersion.WithKind(k)
	}
	objects := []namedwatch.Object{{Kind: corev1.SchemeGroupVersion.WithKind("Secret"), Namespace: k.namespace, Name: k.secretName}}
	if k.validating != "" {
		objects = append(objects, namedwatch.Object{Kind: kind("ValidatingWebhookConfiguration"), Name: k.validating})
	}
	if k.mutating != "" {
		objects = append(objects, namedwatch.Object{Kind: kind("MutatingWebhookConfiguration"), Name: k.mutating})
	}
	return namedwatch.Run(ctx, namedwatch.Options{
		Name: "cabundle", Config: k.config, Objects: objects, Log: k.log,
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
func (k *bundleKeeper) sync(ctx context.Context) error {
	secret, err := k.client.CoreV1().Secrets(k.namespace).Get(ctx, k.secretName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("CA Secret %s/%s: %w", k.namespace, k.secretName, err)
	}
	ca := secret.Data[caKey]
	if len(ca) == 0 {
		return fmt.Errorf("CA Secret %s/%s has no %s yet", k.namespace, k.secretName, caKey)
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
			k.log.Info("updated caBundle", target.kind, target.name)
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

func (k *bundleKeeper) targets() []webhookTarget {
	api := k.client.AdmissionregistrationV1()
	return []webhookTarget{
		{"validatingwebhookconfiguration", k.validating, loader(api.ValidatingWebhookConfigurations(), k.validating,
			func(c *admissionregistrationv1.ValidatingWebhookConfiguration) []*admissionregistrationv1.WebhookClientConfig {
				var ccs []*admissionregistrationv1.WebhookClientConfig
				for i := range c.Webhooks {
					ccs = append(ccs, &c.Webhooks[i].ClientConfig)
				}
				return ccs
			})},
		{"mutatingwebhookconfiguration", k.mutating, loader(api.MutatingWebhookConfigurations(), k.mutating,
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
