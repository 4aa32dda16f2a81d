// Package admission is leaseguard's HTTP/admission plumbing: it reads
// AdmissionReviews into the decision core's terms and writes its decisions
// back as AdmissionResponses. It holds no decision logic.
//
// A review is decoded as the API machinery decodes it: sigs.k8s.io/json
// (case-sensitive field names, the last of duplicate keys, duplicates
// reported) into admission/v1's own types; the request it carries is read
// into the decision core's terms by webhook/decision/leaseobject
// (ReadRequest).
package admission

import (
	"fmt"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	kjson "sigs.k8s.io/json"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/oneline"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
)

// PolicySource hands out the policy in force. Implementations swap it whole
// on reload, so a request sees one consistent policy.
type PolicySource interface {
	Policy() *policy.Policy
}

// StaticPolicy is a PolicySource that never changes.
type StaticPolicy struct{ P *policy.Policy }

// Policy returns the fixed policy.
func (s StaticPolicy) Policy() *policy.Policy { return s.P }

// The AdmissionReview version the webhooks are registered for.
const (
	reviewAPIVersion = "admission.k8s.io/v1"
	reviewKind       = "AdmissionReview"
)

// Review is what leaseguard reads of an AdmissionReview request.
type Review struct {
	UID string
	// Request is the decision core's view; nil when Err is set.
	Request *leaseobject.Request
	// Err says what could not be read; the review is then refused.
	Err error
}

// maxUIDBytes bounds request.uid, which every answer echoes and every log
// line names: the API server sends a 36-byte UUID.
const maxUIDBytes = 128

// maxErrorText bounds the part of a refusal's message that quotes the body.
const maxErrorText = 512

// ParseReview reads an AdmissionReview body. A body that is not an
// AdmissionReview at all is an error; a review that is, but whose request
// cannot be decided, comes back with Err set and the UID to answer to.
func ParseReview(body []byte, now time.Time) (*Review, error) {
	d, err := decodeReview(body)
	if err != nil {
		return nil, err
	}
	r := &Review{UID: string(d.request.UID), Err: d.err}
	if r.Err == nil {
		r.Request, r.Err = leaseobject.ReadRequest(d.request, now)
	}
	return r, nil
}

// decodedReview is an AdmissionReview's request as the wire brought it,
// and what the strict decoder found wrong with the review's JSON.
type decodedReview struct {
	request *admissionv1.AdmissionRequest
	err     error
}

// decodeReview reads an AdmissionReview body as the API machinery does. A
// body that is not an AdmissionReview at all, or carries no request to
// answer, is an error; a review whose JSON breaks a strict rule (a
// duplicate key, a value of the wrong type) comes back with err set and
// the request's UID.
func decodeReview(body []byte) (*decodedReview, error) {
	var review admissionv1.AdmissionReview
	strict, err := kjson.UnmarshalStrict(body, &review, kjson.DisallowDuplicateFields)
	if ok, _ := kjson.SyntaxErrorOffset(err); ok {
		return nil, leaseobject.DecodeError("", err)
	}
	if review.APIVersion != reviewAPIVersion || review.Kind != reviewKind {
		if err != nil && review.APIVersion == "" && review.Kind == "" {
			return nil, leaseobject.DecodeError("", err)
		}
		return nil, fmt.Errorf("body is %s %s, want %s %s", orMissing(oneline.Clip(review.APIVersion)), orMissing(oneline.Clip(review.Kind)), reviewAPIVersion, reviewKind)
	}
	req := review.Request
	if req == nil {
		if err != nil {
			return nil, leaseobject.DecodeError("", err)
		}
		return nil, fmt.Errorf("AdmissionReview has no request")
	}
	if review.Response != nil {
		return nil, fmt.Errorf("AdmissionReview carries a response: the API server sends a request only")
	}
	if req.UID == "" {
		return nil, fmt.Errorf("request.uid is missing")
	}
	if n := len(req.UID); n > maxUIDBytes {
		return nil, fmt.Errorf("request.uid is %d bytes long: the API server sends a UUID", n)
	}
	d := &decodedReview{request: req}
	switch {
	case err != nil:
		d.err = reviewError(err)
	case len(strict) > 0:
		d.err = reviewError(strict[0])
	}
	return d, nil
}

// reviewError names a field of the review the decoder could not read, by
// its path ("request.userInfo.username: want string, got JSON number").
func reviewError(err error) error {
	return leaseobject.DecodeError("", err)
}

func orMissing(s string) string {
	if s == "" {
		return "(missing)"
	}
	return s
}
