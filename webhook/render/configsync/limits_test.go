package configsync

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// A rendering the API server refuses is said to be one: the API server
// keeps routing by the configuration it has. Other errors are left as
// they are.
func TestARefusedRenderingIsSaidToBeOne(t *testing.T) {
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}, "leaseguard-validating-webhook-configuration",
		field.ErrorList{field.Invalid(field.NewPath("webhooks").Index(0).Child("matchConditions").Index(2).Child("expression"), "...", "expression code point size exceeds limit: size: 121581, limit 100000")})
	err := refused(fmt.Errorf("validatingwebhookconfiguration leaseguard-validating-webhook-configuration: %w", invalid))
	if !strings.Contains(err.Error(), "the API server refuses the rendering of the policy in force and keeps routing by the configuration it has") ||
		!strings.Contains(err.Error(), "limit 100000") || !apierrors.IsInvalid(err) {
		t.Errorf("%v", err)
	}
	other := errors.New("connection refused")
	if refused(other) != other {
		t.Errorf("refused(%v) = %v", other, refused(other))
	}
}

// Where a policy's rendering is broader than the policy, serve says so
// once for the policy, not at every resync.
func TestBroaderRenderingsAreLoggedOncePerPolicy(t *testing.T) {
	var lines []string
	s := &Syncer{Log: funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})}
	s.noteLimits("a", []string{"rule apps: the namespaces do not fit"})
	s.noteLimits("a", []string{"rule apps: the namespaces do not fit"})
	s.noteLimits("b", nil)
	s.noteLimits("c", []string{"rule x: y"})
	if len(lines) != 2 || !strings.Contains(lines[0], "the routing is broader than the policy") || !strings.Contains(lines[0], "rule apps") || !strings.Contains(lines[1], "rule x") {
		t.Errorf("logged %q", lines)
	}
}
