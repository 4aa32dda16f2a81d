package faults

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/leaseguard/leaseguard/test/cluster/kccworkload"
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

// An exit counts against leaseguard where the same fault cost the
// unguarded cluster nothing; where it cost it some leaderships, only a
// difference beyond chance does.
func TestLeaseguardsExitsAreThoseTheUnguardedTwinDidNotHave(t *testing.T) {
	guarded := nsFigures{exits: map[string]int{"kcc-03": 2, "kcc-04": 0}}
	if got := leaseguardsExits(guarded, nsFigures{}, false); len(got) != 1 || got[0] != "kcc-03" {
		t.Errorf("the fault cost the unguarded cluster nothing: leaseguard's exits %v, want [kcc-03]", got)
	}
	// An API server away about as long as the renew deadline: which
	// managers lose is timing, independently in each cluster.
	partial := nsFigures{exits: map[string]int{"kcc-02": 1, "kcc-04": 1, "kcc-05": 1, "kcc-07": 1}}
	eight := nsFigures{exits: map[string]int{"kcc-01": 1, "kcc-02": 1, "kcc-03": 1, "kcc-04": 1, "kcc-05": 1, "kcc-06": 1, "kcc-08": 1, "kcc-10": 1}}
	if got := leaseguardsExits(eight, partial, false); len(got) != 0 {
		t.Errorf("8 guarded exits beside 4 unguarded: leaseguard's %v, want none", got)
	}
	one := nsFigures{figures: kccworkload.Figures{Missed: map[string]bool{"kcc-01": true}}}
	if got := leaseguardsExits(eight, one, false); len(got) != 7 {
		t.Errorf("8 guarded exits beside 1 unguarded namespace without a leader: leaseguard's %v, want the 7 whose twins kept leading", got)
	}
	// The API server itself stalled (the control writes say so): which
	// managers it ends is timing, even where it ended no unguarded one;
	// many more guarded exits than chance allows are still charged.
	three := nsFigures{exits: map[string]int{"kcc-01": 1, "kcc-05": 1, "kcc-09": 1}}
	if got := leaseguardsExits(three, nsFigures{}, true); len(got) != 0 {
		t.Errorf("3 guarded exits while the API server stalled, none unguarded: leaseguard's %v, want none", got)
	}
	if got := leaseguardsExits(three, nsFigures{}, false); len(got) != 3 {
		t.Errorf("3 guarded exits while the API server served, none unguarded: leaseguard's %v, want all 3", got)
	}
	if got := leaseguardsExits(eight, nsFigures{}, true); len(got) != 8 {
		t.Errorf("8 guarded exits while the API server stalled, none unguarded: leaseguard's %v, want all 8", got)
	}
}

// After a restart the API server answers the shared renewals leaseguard's
// admission policy acknowledges 503 for a while more: the guarded cluster's
// non-designated managers are without it longer than their twins. Their
// exits are the protocol's where the restart alone ended unguarded
// leaderships, or where it and that window reach the lock's renew deadline
// less a retry period; a window of none excuses nothing, however long the
// restart, and a short restart that cost the unguarded cluster nothing
// excuses nothing either.
func TestTheRestartWindowExplainsExitsOnlyAtTheProtocolsEdge(t *testing.T) {
	for _, c := range []struct {
		away, window  time.Duration
		unguardedLost int
		want          bool
	}{
		{away: 6600 * time.Millisecond, window: 1500 * time.Millisecond, unguardedLost: 10, want: true}, // a kind run: every manager exited
		{away: 6 * time.Second, window: 2 * time.Second, want: true},
		{away: 5 * time.Second, window: 2 * time.Second, unguardedLost: 3, want: true},
		{away: 5 * time.Second, window: 2500 * time.Millisecond, want: false},
		{away: 9 * time.Second, unguardedLost: 5, want: false},
	} {
		r := result{apiAway: c.away, policyWindow: c.window}
		if got := restartWindowEndsLeaderships(r, c.unguardedLost); got != c.want {
			t.Errorf("away %s, window %s, %d unguarded leaders lost: the window ends leaderships %v, want %v", c.away, c.window, c.unguardedLost, got, c.want)
		}
	}
}

