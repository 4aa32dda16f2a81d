package faults

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestClassifyTellsLeaseguardFromTheAPIServer(t *testing.T) {
	lease := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, outAdmitted},
		{apierrors.NewForbidden(lease, "x", errors.New(`admission webhook "validate.leases.leaseguard.io" denied the request: leaseguard: rule r: ...`)), outDenied},
		{apierrors.NewInternalError(errors.New(`failed calling webhook "validate.leases.leaseguard.io": failed to call webhook: connection refused`)), outWebhookUnreachable},
		{apierrors.NewForbidden(lease, "x", errors.New(`User "u" cannot patch resource "leases"`)), outAPIServerDown},
		{fmt.Errorf("Patch %q: dial tcp 198.18.0.1:6443: connect: connection refused", "https://x"), outAPIServerDown},
		{apierrors.NewConflict(lease, "x", errors.New("changed")), outConflict},
		{errors.New("something else"), outOther},
	} {
		if got := classify(c.err); got != c.want {
			t.Errorf("classify(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestSummarizeCountsWhatTheDesignPromisesAgainst(t *testing.T) {
	now := time.Now()
	denied := errors.New("leaseguard: denied")
	events := []event{
		{at: now, kind: evGuardedWrite, outcome: outAdmitted},
		{at: now, kind: evGuardedWrite, outcome: outWebhookUnreachable, detail: "refused"},
		{at: now, kind: evGuardedWrite, outcome: outAPIServerDown},
		{at: now, kind: evNonDesignated, outcome: outDenied, detail: denied.Error()},
		{at: now, kind: evNonDesignated, outcome: outAdmitted},
		{at: now, kind: evIdentityChange, outcome: outAdmitted},
		{at: now, kind: evIdentityChange, outcome: outWebhookUnreachable},
		{at: now, kind: evLeadershipLost, outcome: outOther},
	}
	r := summarize("f", events, time.Second)
	// A non-designated manager's renewal of the shared lease is a guarded
	// write: refused, it fails (that manager would stop leading).
	if r.guarded != 5 || r.failedGuarded != 2 || r.apiDown != 1 || r.nonDesignated != 2 || r.probes != 2 ||
		r.wrongAdmissions != 1 || r.wrongIdentity != 1 || r.leadershipsLost != 1 {
		t.Fatalf("summary: %+v", r)
	}
	if report := renderReport([]result{r}); !strings.Contains(report, "| f | 1 s | 5 (2) | 2 | 1 | 2 | 1 | 0 / 0 |") {
		t.Fatalf("report:\n%s", report)
	}
}

// A non-designated renewal that arrives after a newer one was stored is
// refused as moving renewTime backwards. That is tolerated only where the
// API server's calls failed open (the mutating webhook's acknowledgment
// was skipped); anywhere else it is leaseguard's failure.
func TestStaleNonDesignatedRenewalsCountOnlyWhereCallsFailedOpen(t *testing.T) {
	now := time.Now()
	stale := `admission webhook "renewals.leases.leaseguard.io" denied the request: leaseguard: rule e2e-mcl: x moves renewTime backwards on multiclusterlease ns/kcc-leader (stored renewTime: 2026-12-03T13:22:08.353008Z)`
	events := []event{
		{at: now, kind: evNonDesignated, outcome: outDenied, detail: stale},
		{at: now, kind: evNonDesignated, outcome: outAdmitted},
		// A designated manager's stale write is never tolerated.
		{at: now, kind: evGuardedWrite, outcome: outDenied, detail: stale},
	}
	r := summarize("partition", events, time.Second)
	if r.staleRefused != 1 || r.failedGuarded != 1 {
		t.Fatalf("stale %d, failed %d; want 1 and 1: %+v", r.staleRefused, r.failedGuarded, r)
	}
	if got := r.failedGuardedWrites(); got != 2 {
		t.Errorf("no call failed open: failed guarded writes %d, want 2 (the stale refusal is leaseguard's)", got)
	}
	r.failOpen = 3
	if got := r.failedGuardedWrites(); got != 1 {
		t.Errorf("calls failed open: failed guarded writes %d, want 1", got)
	}
	if n := r.staleNote(); !strings.Contains(n, "1 non-designated renewals refused as stale") {
		t.Errorf("note %q", n)
	}
}
