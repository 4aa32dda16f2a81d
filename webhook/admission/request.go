// Package admission is leaseguard's HTTP/admission plumbing: it reads
// AdmissionReviews into the decision core's terms and writes its decisions
// back as AdmissionResponses. It holds no decision logic.
//
// It reads the AdmissionReview itself, field by field with the same fast
// JSON reader as the objects (webhook/leaseobject), instead of decoding the
// whole review into Go structs: that decoding was most of what a request
// cost inside leaseguard (docs/performance.md).
package admission

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/valyala/fastjson"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/webhook/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/policy"
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

// ParseReview reads an AdmissionReview body. A body that is not an
// AdmissionReview at all is an error; a review that is, but whose request
// cannot be decided, comes back with Err set and the UID to answer to.
func ParseReview(body []byte, now time.Time) (*Review, error) {
	// Checked first with encoding/json's scanner, as the API machinery
	// reads: linear, allocation-free, and strict where fastjson is lenient
	// (raw control characters in strings and keys, nan). fastjson's own
	// errors quote the rest of the body at every level of nesting (a few
	// MiB of body cost gigabytes), and its validator recurses without a
	// bound.
	if !json.Valid(body) {
		return nil, notJSON(body)
	}
	if err := checkItems(body); err != nil {
		return nil, err
	}
	return parseValid(body, now)
}

// parseValid is ParseReview for a body already checked as JSON and counted.
func parseValid(body []byte, now time.Time) (*Review, error) {
	p := parsers.Get()
	defer func() {
		// A parser keeps the parse tree's room for the next body: only
		// one sized for the reviews of lease writes goes back.
		if len(body) <= pooledParserBytes {
			parsers.Put(p)
		}
	}()
	root, err := p.ParseBytes(body)
	if err != nil {
		// Nesting deeper than fastjson.MaxDepth (300).
		return nil, fmt.Errorf("not JSON leaseguard reads: %w", readerError(err))
	}
	// The API machinery's decoder reads some bodies otherwise than fastjson
	// (invalid UTF-8, escaped UTF-16 surrogates, duplicate keys): such
	// bodies are refused, so that leaseguard reads every review as the API
	// machinery does. The API server, which writes reviews with
	// encoding/json from its own structures, never sends one.
	if !utf8.Valid(body) {
		return nil, fmt.Errorf("not JSON: invalid UTF-8")
	}
	if err := noSurrogateEscapes(body); err != nil {
		return nil, err
	}
	if root.Type() != fastjson.TypeObject {
		return nil, fmt.Errorf("want a JSON object, got JSON %s", root.Type())
	}
	if err := noDuplicateKeys(root); err != nil {
		return nil, err
	}
	apiVersion, kind := string(root.GetStringBytes("apiVersion")), string(root.GetStringBytes("kind"))
	if apiVersion != reviewAPIVersion || kind != reviewKind {
		return nil, fmt.Errorf("body is %s %s, want %s %s", orMissing(policy.Clip(apiVersion)), orMissing(policy.Clip(kind)), reviewAPIVersion, reviewKind)
	}
	req := root.Get("request")
	if req == nil || req.Type() != fastjson.TypeObject {
		return nil, fmt.Errorf("AdmissionReview has no request")
	}
	if resp := root.Get("response"); resp != nil && resp.Type() != fastjson.TypeNull {
		return nil, fmt.Errorf("AdmissionReview carries a response: the API server sends a request only")
	}
	uid := req.Get("uid")
	if uid == nil || uid.Type() != fastjson.TypeString || len(uid.GetStringBytes()) == 0 {
		return nil, fmt.Errorf("request.uid is missing")
	}
	if n := len(uid.GetStringBytes()); n > maxUIDBytes {
		return nil, fmt.Errorf("request.uid is %d bytes long: the API server sends a UUID", n)
	}
	r := &Review{UID: string(uid.GetStringBytes())}
	if len(body) > MaxObjectItems { // else it cannot hold that many
		if obj := req.Get("object"); obj != nil {
			if n := valueItems(obj); n > MaxObjectItems {
				r.Err = &objectTooLarge{items: n}
				return r, nil
			}
		}
	}
	r.Request, r.Err = toPolicyRequest(req, now)
	return r, nil
}

var parsers fastjson.ParserPool

// pooledParserBytes is the largest body whose parser goes back to the pool.
const pooledParserBytes = 64 << 10

// maxUIDBytes bounds request.uid, which every answer echoes and every log
// line names: the API server sends a 36-byte UUID.
const maxUIDBytes = 128

