package topcmd

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

func TestBypassReaderSaysWhatTheAnnotationSays(t *testing.T) {
	const name = "leaseguard-validating-webhook-configuration"
	ctx := context.Background()
	cs := fake.NewClientset()
	b := &bypassReader{client: cs, name: name}
	b.read(ctx)
	if got := b.current(); got != nil {
		t.Errorf("no configuration installed: %+v, want nothing shown", got)
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, v, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.read(ctx)
	if got := b.current(); got != nil {
		t.Errorf("not bypassed: %+v", got)
	}
	v.Annotations = map[string]string{manifests.BypassAnnotation: "INC-42"}
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.read(ctx)
	if got := b.current(); got == nil || got.Configuration != name || got.Reason != "INC-42" {
		t.Errorf("bypassed: %+v, want the configuration and its reason", got)
	}
}
