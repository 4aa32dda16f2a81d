package leaseobject

import (
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	renew    = time.Date(2026, 1, 2, 15, 4, 5, 123456000, time.UTC)
	acquire  = time.Date(2026, 1, 2, 15, 0, 0, 500000000, time.UTC)
	creation = time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
)

const leaseJSON = `{
  "apiVersion": "coordination.k8s.io/v1",
  "kind": "Lease",
  "metadata": {
    "name": "kcc-leader-team-a",
    "namespace": "cnrm-system",
    "creationTimestamp": "2026-01-01T10:00:00Z",
    "resourceVersion": "42",
    "annotations": {"leaseguard.io/designated-manager": "system:serviceaccount:cnrm-system:mgr-a", "other": "x"},
    "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}]
  },
  "spec": {
    "holderIdentity": "pod-a_1234",
    "renewTime": "2026-01-02T15:04:05.123456Z",
    "acquireTime": "2026-01-02T15:00:00.500000Z",
    "leaseDurationSeconds": 15,
    "leaseTransitions": 7,
    "strategy": "OldestEmulationVersion",
    "preferredHolder": "pod-b"
  }
}`

const leaseYAML = `# kubectl get lease -o yaml
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: kcc-leader-team-a
  namespace: cnrm-system
  creationTimestamp: "2026-01-01T10:00:00Z"
  annotations:
    leaseguard.io/designated-manager: system:serviceaccount:cnrm-system:mgr-a
    other: x
spec:
  holderIdentity: pod-a_1234
  renewTime: "2026-01-02T15:04:05.123456Z"
  acquireTime: 2026-01-02T15:00:00.500000Z
  leaseDurationSeconds: 15
  leaseTransitions: 7
  strategy: OldestEmulationVersion
  preferredHolder: pod-b
`

const mclJSON = `{
  "apiVersion": "multicluster.core.cnrm.cloud.google.com/v1alpha1",
  "kind": "MultiClusterLease",
  "metadata": {"name": "kcc-leader", "namespace": "cnrm-system", "creationTimestamp": "2026-01-01T10:00:00Z"},
  "spec": {
    "holderIdentity": "cluster-1/pod-a",
    "renewTime": "2026-01-02T15:04:05.123456Z",
    "leaseDurationSeconds": 30,
    "renewDeadlineSeconds": 20,
    "retryPeriodSeconds": 4
  },
  "status": {"globalHolderIdentity": "cluster-1/pod-a", "globalLeaseTransitions": 3}
}`

const mclYAML = `apiVersion: multicluster.core.cnrm.cloud.google.com/v1alpha1
kind: MultiClusterLease
metadata:
  name: kcc-leader
  namespace: cnrm-system
  creationTimestamp: "2026-01-01T10:00:00Z"
  finalizers:
  - multiclusterlease.core.cnrm.cloud.google.com/finalizer
spec:
  holderIdentity: cluster-1/pod-a
  renewTime: "2026-01-02T15:04:05.123456Z"
  leaseDurationSeconds: 30
  renewDeadlineSeconds: 20
  retryPeriodSeconds: 4
status:
  globalHolderIdentity: cluster-1/pod-a
`

var wantLease = Object{
	Namespace:         "cnrm-system",
	Name:              "kcc-leader-team-a",
	CreationTimestamp: creation,
	Designated:        "system:serviceaccount:cnrm-system:mgr-a",
	HasDesignation:    true,
	Spec: Spec{
		Holder:          "pod-a_1234",
		RenewTime:       renew,
		AcquireTime:     acquire,
		LeaseDuration:   15 * time.Second,
		Transitions:     7,
		Strategy:        "OldestEmulationVersion",
		PreferredHolder: "pod-b",
	},
}

var wantMCL = Object{
	Namespace:         "cnrm-system",
	Name:              "kcc-leader",
	CreationTimestamp: creation,
	Spec: Spec{
		Holder:        "cluster-1/pod-a",
		RenewTime:     renew,
		LeaseDuration: 30 * time.Second,
		RenewDeadline: 20 * time.Second,
		RetryPeriod:   4 * time.Second,
	},
}

