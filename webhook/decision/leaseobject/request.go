package leaseobject

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	kjson "sigs.k8s.io/json"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/webhook/decision/oneline"
)

// requestOptions is what leaseguard reads of request.options.
type requestOptions struct {
	FieldManager string `json:"fieldManager"`
}

// ReadRequest derives the decision core's request from an AdmissionRequest:
// the caller's identity, read once, and both objects decoded. Anything it cannot read is an error naming what is
// wrong, e.g. `request.object: spec.renewTime: "yesterday" is not an RFC
// 3339 time such as 2026-01-02T15:04:05.000000Z`.
func ReadRequest(req *admissionv1.AdmissionRequest, now time.Time) (*Request, error) {
	res, err := resourceOf(req.Kind.Group, req.Kind.Version, req.Kind.Kind)
	if err != nil {
		return nil, err
	}
	out := &Request{
		Resource:    res,
		Subresource: req.SubResource,
		Now:         now,
		DryRun:      req.DryRun != nil && *req.DryRun,
		Caller: Caller{
			Username: req.UserInfo.Username,
			Groups:   req.UserInfo.Groups,
		},
	}
	if raw := req.Options.Raw; len(raw) > 0 {
		var o requestOptions
		if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, &o); err != nil {
			return nil, prefixed("request.options", DecodeError("", err))
		}
		out.FieldManager = o.FieldManager
	}
	if pods := req.UserInfo.Extra[PodNameExtra]; len(pods) > 0 {
		out.Caller.PodName = pods[0]
	}
	if out.Caller.Username == "" {
		return nil, fmt.Errorf("request.userInfo.username is empty")
	}
	if out.Subresource != "" && out.Subresource != StatusSubresource {
		return nil, fmt.Errorf("subresource %q is not guarded (only status)", oneline.Clip(out.Subresource))
	}
	switch op := req.Operation; op {
	case admissionv1.Create:
		out.Operation = Create
	case admissionv1.Update:
		out.Operation = Update
	case admissionv1.Delete:
		out.Operation = Delete
	default:
		return nil, fmt.Errorf("operation %q is not guarded (want CREATE, UPDATE or DELETE)", oneline.Clip(string(op)))
	}
	if out.Operation != Create {
		if out.Old, err = decodeObject(res, req.OldObject.Raw, "oldObject", out.Operation); err != nil {
			return nil, err
		}
	}
	if out.Operation != Delete {
		if out.New, err = decodeObject(res, req.Object.Raw, "object", out.Operation); err != nil {
			return nil, err
		}
		if err := CheckWritten(out.Old, out.New); err != nil {
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
func decodeObject(res Resource, raw json.RawMessage, key string, op Operation) (*Object, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, fmt.Errorf("request.%s is missing on %s", key, op)
	}
	o, err := DecodeJSON(res, raw)
	if err != nil {
		return nil, fmt.Errorf("request.%s: %w", key, err)
	}
	return o, nil
}

// fillNames checks the request's name against the object's, and gives the
// objects the request's namespace when they leave it to the URL.
func fillNames(out *Request, name, namespace string) error {
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
	for _, o := range []*Object{out.New, out.Old} {
		if o != nil && o.Namespace == "" {
			o.Namespace = namespace
		}
	}
	return nil
}

func resourceOf(group, version, kind string) (Resource, error) {
	switch {
	case group == "coordination.k8s.io" && kind == "Lease":
		return Leases, nil
	case group == mclv1alpha1.Group && kind == mclv1alpha1.Kind:
		return MultiClusterLeases, nil
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
