// Package leaseobject turns the serialized Lease or MultiClusterLease of an
// admission request (JSON) or of a file (YAML) into the decision core's
// normalised policy.Object, rejecting what it cannot read with an error that
// names the field.
package leaseobject

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/webhook/policy"
)

// wireObject holds only the fields leaseguard reads, so decoding skips the
// rest (managedFields, status) without building it.
type wireObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name              string            `json:"name"`
		Namespace         string            `json:"namespace"`
		CreationTimestamp metav1.Time       `json:"creationTimestamp"`
		Annotations       map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		HolderIdentity       *string `json:"holderIdentity"`
		RenewTime            *string `json:"renewTime"`
		AcquireTime          *string `json:"acquireTime"`
		LeaseDurationSeconds *int32  `json:"leaseDurationSeconds"`
		RenewDeadlineSeconds *int32  `json:"renewDeadlineSeconds"`
		RetryPeriodSeconds   *int32  `json:"retryPeriodSeconds"`
		LeaseTransitions     *int32  `json:"leaseTransitions"`
		Strategy             *string `json:"strategy"`
		PreferredHolder      *string `json:"preferredHolder"`
	} `json:"spec"`
}

// Kind returns the apiVersion and kind that a resource's objects carry.
func Kind(res policy.Resource) (apiVersion, kind string, ok bool) {
	switch res {
	case policy.Leases:
		return coordinationv1.SchemeGroupVersion.String(), "Lease", true
	case policy.MultiClusterLeases:
		return mclv1alpha1.Group + "/" + mclv1alpha1.Version, mclv1alpha1.Kind, true
	}
	return "", "", false
}

// Decode reads one object of the given resource from JSON or YAML.
func Decode(res policy.Resource, data []byte) (*policy.Object, error) {
	wantVersion, wantKind, ok := Kind(res)
	if !ok {
		return nil, fmt.Errorf("resource %q is not guarded by leaseguard (want leases or multiclusterleases)", res)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, fmt.Errorf("empty object")
	}
	if data[0] != '{' {
		converted, err := yaml.YAMLToJSON(data)
		if err != nil {
			return nil, fmt.Errorf("not JSON or YAML: %w", err)
		}
		data = converted
	}
	var w wireObject
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, describeJSONError(err)
	}
	if w.Kind != wantKind || w.APIVersion != wantVersion {
		return nil, fmt.Errorf("object is %s %s, want %s %s", orMissing(w.APIVersion), orMissing(w.Kind), wantVersion, wantKind)
	}
	if w.Metadata.Name == "" {
		return nil, fmt.Errorf("metadata.name is missing")
	}

	o := &policy.Object{
		Namespace:         w.Metadata.Namespace,
		Name:              w.Metadata.Name,
		CreationTimestamp: w.Metadata.CreationTimestamp.Time,
	}
	o.Designated, o.HasDesignation = w.Metadata.Annotations[policy.DesignationAnnotation]
	s := &w.Spec
	if s.HolderIdentity != nil {
		o.Spec.Holder = *s.HolderIdentity
	}
	var err error
	if o.Spec.RenewTime, err = microTime("spec.renewTime", s.RenewTime); err != nil {
		return nil, err
	}
	if o.Spec.AcquireTime, err = microTime("spec.acquireTime", s.AcquireTime); err != nil {
		return nil, err
	}
	if o.Spec.LeaseDuration, err = seconds("spec.leaseDurationSeconds", s.LeaseDurationSeconds); err != nil {
		return nil, err
	}
	if o.Spec.RenewDeadline, err = seconds("spec.renewDeadlineSeconds", s.RenewDeadlineSeconds); err != nil {
		return nil, err
	}
	if o.Spec.RetryPeriod, err = seconds("spec.retryPeriodSeconds", s.RetryPeriodSeconds); err != nil {
		return nil, err
	}
	if s.LeaseTransitions != nil {
		if *s.LeaseTransitions < 0 {
			return nil, fmt.Errorf("spec.leaseTransitions is negative (%d)", *s.LeaseTransitions)
		}
		o.Spec.Transitions = *s.LeaseTransitions
	}
	if s.Strategy != nil {
		o.Spec.Strategy = *s.Strategy
	}
	if s.PreferredHolder != nil {
		o.Spec.PreferredHolder = *s.PreferredHolder
	}
	return o, nil
}

// microTime parses an RFC 3339 time (MicroTime writes microseconds; any
// fraction is accepted, as the API server does).
func microTime(field string, v *string) (time.Time, error) {
	if v == nil || *v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, *v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %q is not an RFC 3339 time such as 2026-01-02T15:04:05.000000Z", field, *v)
	}
	return t, nil
}

func seconds(field string, v *int32) (time.Duration, error) {
	if v == nil {
		return 0, nil
	}
	if *v < 0 {
		return 0, fmt.Errorf("%s is negative (%d)", field, *v)
	}
	return time.Duration(*v) * time.Second, nil
}

// describeJSONError names the field a decoding error is about.
func describeJSONError(err error) error {
	if te, ok := err.(*json.UnmarshalTypeError); ok && te.Field != "" {
		return fmt.Errorf("%s: want %s, got JSON %s", te.Field, te.Type, te.Value)
	}
	return fmt.Errorf("cannot decode object: %w", err)
}

func orMissing(s string) string {
	if s == "" {
		return "(missing)"
	}
	return s
}

// DecodeAny reads a Lease or a MultiClusterLease, telling which from its
// apiVersion and kind.
func DecodeAny(data []byte) (policy.Resource, *policy.Object, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return "", nil, fmt.Errorf("empty object")
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(trimmed, &head); err != nil {
		return "", nil, fmt.Errorf("not JSON or YAML: %w", err)
	}
	for _, res := range []policy.Resource{policy.Leases, policy.MultiClusterLeases} {
		if v, k, _ := Kind(res); head.APIVersion == v && head.Kind == k {
			o, err := Decode(res, trimmed)
			return res, o, err
		}
	}
	return "", nil, fmt.Errorf("object is %s %s, want coordination.k8s.io/v1 Lease or %s/%s %s",
		orMissing(head.APIVersion), orMissing(head.Kind), mclv1alpha1.Group, mclv1alpha1.Version, mclv1alpha1.Kind)
}