// The schema window is only the 503s the admission policy plugin answered
// after the unguarded renewals were answered again: not the guarded
// outage's other failures, and nothing where no 503 came.
func TestTheSchemaWindowIsThe503sAfterTheUnguardedCameBack(t *testing.T) {
	t0 := time.Now()
	unguarded := restartOutage{failed: t0, back: t0.Add(7 * time.Second)}
	guarded := restartOutage{failed: t0, back: t0.Add(15 * time.Second), answered503: 12, last503: t0.Add(9 * time.Second),
		failures: map[string]int{"503 (schema not read yet)": 12, "no answer": 40, "500 InternalError": 3}}
	if got := guarded.schemaWindow(unguarded); got != 2100*time.Millisecond {
		t.Errorf("schema window %s, want 2.1s (the last 503 at 9 s, the unguarded back at 7 s, one probe period)", got)
	}
	if got := (restartOutage{failed: t0, back: t0.Add(15 * time.Second)}).schemaWindow(unguarded); got != 0 {
		t.Errorf("schema window without a 503: %s, want 0", got)
	}
	early := restartOutage{answered503: 1, last503: t0.Add(3 * time.Second)}
	if got := early.schemaWindow(unguarded); got != 0 {
		t.Errorf("a 503 before the unguarded came back: schema window %s, want 0", got)
	}
	if got, want := guarded.failureNote(), "40× no answer, 12× 503 (schema not read yet), 3× 500 InternalError"; got != want {
		t.Errorf("failure note %q, want %q", got, want)
	}
}

// A write that failed at the API server is leaseguard's unless the control
// writes, which no webhook of leaseguard's sees, failed or stalled while it
// was in flight; so are a leadership lost and a webhook call failed open.
func TestAPIServerFailuresCountAgainstLeaseguardOnlyWhileControlWritesWereServed(t *testing.T) {
	t0 := time.Now()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	control := func(sent, answered float64, outcome string) event {
		return event{at: at(answered), sent: at(sent), kind: evControl, outcome: outcome}
	}
	events := []event{
		control(0, 0.01, outAdmitted),
		{at: at(5), kind: evGuardedWrite, outcome: outAPIServerDown}, // nothing wrong with the control writes: leaseguard's
		control(20, 25, outAPIServerDown),
		control(25.5, 28.5, outAdmitted),                                // admitted, but 3 s: stalled
		{at: at(27), kind: evGuardedWrite, outcome: outAPIServerDown},   // in flight during the outage
		{at: at(38), kind: evIdentityChange, outcome: outAPIServerDown}, // sent at 28 at the earliest: overlaps the stalled write
		{at: at(45), kind: evNonDesignated, outcome: outAPIServerDown},  // long after
		control(44, 44.01, outAdmitted),
	}
	events = append(events,
		event{at: at(30), kind: evLeadershipLost, who: "a"},                           // its renewals failed through the stall: the API server's
		event{at: at(60), kind: evLeadershipLost, who: "b"},                           // the API server served: leaseguard's
		event{at: at(26), kind: evFailOpen, outcome: "context deadline exceeded (x)"}, // timed out in the stall
		event{at: at(50), kind: evFailOpen, outcome: "EOF (x)"},                       // the API server served: leaseguard's
		event{at: at(51), kind: evFailOpen, outcome: "EOF (x)"},
	)
	r := summarize("f", events, time.Minute)
	r.failOpen = 3
	if r.leadershipsLost != 2 || r.leadershipsLostOwn() != 1 {
		t.Errorf("leaderships lost %d, of them while the control writes were served %d; want 2 and 1", r.leadershipsLost, r.leadershipsLostOwn())
	}
	if r.failOpenLogged != 3 || r.failOpenShared != 1 || r.failOpenOwn() != 2 {
		t.Errorf("failed open by the log %d, of them in the stall %d, charged %d; want 3, 1, 2", r.failOpenLogged, r.failOpenShared, r.failOpenOwn())
	}
	if n := r.failOpenNote(); n != "; failed open, by the API server's log: 2× EOF (x), 1× context deadline exceeded (x)" {
		t.Errorf("fail-open note %q", n)
	}
	// The metric is the count: a log that named more calls than it (read
	// twice, say) never makes the charge negative.
	r.failOpen = 0
	if got := r.failOpenOwn(); got != 0 {
		t.Errorf("no call failed open by the metric: charged %d, want 0", got)
	}
	if r.control != 4 || r.controlTrouble != 2 {
		t.Errorf("control writes %d, in trouble %d; want 4 and 2", r.control, r.controlTrouble)
	}
	if r.apiDown != 4 || r.apiDownShared != 2 || r.apiDownOwn() != 2 {
		t.Errorf("failed at the API server %d, of them while the control writes failed %d, own %d; want 4, 2, 2", r.apiDown, r.apiDownShared, r.apiDownOwn())
	}
	if r.guarded != 3 {
		t.Errorf("control writes counted as guarded writes: %d, want 3", r.guarded)
	}
	if n := r.controlNote(); !strings.Contains(n, "2 of 4 control writes") || !strings.Contains(n, "over 8.5s") || !strings.Contains(n, "2 of the 4 writes") ||
		!strings.Contains(n, "1 of the 2 leaderships lost") || !strings.Contains(n, "1 of the 3 webhook calls") {
		t.Errorf("note %q", n)
	}
	if n := (result{}).controlNote(); n != "" {
		t.Errorf("note without trouble %q", n)
	}
}

