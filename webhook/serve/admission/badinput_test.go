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

	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
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
		{"empty body", nil, http.StatusBadRequest, "leaseguard: cannot decide: request body is empty"},
		{"not JSON", []byte("{not json"), http.StatusBadRequest, "leaseguard: cannot decide: not JSON: "},
		// A raw control character in a key or string (fastjson, leaseguard's
		// reader once, read it; found by FuzzDecodeAndDecide).
		{"a raw control character in a key", bytes.Replace(review{kind: "MultiClusterLease", operation: "CREATE", user: managerA, object: good}.json(),
			[]byte(`"userInfo":{`), []byte("\"userInfo\":{\"\x00\":1,"), 1), http.StatusBadRequest,
			`not JSON: invalid character '\x00' in string literal`},
		{"a raw newline in a string", bytes.Replace(review{kind: "MultiClusterLease", operation: "CREATE", user: managerA, object: good}.json(),
			[]byte(`"username":"system:`), []byte("\"username\":\"system\n:"), 1), http.StatusBadRequest,
			`not JSON: invalid character '\n' in string literal`},
		// Fields leaseguard does not read, of a type the API machinery's
		// decoder refuses.
		{"resource of the wrong type", bytes.Replace(review{kind: "MultiClusterLease", operation: "CREATE", user: managerA, object: good}.json(),
			[]byte(`"userInfo":{`), []byte(`"requestResource":[1],"userInfo":{`), 1), http.StatusBadRequest,
			"request.requestResource: want object, got JSON array"},
		{"requestSubResource of the wrong type", bytes.Replace(review{kind: "MultiClusterLease", operation: "CREATE", user: managerA, object: good}.json(),
			[]byte(`"userInfo":{`), []byte(`"requestSubResource":7,"userInfo":{`), 1), http.StatusBadRequest,
			"request.requestSubResource: want string, got JSON number"},
		{"userInfo.extra of the wrong type", bytes.Replace(review{kind: "MultiClusterLease", operation: "CREATE", user: managerA, object: good}.json(),
			[]byte(`"userInfo":{`), []byte(`"userInfo":{"extra":{"k":"not-a-list"},`), 1), http.StatusBadRequest,
			"request.userInfo.extra: want array of strings, got JSON string"},
		{"userInfo.uid of the wrong type", bytes.Replace(review{kind: "MultiClusterLease", operation: "CREATE", user: managerA, object: good}.json(),
			[]byte(`"userInfo":{`), []byte(`"userInfo":{"uid":7,`), 1), http.StatusBadRequest,
			"request.userInfo.uid: want string, got JSON number"},
		{"a review carrying a response", bytes.Replace(review{kind: "MultiClusterLease", operation: "CREATE", user: managerA, object: good}.json(),
			[]byte(`"request":{`), []byte(`"response":{"allowed":true},"request":{`), 1), http.StatusBadRequest,
			"leaseguard: cannot decide: AdmissionReview carries a response: the API server sends a request only"},
		// The API machinery reads the last of duplicate keys; the API
		// server never writes one, so leaseguard refuses those it reads.
		{"a duplicate key", bytes.Replace(review{kind: "MultiClusterLease", operation: "UPDATE", user: managerB, oldObject: good, object: good}.json(),
			[]byte(`"userInfo":{`), []byte(`"userInfo":{"username":"`+managerA+`",`), 1), http.StatusBadRequest,
			`leaseguard: cannot decide: not JSON the API server writes: request.userInfo.username appears more than once`},
		{"a duplicate key, one of them escaped", bytes.Replace(review{kind: "MultiClusterLease", operation: "UPDATE", user: managerB, oldObject: good, object: good}.json(),
			[]byte(`"userInfo":{`), []byte(`"userInfo":{"user\u006eame":"`+managerA+`",`), 1), http.StatusBadRequest,
			`leaseguard: cannot decide: not JSON the API server writes: request.userInfo.username appears more than once`},
		{"a duplicate key in the object", review{kind: "MultiClusterLease", operation: "UPDATE", user: managerA, oldObject: good,
			object: strings.Replace(good, `"holderIdentity":"cluster-a"`, `"holderIdentity":"cluster-a","holderIdentity":"cluster-b"`, 1)}.json(), http.StatusBadRequest,
			`leaseguard: cannot decide: request.object: not JSON the API server writes: spec.holderIdentity appears more than once`},
		{"not an AdmissionReview", []byte(`{"apiVersion":"v1","kind":"Pod"}`), http.StatusBadRequest,
			"leaseguard: cannot decide: body is v1 Pod, want admission.k8s.io/v1 AdmissionReview"},
		{"an AdmissionReview of another version", []byte(`{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u"}}`), http.StatusBadRequest,
			"body is admission.k8s.io/v1beta1 AdmissionReview, want admission.k8s.io/v1 AdmissionReview"},
		{"no request", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`), http.StatusBadRequest, "AdmissionReview has no request"},
		{"no uid", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":"CREATE"}}`), http.StatusBadRequest, "request.uid is missing"},
		{"oversized body", oversizedReview(), http.StatusRequestEntityTooLarge,
			"leaseguard: cannot decide: AdmissionReview of 32.0 MiB is larger than leaseguard reads (32.0 MiB): no lease the API server can store is that large"},
		{"username of the wrong type", []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"0b9f3c1e-1111-2222-3333-444455556666",` +
			`"kind":{"group":"coordination.k8s.io","version":"v1","kind":"Lease"},"operation":"CREATE","userInfo":{"username":7}}}`), http.StatusBadRequest,
			"request.userInfo.username: want string, got JSON number"},
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
			req := httptest.NewRequest(http.MethodPost, manifests.ValidatePath, body)
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
			if tc.code != http.StatusBadRequest || strings.Contains(string(tc.body), `"uid":"0b9f`) {
				// Where the body names a UID, the answer carries it, or the
				// API server could not match it to its request.
				if uidOf(tc.body) != "" && string(resp.UID) != uidOf(tc.body) {
					t.Errorf("answer UID %q, want %q", resp.UID, uidOf(tc.body))
				}
			}
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