// sameObject compares objects field by field, times as instants.
func sameObject(t *testing.T, got *Object, want *Object) {
	t.Helper()
	if got == nil {
		t.Fatal("nil object")
	}
	if got.Namespace != want.Namespace || got.Name != want.Name {
		t.Errorf("object %s/%s, want %s/%s", got.Namespace, got.Name, want.Namespace, want.Name)
	}
	if !got.CreationTimestamp.Equal(want.CreationTimestamp) {
		t.Errorf("CreationTimestamp %v, want %v", got.CreationTimestamp, want.CreationTimestamp)
	}
	if got.Designated != want.Designated || got.HasDesignation != want.HasDesignation {
		t.Errorf("designation %q (present %v), want %q (present %v)", got.Designated, got.HasDesignation, want.Designated, want.HasDesignation)
	}
	g, w := &got.Spec, &want.Spec
	if g.Holder != w.Holder {
		t.Errorf("Holder %q, want %q", g.Holder, w.Holder)
	}
	if !g.RenewTime.Equal(w.RenewTime) {
		t.Errorf("RenewTime %v, want %v", g.RenewTime, w.RenewTime)
	}
	if !g.AcquireTime.Equal(w.AcquireTime) {
		t.Errorf("AcquireTime %v, want %v", g.AcquireTime, w.AcquireTime)
	}
	if g.LeaseDuration != w.LeaseDuration || g.RenewDeadline != w.RenewDeadline || g.RetryPeriod != w.RetryPeriod {
		t.Errorf("durations %v/%v/%v, want %v/%v/%v", g.LeaseDuration, g.RenewDeadline, g.RetryPeriod, w.LeaseDuration, w.RenewDeadline, w.RetryPeriod)
	}
	if g.Transitions != w.Transitions {
		t.Errorf("Transitions %d, want %d", g.Transitions, w.Transitions)
	}
	if g.Strategy != w.Strategy || g.PreferredHolder != w.PreferredHolder {
		t.Errorf("Strategy %q PreferredHolder %q, want %q %q", g.Strategy, g.PreferredHolder, w.Strategy, w.PreferredHolder)
	}
	if !g.Equal(w) {
		t.Errorf("Spec.Equal is false:\n got %+v\nwant %+v", *g, *w)
	}
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name string
		res  Resource
		data string
		want Object
	}{
		{"lease JSON", Leases, leaseJSON, wantLease},
		{"lease YAML", Leases, leaseYAML, wantLease},
		{"lease JSON with surrounding whitespace", Leases, "\n\t " + leaseJSON + "\n\n", wantLease},
		{"MultiClusterLease JSON", MultiClusterLeases, mclJSON, wantMCL},
		{"MultiClusterLease YAML", MultiClusterLeases, mclYAML, wantMCL},
		{
			"lease without spec",
			Leases,
			`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l","namespace":"ns"}}`,
			Object{Namespace: "ns", Name: "l"},
		},
		{
			"released lease: null and empty fields",
			Leases,
			`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l","namespace":"ns","annotations":null},
			  "spec":{"holderIdentity":null,"renewTime":null,"acquireTime":"","leaseDurationSeconds":null,"leaseTransitions":0}}`,
			Object{Namespace: "ns", Name: "l"},
		},
		{
			"designation annotation absent",
			Leases,
			`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l","namespace":"ns","annotations":{"other":"x"}},"spec":{"holderIdentity":"h"}}`,
			Object{Namespace: "ns", Name: "l", Spec: Spec{Holder: "h"}},
		},
		{
			"designation annotation empty",
			Leases,
			`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l","namespace":"ns","annotations":{"leaseguard.io/designated-manager":""}}}`,
			Object{Namespace: "ns", Name: "l", Designated: "", HasDesignation: true},
		},
		{
			"designation annotation empty, YAML",
			MultiClusterLeases,
			"apiVersion: multicluster.core.cnrm.cloud.google.com/v1alpha1\nkind: MultiClusterLease\nmetadata:\n  name: m\n  annotations:\n    leaseguard.io/designated-manager: \"\"\n",
			Object{Name: "m", Designated: "", HasDesignation: true},
		},
		{
			"renewTime in a non-UTC offset",
			Leases,
			`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l"},"spec":{"holderIdentity":"h","renewTime":"2026-01-02T17:04:05.123456+02:00"}}`,
			Object{Name: "l", Spec: Spec{Holder: "h", RenewTime: renew}},
		},
		{
			"renewTime with nanoseconds and no fraction",
			Leases,
			`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l"},"spec":{"renewTime":"2026-01-02T15:04:05.123456789Z","acquireTime":"2026-01-02T15:00:00Z"}}`,
			Object{Name: "l", Spec: Spec{
				RenewTime:   time.Date(2026, 1, 2, 15, 4, 5, 123456789, time.UTC),
				AcquireTime: time.Date(2026, 1, 2, 15, 0, 0, 0, time.UTC),
			}},
		},
		{
			"zero durations",
			MultiClusterLeases,
			`{"apiVersion":"multicluster.core.cnrm.cloud.google.com/v1alpha1","kind":"MultiClusterLease","metadata":{"name":"m"},"spec":{"leaseDurationSeconds":0,"renewDeadlineSeconds":0,"retryPeriodSeconds":0}}`,
			Object{Name: "m"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := Decode(tc.res, []byte(tc.data))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			sameObject(t, o, &tc.want)

			res, o2, err := DecodeAny([]byte(tc.data))
			if err != nil {
				t.Fatalf("DecodeAny: %v", err)
			}
			if res != tc.res {
				t.Errorf("DecodeAny resource %q, want %q", res, tc.res)
			}
			sameObject(t, o2, &tc.want)
		})
	}
}

