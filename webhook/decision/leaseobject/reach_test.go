package leaseobject

import (
	"strings"
	"testing"
)

// Labels and annotations are kept as text the core compares (a status
// writer changes neither): equal maps as the API server writes them read
// alike, absent, null and empty alike, and a large map as its digest.
func TestLabelsAndAnnotationsAreKeptAsText(t *testing.T) {
	obj := func(meta string) string {
		return `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"l","namespace":"ns"` + meta + `}}`
	}
	read := func(meta string) *Object {
		t.Helper()
		o, err := DecodeJSON(Leases, []byte(obj(meta)))
		if err != nil {
			t.Fatalf("%s: %v", meta, err)
		}
		return o
	}
	for _, meta := range []string{``, `,"labels":null,"annotations":null`, `,"labels":{},"annotations":{}`} {
		if o := read(meta); o.Labels != "" || o.Annotations != "" {
			t.Errorf("%s: labels %q, annotations %q, want none", meta, o.Labels, o.Annotations)
		}
	}
	o := read(`,"labels":{"a": "1", "b":"2"},"annotations":{"leaseguard.io/designated-manager":"u","x":"y"}`)
	if o.Labels != `{"a":"1","b":"2"}` || o.Annotations != `{"leaseguard.io/designated-manager":"u","x":"y"}` || o.Designated != "u" || !o.HasDesignation {
		t.Errorf("labels %q, annotations %q, designated %q", o.Labels, o.Annotations, o.Designated)
	}
	if a, b := read(`,"annotations":{"x":"y"}`), read(`,"annotations":{"x":"z"}`); a.Annotations == b.Annotations {
		t.Errorf("different annotations read alike: %q", a.Annotations)
	}
	big := `,"labels":{"k":"` + strings.Repeat("v", 8<<10) + `"}`
	if l := read(big).Labels; len(l) > 100 || !strings.Contains(l, "sha256") {
		t.Errorf("a large label map is kept as %d bytes %.60q, want its length and digest", len(l), l)
	}
	if read(big).Labels == read(strings.Replace(big, `"k"`, `"j"`, 1)).Labels {
		t.Errorf("different large label maps read alike")
	}
	// The designation is still read as the API machinery reads it.
	_, err := DecodeJSON(Leases, []byte(obj(`,"annotations":{"leaseguard.io/designated-manager":"a","leaseguard.io/designated-manager":"b"}`)))
	if err == nil || !strings.Contains(err.Error(), "metadata.annotations.leaseguard.io/designated-manager appears more than once") {
		t.Errorf("a duplicated designation: %v", err)
	}
}
