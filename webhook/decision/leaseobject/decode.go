// Package leaseobject defines the decision core's terms, the view of a
// write (object.go: Request, Caller, Object, Spec), and reads what arrives
// into them: an admission request into a Request (ReadRequest: the
// caller's identity once, both objects decoded), and the serialized Lease or
// MultiClusterLease of a request (JSON) or of a file (YAML) into the
// normalised Object. It decodes with the API machinery's JSON
// decoder (sigs.k8s.io/json: case-sensitive, the last of duplicate keys,
// duplicates in what it reads reported) into a deliberately partial typed
// view of the object: what leaseguard decides on is decoded, everything else
// (the managed fields' sets, other fields) is skipped without being held,
// and labels and annotations are kept only as the text a status writer's
// write is compared by (past 4 KiB, a digest), so a write stuffed with
// items costs about its size.
//
// What it cannot read is handled in two ways. The object's identity
// (apiVersion, kind, metadata) is validated by the API server for every
// kind, so a problem there is an error naming the field. A spec field is
// read as leniently as the API server accepts it (a MultiClusterLease is a
// custom resource, stored as written, whatever its schema let through): one
// that still cannot be read is recorded in Object.Unreadable with its JSON
// text, so that a write which leaves it unchanged can be decided, and the
// caller (ReadRequest, `leaseguard check`) decides whether a new value
// of that kind is an error.
package leaseobject

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	mclv1alpha1 "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
	"github.com/leaseguard/leaseguard/webhook/decision/oneline"
)

// Kind returns the apiVersion and kind that a resource's objects carry.
func Kind(res Resource) (apiVersion, kind string, ok bool) {
	switch res {
	case Leases:
		return coordinationv1.SchemeGroupVersion.String(), "Lease", true
	case MultiClusterLeases:
		return mclv1alpha1.Group + "/" + mclv1alpha1.Version, mclv1alpha1.Kind, true
	}
	return "", "", false
}

// Decode reads one object of the given resource from JSON or YAML. A spec
// field it cannot read is an error (see Strict).
func Decode(res Resource, data []byte) (*Object, error) {
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
func DecodeLenient(res Resource, data []byte) (*Object, error) {
	if _, _, ok := Kind(res); !ok {
		return nil, fmt.Errorf("resource %q is not guarded by leaseguard (want leases or multiclusterleases)", res)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, fmt.Errorf("empty object")
	}
	if data[0] != '{' && data[0] != '[' {
		converted, err := yaml.YAMLToJSON(data)
		if err != nil {
			return nil, fmt.Errorf("not JSON or YAML: %w", err)
		}
		data = converted
	}
	return DecodeJSON(res, data)
}

// CheckWritten refuses a written object with a spec field leaseguard cannot
// read, unless the stored object holds the very same value: such a write
// leaves the field as it was, and is decided without it, so that a stored
// object never becomes one nobody can write (docs/design.md §4). old is nil
// on CREATE.
func CheckWritten(old, new *Object) error {
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
func holds(list []Unreadable, u Unreadable) bool {
	for _, o := range list {
		if o.Field == u.Field && o.Raw == u.Raw {
			return true
		}
	}
	return false
}

// Strict turns the first unreadable field of o into an error.
func Strict(o *Object) error {
	if len(o.Unreadable) == 0 {
		return nil
	}
	return fmt.Errorf("%s%s", o.Unreadable[0].Field, o.Unreadable[0].Problem)
}

// wireObject is what leaseguard reads of a Lease or MultiClusterLease.
type wireObject struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Metadata   wireMetadata `json:"metadata"`
	Spec       *wireSpec    `json:"spec"`
}

type wireMetadata struct {
	Name              string           `json:"name"`
	Namespace         string           `json:"namespace"`
	GenerateName      string           `json:"generateName"`
	CreationTimestamp string           `json:"creationTimestamp"`
	Labels            mapText          `json:"labels"`
	Annotations       *wireAnnotations `json:"annotations"`
	Finalizers        json.RawMessage  `json:"finalizers"`
	OwnerReferences   json.RawMessage  `json:"ownerReferences"`
	// ManagedFields are read leniently, on their own (managedTimes): the
	// API server writes them, and a malformed entry is skipped.
	ManagedFields json.RawMessage `json:"managedFields"`
}

// wireAnnotations holds the one annotation leaseguard reads, and the text
// of them all (mapText), which a status writer's write must leave as it is.
// The tag is DesignationAnnotation (a test holds them equal).
type wireAnnotations struct {
	Designated *string `json:"leaseguard.io/designated-manager"`
	text       mapText
}

// UnmarshalJSON reads the designation as the API machinery's decoder does
// (a duplicate of it is reported under its path) and keeps the text of the
// whole map. b is the decoder's own slice: nothing of it is held.
func (a *wireAnnotations) UnmarshalJSON(b []byte) error {
	var in struct {
		Designated *string `json:"leaseguard.io/designated-manager"`
	}
	strict, err := kjson.UnmarshalStrict(b, &in, kjson.DisallowDuplicateFields)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		if fe, ok := strict[0].(kjson.FieldError); ok {
			fe.SetFieldPath("metadata.annotations." + fe.FieldPath())
		}
		return strict[0]
	}
	a.Designated = in.Designated
	return a.text.UnmarshalJSON(b)
}