func TestSupportNoteNamesTheSharedProcessesAndWhyManagersExitedInTheWindow(t *testing.T) {
	from := time.Date(2026, 12, 6, 10, 0, 0, 500e6, time.UTC)
	exit := func(sec int, code int32, msg string) kccworkload.Termination {
		return kccworkload.Termination{At: from.Truncate(time.Second).Add(time.Duration(sec) * time.Second), ExitCode: code, Message: msg}
	}
	lost := "lost leadership: global lock not renewed"
	after := kccworkload.Processes{
		"cnrm-system": {
			"a": {Namespace: "kcc-01", Restarts: 2, LastExits: []kccworkload.Termination{exit(1, 1, lost)}},
			"b": {Namespace: "kcc-02", Restarts: 1, LastExits: []kccworkload.Termination{exit(-60, 1, "an exit of an earlier window")}},
			"c": {Namespace: "kcc-03", Restarts: 1, LastExits: []kccworkload.Termination{exit(0, 2, "renew: Forbidden")}},
		},
		"cnrm-unguarded": {"d": {Namespace: "kcc-01", Restarts: 1, LastExits: []kccworkload.Termination{exit(3, 1, lost)}}},
	}
	got := supportNote(map[string]int{kccworkload.Emulator: 1}, after, from)
	want := `namespace mode: gcs-emulator exited 1 times; 2× "exit 1: lost leadership: global lock not renewed"; 1× "exit 2: renew: Forbidden"`
	if got != want {
		t.Errorf("note\n%s\nwant\n%s", got, want)
	}
	if got := supportNote(nil, after, from.Add(time.Minute)); got != "" {
		t.Errorf("nothing exited in the window: %q", got)
	}
}

func TestElectionFiguresCountHolderChangesAndTheLongestStillRenewTime(t *testing.T) {
	t0 := time.Now()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	kcm := func(s float64, holder string, renewed float64) leaseSample {
		return leaseSample{at: at(s), component: "kube-controller-manager", holder: holder, renewed: at(renewed), transitions: 1}
	}
	samples := []leaseSample{
		kcm(0, "a", 0), kcm(1, "a", 0), kcm(2, "a", 2), kcm(3, "a", 2), kcm(4, "a", 2), kcm(5, "a", 2), kcm(6, "a", 6),
		{at: at(6.5), component: "kube-controller-manager", err: errors.New("unavailable")},
		kcm(7, "b", 7), kcm(20, "b", 20),
		{at: at(1), component: "kube-scheduler", holder: "s", renewed: at(1)},
	}
	got := summarizeElection(samples, at(0), at(8))
	if len(got) != 2 {
		t.Fatalf("figures %+v", got)
	}
	if f := got[0]; f.holderChanges != 1 || f.longestStale != 4*time.Second || f.samples != 8 {
		t.Errorf("kube-controller-manager: %+v, want 1 holder change, renewTime still 4s, 8 samples", f)
	}
	if f := got[1]; f.holderChanges != 0 || f.samples != 1 {
		t.Errorf("kube-scheduler: %+v", f)
	}
	if n := electionNote(got); !strings.Contains(n, "kube-controller-manager 1 holder changes, renewTime still at most 4s") {
		t.Errorf("note %q", n)
	}
	if h := strings.Join(got[0].holders, " → "); h != "a → b" {
		t.Errorf("kube-controller-manager's holders %q, want a → b", h)
	}
}

