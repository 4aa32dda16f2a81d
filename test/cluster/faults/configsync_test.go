package faults

import (
	"context"
	"fmt"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// leaseguard's names (webhook/render/configsync, webhook/render/manifests), written out:
// importing those packages would bring the generator's CEL into this
// module.
const (
	validatingName      = "leaseguard-validating-webhook-configuration"
	validateWebhook     = "validate.leases.leaseguard.io"
	policyAnnotation    = "leaseguard.io/policy-sha256"
	renderingAnnotation = "leaseguard.io/rendering-sha256"
	bypassAnnotation    = "leaseguard.io/bypass"
)

// checkConfigurationDrift takes the chart's install through an edit of its
// admission configuration that also drops leaseguard.io/policy-sha256
// (repaired within seconds: every replica watches the objects it keeps;
// 30 s allowed, where the one-minute poll it replaced needed up to a
// minute), then an operator's bypass (leaseguard.io/bypass: the
// edit stays and every replica reports it), then the bypass lifted (the
// rendering comes back). It runs before the workload: while edited, the
// fail-closed webhook checks nothing.
func (c *cluster) checkConfigurationDrift(t *testing.T, s *scraper) {
	ctx := context.Background()
	api := c.admin.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	edit := func(change func(*admissionregistrationv1.ValidatingWebhookConfiguration)) {
		t.Helper()
		if err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			v, err := api.Get(ctx, validatingName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(v)
			_, err = api.Update(ctx, v, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	// weaken is the edit: the fail-closed webhook made fail-open and
	// matching nothing.
	weaken := func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
		for i := range v.Webhooks {
			if v.Webhooks[i].Name == validateWebhook {
				v.Webhooks[i].FailurePolicy = ptr.To(admissionregistrationv1.Ignore)
				v.Webhooks[i].MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "nothing", Expression: "false"}}
			}
		}
	}
	rendered := func() error {
		v, err := api.Get(ctx, validatingName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if v.Annotations[policyAnnotation] == "" || v.Annotations[renderingAnnotation] == "" {
			return fmt.Errorf("annotations %v: not sealed", v.Annotations)
		}
		for _, w := range v.Webhooks {
			if w.Name == validateWebhook {
				if ptr.Deref(w.FailurePolicy, "") != admissionregistrationv1.Fail || len(w.MatchConditions) == 0 || w.MatchConditions[0].Name == "nothing" {
					return fmt.Errorf("webhook %s still edited: failurePolicy %v", w.Name, ptr.Deref(w.FailurePolicy, ""))
				}
				return nil
			}
		}
		return fmt.Errorf("no webhook %s", validateWebhook)
	}
	// every reads a metric on every replica and says which differ from want.
	every := func(metric string, want float64) error {
		for _, p := range c.pods(t) {
			if got := s.sum(p.Status.PodIP, func(series string) bool { return series == metric }); got != want {
				return fmt.Errorf("pod %s: %s = %v, want %v", p.Name, metric, got, want)
			}
		}
		return nil
	}
	repairs := func() float64 {
		total := 0.0
		for _, p := range c.pods(t) {
			total += s.sum(p.Status.PodIP, func(series string) bool { return series == "leaseguard_admission_configuration_repairs_total" })
		}
		return total
	}
	lift := func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
		delete(v.Annotations, bypassAnnotation)
	}
	defer func() {
		if t.Failed() {
			edit(lift)
			waitUntil(t, "the rendering back for the tests that follow", 3*time.Minute, rendered)
		}
	}()

	before := repairs()
	edit(func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
		weaken(v)
		delete(v.Annotations, policyAnnotation)
	})
	start := time.Now()
	waitUntil(t, "the edit that dropped the policy annotation repaired", 30*time.Second, rendered)
	t.Logf("an edit dropping %s repaired after %s", policyAnnotation, time.Since(start).Round(time.Second))
	// The replica records its sync once the whole configuration is
	// synced (the policies and the mutating configuration after the
	// validating one): a moment after the repair shows.
	waitUntil(t, "the repair counted", 30*time.Second, func() error {
		if after := repairs(); after <= before {
			return fmt.Errorf("leaseguard_admission_configuration_repairs_total summed over the replicas: %v, then %v; want it to count the repair", before, after)
		}
		return nil
	})

	edit(func(v *admissionregistrationv1.ValidatingWebhookConfiguration) {
		weaken(v)
		v.Annotations[bypassAnnotation] = "kind stage: bypass honoured"
	})
	waitUntil(t, "every replica reporting the bypass", 30*time.Second, func() error {
		return every("leaseguard_admission_configuration_bypassed", 1)
	})
	// Each replica has synced since the bypass (it reports it): none
	// undid the edit.
	if err := rendered(); err == nil {
		t.Fatal("the bypassed configuration was repaired: the operator's edit was undone")
	}

	edit(lift)
	waitUntil(t, "the rendering back once the bypass is lifted", 30*time.Second, rendered)
	waitUntil(t, "every replica in sync, not bypassed", 3*time.Minute, func() error {
		if err := every("leaseguard_admission_configuration_bypassed", 0); err != nil {
			return err
		}
		return every("leaseguard_admission_configuration_in_sync", 1)
	})
}