// mapText is a metadata map as leaseguard compares it: rawKey of its
// compact JSON text, "" when absent, null or empty. The API server writes
// both objects of a review with the same encoder (keys sorted), so equal
// maps have equal texts; a map over 4 KiB is kept as its length and
// SHA-256, so that a Lease with thousands of labels costs no copy of them.
type mapText string

func (m *mapText) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || string(b) == "null" || string(b) == "{}":
		*m = ""
	case len(b) > maxRawBytes:
		*m = mapText(rawKey(b))
	default:
		var c bytes.Buffer
		if json.Compact(&c, b) != nil || c.String() == "{}" {
			*m = mapText(rawKey(b))
			break
		}
		*m = mapText(c.String())
	}
	return nil
}

// wireSpec keeps each spec field as its JSON text: a custom resource is
// stored as written, so each is read leniently on its own (specStr,
// specTime, specCount).
type wireSpec struct {
	HolderIdentity       json.RawMessage `json:"holderIdentity"`
	RenewTime            json.RawMessage `json:"renewTime"`
	AcquireTime          json.RawMessage `json:"acquireTime"`
	LeaseDurationSeconds json.RawMessage `json:"leaseDurationSeconds"`
	RenewDeadlineSeconds json.RawMessage `json:"renewDeadlineSeconds"`
	RetryPeriodSeconds   json.RawMessage `json:"retryPeriodSeconds"`
	LeaseTransitions     json.RawMessage `json:"leaseTransitions"`
	Strategy             json.RawMessage `json:"strategy"`
	PreferredHolder      json.RawMessage `json:"preferredHolder"`
}

// wireManagedEntry is what leaseguard reads of a managedFields entry.
type wireManagedEntry struct {
	Manager     string          `json:"manager"`
	Operation   string          `json:"operation"`
	Subresource string          `json:"subresource"`
	APIVersion  string          `json:"apiVersion"`
	Time        json.RawMessage `json:"time"`
	FieldsV1    *struct {
		Spec *struct {
			RenewTime json.RawMessage `json:"f:renewTime"`
		} `json:"f:spec"`
	} `json:"fieldsV1"`
}

