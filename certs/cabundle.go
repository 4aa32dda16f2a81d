package certs

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// caKey is where cert-manager's dynamic authority keeps the CA certificate.
const caKey = "ca.crt"

// bundleKeeper copies the CA of the authority's Secret into the caBundle of
// leaseguard's webhook configurations: on every CA rotation and, to repair
// anything else that changed them, once a minute.
type bundleKeeper struct {
	client                kubernetes.Interface
	namespace, secretName string
	validating, mutating  string
	log                   logr.Logger
}

func (k *bundleKeeper) run(ctx context.Context, rotated <-chan struct{}) error {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	retryFast := time.NewTicker(2 * time.Second)
	defer retryFast.Stop()
	synced := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-rotated:
			synced = false
		case <-t.C:
			synced = false
		case <-retryFast.C:
		}
		if synced {
			continue
		}
		if err := k.sync(ctx); err != nil {
			k.log.Error(err, "updating the webhook configurations' caBundle; retrying")
			continue
		}
		synced = true
	}
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
