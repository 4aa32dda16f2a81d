package admission

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/leaseguard/leaseguard/test/testfixtures"
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

func init() {
	// controller-runtime complains (with a stack trace) when its logger is
	// never set; the tests want quiet plumbing.
	ctrllog.SetLogger(logr.Discard())
}

// testNow is the server clock of every test request.
var testNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// testPolicy is Config Connector's namespace mode: the shared
// MultiClusterLease (deny) and the bound Leases (warn).
var testPolicy = testfixtures.KCCPolicy(testfixtures.KCCOptions{NoOperators: true})

func testPolicySource(t testing.TB) PolicySource {
	t.Helper()
	p, err := policyfile.Parse([]byte(testPolicy), policy.CompileOptions{OwnNamespace: "leaseguard-system"})
	if err != nil {
		t.Fatal(err)
	}
	return StaticPolicy{P: p}
}

func validatingHandler(t testing.TB) http.Handler {
	v := &Validator{Policies: testPolicySource(t), Log: logr.Discard(), Now: func() time.Time { return testNow }}
	return v.Handler()
}

func mutatingHandler(t testing.TB) http.Handler {
	m := &Designator{Policies: testPolicySource(t), Log: logr.Discard(), Now: func() time.Time { return testNow }}
	return m.Handler()
}

// review renders an AdmissionReview with the given request fields. Objects
// are raw JSON strings ("" leaves them out).
type review struct {
	kind        string // "MultiClusterLease" or "Lease" (or anything else)
	operation   string
	subresource string
	user        string
	podName     string
	oldObject   string
	object      string
}

func (r review) json() []byte {
	group, version, resource := "multicluster.core.cnrm.cloud.google.com", "v1alpha1", "multiclusterleases"
	if r.kind == "Lease" {
		group, version, resource = "coordination.k8s.io", "v1", "leases"
	}
	if r.kind == "Pod" {
		group, version, resource = "", "v1", "pods"
	}
	req := map[string]any{
		"uid":         "0b9f3c1e-1111-2222-3333-444455556666",
		"kind":        map[string]string{"group": group, "version": version, "kind": r.kind},
		"resource":    map[string]string{"group": group, "version": version, "resource": resource},
		"subResource": r.subresource,
		"namespace":   "cnrm-system",
		"operation":   r.operation,
		"userInfo":    map[string]any{"username": r.user},
	}
	if r.podName != "" {
		req["userInfo"].(map[string]any)["extra"] = map[string][]string{leaseobject.PodNameExtra: {r.podName}}
	}
	if r.object != "" {
		req["object"] = json.RawMessage(r.object)
	}
	if r.oldObject != "" {
		req["oldObject"] = json.RawMessage(r.oldObject)
	}
	out, err := json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
	if err != nil {
		panic(err)
	}
	return out
}

func mcl(annotations, spec string) string {
	return `{"apiVersion":"multicluster.core.cnrm.cloud.google.com/v1alpha1","kind":"MultiClusterLease",` +
		`"metadata":{"name":"kcc-leader","namespace":"cnrm-system","creationTimestamp":"2026-11-30T11:00:00Z","annotations":{` + annotations + `},` +
		`"managedFields":[{"manager":"kubectl","operation":"Update","apiVersion":"v1","time":"2026-11-30T11:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:holderIdentity":{},"f:renewTime":{}}}}]},` +
		`"spec":{` + spec + `}}`
}

const (
	managerA = "system:serviceaccount:cnrm-system:cnrm-controller-manager-a"
	managerB = "system:serviceaccount:cnrm-system:cnrm-controller-manager-b"
	designA  = `"leaseguard.io/designated-manager":"` + managerA + `"`
)

// post sends body to h and decodes the AdmissionReview it answers.
func post(t testing.TB, h http.Handler, body []byte) (int, *admissionv1.AdmissionResponse) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, manifests.ValidatePath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("response is not an AdmissionReview: %v\n%s", err, rec.Body.String())
	}
	if out.Response == nil {
		t.Fatalf("AdmissionReview without response: %s", rec.Body.String())
	}
	return rec.Code, out.Response
}
