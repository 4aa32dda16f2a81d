package faults

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// result is what one fault did to the workload.
type result struct {
	name     string
	duration time.Duration
	// guarded writes the policy admits (leaders' Lease writes, the
	// designated manager's renewals), and how many failed for a reason of
	// the webhook's (refused, or denied by leaseguard).
	guarded, failedGuarded int
	// writes that found the API server itself unavailable, and of them
	// those answered while the API server failed or stalled the control
	// writes too (apiDownShared): its own outage, not leaseguard's.
	apiDown, apiDownShared int
	// control writes sent, and those that failed or took slowControl or
	// longer; controlFrom and controlTo bound the trouble.
	control, controlTrouble int
	controlFrom, controlTo  time.Time
	// leadershipsLost, and of them those lost while the control writes
	// failed or stalled (leadershipsLostShared): the API server's.
	leadershipsLost, leadershipsLostShared int
	// identity changes sent and how many were admitted (wrongAdmissions);
	// nonDesignated counts the guarded writes that were other managers'
	// renewals of the shared MultiClusterLease.
	probes, nonDesignated          int
	wrongIdentity, wrongAdmissions int
	// failOpen counts the API server's calls to leaseguard that failed and
	// were admitted unguarded (failurePolicy Ignore), failClosed those that
	// failed and were refused (Fail): apiserver_admission_webhook_* metrics.
	failOpen, failClosed int
	// failOpenLogged are the failed-open calls the API server's log names
	// in the window (evFailOpen), failOpenShared those of them while the
	// control writes failed or stalled: the API server's own stall timed
	// them out. failOpenReasons counts them by what failed.
	failOpenLogged, failOpenShared int
	failOpenReasons                map[string]int
	// staleRefused counts non-designated renewals refused because they
	// arrived after a newer renewal was stored (renewTime moved backwards).
	// The mutating webhook acknowledges such a renewal (answers it without
	// storing it), so one is refused only when that call failed open. A
	// known gap (docs/reliability.md): the manager's lock retries within its
	// renew deadline, and the test still fails on any leadership lost.
	// Tolerated only in a window where calls failed open (see
	// failedGuardedWrites).
	staleRefused int
	outcomes     map[string]int
	// namespaceMode are the namespace-mode workload's figures, guarded
	// cluster first.
	namespaceMode []nsFigures
	// election are the control plane's coordinated Leases' figures.
	election []electionFigures
	// apiAway is how long the API server's restart left the unguarded
	// cluster's shared renewals unanswered; policyWindow how much longer
	// its MutatingAdmissionPolicy plugin answered the guarded cluster's
	// 503 (restartOutage.schemaWindow).
	apiAway, policyWindow time.Duration
	examples              string
	notes                 string
}

func summarize(name string, events []event, d time.Duration) result {
	r := result{name: name, duration: d, outcomes: map[string]int{}, failOpenReasons: map[string]int{}}
	var examples []string
	shown := map[string]int{}
	example := func(e event) {
		if shown[e.kind] < 5 {
			shown[e.kind]++
			examples = append(examples, fmt.Sprintf("%s %s %s: %s (%s)", e.at.Format("15:04:05.000"), e.kind, e.who, e.outcome, e.detail))
		}
	}
	var trouble []event
	for _, e := range events {
		if e.kind != evControl {
			continue
		}
		r.control++
		if e.outcome != outAdmitted && e.outcome != outConflict || e.at.Sub(e.sent) >= slowControl {
			r.controlTrouble++
			trouble = append(trouble, e)
			if r.controlFrom.IsZero() || e.sent.Before(r.controlFrom) {
				r.controlFrom = e.sent
			}
			r.controlTo = later(r.controlTo, e.at)
		}
	}
	for _, e := range events {
		if e.kind == evControl {
			continue
		}
		switch e.kind {
		case evLeadershipLost:
			r.leadershipsLost++
			if whileControlFailed(e, trouble) {
				r.leadershipsLostShared++
			}
			r.outcomes[e.kind]++
			example(e)
			continue
		case evFailOpen:
			r.failOpenLogged++
			if whileControlFailed(e, trouble) {
				r.failOpenShared++
			}
			r.failOpenReasons[e.outcome]++
			example(e)
			continue
		}
		r.outcomes[e.kind+"/"+e.outcome]++
		if e.outcome == outAPIServerDown || e.outcome == outOther {
			r.apiDown++
			if whileControlFailed(e, trouble) {
				r.apiDownShared++
			}
			example(e)
		}
		switch e.kind {
		case evGuardedWrite, evNonDesignated:
			r.guarded++
			if e.kind == evNonDesignated {
				r.nonDesignated++
			}
			switch {
			case e.kind == evNonDesignated && e.outcome == outDenied && strings.Contains(e.detail, "moves renewTime backwards"):
				r.staleRefused++
				example(e)
			case e.outcome == outDenied || e.outcome == outWebhookUnreachable:
				r.failedGuarded++
				example(e)
			}
		case evIdentityChange:
			r.probes++
			if e.outcome == outAdmitted {
				r.wrongIdentity++
				r.wrongAdmissions++
				example(e)
			}
		}
	}
	r.examples = strings.Join(examples, "\n")
	return r
}

