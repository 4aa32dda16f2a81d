package admission

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	kjson "sigs.k8s.io/json"

	"github.com/leaseguard/leaseguard/webhook/policy"
)

// Every unreadable request is refused with an error naming what is wrong —
// never a panic, never an allow.
func TestBadInputIsRefusedWithAClearError(t *testing.T) {
	h := validatingHandler(t)
	spec := `"holderIdentity":"cluster-a","renewTime":"2026-11-30T11:59:59.000000Z"`
	good := mcl(designA, spec)
	cases := []struct {
		name string
		body []byte
		code int32
		want string
	}{
		{"empty body", nil, http.StatusBadRequest, "request body is empty"},
		{"not JSON", []byte("{not json"), http.StatusBadRequest, "couldn't get version/kind"},
		{"oversized body", append([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"`), bytes.Repeat([]byte("x"), 8<<20)...), http.StatusRequestEntityTooLarge, "request entity is too large"},
		{"wrong kind", review{kind: "Pod", operation: "CREATE", user: managerA, object: `{}`}.json(), http.StatusBadRequest,
			"kind v1 Pod is not guarded by leaseguard"},
		{"no oldObject on UPDATE", review{kind: "MultiClusterLease", operation: "UPDATE", user: managerA, object: good}.json(), http.StatusBadRequest,
			"request.oldObject is missing on UPDATE"},
		{"no object on CREATE", review{kind: "MultiClusterLease", operation: "CREATE", user: managerA}.json(), http.StatusBadRequest,
			"request.object is missing on CREATE"},
		{"no oldObject on DELETE", review{kind: "MultiClusterLease", operation: "DELETE", user: managerA}.json(), http.StatusBadRequest,
			"request.oldObject is missing on DELETE"},
		{"unparsable renewTime", review{kind: "MultiClusterLease", operation: "CREATE", user: managerA, object: mcl("", `"renewTime":"yesterday"`)}.json(), http.StatusBadRequest,
			`request.object: spec.renewTime: "yesterday" is not an RFC 3339 time`},
		{"negative lease duration", review{kind: "MultiClusterLease", operation: "CREATE", user: managerA, object: mcl("", `"leaseDurationSeconds":-15`)}.json(), http.StatusBadRequest,
			"request.object: spec.leaseDurationSeconds is negative (-15)"},
		{"negative retry period in the old object", review{kind: "MultiClusterLease", operation: "UPDATE", user: managerA, oldObject: mcl("", `"retryPeriodSeconds":-1`), object: good}.json(), http.StatusBadRequest,
			"request.oldObject: spec.retryPeriodSeconds is negative (-1)"},
		{"holderIdentity of the wrong type", review{kind: "MultiClusterLease", operation: "CREATE", user: managerA, object: mcl("", `"holderIdentity":42`)}.json(), http.StatusBadRequest,
			"request.object: spec.holderIdentity: want string, got JSON number"},
		{"object of another kind than the request says", review{kind: "Lease", operation: "CREATE", user: managerA, object: good}.json(), http.StatusBadRequest,
			"request.object: object is multicluster.core.cnrm.cloud.google.com/v1alpha1 MultiClusterLease, want coordination.k8s.io/v1 Lease"},
		{"object without a name", review{kind: "MultiClusterLease", operation: "CREATE", user: managerA, object: `{"apiVersion":"multicluster.core.cnrm.cloud.google.com/v1alpha1","kind":"MultiClusterLease","metadata":{}}`}.json(), http.StatusBadRequest,
			"request.object: metadata.name is missing"},
		{"no username", review{kind: "MultiClusterLease", operation: "CREATE", object: good}.json(), http.StatusBadRequest,
			"request.userInfo.username is empty"},
		{"CONNECT", review{kind: "MultiClusterLease", operation: "CONNECT", user: managerA, object: good}.json(), http.StatusBadRequest,
			`operation "CONNECT" is not guarded`},
		{"unknown subresource", review{kind: "MultiClusterLease", operation: "UPDATE", subresource: "scale", user: managerA, oldObject: good, object: good}.json(), http.StatusBadRequest,
			`subresource "scale" is not guarded (only status)`},
		{"object is not an object", review{kind: "MultiClusterLease", operation: "CREATE", user: managerA, object: `[1,2]`}.json(), http.StatusBadRequest,
			"request.object: cannot decode object"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			var body *bytes.Reader
			if tc.body != nil {
				body = bytes.NewReader(tc.body)
			} else {
				body = bytes.NewReader(nil)
			}
			req := httptest.NewRequest(http.MethodPost, ValidatePath, body)
			if tc.body == nil {
				req.Body = http.NoBody
			}
			req.Header.Set("Content-Type", "application/json")
			h.ServeHTTP(rec, req)
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
				t.Fatalf("answer is not an AdmissionReview response: %v %s", err, rec.Body.String())
			}
			resp := out.Response
			if resp.Allowed {
				t.Fatal("bad input was allowed")
			}
			if resp.Result == nil || resp.Result.Code != tc.code {
				t.Fatalf("result %+v, want code %d", resp.Result, tc.code)
			}
			if !strings.Contains(resp.Result.Message, tc.want) {
				t.Fatalf("message %q does not contain %q", resp.Result.Message, tc.want)
			}
		})
	}
}

// FuzzDecodeAndDecide feeds arbitrary bodies to the validating handler: it
// must always answer with an AdmissionReview, and may allow only what the
// decision core, given the same request, admits.
func FuzzDecodeAndDecide(f *testing.F) {
	spec := `"holderIdentity":"cluster-a","leaseDurationSeconds":15,"renewTime":"2026-11-30T11:59:59.000000Z"`
	for _, r := range []review{
		{kind: "MultiClusterLease", operation: "UPDATE", user: managerB, oldObject: mcl(designA, spec), object: mcl(designA, `"holderIdentity":"b","renewTime":"2026-11-30T12:00:00.000000Z"`)},
		{kind: "MultiClusterLease", operation: "UPDATE", subresource: "status", user: managerA, oldObject: mcl(designA, spec), object: mcl(designA, spec)},
		{kind: "MultiClusterLease", operation: "CREATE", user: managerA, object: mcl("", spec)},
		{kind: "MultiClusterLease", operation: "DELETE", user: managerB, oldObject: mcl(designA, spec)},
		{kind: "Lease", operation: "CREATE", user: managerA, object: `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"kcc-leader-a","namespace":"cnrm-system"},"spec":{"holderIdentity":"x","leaseTransitions":1,"acquireTime":"2026-11-30T11:59:59.000000Z"}}`},
	} {
		f.Add(r.json())
	}
	h := validatingHandler(f)
	src := testPolicySource(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, ValidatePath, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("answer is not an AdmissionReview response: %v %q", err, rec.Body.String())
		}
		if !out.Response.Allowed {
			return
		}
		var in admissionv1.AdmissionReview
		// Decoded as the API machinery decodes (case-sensitive field names),
		// as controller-runtime does.
		if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &in); err != nil || in.Request == nil {
			t.Fatalf("allowed a body that is not an AdmissionReview: %q", body)
		}
		preq, err := ToPolicyRequest(in.Request, testNow)
		if err != nil {
			t.Fatalf("allowed an unreadable request (%v): %q", err, body)
		}
		if d := policy.Decide(src.Policy(), preq); d.Verdict == policy.Deny {
			t.Fatalf("allowed a write the core denies (%s): %q", d.Message, body)
		}
	})
}