// A stored object with a field leaseguard cannot read (a custom resource is
// stored as written) is decided without that field, with a warning for the
// client; a write of such a value is refused unless it leaves the stored
// value as it is.
func TestUnreadableStoredFieldsAreDecidedWithoutThem(t *testing.T) {
	h := validatingHandler(t)
	good := mcl(designA, `"holderIdentity":"cluster-a","renewTime":"2026-11-30T11:59:59.000000Z"`)
	bad := mcl(designA, `"holderIdentity":"cluster-a","renewTime":"2026-11-30T11:59:50.000000Z","retryPeriodSeconds":-1`)
	_, resp := post(t, h, review{kind: "MultiClusterLease", operation: "UPDATE", user: managerA, oldObject: bad, object: good}.json())
	if !resp.Allowed {
		t.Fatalf("the designated manager's renewal over an unreadable stored field was refused: %+v", resp.Result)
	}
	want := "leaseguard: stored multiclusterlease cnrm-system/kcc-leader has an unreadable spec.retryPeriodSeconds (is negative (-1)); judged without it, by the time the API server stored the last renewal"
	if len(resp.Warnings) != 1 || resp.Warnings[0] != want {
		t.Errorf("warnings %q, want %q", resp.Warnings, want)
	}
	// Leaving the unreadable value as it is: decided (here, a status
	// writer's finalizer write is admitted).
	_, resp = post(t, h, review{kind: "MultiClusterLease", operation: "UPDATE", user: "system:serviceaccount:multiclusterlease-system:default",
		oldObject: bad, object: strings.Replace(bad, `"annotations":{`, `"finalizers":["multiclusterlease.core.cnrm.cloud.google.com/finalizer"],"annotations":{`, 1)}.json())
	if !resp.Allowed {
		t.Errorf("a write leaving the unreadable value unchanged was refused: %+v", resp.Result)
	}
	// Writing a new unreadable value: refused, naming the field.
	_, resp = post(t, h, review{kind: "MultiClusterLease", operation: "UPDATE", user: managerA,
		oldObject: bad, object: strings.Replace(bad, `"retryPeriodSeconds":-1`, `"retryPeriodSeconds":-2`, 1)}.json())
	if resp.Allowed || resp.Result.Code != http.StatusBadRequest || resp.Result.Message != "leaseguard: cannot decide: request.object: spec.retryPeriodSeconds is negative (-2)" {
		t.Errorf("a new unreadable value: allowed=%v %+v", resp.Allowed, resp.Result)
	}
}

// Bodies built to make the reader's work or its error grow faster than the
// body are answered shortly, with a short message naming what is wrong.
// Against fastjson, leaseguard's reader once, each ran out of time or
// memory: its validator recursed without bound (3 million '[' overflowed
// the stack, a fatal error), its errors quoted the rest of the body at every
// level (4 MiB cost gigabytes), and a duplicate key's path was rebuilt at
// every level. The API machinery's decoder bounds nesting and skips what
// leaseguard does not read.
func TestHostileBodiesAreRefusedWithAShortMessage(t *testing.T) {
	h := validatingHandler(t)
	const uid = "0b9f3c1e-1111-2222-3333-444455556666"
	head := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"` + uid + `","x":`
	nestedKeys := func(depth int) []byte {
		key := `"` + strings.Repeat("\u00ad", 20000) + `"`
		return []byte(head + strings.Repeat("{"+key+":", depth) + `{"a":0,"a":0}` + strings.Repeat("}", depth) + `}}`)
	}
	for _, c := range []struct {
		name string
		body []byte
		want string
	}{
		{"4 MiB of unclosed '['", append([]byte(head), bytes.Repeat([]byte("["), 4<<20)...), "exceeded max depth"},
		// Read as the API machinery reads them: a field leaseguard does
		// not decode is skipped, however deep or odd.
		{"deep, but valid", []byte(head + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + "}}"), "kind (missing) is not guarded"},
		{"an error after 4 MiB of text", append([]byte(head+strings.Repeat("[", 295)+"t"), bytes.Repeat([]byte{0x80}, 4<<20)...), "not JSON: invalid character"},
		{"nan", append([]byte(head+`[nan,"`), bytes.Repeat([]byte("a"), 4<<20)...), "not JSON: invalid character 'a'"},
		{"a duplicate key under 290 long keys", nestedKeys(290), "kind (missing) is not guarded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, resp := post(t, h, c.body)
			if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusBadRequest {
				t.Fatalf("allowed=%v %+v", resp.Allowed, resp.Result)
			}
			if msg := resp.Result.Message; !strings.Contains(msg, c.want) || len(msg) > maxErrorText+200 {
				t.Errorf("message of %d bytes, want one containing %q: %.400s", len(msg), c.want, msg)
			}
			if resp.UID != uid {
				t.Errorf("answer UID %q", resp.UID)
			}
		})
	}
}