// slowControl is how long a control write may take before it counts as the
// API server in trouble: a ConfigMap update is milliseconds.
const slowControl = 2 * time.Second

// apiDownLookback is how long before its answer a failed write may have
// been sent: the longest client timeout of the workload (the candidates'
// renew deadline), and slack for the two clocks' reads.
const apiDownLookback = renewDeadline + 2*time.Second

// whileControlFailed tells whether e, a write that failed at the API
// server (or a leadership lost, a webhook call failed open: what a write's
// failure ended), was in flight while a control write failed or stalled.
func whileControlFailed(e event, trouble []event) bool {
	for _, c := range trouble {
		if !c.sent.After(e.at.Add(2*time.Second)) && !c.at.Before(e.at.Add(-apiDownLookback)) {
			return true
		}
	}
	return false
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// apiDownOwn are the writes that failed at the API server while it served
// the control writes well: no outage of its own explains them, so a fault
// of leaseguard's (a hung or dropped webhook call timing the client out)
// may.
func (r result) apiDownOwn() int { return r.apiDown - r.apiDownShared }

// leadershipsLostOwn are the leaderships lost while the API server served
// the control writes well. A leader that could not renew through a stalled
// API server lost by the protocol, with or without leaseguard.
func (r result) leadershipsLostOwn() int { return r.leadershipsLost - r.leadershipsLostShared }

// failOpenOwn are the webhook calls that failed open, less those the API
// server's log puts where the control writes failed or stalled: a stalled
// API server times its own calls out. The count is the API server's
// metric; the log only explains, so a call the log missed stays charged.
func (r result) failOpenOwn() int { return max(r.failOpen-r.failOpenShared, 0) }

// controlNote says, in the report, when the API server failed or stalled
// the control writes.
func (r result) controlNote() string {
	if r.controlTrouble == 0 {
		return ""
	}
	note := fmt.Sprintf("; the API server itself failed or stalled %d of %d control writes (a ConfigMap no webhook sees) over %s from %s, and %d of the %d writes that failed at the API server were in flight then",
		r.controlTrouble, r.control, r.controlTo.Sub(r.controlFrom).Round(100*time.Millisecond), r.controlFrom.Format("15:04:05"), r.apiDownShared, r.apiDown)
	if r.leadershipsLostShared > 0 {
		note += fmt.Sprintf(", as were %d of the %d leaderships lost", r.leadershipsLostShared, r.leadershipsLost)
	}
	if r.failOpenShared > 0 {
		note += fmt.Sprintf(", and %d of the %d webhook calls the API server's log says failed open", r.failOpenShared, r.failOpenLogged)
	}
	return note
}

// failOpenNote says, in the report, why webhook calls failed open, from
// the API server's log.
func (r result) failOpenNote() string {
	if r.failOpenLogged == 0 {
		return ""
	}
	return "; failed open, by the API server's log: " + countedList(r.failOpenReasons)
}

// mostFrequentFirst returns counts' keys, the most counted first (then by
// name): what the report's notes list.
func mostFrequentFirst(counts map[string]int) []string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if counts[keys[i]] != counts[keys[j]] {
			return counts[keys[i]] > counts[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

// countedList renders counts as "3× a, 1× b", the most counted first.
func countedList(counts map[string]int) string {
	keys := mostFrequentFirst(counts)
	for i, k := range keys {
		keys[i] = fmt.Sprintf("%d× %s", counts[k], k)
	}
	return strings.Join(keys, ", ")
}

// joinNotes joins a report's notes, skipping empty ones.
func joinNotes(a, b string) string {
	a = strings.TrimPrefix(a, "; ")
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// failedGuardedWrites is failedGuarded, with the stale non-designated
// renewals refused in a window where no webhook call failed open: there
// the mutating webhook acknowledged every renewal it was sent, so a refusal
// is leaseguard's fault.
func (r result) failedGuardedWrites() int {
	if r.failOpen == 0 {
		return r.failedGuarded + r.staleRefused
	}
	return r.failedGuarded
}

// staleNote says, in the report, how many stale renewals were refused.
func (r result) staleNote() string {
	if r.staleRefused == 0 {
		return ""
	}
	return fmt.Sprintf("; %d non-designated renewals refused as stale (renewTime behind the stored one: the mutating webhook's acknowledgment failed open: a known gap, docs/reliability.md)", r.staleRefused)
}

// assertClean fails on what the design promises never happens while at
// least one replica serves: a guarded write that fails, a leadership lost,
// an identity change admitted. API-server outages are no fault of the
// webhook's and are reported, not failed, unless strict; strict, a write
// that failed at the API server fails the test unless the control writes
// show the API server in trouble of its own at that moment (a CI machine
// starving the kind node once kept it away 40 s in a rolling restart).
// Leaderships lost and webhook calls failed open while the control writes
// show that trouble are the API server's too, and reported: in one CI run
// it stalled 38 of 249 control writes over 3.5 minutes of a rolling
// restart, and 5 leaders could not renew through it.
//
// No webhook call may fail open either. An API server keeps HTTP/1.1
// connections to a replica; one that reused its idle connection just as
// the replica closed it on SIGTERM got EOF, and POST is not retried. The
// replica now drains on SIGTERM (--shutdown-drain: every answer says
// "Connection: close" before it stops), after the preStop sleep. Without
// the sleep a rolling restart failed open 2 to 6 times, with it and no
// drain about once in six runs (docs/reliability.md).
func assertClean(t *testing.T, r result, strict bool) {
	t.Helper()
	const failOpenAllowed = 0
	if r.failedGuardedWrites() > 0 || r.leadershipsLostOwn() > 0 || r.wrongAdmissions > 0 || r.failOpenOwn() > failOpenAllowed {
		t.Errorf("%s: %d failed guarded writes, %d leaderships lost, %d wrong admissions, %d webhook calls failed open (at most %d allowed), while the API server served the control writes well; first ones:\n%s",
			r.name, r.failedGuardedWrites(), r.leadershipsLostOwn(), r.wrongAdmissions, r.failOpenOwn(), failOpenAllowed, r.examples)
	}
	if strict && r.apiDownOwn() > 0 {
		t.Errorf("%s: %d writes failed at the API server while it served the control writes well:\n%s", r.name, r.apiDownOwn(), r.examples)
	}
}

// assertHeld is assertClean for a replica lost or cut off while its
// endpoint is still ready: a call the API server had already sent down the
// lost path can only fail, and the entry's failurePolicy decides it, as
// designed (docs/reliability.md). Rightful renewals are on the Ignore route,
// so their failed calls are counted as failed open but still admitted;
// anything else is refused. What must hold is the same: no guarded write
// failed, no leadership lost, no wrong admission, no API server error.
func assertHeld(t *testing.T, r result) {
	t.Helper()
	if r.failedGuardedWrites() > 0 || r.leadershipsLostOwn() > 0 || r.wrongAdmissions > 0 || r.apiDownOwn() > 0 {
		t.Errorf("%s: %d failed guarded writes, %d leaderships lost, %d wrong admissions, %d API server errors while it served the control writes well; first ones:\n%s",
			r.name, r.failedGuardedWrites(), r.leadershipsLostOwn(), r.wrongAdmissions, r.apiDownOwn(), r.examples)
	}
}

// webhookFailures reads the API server's counts of failed calls to
// leaseguard's webhooks: admitted anyway (fail open) and refused.
func webhookFailures(ctx context.Context, admin kubernetes.Interface) (failOpen, failClosed int, err error) {
	raw, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.Contains(line, `.leaseguard.io"`) {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(f[1], &v); err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(line, "apiserver_admission_webhook_fail_open_count{"):
			failOpen += int(v)
		case strings.HasPrefix(line, "apiserver_admission_webhook_rejection_count{") && strings.Contains(line, `error_type="calling_webhook_error"`):
			failClosed += int(v)
		}
	}
	return failOpen, failClosed, nil
}

// failOpensLogged reads, from the API server's log, the calls to
// leaseguard's webhooks that failed open between from and to: when each
// failed and why (the metric counts them, but neither says when, nor
// whether the API server itself was stalled then).
func failOpensLogged(ctx context.Context, admin kubernetes.Interface, from, to time.Time) ([]event, error) {
	pods, err := admin.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "component=kube-apiserver"})
	if err != nil {
		return nil, err
	}
	if len(pods.Items) == 0 {
		return nil, errors.New("no Pod labelled component=kube-apiserver in kube-system")
	}
	var events []event
	for _, p := range pods.Items {
		since := metav1.NewTime(from.Add(-time.Second))
		raw, err := admin.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{SinceTime: &since, Timestamps: true, LimitBytes: ptr.To[int64](64 << 20)}).DoRaw(ctx)
		if err != nil {
			return nil, fmt.Errorf("the log of %s: %w", p.Name, err)
		}
		for _, e := range parseFailOpens(string(raw)) {
			if !e.at.Before(from) && !e.at.After(to) {
				events = append(events, e)
			}
		}
	}
	return events, nil
}

