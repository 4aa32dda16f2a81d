// Package admission is leaseguard's HTTP/admission plumbing: it reads
// AdmissionReviews into the decision core's terms and writes its decisions
// back as AdmissionResponses. It holds no decision logic.
//
// A review is decoded as the API machinery decodes it: sigs.k8s.io/json
// (case-sensitive field names, the last of duplicate keys, duplicates
// reported) into admission/v1's own types, and the objects it carries by
// webhook/decision/leaseobject into a partial typed view.
package admission

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	kjson "sigs.k8s.io/json"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
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
	Request *policy.Request
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
		r.Request, r.Err = toPolicyRequest(d.request, now)
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

// requestOptions is what leaseguard reads of request.options.
type requestOptions struct {
	FieldManager string `json:"fieldManager"`
}

// toPolicyRequest derives the decision core's request from an
// AdmissionRequest. Anything it cannot read is an error naming what is
// wrong, e.g. `request.object: spec.renewTime: "yesterday" is not an RFC
// 3339 time such as 2026-01-02T15:04:05.000000Z`.
func toPolicyRequest(req *admissionv1.AdmissionRequest, now time.Time) (*policy.Request, error) {
	res, err := resourceOf(req.Kind.Group, req.Kind.Version, req.Kind.Kind)
	if err != nil {
		return nil, err
	}
	out := &policy.Request{
		Resource:    res,
		Subresource: req.SubResource,
		Now:         now,
		DryRun:      req.DryRun != nil && *req.DryRun,
		Caller: policy.Caller{
			Username: req.UserInfo.Username,
			Groups:   req.UserInfo.Groups,
		},
	}
	if raw := req.Options.Raw; len(raw) > 0 {
		var o requestOptions
		if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &o); err != nil {
			return nil, prefixed("request.options", leaseobject.DecodeError("", err))
		}
		out.FieldManager = o.FieldManager
	}
	if pods := req.UserInfo.Extra[policy.PodNameExtra]; len(pods) > 0 {
		out.Caller.PodName = pods[0]
	}
	if out.Caller.Username == "" {
		return nil, fmt.Errorf("request.userInfo.username is empty")
	}
	if out.Subresource != "" && out.Subresource != policy.StatusSubresource {
		return nil, fmt.Errorf("subresource %q is not guarded (only status)", oneline.Clip(out.Subresource))
	}
	switch op := req.Operation; op {
	case admissionv1.Create:
		out.Operation = policy.Create
	case admissionv1.Update:
		out.Operation = policy.Update
	case admissionv1.Delete:
		out.Operation = policy.Delete
	default:
		return nil, fmt.Errorf("operation %q is not guarded (want CREATE, UPDATE or DELETE)", oneline.Clip(string(op)))
	}
	if out.Operation != policy.Create {
		if out.Old, err = decodeObject(res, req.OldObject.Raw, "oldObject", out.Operation); err != nil {
			return nil, err
		}
	}
	if out.Operation != policy.Delete {
		if out.New, err = decodeObject(res, req.Object.Raw, "object", out.Operation); err != nil {
			return nil, err
		}
		if err := leaseobject.CheckWritten(out.Old, out.New); err != nil {
			return nil, fmt.Errorf("request.object: %w", err)
		}
	}
	return out, fillNames(out, req.Name, req.Namespace)
}

// prefixed puts a field's path before an error of a value decoded on its
// own ("request.options: fieldManager: want string, ...").
func prefixed(path string, err error) error {
	return errors.New(path + "." + strings.TrimPrefix(err.Error(), "cannot decode object: "))
}

// decodeObject reads request.object or request.oldObject, which the
// operation requires.
func decodeObject(res policy.Resource, raw json.RawMessage, key string, op policy.Operation) (*policy.Object, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, fmt.Errorf("request.%s is missing on %s", key, op)
	}
	o, err := leaseobject.DecodeJSON(res, raw)
	if err != nil {
		return nil, fmt.Errorf("request.%s: %w", key, err)
	}
	return o, nil
}

// fillNames checks the request's name against the object's, and gives the
// objects the request's namespace when they leave it to the URL.
func fillNames(out *policy.Request, name, namespace string) error {
	obj := out.New
	if obj == nil {
		obj = out.Old
	}
	if name != "" && obj.Name != "" && obj.Name != name {
		return fmt.Errorf("request.name %q does not match the object's name %q", oneline.Clip(name), oneline.Clip(obj.Name))
	}
	if obj.Name == "" {
		// Validation sees the name the API server generated; the mutating
		// webhooks see only generateName.
		obj.Name = name
	}
	for _, o := range []*policy.Object{out.New, out.Old} {
		if o != nil && o.Namespace == "" {
			o.Namespace = namespace
		}
	}
	return nil
}

func resourceOf(group, version, kind string) (policy.Resource, error) {
	switch {
	case group == "coordination.k8s.io" && kind == "Lease":
		return policy.Leases, nil
	case group == mclv1alpha1.Group && kind == mclv1alpha1.Kind:
		return policy.MultiClusterLeases, nil
	}
	group, version, kind = oneline.Clip(group), oneline.Clip(version), oneline.Clip(kind)
	var k string
	switch {
	case kind == "":
		k = "(missing)"
	case group == "":
		k = version + " " + kind
	default:
		k = group + "/" + version + " " + kind
	}
	return "", fmt.Errorf("kind %s is not guarded by leaseguard (want coordination.k8s.io Lease or %s %s)", k, mclv1alpha1.Group, mclv1alpha1.Kind)
}

func orMissing(s string) string {
	if s == "" {
		return "(missing)"
	}
	return s
}