// oversizedReview is an AdmissionReview one byte over MaxReviewBytes, with
// its UID first as the API server writes it.
func oversizedReview() []byte {
	head := []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"0b9f3c1e-1111-2222-3333-444455556666","name":"`)
	pad := bytes.Repeat([]byte("<"), MaxReviewBytes+1-len(head)-3)
	return append(append(head, pad...), []byte(`"}}`)...)
}

func uidOf(body []byte) string {
	const key = `"uid":"`
	i := bytes.Index(body, []byte(key))
	if i < 0 || i > headBytes {
		return ""
	}
	rest := body[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

func TestScanUIDReadsOnlyTheHead(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"abc","object":{"uid":"not-this"}}}`, "abc"},
		{`{"request":{"kind":{"uid":"nested"},"uid":"late"}}`, "late"},
		{`{"response":{"uid":"wrong-place"}}`, ""},
		{`{"request":{"uid":"truncated`, ""},
		{`[1,2,{"request":{"uid":"in-an-array"}}]`, ""},
	} {
		if got := scanUID([]byte(c.body)); got != c.want {
			t.Errorf("scanUID(%s) = %q, want %q", c.body, got, c.want)
		}
	}
}

// FuzzDecodeAndDecide feeds arbitrary bodies to the validating handler: it
// must always answer with an AdmissionReview, and may allow only a body that
// the API machinery's own decoder reads as an AdmissionReview whose request,
// as that decoder reads it, the decision core admits: the check that
// leaseguard's reading (the same decoder into a partial view of the
// objects) agrees with the API server's.
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
		req := httptest.NewRequest(http.MethodPost, manifests.ValidatePath, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("answer is not an AdmissionReview response: %v %q", err, rec.Body.String())
		}
		if !out.Response.Allowed {
			return
		}
		// Decoded as the API machinery decodes (case-sensitive field names,
		// the last of duplicate keys), then read again from its canonical
		// form.
		var in admissionv1.AdmissionReview
		if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &in); err != nil || in.Request == nil ||
			in.APIVersion != reviewAPIVersion || in.Kind != reviewKind {
			t.Fatalf("allowed a body that is not an AdmissionReview: %q", body)
		}
		if string(out.Response.UID) != string(in.Request.UID) {
			t.Fatalf("answered UID %q to request %q", out.Response.UID, in.Request.UID)
		}
		canonical, err := json.Marshal(&in)
		if err != nil {
			t.Fatalf("re-encoding: %v", err)
		}
		r, err := ParseReview(canonical, testNow)
		if err != nil || r.Err != nil {
			t.Fatalf("allowed a request the API machinery reads differently (%v, %v): %q", err, r.Err, body)
		}
		if d := policy.Decide(src.Policy(), r.Request); d.Verdict == policy.Deny {
			t.Fatalf("allowed a write the core denies (%s): %q", d.Message, body)
		}
	})
}

// What the API machinery's decoder reads, leaseguard reads alike: invalid
// UTF-8 and a lone escaped surrogate are U+FFFD to both, so the write is
// decided as the API server would record it (here: not a manager).
func TestOddTextIsReadAsTheAPIMachineryReadsIt(t *testing.T) {
	h := validatingHandler(t)
	good := mcl(designA, `"holderIdentity":"cluster-a","renewTime":"2026-11-30T11:59:59.000000Z"`)
	body := review{kind: "MultiClusterLease", operation: "CREATE", user: managerA, object: good}.json()
	for name, odd := range map[string][]byte{
		"invalid UTF-8":               []byte("\"username\":\"system\xff:"),
		"an escaped UTF-16 surrogate": []byte(`"username":"\ud800system:`),
	} {
		_, resp := post(t, h, bytes.Replace(body, []byte(`"username":"system:`), odd, 1))
		if resp.Allowed || resp.Result == nil || resp.Result.Code != http.StatusForbidden ||
			!strings.Contains(resp.Result.Message, "\ufffd") || !strings.Contains(resp.Result.Message, "is not a manager of multiclusterlease") {
			t.Errorf("%s: allowed=%v %+v; want the write denied to the user the API machinery reads", name, resp.Allowed, resp.Result)
		}
	}
}
