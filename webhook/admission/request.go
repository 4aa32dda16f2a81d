// Package admission is leaseguard's HTTP/admission plumbing: it reads
// AdmissionRequests into the decision core's terms and writes its decisions
// back as AdmissionResponses. It holds no decision logic.
package admission

import (
	"fmt"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	coordinationv1 "k8s.io/api/coordination/v1"

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

// ToPolicyRequest derives the decision core's request from an admission
// request. Anything it cannot read is an error naming what is wrong.
func ToPolicyRequest(req *admissionv1.AdmissionRequest, now time.Time) (*policy.Request, error) {
	if req == nil {
		return nil, fmt.Errorf("AdmissionReview has no request")
	}
	res, err := resourceOf(req)
	if err != nil {
		return nil, err
	}
	out := &policy.Request{
		Resource:    res,
		Subresource: req.SubResource,
		Now:         now,
		Caller: policy.Caller{
			Username: req.UserInfo.Username,
			Groups:   req.UserInfo.Groups,
		},
	}
	if pods := req.UserInfo.Extra[policy.PodNameExtra]; len(pods) > 0 {
		out.Caller.PodName = pods[0]
	}
	if out.Caller.Username == "" {
		return nil, fmt.Errorf("request.userInfo.username is empty")
	}
	if req.SubResource != "" && req.SubResource != policy.StatusSubresource {
		return nil, fmt.Errorf("subresource %q is not guarded (only status)", req.SubResource)
	}

	switch req.Operation {
	case admissionv1.Create:
		out.Operation = policy.Create
	case admissionv1.Update:
		out.Operation = policy.Update
	case admissionv1.Delete:
		out.Operation = policy.Delete
	default:
		return nil, fmt.Errorf("operation %q is not guarded (want CREATE, UPDATE or DELETE)", req.Operation)
	}

	if out.Operation != policy.Delete {
		if len(req.Object.Raw) == 0 {
			return nil, fmt.Errorf("request.object is missing on %s", req.Operation)
		}
		if out.New, err = leaseobject.Decode(res, req.Object.Raw); err != nil {
			return nil, fmt.Errorf("request.object: %w", err)
		}
	}
	if out.Operation != policy.Create {
		if len(req.OldObject.Raw) == 0 {
			return nil, fmt.Errorf("request.oldObject is missing on %s", req.Operation)
		}
		if out.Old, err = leaseobject.Decode(res, req.OldObject.Raw); err != nil {
			return nil, fmt.Errorf("request.oldObject: %w", err)
		}
	}
	obj := out.New
	if obj == nil {
		obj = out.Old
	}
	if req.Name != "" && obj.Name != req.Name {
		return nil, fmt.Errorf("request.name %q does not match the object's name %q", req.Name, obj.Name)
	}
	if obj.Namespace == "" {
		// Objects in a create request may leave their namespace to the URL.
		obj.Namespace = req.Namespace
	}
	if out.Old != nil && out.Old.Namespace == "" {
		out.Old.Namespace = req.Namespace
	}
	return out, nil
}

func resourceOf(req *admissionv1.AdmissionRequest) (policy.Resource, error) {
	switch {
	case req.Kind.Group == coordinationv1.GroupName && req.Kind.Kind == "Lease":
		return policy.Leases, nil
	case req.Kind.Group == mclv1alpha1.Group && req.Kind.Kind == mclv1alpha1.Kind:
		return policy.MultiClusterLeases, nil
	}
	return "", fmt.Errorf("kind %s is not guarded by leaseguard (want coordination.k8s.io Lease or %s %s)",
		kindString(req), mclv1alpha1.Group, mclv1alpha1.Kind)
}

func kindString(req *admissionv1.AdmissionRequest) string {
	if req.Kind.Kind == "" {
		return "(missing)"
	}
	if req.Kind.Group == "" {
		return req.Kind.Version + " " + req.Kind.Kind
	}
	return req.Kind.Group + "/" + req.Kind.Version + " " + req.Kind.Kind
}
