package policy

import (
	"testing"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
)

// The MultiClusterLease controller's finalizer write is admitted without
// allocating, as every admitted write (decide.go).
func TestControllerFinalizerWriteDoesNotAllocate(t *testing.T) {
	p := mustCompile(t, hardPolicy)
	req := &leaseobject.Request{Resource: leaseobject.MultiClusterLeases, Operation: leaseobject.Update, Caller: ctrl, Now: t0.Add(sec),
		Old: in(leaseobject.MultiClusterLeases, "hard", finalizers(`["example.com/mine"]`)),
		New: in(leaseobject.MultiClusterLeases, "hard", finalizers(`["example.com/mine","`+leaseobject.ControllerFinalizer+`"]`))}
	if d := Decide(p, req); d.Verdict != Allow {
		t.Fatalf("the controller adding its finalizer: %+v", d)
	}
	if allocs := testing.AllocsPerRun(100, func() { Decide(p, req) }); allocs != 0 {
		t.Errorf("Decide allocates %v times per run, want 0", allocs)
	}
}