func TestDecodeNonUTCRenewTimeIsSameInstant(t *testing.T) {
	const data = `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l"},
	  "spec":{"holderIdentity":"h","renewTime":"2026-01-02T15:04:05.123456+02:00"}}`
	o, err := Decode(Leases, []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 1, 2, 13, 4, 5, 123456000, time.UTC)
	if !o.Spec.RenewTime.Equal(want) {
		t.Errorf("RenewTime %v, want the instant %v", o.Spec.RenewTime, want)
	}
	if got := o.Spec.RenewTime.UTC().Format(time.RFC3339Nano); got != "2026-01-02T13:04:05.123456Z" {
		t.Errorf("RenewTime in UTC %s", got)
	}
	// The same instant written in UTC gives an equal spec.
	utc, err := Decode(Leases, []byte(strings.Replace(data, "2026-01-02T15:04:05.123456+02:00", "2026-01-02T13:04:05.123456Z", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if !o.Spec.Equal(&utc.Spec) {
		t.Errorf("specs differ: %+v vs %+v", o.Spec, utc.Spec)
	}
}

const leaseHead = `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l","namespace":"ns"},"spec":`

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name string
		res  Resource
		data string
		// want are substrings of the error.
		want []string
	}{
		{"empty", Leases, "", []string{"empty object"}},
		{"blank", Leases, " \n\t", []string{"empty object"}},
		{"unguarded resource", Resource("pods"), "{}", []string{`resource "pods" is not guarded by leaseguard (want leases or multiclusterleases)`}},
		{
			"lease where a MultiClusterLease is wanted",
			MultiClusterLeases,
			leaseJSON,
			[]string{"object is coordination.k8s.io/v1 Lease, want multicluster.core.cnrm.cloud.google.com/v1alpha1 MultiClusterLease"},
		},
		{
			"MultiClusterLease where a lease is wanted",
			Leases,
			mclYAML,
			[]string{"object is multicluster.core.cnrm.cloud.google.com/v1alpha1 MultiClusterLease, want coordination.k8s.io/v1 Lease"},
		},
		{
			"wrong apiVersion",
			Leases,
			`{"apiVersion":"coordination.k8s.io/v1beta1","kind":"Lease","metadata":{"name":"l"}}`,
			[]string{"object is coordination.k8s.io/v1beta1 Lease, want coordination.k8s.io/v1 Lease"},
		},
		{
			"wrong kind",
			Leases,
			`{"apiVersion":"coordination.k8s.io/v1","kind":"Leases","metadata":{"name":"l"}}`,
			[]string{"object is coordination.k8s.io/v1 Leases, want coordination.k8s.io/v1 Lease"},
		},
		{
			"apiVersion and kind missing",
			Leases,
			`{"metadata":{"name":"l"}}`,
			[]string{"object is (missing) (missing), want coordination.k8s.io/v1 Lease"},
		},
		{
			"name missing",
			Leases,
			`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"namespace":"ns"}}`,
			[]string{"metadata.name is missing"},
		},
		{
			"name empty, YAML",
			MultiClusterLeases,
			"apiVersion: multicluster.core.cnrm.cloud.google.com/v1alpha1\nkind: MultiClusterLease\nmetadata:\n  name: \"\"\n",
			[]string{"metadata.name is missing"},
		},
		{"negative leaseDurationSeconds", Leases, leaseHead + `{"leaseDurationSeconds":-15}}`, []string{"spec.leaseDurationSeconds", "negative (-15)"}},
		{"negative renewDeadlineSeconds", MultiClusterLeases,
			`{"apiVersion":"multicluster.core.cnrm.cloud.google.com/v1alpha1","kind":"MultiClusterLease","metadata":{"name":"m"},"spec":{"renewDeadlineSeconds":-2}}`,
			[]string{"spec.renewDeadlineSeconds", "negative (-2)"}},
		{"negative retryPeriodSeconds", MultiClusterLeases,
			"apiVersion: multicluster.core.cnrm.cloud.google.com/v1alpha1\nkind: MultiClusterLease\nmetadata:\n  name: m\nspec:\n  retryPeriodSeconds: -1\n",
			[]string{"spec.retryPeriodSeconds", "negative (-1)"}},
		{"negative leaseTransitions", Leases, leaseHead + `{"leaseTransitions":-3}}`, []string{"spec.leaseTransitions", "negative (-3)"}},
		{"unparsable renewTime", Leases, leaseHead + `{"renewTime":"yesterday"}}`,
			[]string{`spec.renewTime: "yesterday" is not an RFC 3339 time`}},
		{"renewTime without zone", Leases, leaseHead + `{"renewTime":"2026-01-02T15:04:05.123456"}}`,
			[]string{`spec.renewTime: "2026-01-02T15:04:05.123456" is not an RFC 3339 time`}},
		{"unparsable acquireTime", Leases, leaseHead + `{"acquireTime":"2026-13-01T00:00:00Z"}}`,
			[]string{`spec.acquireTime: "2026-13-01T00:00:00Z" is not an RFC 3339 time`}},
		{"unparsable renewTime, YAML", Leases,
			"apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: l\nspec:\n  renewTime: 5 seconds ago\n",
			[]string{`spec.renewTime: "5 seconds ago" is not an RFC 3339 time`}},
		{"unparsable creationTimestamp", Leases,
			`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l","creationTimestamp":"yesterday"}}`,
			[]string{"metadata.creationTimestamp", `"yesterday"`}},
		{"holderIdentity a number", Leases, leaseHead + `{"holderIdentity":42}}`,
			[]string{"spec.holderIdentity: want string, got JSON number"}},
		{"holderIdentity a YAML boolean", Leases,
			"apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: l\nspec:\n  holderIdentity: true\n",
			[]string{"spec.holderIdentity: want string, got JSON "}},
		{"leaseDurationSeconds a string", Leases, leaseHead + `{"leaseDurationSeconds":"15"}}`,
			[]string{"spec.leaseDurationSeconds: want ", "string"}},
		{"leaseTransitions a fraction", Leases, leaseHead + `{"leaseTransitions":1.5}}`,
			[]string{"spec.leaseTransitions"}},
		{"leaseDurationSeconds beyond int32", Leases, leaseHead + `{"leaseDurationSeconds":3000000000}}`,
			[]string{"spec.leaseDurationSeconds", "3000000000"}},
		{"renewTime a number", Leases, leaseHead + `{"renewTime":1767366245}}`,
			[]string{"spec.renewTime", "number"}},
		{"annotation a number", Leases,
			`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l","annotations":{"leaseguard.io/designated-manager":5}}}`,
			[]string{"metadata.annotations", "want string, got JSON number"}},
		{"name a number", Leases,
			`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":7}}`,
			[]string{"metadata.name", "number"}},
		{"spec an array", Leases, leaseHead + `[]}`, []string{"spec", "array"}},
		{"kind a number", Leases, `{"apiVersion":"coordination.k8s.io/v1","kind":1,"metadata":{"name":"l"}}`, []string{"kind", "number"}},
		{"truncated JSON", Leases, `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease"`, []string{"cannot decode object"}},
		{"bad YAML", Leases, "apiVersion: coordination.k8s.io/v1\nkind: Lease\nspec: [\n", []string{"not JSON or YAML", "yaml: line"}},
		{"a JSON array", Leases, `[{"kind":"Lease"}]`, []string{"array"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := Decode(tc.res, []byte(tc.data))
			if err == nil {
				t.Fatalf("Decode succeeded: %+v", o)
			}
			if o != nil {
				t.Errorf("Decode returned an object with its error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q is not one line", err)
			}
		})
	}
}

func TestDecodeAnyErrors(t *testing.T) {
	const want2 = ", want coordination.k8s.io/v1 Lease or multicluster.core.cnrm.cloud.google.com/v1alpha1 MultiClusterLease"
	tests := []struct {
		name, data string
		want       string
		exact      bool
	}{
		{"empty", "", "empty object", true},
		{"blank", "\n  \n", "empty object", true},
		{"ConfigMap", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}`, "object is v1 ConfigMap" + want2, true},
		{"ConfigMap YAML", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n", "object is v1 ConfigMap" + want2, true},
		{"Lease of another version", "apiVersion: coordination.k8s.io/v1beta1\nkind: Lease\nmetadata:\n  name: l\n", "object is coordination.k8s.io/v1beta1 Lease" + want2, true},
		{"kind missing", "apiVersion: coordination.k8s.io/v1\nmetadata:\n  name: l\n", "object is coordination.k8s.io/v1 (missing)" + want2, true},
		{"apiVersion missing", "kind: Lease\nmetadata:\n  name: l\n", "object is (missing) Lease" + want2, true},
		{"bad YAML", "kind: Lease\n  apiVersion: [\n", "not JSON or YAML: ", false},
		// The kind is known, so Decode's errors come through.
		{"known kind, name missing", `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{}}`, "metadata.name is missing", true},
		{"known kind, bad field", "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: l\nspec:\n  leaseTransitions: -1\n", "spec.leaseTransitions", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, o, err := DecodeAny([]byte(tc.data))
			if err == nil {
				t.Fatalf("DecodeAny succeeded: %s %+v", res, o)
			}
			if o != nil {
				t.Errorf("DecodeAny returned an object with its error")
			}
			if tc.exact && err.Error() != tc.want {
				t.Errorf("error %q, want %q", err, tc.want)
			}
			if !tc.exact && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestKind(t *testing.T) {
	tests := []struct {
		res           Resource
		version, kind string
		ok            bool
	}{
		{Leases, "coordination.k8s.io/v1", "Lease", true},
		{MultiClusterLeases, "multicluster.core.cnrm.cloud.google.com/v1alpha1", "MultiClusterLease", true},
		{Resource("configmaps"), "", "", false},
	}
	for _, tc := range tests {
		v, k, ok := Kind(tc.res)
		if v != tc.version || k != tc.kind || ok != tc.ok {
			t.Errorf("Kind(%q) = %q, %q, %v; want %q, %q, %v", tc.res, v, k, ok, tc.version, tc.kind, tc.ok)
		}
	}
}

// Every time the API server stores must be readable: a Lease's MicroTime,
// and whatever a custom resource's `format: date-time` lets through.
func TestParseTimeAcceptsWhatTheAPIServerStores(t *testing.T) {
	utc := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		in   string
		want time.Time
	}{
		{"2026-11-30T14:00:00.000000Z", utc("2026-11-30T14:00:00Z")},
		{"2026-11-30t14:00:00z", utc("2026-11-30T14:00:00Z")},
		{"2026-11-30T14:00:00.5z", utc("2026-11-30T14:00:00.5Z")},
		{"2026-11-30T14:00:00.123456789123Z", utc("2026-11-30T14:00:00.123456789Z")},
		{"2026-11-30T14:00:00+99:00", utc("2026-11-26T11:00:00Z")},
		{"2026-11-30T14:00:00-00:30", utc("2026-11-30T14:30:00Z")},
		{"2026-11-30T14:00:00.000000+01:00", utc("2026-11-30T13:00:00Z")},
		// A comma fraction, as Go reads it; as long as the date-time
		// pattern allows (a long one skips time.Parse, found by a
		// differential fuzz of the two paths).
		{"2026-11-30T14:00:00,5Z", utc("2026-11-30T14:00:00.5Z")},
		{"2026-11-30T14:00:00,500000000000000000000Z", utc("2026-11-30T14:00:00.5Z")},
		{"2026-11-30T14:00:00." + strings.Repeat("0", 100) + "+01:00", utc("2026-11-30T13:00:00Z")},
	}
	for _, c := range cases {
		got, err := ParseTime(c.in)
		if err != nil || !got.Equal(c.want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"yesterday", "2026-11-30", "2026-11-30T24:00:00Z", "2026-11-30T14:60:00Z", "2026-02-30T14:00:00Z",
		"2026-11-30 14:00:00Z", "2026-11-30T14:00:00", "2026-11-30T14:00:00.Z", "2026-11-30T14:00:00+0100", "2026-11-30T14:00:00+1:00"} {
		if got, err := ParseTime(bad); err == nil {
			t.Errorf("ParseTime(%q) = %v, want an error", bad, got)
		} else if !strings.Contains(err.Error(), "is not an RFC 3339 time such as 2026-01-02T15:04:05.000000Z") {
			t.Errorf("ParseTime(%q) error %q", bad, err)
		}
	}
}

// A stored object with a spec field leaseguard cannot read is decided
// without it: the field is recorded with its JSON text, not an error.
func TestDecodeLenientRecordsUnreadableSpecFields(t *testing.T) {
	data := `{"apiVersion":"multicluster.core.cnrm.cloud.google.com/v1alpha1","kind":"MultiClusterLease",
	  "metadata":{"name":"m","namespace":"ns","finalizers":["f"],"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"x","uid":"u"}],
	    "managedFields":[
	      {"manager":"kcc","operation":"Update","time":"2026-11-30T14:00:03Z","fieldsV1":{"f:spec":{"f:holderIdentity":{},"f:renewTime":{}}}},
	      {"manager":"ctrl","operation":"Update","subresource":"status","time":"2026-11-30T14:00:09Z","fieldsV1":{"f:status":{}}},
	      {"manager":"labeler","operation":"Update","time":"2026-11-30T14:00:07Z","fieldsV1":{"f:metadata":{"f:labels":{}}}}]},
	  "spec":{"holderIdentity":"c","renewTime":"yesterday","leaseDurationSeconds":-5}}`
	o, err := DecodeLenient(MultiClusterLeases, []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Unreadable) != 2 || o.Unreadable[0].Field != "spec.renewTime" || o.Unreadable[0].Raw != `"yesterday"` ||
		o.Unreadable[1].Field != "spec.leaseDurationSeconds" || o.Unreadable[1].Raw != "-5" {
		t.Fatalf("Unreadable = %+v", o.Unreadable)
	}
	if o.Spec.Holder != "c" || !o.Spec.RenewTime.IsZero() || o.Spec.LeaseDuration != 0 {
		t.Errorf("spec %+v", o.Spec)
	}
	// Only the main resource's owner of spec.renewTime tells when the last
	// renewal was stored: not the status writer, not the labeller.
	if want := time.Date(2026, 11, 30, 14, 0, 3, 0, time.UTC); !o.RenewWrite.Equal(want) {
		t.Errorf("RenewWrite = %v, want %v", o.RenewWrite, want)
	}
	if o.Finalizers != `["f"]` || !strings.Contains(o.OwnerReferences, `"name":"x"`) {
		t.Errorf("Finalizers %q, OwnerReferences %q", o.Finalizers, o.OwnerReferences)
	}
	// A later co-owner (server-side apply of the stored value, stamped
	// whatever it changes) records no write of renewTime: the earliest
	// owner is the record (seventh attack round).
	coOwned := strings.Replace(data, `"fieldsV1":{"f:metadata":{"f:labels":{}}}`, `"fieldsV1":{"f:metadata":{"f:labels":{}},"f:spec":{"f:renewTime":{}}}`, 1)
	if c, err := DecodeLenient(MultiClusterLeases, []byte(coOwned)); err != nil {
		t.Fatal(err)
	} else if want := time.Date(2026, 11, 30, 14, 0, 3, 0, time.UTC); !c.RenewWrite.Equal(want) {
		t.Errorf("co-owned: RenewWrite = %v, want the earliest owner's %v", c.RenewWrite, want)
	}
	if _, err := Decode(MultiClusterLeases, []byte(data)); err == nil ||
		err.Error() != `spec.renewTime: "yesterday" is not an RFC 3339 time such as 2026-01-02T15:04:05.000000Z` {
		t.Errorf("strict Decode error %v", err)
	}
}

// The mutating webhook sees a CREATE with generateName before the API server
// names the object.
func TestDecodeGenerateName(t *testing.T) {
	o, err := Decode(MultiClusterLeases, []byte(`{"apiVersion":"multicluster.core.cnrm.cloud.google.com/v1alpha1","kind":"MultiClusterLease","metadata":{"generateName":"kcc-","namespace":"ns"}}`))
	if err != nil || o.Name != "" || o.GenerateName != "kcc-" {
		t.Fatalf("Decode = %+v, %v", o, err)
	}
}

// `leaseguard check` reads object files: a bad one gets a short error, and
// one stuffed with items costs about its size (fastjson's errors quoted the
// rest of the text at every level of nesting: a 1 MiB file took 1.2 GiB and
// printed 1 MiB; its parse tree cost about 400 bytes an item).
func TestDecodeLenientRefusesHostileFilesShortly(t *testing.T) {
	head := `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l"},"spec":`
	nested := head + strings.Repeat(`{"a":`, 299) + "tru" + strings.Repeat("x", 1<<20)
	many := head + `{"x":[` + strings.Repeat("0,", 60_000) + `0]}}`
	deep := head + strings.Repeat(`[`, 1000) + strings.Repeat(`]`, 1000) + `}`
	for _, c := range []struct{ name, data, want string }{
		{"not JSON after 299 levels", nested, "cannot decode object: not JSON: invalid character 'x'"},
		{"60,000 items where leaseguard reads none", many, ""},
		{"deeper than the reader reads", deep, "spec: want object, got JSON array"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := DecodeLenient(Leases, []byte(c.data))
			runtime.ReadMemStats(&after)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("error %.300q, want the object read", err)
			case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want) || len(err.Error()) > 300):
				t.Errorf("error %.300q, want a short one starting with %q", err, c.want)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8*uint64(len(c.data))+(8<<20) {
				t.Errorf("allocated %d MiB for %d bytes", alloc>>20, len(c.data))
			}
		})
	}
}