// DecodeJSON reads one object of the given resource from JSON as the API
// machinery does, leniently as DecodeLenient does.
func DecodeJSON(res Resource, data []byte) (*Object, error) {
	wantVersion, wantKind, ok := Kind(res)
	if !ok {
		return nil, fmt.Errorf("resource %q is not guarded by leaseguard (want leases or multiclusterleases)", res)
	}
	var w wireObject
	strict, err := kjson.UnmarshalStrict(data, &w, kjson.DisallowDuplicateFields)
	if err != nil {
		if ok, _ := kjson.SyntaxErrorOffset(err); ok {
			return nil, fmt.Errorf("cannot decode object: %w", DecodeError("", err))
		}
		return nil, DecodeError("", err)
	}
	if len(strict) > 0 {
		return nil, DecodeError("", strict[0])
	}
	if w.Kind != wantKind || w.APIVersion != wantVersion {
		return nil, fmt.Errorf("object is %s %s, want %s %s", orMissing(oneline.Clip(w.APIVersion)), orMissing(oneline.Clip(w.Kind)), wantVersion, wantKind)
	}
	m := &w.Metadata
	o := &Object{Name: m.Name, Namespace: m.Namespace, GenerateName: m.GenerateName}
	if m.CreationTimestamp != "" {
		if o.CreationTimestamp, err = ParseTime(m.CreationTimestamp); err != nil {
			return nil, fmt.Errorf("metadata.creationTimestamp: %w", err)
		}
	}
	o.Labels = string(m.Labels)
	if a := m.Annotations; a != nil {
		o.HasAnnotations = true
		o.Annotations = string(a.text)
		if a.Designated != nil {
			o.HasDesignation, o.Designated = true, *a.Designated
		}
	}
	o.Finalizers, o.OwnerReferences = listText(m.Finalizers), listText(m.OwnerReferences)
	entries := managedEntries(m.ManagedFields)
	o.RenewWrite = renewWrite(entries)
	o.ManagedTimes = managedTimes(entries)
	if sp := w.Spec; sp != nil {
		s := &o.Spec
		s.Holder = specStr(o, "holderIdentity", sp.HolderIdentity)
		s.RenewTime = specTime(o, "renewTime", sp.RenewTime)
		if !s.RenewTime.IsZero() {
			_ = json.Unmarshal(sp.RenewTime, &o.RenewTimeText)
		}
		s.AcquireTime = specTime(o, "acquireTime", sp.AcquireTime)
		s.LeaseDuration = time.Duration(specCount(o, "leaseDurationSeconds", sp.LeaseDurationSeconds)) * time.Second
		s.RenewDeadline = time.Duration(specCount(o, "renewDeadlineSeconds", sp.RenewDeadlineSeconds)) * time.Second
		s.RetryPeriod = time.Duration(specCount(o, "retryPeriodSeconds", sp.RetryPeriodSeconds)) * time.Second
		s.Transitions = specCount(o, "leaseTransitions", sp.LeaseTransitions)
		s.Strategy = specStr(o, "strategy", sp.Strategy)
		s.PreferredHolder = specStr(o, "preferredHolder", sp.PreferredHolder)
	}
	if o.Name == "" && o.GenerateName == "" {
		return nil, fmt.Errorf("metadata.name is missing")
	}
	return o, nil
}

// DecodeError names what the API machinery's decoder could not read, by
// its path under prefix ("request." for a review): "not JSON: ..." for a
// syntax error, "PATH: want TYPE, got JSON KIND" for a value of another
// type, "PATH appears more than once" for a duplicate key.
func DecodeError(prefix string, err error) error {
	var typeErr *json.UnmarshalTypeError
	var fieldErr kjson.FieldError
	switch {
	case errors.As(err, &typeErr):
		got := typeErr.Value
		if got == "bool" {
			got = "boolean"
		}
		path := typeErr.Field
		if path == "" && prefix == "" {
			return fmt.Errorf("cannot decode object: want a JSON object, got JSON %s", oneline.Clip(got))
		}
		return fmt.Errorf("%s%s: want %s, got JSON %s", prefix, oneline.Clip(path), wantOf(typeErr), oneline.Clip(got))
	case errors.As(err, &fieldErr):
		return fmt.Errorf("not JSON the API server writes: %s%s appears more than once", prefix, oneline.Clip(fieldErr.FieldPath()))
	}
	if ok, _ := kjson.SyntaxErrorOffset(err); ok {
		return fmt.Errorf("not JSON: %s", oneline.Clip(err.Error()))
	}
	return fmt.Errorf("cannot decode: %s", oneline.Clip(err.Error()))
}