// failOpenLine is what the API server's webhook dispatchers log, at warning
// level, for a call that failed with failurePolicy Ignore.
const failOpenLine = "Failed calling webhook, failing open "

// parseFailOpens finds, in an API server's log read with timestamps, the
// calls to leaseguard's webhooks (named *.leaseguard.io) that failed open.
// Their outcome is the error's last part (EOF, context deadline exceeded,
// connection refused) and the webhook's name.
func parseFailOpens(log string) []event {
	var events []event
	for _, line := range strings.Split(log, "\n") {
		stamp, rest, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		_, msg, ok := strings.Cut(rest, failOpenLine)
		if !ok {
			continue
		}
		hook, callErr, ok := strings.Cut(msg, ": ")
		if !ok || !strings.HasSuffix(hook, ".leaseguard.io") {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil {
			continue
		}
		reason := callErr
		if i := strings.LastIndex(callErr, ": "); i >= 0 {
			reason = callErr[i+2:]
		}
		events = append(events, event{at: at, kind: evFailOpen, who: hook, outcome: fmt.Sprintf("%s (%s)", strings.TrimSpace(reason), hook), detail: callErr})
	}
	return events
}

// counterDelta is after-before, or after when the counter was reset (the API
// server restarted in between).
func counterDelta(before, after int) int {
	if after < before {
		return after
	}
	return after - before
}

func renderReport(results []result) string {
	var b strings.Builder
	b.WriteString("| fault | window | guarded writes (of them non-designated renewals) | failed guarded writes | leaderships lost | identity changes sent | wrong admissions | webhook calls failed open / closed | notes |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %.0f s | %d (%d) | %d | %d | %d | %d | %d / %d | %s |\n", r.name, r.duration.Seconds(),
			r.guarded, r.nonDesignated, r.failedGuardedWrites(), r.leadershipsLost, r.probes, r.wrongAdmissions, r.failOpen, r.failClosed, r.notes)
	}
	b.WriteString("\nOutcomes by kind of write:\n\n")
	for _, r := range results {
		var keys []string
		for k := range r.outcomes {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %d", k, r.outcomes[k]))
		}
		fmt.Fprintf(&b, "- %s: %s\n", r.name, strings.Join(parts, ", "))
	}
	return b.String()
}
