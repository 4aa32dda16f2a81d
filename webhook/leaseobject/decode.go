// Package leaseobject turns the serialized Lease or MultiClusterLease of an
// admission request (JSON) or of a file (YAML) into the decision core's
// normalised policy.Object, rejecting what it cannot read with an error that
// names the field.
package leaseobject

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/valyala/fastjson"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/yaml"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/webhook/policy"
)

// parsers are reused across requests: decoding an object then allocates only
// the strings it keeps.
var parsers fastjson.ParserPool

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
	parser := parsers.Get()
	defer parsers.Put(parser)
	v, err := parser.ParseBytes(data)
	if err != nil {
		return nil, fmt.Errorf("cannot decode object: %w", err)
	}
	if v.Type() != fastjson.TypeObject {
		return nil, fmt.Errorf("cannot decode object: want a JSON object, got JSON %s", v.Type())
	}
	r := reader{root: v}
	apiVersion, kind := r.str("apiVersion"), r.str("kind")
	if r.err == nil && (kind != wantKind || apiVersion != wantVersion) {
		return nil, fmt.Errorf("object is %s %s, want %s %s", orMissing(apiVersion), orMissing(kind), wantVersion, wantKind)
	}
	o := &policy.Object{
		Name:      r.str("metadata", "name"),
		Namespace: r.str("metadata", "namespace"),
	}
	o.CreationTimestamp = r.time("metadata", "creationTimestamp")
	if ann := r.object("metadata", "annotations"); ann != nil {
		if d := ann.Get(policy.DesignationAnnotation); d != nil {
			o.HasDesignation = true
			o.Designated = r.strValue(d, "metadata", "annotations", policy.DesignationAnnotation)
		}
	}
	if r.object("spec") != nil {
		s := &o.Spec
		s.Holder = r.str("spec", "holderIdentity")
		s.RenewTime = r.time("spec", "renewTime")
		s.AcquireTime = r.time("spec", "acquireTime")
		s.LeaseDuration = r.seconds("spec", "leaseDurationSeconds")
		s.RenewDeadline = r.seconds("spec", "renewDeadlineSeconds")
		s.RetryPeriod = r.seconds("spec", "retryPeriodSeconds")
		s.Transitions = r.count("spec", "leaseTransitions")
		s.Strategy = r.str("spec", "strategy")
		s.PreferredHolder = r.str("spec", "preferredHolder")
	}
	if r.err != nil {
		return nil, r.err
	}
	if o.Name == "" {
		return nil, fmt.Errorf("metadata.name is missing")
	}
	return o, nil
}

// reader pulls typed fields out of a parsed object and keeps the first
// error, named by the field's path.
type reader struct {
	root *fastjson.Value
	err  error
}

// get returns the value at path, or nil when it is absent or null.
func (r *reader) get(path ...string) *fastjson.Value {
	v := r.root.Get(path...)
	if v == nil || v.Type() == fastjson.TypeNull {
		return nil
	}
	return v
}

// fail records "<field>: <problem>" unless an error is already kept.
func (r *reader) fail(field string, format string, args ...any) {
	r.failf("%s: "+format, append([]any{field}, args...)...)
}

func (r *reader) failf(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *reader) str(path ...string) string {
	v := r.get(path...)
	if v == nil {
		return ""
	}
	return r.strValue(v, path...)
}

// strValue reads a string; path names the field only if it is not one (the
// path is joined on failure only, so reading allocates just the string).
func (r *reader) strValue(v *fastjson.Value, path ...string) string {
	b, err := v.StringBytes()
	if err != nil {
		r.fail(strings.Join(path, "."), "want string, got JSON %s", v.Type())
		return ""
	}
	return string(b)
}

func (r *reader) object(path ...string) *fastjson.Object {
	v := r.get(path...)
	if v == nil {
		return nil
	}
	o, err := v.Object()
	if err != nil {
		r.fail(strings.Join(path, "."), "want object, got JSON %s", v.Type())
		return nil
	}
	return o
}

// time parses an RFC 3339 time (MicroTime writes microseconds; any fraction
// is accepted, as the API server does).
func (r *reader) time(path ...string) time.Time {
	s := r.str(path...)
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		r.fail(strings.Join(path, "."), "%q is not an RFC 3339 time such as 2026-01-02T15:04:05.000000Z", s)
	}
	return t
}

// seconds reads a non-negative int32 count of seconds.
func (r *reader) seconds(path ...string) time.Duration {
	return time.Duration(r.count(path...)) * time.Second
}

// count reads a non-negative int32.
func (r *reader) count(path ...string) int32 {
	v := r.get(path...)
	if v == nil {
		return 0
	}
	if v.Type() != fastjson.TypeNumber {
		r.fail(strings.Join(path, "."), "want integer, got JSON %s", v.Type())
		return 0
	}
	n, err := v.Int64()
	switch {
	case err != nil:
		r.fail(strings.Join(path, "."), "want integer, got %s", v)
	case n < 0:
		r.failf("%s is negative (%d)", strings.Join(path, "."), n)
	case n > math.MaxInt32:
		r.failf("%s is out of range (%d)", strings.Join(path, "."), n)
	default:
		return int32(n)
	}
	return 0
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