// wantOf names the JSON type a Go field wants.
func wantOf(e *json.UnmarshalTypeError) string {
	t := e.Type
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			return "array of strings"
		}
		return "array"
	}
	if isInteger(t.Kind()) {
		return "integer"
	}
	return t.String()
}

// listText is a list field's JSON text, compacted; "" when absent, null or
// empty.
func listText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" || string(raw) == "[]" {
		return ""
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	if b.String() == "[]" {
		return ""
	}
	return b.String()
}

// maxManagedTimeBytes bounds a managedFields time worth parsing.
const maxManagedTimeBytes = 64

// maxManagedEntries bounds the managedFields entries read: the API server
// keeps at most ten Update entries.
const maxManagedEntries = 4096

// managedEntry is one managedFields entry as leaseguard reads it.
type managedEntry struct {
	key, time  string
	renewTime  bool
	subresouce bool
}

// managedEntries reads the managedFields entries leniently, one at a time
// into one struct (a review can carry thousands): a list that is not one
// reads as none; a field of another type, or an entry that is no object,
// is skipped and the rest read (the API server writes them).
func managedEntries(raw json.RawMessage) []managedEntry {
	if len(raw) == 0 || raw[0] != '[' {
		return nil
	}
	dec := kjson.NewDecoderCaseSensitivePreserveInts(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return nil
	}
	var out []managedEntry
	for len(out) < maxManagedEntries && dec.More() {
		var e wireManagedEntry
		if err := dec.Decode(&e); err != nil {
			var typeErr *json.UnmarshalTypeError
			if !errors.As(err, &typeErr) {
				break
			}
		}
		var t string
		if len(e.Time) > 0 && e.Time[0] == '"' {
			_ = json.Unmarshal(e.Time, &t)
		}
		out = append(out, managedEntry{
			key:        e.Manager + "\n" + e.Operation + "\n" + e.Subresource + "\n" + e.APIVersion,
			time:       t,
			renewTime:  e.FieldsV1 != nil && e.FieldsV1.Spec != nil && len(e.FieldsV1.Spec.RenewTime) > 0,
			subresouce: e.Subresource != "",
		})
	}
	return out
}

// renewWrite is the time of the managedFields entry of the main resource
// that owns spec.renewTime: when the API server stored the last write of
// it. The API server writes these times as whole seconds
// (2026-01-02T15:04:05Z); a longer one is not its own.
//
// Where several entries own it, the earliest: a write that changes
// renewTime takes the field from every other entry and gives it to the
// writer's alone, so a second owner came later, by applying the stored
// value unchanged (server-side apply stamps its entry whatever it
// changes). Its stamp records no write of renewTime; taken as the record,
// a sibling pod applying the stored renewTime with a label once a second
// kept the holder's every renewal "too early" (I6) until its lease
// expired (seventh attack round, docs/security.md).
func renewWrite(entries []managedEntry) time.Time {
	var earliest time.Time
	for _, e := range entries {
		if e.subresouce || !e.renewTime || len(e.time) > maxManagedTimeBytes {
			continue
		}
		if t, ok := parseTime(e.time); ok && (earliest.IsZero() || t.Before(earliest)) {
			earliest = t
		}
	}
	return earliest
}

// managedTimes lists every managedFields entry's time with its key. Times
// longer than any the API server writes are kept as text only.
func managedTimes(entries []managedEntry) []ManagedTime {
	var out []ManagedTime
	for _, e := range entries {
		if e.time == "" {
			continue
		}
		m := ManagedTime{Key: e.key, Raw: e.time[:min(len(e.time), maxManagedTimeBytes)], RenewWriter: e.renewTime && !e.subresouce}
		if len(e.time) <= maxManagedTimeBytes {
			m.Time, _ = parseTime(e.time)
		}
		out = append(out, m)
	}
	return out
}

