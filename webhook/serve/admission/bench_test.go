package admission

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

// noopHandler admits everything without reading the objects: the baseline
// cost of controller-runtime's AdmissionReview plumbing on the same input.
type noopHandler struct{}

func (noopHandler) Handle(context.Context, cradmission.Request) cradmission.Response {
	return cradmission.Allowed("")
}

// renewalReview is the hot path: the designated manager renewing the shared
// MultiClusterLease, with managedFields as the API server sends them.
func renewalReview() []byte {
	at := func(ts string) string {
		return mcl(designA, `"holderIdentity":"cluster-a","leaseDurationSeconds":15,"retryPeriodSeconds":15,"renewTime":"`+ts+`"`)
	}
	return review{kind: "MultiClusterLease", operation: "UPDATE", user: managerA,
		oldObject: at("2026-11-30T11:59:50.000000Z"), object: at("2026-11-30T11:59:58.000000Z")}.json()
}

func benchmarkHandler(b *testing.B, h http.Handler, body []byte) {
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, manifests.ValidatePath, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("HTTP %d", rec.Code)
		}
	}
}

// BenchmarkHandler compares the full validating handler (AdmissionReview
// JSON in, decision, response out) with the no-op handler on the same body.
func BenchmarkHandler(b *testing.B) {
	body := renewalReview()
	b.Run("handler=noop", func(b *testing.B) {
		benchmarkHandler(b, &cradmission.Webhook{Handler: noopHandler{}}, body)
	})
	b.Run("handler=leaseguard", func(b *testing.B) {
		benchmarkHandler(b, validatingHandler(b), body)
	})
}

// BenchmarkParseReview isolates reading the AdmissionReview and its two
// objects.
func BenchmarkParseReview(b *testing.B) {
	body := renewalReview()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if r, err := ParseReview(body, testNow); err != nil || r.Err != nil {
			b.Fatal(err, r.Err)
		}
	}
}
