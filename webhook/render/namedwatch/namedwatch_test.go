package namedwatch

import (
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	vwc     = schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingWebhookConfiguration"}
	mapKind = schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingAdmissionPolicy"}
	secret  = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
)

// A kind the API server does not serve (a MutatingAdmissionPolicy before
// Kubernetes 1.36) is left out rather than failing the controller, whose
// informer would otherwise never sync; each watched object is selected by
// its name (and namespace), which is what RBAC by resourceNames allows.
func TestServedSelectsByNameAndSkipsUnservedKinds(t *testing.T) {
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(vwc, meta.RESTScopeRoot)
	mapper.Add(secret, meta.RESTScopeNamespace)
	o := Options{Log: testr.New(t), Objects: []Object{
		{Kind: vwc, Name: "lg-validating-webhook-configuration"},
		{Kind: mapKind, Name: "lg-coalesce-renewals"},
		{Kind: secret, Namespace: "lg-system", Name: "lg-ca"},
	}}
	watched, byObject, err := served(o, mapper)
	if err != nil {
		t.Fatal(err)
	}
	if len(watched) != 2 {
		t.Fatalf("watched %d objects, want the 2 served", len(watched))
	}
	for i, want := range []Object{o.Objects[0], o.Objects[2]} {
		m := watched[i].(*metav1.PartialObjectMetadata)
		if m.GroupVersionKind() != want.Kind {
			t.Errorf("object %d: kind %v, want %v", i, m.GroupVersionKind(), want.Kind)
		}
		sel := byObject[watched[i]]
		if got, want := sel.Field.String(), "metadata.name="+want.Name; got != want {
			t.Errorf("%s: field selector %q, want %q", o.Objects[i], got, want)
		}
		_, inNS := sel.Namespaces[want.Namespace]
		if want.Namespace != "" && (!inNS || len(sel.Namespaces) != 1) {
			t.Errorf("%s: namespaces %v, want only %s", want, sel.Namespaces, want.Namespace)
		}
	}

	o.Objects = append(o.Objects, Object{Kind: vwc, Name: "another"})
	if _, _, err := served(o, mapper); err == nil || !strings.Contains(err.Error(), "one object per kind") {
		t.Errorf("two objects of one kind: %v, want refused", err)
	}
}