// toPolicyRequest derives the decision core's request from an
// AdmissionRequest. Anything it cannot read is an error naming what is
// wrong, e.g. `request.object: spec.renewTime: "yesterday" is not an RFC
// 3339 time such as 2026-01-02T15:04:05.000000Z`.
func toPolicyRequest(req *fastjson.Value, now time.Time) (*policy.Request, error) {
	f := fields{v: req}
	res, err := resourceOf(f.str("kind", "group"), f.str("kind", "version"), f.str("kind", "kind"))
	if err != nil {
		return nil, err
	}
	out := &policy.Request{
		Resource:     res,
		Subresource:  f.str("subResource"),
		Now:          now,
		DryRun:       f.bool("dryRun"),
		FieldManager: f.str("options", "fieldManager"),
		Caller: policy.Caller{
			Username: f.str("userInfo", "username"),
			Groups:   f.strings("userInfo", "groups"),
		},
	}
	if pods := f.strings("userInfo", "extra", policy.PodNameExtra); len(pods) > 0 {
		out.Caller.PodName = pods[0]
	}
	f.checkUnreadFields()
	if f.err != nil {
		return nil, f.err
	}
	if out.Caller.Username == "" {
		return nil, fmt.Errorf("request.userInfo.username is empty")
	}
	if out.Subresource != "" && out.Subresource != policy.StatusSubresource {
		return nil, fmt.Errorf("subresource %q is not guarded (only status)", policy.Clip(out.Subresource))
	}
	switch op := f.str("operation"); op {
	case "CREATE":
		out.Operation = policy.Create
	case "UPDATE":
		out.Operation = policy.Update
	case "DELETE":
		out.Operation = policy.Delete
	default:
		return nil, fmt.Errorf("operation %q is not guarded (want CREATE, UPDATE or DELETE)", policy.Clip(op))
	}
	if out.Operation != policy.Create {
		if out.Old, err = decodeObject(res, req, "oldObject", out.Operation); err != nil {
			return nil, err
		}
	}
	if out.Operation != policy.Delete {
		if out.New, err = decodeObject(res, req, "object", out.Operation); err != nil {
			return nil, err
		}
		if err := leaseobject.CheckWritten(out.Old, out.New); err != nil {
			return nil, fmt.Errorf("request.object: %w", err)
		}
	}
	return out, fillNames(out, f.str("name"), f.str("namespace"))
}

// decodeObject reads request.object or request.oldObject, which the
// operation requires.
func decodeObject(res policy.Resource, req *fastjson.Value, key string, op policy.Operation) (*policy.Object, error) {
	v := req.Get(key)
	if v == nil || v.Type() == fastjson.TypeNull {
		return nil, fmt.Errorf("request.%s is missing on %s", key, op)
	}
	o, err := leaseobject.DecodeValue(res, v)
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
		return fmt.Errorf("request.name %q does not match the object's name %q", policy.Clip(name), policy.Clip(obj.Name))
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
	group, version, kind = policy.Clip(group), policy.Clip(version), policy.Clip(kind)
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

// fields reads typed request fields and keeps the first type error, named by
// the field's path under request.
type fields struct {
	v   *fastjson.Value
	err error
}

func (f *fields) get(path ...string) *fastjson.Value {
	v := f.v.Get(path...)
	if v == nil || v.Type() == fastjson.TypeNull {
		return nil
	}
	return v
}

func (f *fields) fail(path []string, want string, v *fastjson.Value) {
	if f.err == nil {
		f.err = fmt.Errorf("request.%s: want %s, got JSON %s", joinPath(path), want, v.Type())
	}
}

func (f *fields) str(path ...string) string {
	v := f.get(path...)
	if v == nil {
		return ""
	}
	b, err := v.StringBytes()
	if err != nil {
		f.fail(path, "string", v)
		return ""
	}
	return string(b)
}

func (f *fields) bool(path ...string) bool {
	v := f.get(path...)
	if v == nil {
		return false
	}
	b, err := v.Bool()
	if err != nil {
		f.fail(path, "boolean", v)
	}
	return b
}

func (f *fields) strings(path ...string) []string {
	v := f.get(path...)
	if v == nil {
		return nil
	}
	items, err := v.Array()
	if err != nil {
		f.fail(path, "array of strings", v)
		return nil
	}
	out := make([]string, 0, len(items))
	for _, item := range items {
		b, err := item.StringBytes()
		if err != nil {
			f.fail(path, "array of strings", v)
			return nil
		}
		out = append(out, string(b))
	}
	return out
}

// objectOf checks that the field at path, when set, is an object whose
// values each are null or pass item.
func (f *fields) objectOf(want string, item func(*fastjson.Value) bool, path ...string) {
	v := f.get(path...)
	if v == nil {
		return
	}
	o, err := v.Object()
	ok := err == nil
	if ok {
		o.Visit(func(_ []byte, x *fastjson.Value) { ok = ok && (x.Type() == fastjson.TypeNull || item(x)) })
	}
	if !ok {
		f.fail(path, want, v)
	}
}

func isString(v *fastjson.Value) bool { return v.Type() == fastjson.TypeString }

func isStrings(v *fastjson.Value) bool {
	items, err := v.Array()
	if err != nil {
		return false
	}
	for _, item := range items {
		if item.Type() != fastjson.TypeString {
			return false
		}
	}
	return true
}

// checkUnreadFields checks the type of the request's fields that leaseguard
// does not decide on: the API machinery's decoder refuses a review where
// one has another type, so leaseguard refuses it too (the API server never
// sends one).
func (f *fields) checkUnreadFields() {
	for _, gv := range []string{"resource", "requestKind", "requestResource"} {
		f.objectOf("object of strings", isString, gv)
	}
	f.str("requestSubResource")
	f.str("userInfo", "uid")
	if v := f.get("userInfo"); v != nil && v.Type() != fastjson.TypeObject {
		f.fail([]string{"userInfo"}, "object", v)
	}
	f.objectOf("object of arrays of strings", isStrings, "userInfo", "extra")
}

func joinPath(path []string) string {
	s := ""
	for i, p := range path {
		if i > 0 {
			s += "."
		}
		s += p
	}
	return s
}
