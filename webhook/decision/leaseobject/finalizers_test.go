package leaseobject

import (
	"testing"

	mcl "github.com/leaseguard/leaseguard/api/multicluster/v1alpha1"
)

// The finalizer a status writer may change is the one the
// MultiClusterLease controller adds (docs/design.md §2).
func TestControllerFinalizerIsTheMultiClusterLeaseControllers(t *testing.T) {
	if ControllerFinalizer != mcl.Finalizer {
		t.Fatalf("ControllerFinalizer = %q, want %q", ControllerFinalizer, mcl.Finalizer)
	}
}

func TestSameFinalizersBut(t *testing.T) {
	const own = ControllerFinalizer
	for _, c := range []struct {
		name string
		a, b string
		want bool
	}{
		{"both empty", "", "", true},
		{"own added", "", `["` + own + `"]`, true},
		{"own removed", `["` + own + `"]`, "", true},
		{"own added after another", `["a.io/x"]`, `["a.io/x","` + own + `"]`, true},
		{"own added before another", `["a.io/x"]`, `["` + own + `","a.io/x"]`, true},
		{"own removed between others", `["a.io/x","` + own + `","b.io/y"]`, `["a.io/x","b.io/y"]`, true},
		{"own twice, removed", `["` + own + `","` + own + `"]`, "", true},
		{"another added", "", `["a.io/x"]`, false},
		{"another removed", `["a.io/x","` + own + `"]`, `["` + own + `"]`, false},
		{"another replaced", `["a.io/x"]`, `["a.io/never-released"]`, false},
		{"others reordered", `["a.io/x","b.io/y"]`, `["b.io/y","a.io/x"]`, false},
		{"a prefix of another", `["a.io/x"]`, `["a.io/x","a.io/x"]`, false},
		// Not what the API server writes: decoded, to the same verdicts.
		{"spaces", `[ "a.io/x" ]`, `["a.io/x","` + own + `"]`, true},
		{"escaped own", `["a.io/x"]`, `["a.io/x","multiclusterlease.core.cnrm.cloud.google.com\/finalizer"]`, true},
		{"escaped other", `["a.io/x"]`, `["a.io\/y"]`, false},
		{"an empty name", `[""]`, ``, false},
		{"not strings", `[1]`, `[1]`, true},
		{"not strings, changed", `[1]`, `[2]`, false},
		{"not a list", `{"a":1}`, `[]`, false},
	} {
		if got := SameFinalizersBut(c.a, c.b, own); got != c.want {
			t.Errorf("%s: SameFinalizersBut(%s, %s) = %v, want %v", c.name, c.a, c.b, got, c.want)
		}
		if got := SameFinalizersBut(c.b, c.a, own); got != c.want {
			t.Errorf("%s, reversed: SameFinalizersBut(%s, %s) = %v, want %v", c.name, c.b, c.a, got, c.want)
		}
	}
}