// A holder change is the component's own when its container restarted
// in the window and its Lease never stood still as long as the renew
// deadline: the new process is a new candidate. One that lost its Lease
// (renewTime still for the renew deadline) and restarted for it is
// charged, as is a change with no restart.
func TestAHolderChangeIsTheComponentsOwnOnlyWhenItRestartedWithoutMissingARenewal(t *testing.T) {
	for _, c := range []struct {
		name    string
		f       electionFigures
		charged int
	}{
		{"a restart, renewals kept", electionFigures{holderChanges: 1, restarts: 1, longestStale: 3 * time.Second}, 0},
		{"no restart", electionFigures{holderChanges: 1, longestStale: 3 * time.Second}, 1},
		{"a restart after the Lease stood still for the renew deadline", electionFigures{holderChanges: 1, restarts: 1, longestStale: renewDeadline}, 1},
		{"two changes, one restart", electionFigures{holderChanges: 2, restarts: 1, longestStale: 2 * time.Second}, 1},
	} {
		if got := c.f.holderChanges - c.f.ownRestarts(); got != c.charged {
			t.Errorf("%s: %d holder changes charged, want %d", c.name, got, c.charged)
		}
	}
}

// The API server logs each call to a webhook that failed open; only
// leaseguard's count, with when they failed and why.
func TestFailOpensAreReadFromTheAPIServersLog(t *testing.T) {
	log := strings.Join([]string{
		`2026-12-06T09:39:50.123456789Z W1206 09:39:50.123456       1 dispatcher.go:210] Failed calling webhook, failing open acknowledge.multiclusterleases.leaseguard.io: failed calling webhook "acknowledge.multiclusterleases.leaseguard.io": failed to call webhook: Post "https://leaseguard.leaseguard-system.svc:443/mutate?timeout=5s": context deadline exceeded`,
		`2026-12-06T09:39:51.000000000Z W1206 09:39:51.000000       1 dispatcher.go:205] Failed calling webhook, failing open other.example.com: failed calling webhook "other.example.com": EOF`,
		`2026-12-06T09:39:52.5Z W1206 09:39:52.500000       1 dispatcher.go:205] Failed calling webhook, failing open leases.leaseguard.io: failed calling webhook "leases.leaseguard.io": failed to call webhook: Post "https://leaseguard.leaseguard-system.svc:443/validate": EOF`,
		`2026-12-06T09:39:53Z I1206 09:39:53.000000       1 controller.go:1] something else`,
		`not a timestamp W1206 Failed calling webhook, failing open leases.leaseguard.io: x`,
		``,
	}, "\n")
	got := parseFailOpens(log)
	if len(got) != 2 {
		t.Fatalf("%d fail-opens, want leaseguard's 2: %+v", len(got), got)
	}
	if got[0].who != "acknowledge.multiclusterleases.leaseguard.io" || got[0].outcome != "context deadline exceeded (acknowledge.multiclusterleases.leaseguard.io)" ||
		!got[0].at.Equal(time.Date(2026, 12, 6, 9, 39, 50, 123456789, time.UTC)) || got[0].kind != evFailOpen {
		t.Errorf("first %+v", got[0])
	}
	if got[1].outcome != "EOF (leases.leaseguard.io)" || !got[1].at.Equal(time.Date(2026, 12, 6, 9, 39, 52, 500e6, time.UTC)) {
		t.Errorf("second %+v", got[1])
	}
}
