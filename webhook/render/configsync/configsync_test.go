package configsync

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

func service(path string, ca string) admissionregistrationv1.WebhookClientConfig {
	return admissionregistrationv1.WebhookClientConfig{
		Service:  &admissionregistrationv1.ServiceReference{Namespace: "guard-ns", Name: "guard-svc", Path: ptr.To(path), Port: ptr.To[int32](8443)},
		CABundle: []byte(ca),
	}
}

func TestMergeKeepsWhatTheInstallChose(t *testing.T) {
	live := []admissionregistrationv1.ValidatingWebhook{
		{Name: manifests.ValidateWebhook, ClientConfig: service("/validate-leases", "injected CA"), TimeoutSeconds: ptr.To[int32](5),
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "old", Expression: "true"}}},
		{Name: "gone.leases.leaseguard.io", ClientConfig: service("/gone", "injected CA")},
	}
	want := []admissionregistrationv1.ValidatingWebhook{
		{Name: manifests.ValidateWebhook, ClientConfig: service("/validate-leases", ""), TimeoutSeconds: ptr.To[int32](2),
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "new", Expression: "false"}}},
		{Name: manifests.RenewalsWebhook, ClientConfig: service("/validate-renewals", ""), TimeoutSeconds: ptr.To[int32](2)},
	}
	got, err := merge(live, want, nil, validatingAccess)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != manifests.ValidateWebhook || got[1].Name != manifests.RenewalsWebhook {
		t.Fatalf("webhooks %v, want exactly the rendered two (the one the policy no longer needs removed)", got)
	}
	if got[0].MatchConditions[0].Name != "new" {
		t.Errorf("matchConditions %v, want the rendering's", got[0].MatchConditions)
	}
	if string(got[0].ClientConfig.CABundle) != "injected CA" || *got[0].ClientConfig.Service.Port != 8443 || *got[0].TimeoutSeconds != 5 {
		t.Errorf("kept webhook: clientConfig %+v timeout %d, want the live caBundle, port and timeout", got[0].ClientConfig, *got[0].TimeoutSeconds)
	}
	cc := got[1].ClientConfig
	if string(cc.CABundle) != "injected CA" || cc.Service.Name != "guard-svc" || cc.Service.Namespace != "guard-ns" || *cc.Service.Path != "/validate-renewals" {
		t.Errorf("new webhook: clientConfig %+v path %s, want the live service and CA at its own path", cc, *cc.Service.Path)
	}
	if *live[0].ClientConfig.Service.Path != "/validate-leases" {
		t.Errorf("merge changed the live object's path to %s", *live[0].ClientConfig.Service.Path)
	}
}

func TestNewWebhookOfAnEmptyConfigurationIsServedWhereTheOthersAre(t *testing.T) {
	url := "https://127.0.0.1:9443/validate-leases"
	fallback := admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: []byte("ca")}
	want := []admissionregistrationv1.MutatingWebhook{{Name: manifests.DesignateWebhook, ClientConfig: service("/designate-leases", "")}}
	got, err := merge(nil, want, &fallback, mutatingAccess)
	if err != nil {
		t.Fatal(err)
	}
	if u := *got[0].ClientConfig.URL; u != "https://127.0.0.1:9443/designate-leases" {
		t.Errorf("url %s, want the validating webhook's host at the rendered path", u)
	}
	if _, err := merge(nil, want, nil, mutatingAccess); err == nil || !strings.Contains(err.Error(), "no webhook to tell where leaseguard is served") {
		t.Errorf("without any webhook to copy: %v, want a clear error", err)
	}
}

func TestPrefixOfRefusesNamesManifestsDoesNotRender(t *testing.T) {
	if p, err := PrefixOf("team-guard-validating-webhook-configuration"); err != nil || p != "team-guard" {
		t.Errorf("PrefixOf = %q, %v", p, err)
	}
	for _, name := range []string{"leaseguard", "-validating-webhook-configuration", "my-webhooks"} {
		if _, err := PrefixOf(name); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("PrefixOf(%q) = %v, want an error naming it", name, err)
		}
	}
}

func TestRenderedWithReadsTheInstallsChoices(t *testing.T) {
	c, failOpen, err := manifests.RenderedWith(map[string]string{manifests.CoalesceAnnotation: "webhook", manifests.FailOpenAnnotation: "true"})
	if err != nil || c != manifests.CoalesceInWebhook || !failOpen {
		t.Errorf("RenderedWith = %q %v %v", c, failOpen, err)
	}
	for _, a := range []map[string]string{nil, {manifests.CoalesceAnnotation: "sometimes"}, {manifests.CoalesceAnnotation: "off", manifests.FailOpenAnnotation: "yes"}} {
		if _, _, err := manifests.RenderedWith(a); err == nil || !strings.Contains(err.Error(), "leaseguard.io/") {
			t.Errorf("RenderedWith(%v) = %v, want an error naming the annotation", a, err)
		}
	}
}