// Typed clients read a MultiClusterLease's times as metav1.MicroTime: a
// written time they cannot read would break every typed Get of the object
// and every typed List of its namespace (the controller's cache). Such a
// write is refused with the layout; one already stored stays repairable.
func TestWrittenTimesAreWhatTypedClientsRead(t *testing.T) {
	for _, c := range []struct {
		s     string
		typed bool
	}{
		{"2026-11-30T14:00:03.123456Z", true},
		{"2026-11-30T14:00:03.123456+02:00", true},
		{"2026-11-30T14:00:03Z", false},
		{"2026-11-30T14:00:03.042Z", false},
		{"2026-11-30T14:00:03.123456789Z", false},
		{"2026-11-30t14:00:03.123456Z", false},
		{"2026-11-30T14:00:03.123456z", false},
		{"2026-11-30T14:00:03,123456Z", false},
		{"2026-11-30T14:00:03.123456+99:00", false},
	} {
		if got := TypedTime(c.s); got != c.typed {
			t.Errorf("TypedTime(%q) = %v, want %v", c.s, got, c.typed)
		}
		var mt metav1.MicroTime
		if err := mt.UnmarshalJSON([]byte(`"` + c.s + `"`)); c.typed && err != nil {
			t.Errorf("%q: TypedTime says readable, metav1.MicroTime: %v", c.s, err)
		} else if err == nil && !c.typed && !strings.Contains(c.s, ",") {
			t.Errorf("%q: TypedTime says unreadable, metav1.MicroTime reads it", c.s)
		}
	}
	obj := func(renewTime string) *Object {
		o, err := DecodeLenient(MultiClusterLeases, []byte(`{"apiVersion":"multicluster.core.cnrm.cloud.google.com/v1alpha1","kind":"MultiClusterLease",
		  "metadata":{"name":"m","namespace":"ns"},"spec":{"holderIdentity":"c","renewTime":"`+renewTime+`"}}`))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	good, seconds, seconds2 := obj("2026-11-30T14:00:03.000000Z"), obj("2026-11-30T14:00:03Z"), obj("2026-11-30T14:00:05Z")
	want := `spec.renewTime "2026-11-30T14:00:05Z" cannot be read by typed clients (metav1.MicroTime): write it as 2006-01-02T15:04:05.000000Z07:00`
	for _, c := range []struct {
		name     string
		old, new *Object
		err      string
	}{
		{"create with seconds only", nil, seconds2, want},
		{"renewal with seconds only", good, seconds2, want},
		{"another untyped time over a stored one", seconds, seconds2, want},
		{"a write that leaves the stored untyped time", seconds, obj("2026-11-30T14:00:03Z"), ""},
		{"a write that repairs it", seconds, good, ""},
	} {
		err := CheckWritten(c.old, c.new)
		if (err == nil) != (c.err == "") || (err != nil && err.Error() != c.err) {
			t.Errorf("%s: CheckWritten = %v, want %q", c.name, err, c.err)
		}
	}
	// Leaseguard itself reads them all: the stored object is decided.
	if !seconds.Spec.RenewTime.Equal(good.Spec.RenewTime) || len(seconds.Unreadable) != 0 {
		t.Errorf("an untyped time is still read: %v, unreadable %v", seconds.Spec.RenewTime, seconds.Unreadable)
	}
}

// The one annotation the partial view decodes is the designation.
func TestWireAnnotationsReadTheDesignation(t *testing.T) {
	f, ok := reflect.TypeOf(wireAnnotations{}).FieldByName("Designated")
	if !ok || f.Tag.Get("json") != DesignationAnnotation {
		t.Fatalf("wireAnnotations reads %q, want %q", f.Tag.Get("json"), DesignationAnnotation)
	}
}