// jsonType names the JSON type of a value's text as the messages do.
func jsonType(raw json.RawMessage) string {
	switch raw[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't':
		return "true"
	case 'f':
		return "false"
	case 'n':
		return "null"
	}
	return "number"
}

// present reports whether a field was written with a value other than null.
func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// unreadable records a spec field leaseguard cannot read; problem reads on
// from the field's name (": want string, ...", " is negative (-1)").
func unreadable(o *Object, name string, raw json.RawMessage, problem string) {
	o.Unreadable = append(o.Unreadable, Unreadable{Field: "spec." + name, Raw: rawKey(raw), Problem: problem})
}

// maxRawBytes is the longest JSON text kept as an unreadable field's Raw;
// a longer one is kept as its length and digest, which compare the same.
const maxRawBytes = 4 << 10

// rawKey is what an unreadable field's value is compared by: its JSON
// text (as the API server writes both objects of a review), or for a long
// one its length and SHA-256.
func rawKey(raw json.RawMessage) string {
	if len(raw) <= maxRawBytes {
		return string(raw)
	}
	sum := sha256.Sum256(raw)
	return strconv.Itoa(len(raw)) + " bytes, sha256 " + hex.EncodeToString(sum[:])
}

func specStr(o *Object, name string, raw json.RawMessage) string {
	if !present(raw) {
		return ""
	}
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		unreadable(o, name, raw, ": want string, got JSON "+jsonType(raw))
		return ""
	}
	return s
}

// specTime reads a time as the API server accepts it (ParseTime).
func specTime(o *Object, name string, raw json.RawMessage) time.Time {
	if !present(raw) {
		return time.Time{}
	}
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		unreadable(o, name, raw, ": want an RFC 3339 time string, got JSON "+jsonType(raw))
		return time.Time{}
	}
	if s == "" {
		return time.Time{}
	}
	t, err := ParseTime(s)
	if err != nil {
		unreadable(o, name, raw, ": "+err.Error())
		return t
	}
	if !TypedTime(s) {
		o.Untyped = append(o.Untyped, Unreadable{Field: "spec." + name, Raw: rawKey(raw),
			Problem: " \"" + oneline.Clip(s) + "\" cannot be read by typed clients (metav1.MicroTime): write it as " + MicroTimeLayout})
	}
	return t
}

// specCount reads a non-negative int32.
func specCount(o *Object, name string, raw json.RawMessage) int32 {
	if !present(raw) {
		return 0
	}
	if jsonType(raw) != "number" {
		unreadable(o, name, raw, ": want integer, got JSON "+jsonType(raw))
		return 0
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	switch {
	case err != nil:
		unreadable(o, name, raw, ": want integer, got "+oneline.Clip(string(raw)))
	case n < 0:
		unreadable(o, name, raw, " is negative ("+strconv.FormatInt(n, 10)+")")
	case n > math.MaxInt32:
		unreadable(o, name, raw, " is out of range ("+strconv.FormatInt(n, 10)+")")
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
func DecodeAny(data []byte) (Resource, *Object, error) {
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
func DecodeAnyLenient(data []byte) (Resource, *Object, error) {
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
	for _, res := range []Resource{Leases, MultiClusterLeases} {
		if v, k, _ := Kind(res); head.APIVersion == v && head.Kind == k {
			o, err := DecodeLenient(res, trimmed)
			return res, o, err
		}
	}
	return "", nil, fmt.Errorf("object is %s %s, want coordination.k8s.io/v1 Lease or %s/%s %s",
		orMissing(oneline.Clip(head.APIVersion)), orMissing(oneline.Clip(head.Kind)), mclv1alpha1.Group, mclv1alpha1.Version, mclv1alpha1.Kind)
}

func isInteger(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}
