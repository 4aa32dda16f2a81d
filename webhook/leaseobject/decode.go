// Package leaseobject turns the serialized Lease or MultiClusterLease of an
// admission request (JSON) or of a file (YAML) into the decision core's
// normalised policy.Object.
//
// What it cannot read is handled in two ways. The object's identity
// (apiVersion, kind, metadata) is validated by the API server for every
// kind, so a problem there is an error naming the field. A spec field is
// read as leniently as the API server accepts it (a MultiClusterLease is a
// custom resource, stored as written, whatever its schema let through): one
// that still cannot be read is recorded in Object.Unreadable with its JSON
// text, so that a write which leaves it unchanged can be decided, and the
// caller (ToPolicyRequest, `leaseguard check`) decides whether a new value
// of that kind is an error.
package leaseobject

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
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

// Decode reads one object of the given resource from JSON or YAML. A spec
// field it cannot read is an error (see Strict).
func Decode(res policy.Resource, data []byte) (*policy.Object, error) {
	o, err := DecodeLenient(res, data)
	if err == nil {
		err = Strict(o)
	}
	if err != nil {
		return nil, err
	}
	return o, nil
}

// DecodeLenient reads one object of the given resource from JSON or YAML,
// recording the spec fields it cannot read in Object.Unreadable.
func DecodeLenient(res policy.Resource, data []byte) (*policy.Object, error) {
	if _, _, ok := Kind(res); !ok {
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
	// Checked first with encoding/json's scanner (linear, a short error)
	// and counted: fastjson's errors quote the rest of the text at every
	// level of nesting, and its parse tree costs about 400 bytes an item.
	if !json.Valid(data) {
		err := json.Unmarshal(data, new(json.RawMessage))
		return nil, fmt.Errorf("cannot decode object: not JSON: %s", policy.Clip(fmt.Sprint(err)))
	}
	if n := CountItems(data); n > MaxObjectItems {
		return nil, fmt.Errorf("object holds %d JSON values and keys, more than leaseguard reads in one lease (%d)", n, MaxObjectItems)
	}
	parser := parsers.Get()
	defer parsers.Put(parser)
	v, err := parser.ParseBytes(data)
	if err != nil {
		return nil, fmt.Errorf("cannot decode object: %s", policy.Clip(err.Error()))
	}
	return DecodeValue(res, v)
}

// CheckWritten refuses a written object with a spec field leaseguard cannot
// read, unless the stored object holds the very same value: such a write
// leaves the field as it was, and is decided without it, so that a stored
// object never becomes one nobody can write (docs/design.md §4). old is nil
// on CREATE.
func CheckWritten(old, new *policy.Object) error {
	for _, u := range new.Untyped {
		if old == nil || !holds(old.Untyped, u) {
			return fmt.Errorf("%s%s", u.Field, u.Problem)
		}
	}
	for _, u := range new.Unreadable {
		same := false
		if old != nil {
			for _, o := range old.Unreadable {
				if o.Field == u.Field && o.Raw == u.Raw {
					same = true
				}
			}
		}
		if !same {
			return fmt.Errorf("%s%s", u.Field, u.Problem)
		}
	}
	return nil
}

// holds reports whether list has the field with the very same value.
func holds(list []policy.Unreadable, u policy.Unreadable) bool {
	for _, o := range list {
		if o.Field == u.Field && o.Raw == u.Raw {
			return true
		}
	}
	return false
}

// Strict turns the first unreadable field of o into an error.
func Strict(o *policy.Object) error {
	if len(o.Unreadable) == 0 {
		return nil
	}
	return fmt.Errorf("%s%s", o.Unreadable[0].Field, o.Unreadable[0].Problem)
}

// DecodeValue reads an object already parsed (the admission handler parses
// the whole AdmissionReview once), leniently as DecodeLenient does. The
// strings it keeps are copies: v may be reused once it returns.
func DecodeValue(res policy.Resource, v *fastjson.Value) (*policy.Object, error) {
	wantVersion, wantKind, ok := Kind(res)
	if !ok {
		return nil, fmt.Errorf("resource %q is not guarded by leaseguard (want leases or multiclusterleases)", res)
	}
	if v.Type() != fastjson.TypeObject {
		return nil, fmt.Errorf("cannot decode object: want a JSON object, got JSON %s", v.Type())
	}
	r := reader{root: v}
	apiVersion, kind := r.str("apiVersion"), r.str("kind")
	if r.err == nil && (kind != wantKind || apiVersion != wantVersion) {
		return nil, fmt.Errorf("object is %s %s, want %s %s", orMissing(policy.Clip(apiVersion)), orMissing(policy.Clip(kind)), wantVersion, wantKind)
	}
	o := &policy.Object{
		Name:         r.str("metadata", "name"),
		Namespace:    r.str("metadata", "namespace"),
		GenerateName: r.str("metadata", "generateName"),
	}
	o.CreationTimestamp = r.metaTime("metadata", "creationTimestamp")
	if ann := r.object("metadata", "annotations"); ann != nil {
		o.HasAnnotations = true
		if d := ann.Get(policy.DesignationAnnotation); d != nil {
			o.HasDesignation = true
			o.Designated = r.strValue(d, "metadata", "annotations", policy.DesignationAnnotation)
		}
	}
	o.Finalizers = r.raw("metadata", "finalizers")
	o.OwnerReferences = r.raw("metadata", "ownerReferences")
	o.RenewWrite = r.renewWrite()
	o.ManagedTimes = r.managedTimes()
	if r.object("spec") != nil {
		s := &o.Spec
		s.Holder = r.specStr(o, "holderIdentity")
		s.RenewTime = r.specTime(o, "renewTime")
		if !s.RenewTime.IsZero() {
			o.RenewTimeText = r.str("spec", "renewTime")
		}
		s.AcquireTime = r.specTime(o, "acquireTime")
		s.LeaseDuration = r.specSeconds(o, "leaseDurationSeconds")
		s.RenewDeadline = r.specSeconds(o, "renewDeadlineSeconds")
		s.RetryPeriod = r.specSeconds(o, "retryPeriodSeconds")
		s.Transitions = r.specCount(o, "leaseTransitions")
		s.Strategy = r.specStr(o, "strategy")
		s.PreferredHolder = r.specStr(o, "preferredHolder")
	}
	if r.err != nil {
		return nil, r.err
	}
	if o.Name == "" && o.GenerateName == "" {
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
		r.failf("%s: want string, got JSON %s", strings.Join(path, "."), v.Type())
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
		r.failf("%s: want object, got JSON %s", strings.Join(path, "."), v.Type())
		return nil
	}
	return o
}

// raw returns the JSON text of a field, "" when absent, null or empty.
func (r *reader) raw(path ...string) string {
	v := r.get(path...)
	if v == nil {
		return ""
	}
	if a, err := v.Array(); err == nil && len(a) == 0 {
		return ""
	}
	return string(v.MarshalTo(nil))
}

// metaTime reads a metadata timestamp, which the API server always writes.
func (r *reader) metaTime(path ...string) time.Time {
	s := r.str(path...)
	if s == "" {
		return time.Time{}
	}
	t, err := ParseTime(s)
	if err != nil {
		r.failf("%s: %v", strings.Join(path, "."), err)
	}
	return t
}

// maxManagedTimeBytes bounds a managedFields time worth parsing.
const maxManagedTimeBytes = 64

// renewWrite is the time of the managedFields entry of the main resource
// that owns spec.renewTime: when the API server stored the last write of
// it. A malformed entry is skipped; the API server writes these entries.
func (r *reader) renewWrite() time.Time {
	entries := r.get("metadata", "managedFields")
	if entries == nil {
		return time.Time{}
	}
	list, err := entries.Array()
	if err != nil {
		return time.Time{}
	}
	var latest time.Time
	for _, e := range list {
		if sub := e.GetStringBytes("subresource"); len(sub) > 0 {
			continue
		}
		if e.Get("fieldsV1", "f:spec", "f:renewTime") == nil {
			continue
		}
		// The API server writes these times as whole seconds
		// (2026-01-02T15:04:05Z); a longer one is not its own.
		b := e.GetStringBytes("time")
		if len(b) > maxManagedTimeBytes {
			continue
		}
		if t, ok := parseTime(string(b)); ok && t.After(latest) {
			latest = t
		}
	}
	return latest
}

// maxManagedEntries bounds the managedFields entries whose times are kept:
// the API server keeps at most ten Update entries, and the written object
// is bounded in items before it is parsed.
const maxManagedEntries = 4096

// managedTimes lists every managedFields entry's time with its key. Times
// longer than any the API server writes are kept as text only.
func (r *reader) managedTimes() []policy.ManagedTime {
	entries := r.get("metadata", "managedFields")
	if entries == nil {
		return nil
	}
	list, err := entries.Array()
	if err != nil || len(list) == 0 {
		return nil
	}
	out := make([]policy.ManagedTime, 0, min(len(list), maxManagedEntries))
	for _, e := range list[:min(len(list), maxManagedEntries)] {
		b := e.GetStringBytes("time")
		if len(b) == 0 {
			continue
		}
		m := policy.ManagedTime{
			Key: string(e.GetStringBytes("manager")) + "\n" + string(e.GetStringBytes("operation")) + "\n" +
				string(e.GetStringBytes("subresource")) + "\n" + string(e.GetStringBytes("apiVersion")),
			Raw: string(b[:min(len(b), maxManagedTimeBytes)]),
		}
		if len(b) <= maxManagedTimeBytes {
			m.Time, _ = parseTime(string(b))
		}
		out = append(out, m)
	}
	return out
}

// unreadable records a spec field leaseguard cannot read; problem reads on
// from the field's name (": want string, ...", " is negative (-1)").
func (r *reader) unreadable(o *policy.Object, name string, v *fastjson.Value, problem string) {
	o.Unreadable = append(o.Unreadable, policy.Unreadable{Field: "spec." + name, Raw: rawKey(v), Problem: problem})
}

// maxRawBytes is the longest JSON text kept as an unreadable field's Raw;
// a longer one is kept as its length and digest, which compare the same.
const maxRawBytes = 4 << 10

// rawKey is what an unreadable field's value is compared by: its JSON
// text, or for a long one its length and SHA-256. A string is taken as it
// reads, not re-marshalled (fastjson re-quotes one holding a quote or a
// control character, four bytes for each control character).
func rawKey(v *fastjson.Value) string {
	prefix, text := "", []byte(nil)
	if v.Type() == fastjson.TypeString && len(v.GetStringBytes()) > maxRawBytes/4 {
		// Quoted, it could be four times as long: digested as it reads.
		prefix, text = "string ", v.GetStringBytes()
	} else {
		text = v.MarshalTo(nil)
	}
	if len(text) <= maxRawBytes {
		return prefix + string(text)
	}
	h := sha256.New()
	h.Write([]byte(prefix))
	h.Write(text)
	return prefix + strconv.Itoa(len(text)) + " bytes, sha256 " + hex.EncodeToString(h.Sum(nil))
}

func (r *reader) specStr(o *policy.Object, name string) string {
	v := r.get("spec", name)
	if v == nil {
		return ""
	}
	b, err := v.StringBytes()
	if err != nil {
		r.unreadable(o, name, v, ": want string, got JSON "+v.Type().String())
		return ""
	}
	return string(b)
}

// specTime reads a time as the API server accepts it (ParseTime).
func (r *reader) specTime(o *policy.Object, name string) time.Time {
	v := r.get("spec", name)
	if v == nil {
		return time.Time{}
	}
	b, err := v.StringBytes()
	if err != nil {
		r.unreadable(o, name, v, ": want an RFC 3339 time string, got JSON "+v.Type().String())
		return time.Time{}
	}
	if len(b) == 0 {
		return time.Time{}
	}
	t, err := ParseTime(string(b))
	if err != nil {
		r.unreadable(o, name, v, ": "+err.Error())
		return t
	}
	if !TypedTime(string(b)) {
		o.Untyped = append(o.Untyped, policy.Unreadable{Field: "spec." + name, Raw: rawKey(v),
			Problem: " \"" + policy.Clip(string(b)) + "\" cannot be read by typed clients (metav1.MicroTime): write it as " + MicroTimeLayout})
	}
	return t
}

// specSeconds reads a non-negative int32 count of seconds.
func (r *reader) specSeconds(o *policy.Object, name string) time.Duration {
	return time.Duration(r.specCount(o, name)) * time.Second
}

// specCount reads a non-negative int32.
func (r *reader) specCount(o *policy.Object, name string) int32 {
	v := r.get("spec", name)
	if v == nil {
		return 0
	}
	if v.Type() != fastjson.TypeNumber {
		r.unreadable(o, name, v, ": want integer, got JSON "+v.Type().String())
		return 0
	}
	n, err := v.Int64()
	switch {
	case err != nil:
		r.unreadable(o, name, v, ": want integer, got "+policy.Clip(v.String()))
	case n < 0:
		r.unreadable(o, name, v, " is negative ("+strconv.FormatInt(n, 10)+")")
	case n > math.MaxInt32:
		r.unreadable(o, name, v, " is out of range ("+strconv.FormatInt(n, 10)+")")
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
// apiVersion and kind. An unreadable spec field is an error.
func DecodeAny(data []byte) (policy.Resource, *policy.Object, error) {
	res, o, err := DecodeAnyLenient(data)
	if err == nil {
		err = Strict(o)
	}
	if err != nil {
		return res, nil, err
	}
	return res, o, nil
}

// DecodeAnyLenient is DecodeAny recording unreadable spec fields in
// Object.Unreadable, as DecodeLenient does.
func DecodeAnyLenient(data []byte) (policy.Resource, *policy.Object, error) {
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
			o, err := DecodeLenient(res, trimmed)
			return res, o, err
		}
	}
	return "", nil, fmt.Errorf("object is %s %s, want coordination.k8s.io/v1 Lease or %s/%s %s",
		orMissing(policy.Clip(head.APIVersion)), orMissing(policy.Clip(head.Kind)), mclv1alpha1.Group, mclv1alpha1.Version, mclv1alpha1.Kind)
}
