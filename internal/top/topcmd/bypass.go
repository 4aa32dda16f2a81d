package topcmd

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/leaseguard/leaseguard/internal/top/leasetraffic"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

// bypassReader tells whether leaseguard's admission configuration is
// bypassed (manifests.BypassAnnotation on its validating configuration),
// so that top says so: while bypassed, what the webhook judges is not
// what the policy says.
type bypassReader struct {
	client kubernetes.Interface
	name   string

	mu     sync.Mutex
	bypass *leasetraffic.AdmissionBypass
}

func newBypassReader(cfg *rest.Config, name string) (*bypassReader, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &bypassReader{client: cs, name: name}, nil
}

// read gets the configuration once. A configuration top cannot read (not
// installed, or no get on it: top needs only list and watch on leases)
// shows nothing, as top works with or without the webhook.
func (b *bypassReader) read(ctx context.Context) {
	var bypass *leasetraffic.AdmissionBypass
	v, err := b.client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, b.name, metav1.GetOptions{})
	if err == nil {
		if reason, ok := v.Annotations[manifests.BypassAnnotation]; ok {
			bypass = &leasetraffic.AdmissionBypass{Configuration: b.name, Reason: reason}
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bypass = bypass
}

// poll reads the configuration every interval until ctx ends.
func (b *bypassReader) poll(ctx context.Context, every time.Duration) {
	everyInterval(ctx, every, func() { b.read(ctx) })
}

func (b *bypassReader) current() *leasetraffic.AdmissionBypass {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bypass
}
