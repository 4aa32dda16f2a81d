package vap

import (
	"context"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
)

// parityCase is one write of the corpus: a table case of the policy core
// or a generated one. Its times are relative to Request.Now; the replay
// moves them to the real clock.
type parityCase struct {
	name    string
	source  string // "table" or "generated"
	request leaseobject.Request
}

// Classes of a case.
const (
	classSupported   = "supported"
	classUnsupported = "unsupported"
	classNotReplayed = "not replayed"
)

// result is what one case gave on both API servers.
type result struct {
	c            *parityCase
	class, why   string
	model        policy.Decision // the core's decision for the write as replayed
	faithful     bool            // the replayed write is decided as the table decides the case
	webhook, vap *outcome
	errWebhook   error
	errVAP       error
	// alone is the webhook alone's answer (--coalesce webhook); asShipped
	// says how it differs from the webhook's as shipped ("" when not).
	alone         *outcome
	errAlone      error
	asShipped     string
	sameVerdict   bool
	sameMessage   bool
	differentCode bool
}

// replayMargin is how far the API servers' clocks may be from the instant
// a case is built for: the request's latency, and the whole seconds of the
// clock admission policies see. Cases whose verdict changes within it are
// not replayed (keep times at least 2s from any boundary).
const replayMargin = 2 * time.Second

// TestVerdictParity sends every case through both API servers and requires
// identical verdicts (allowed or refused, and whether a warning is
// returned) on every case the policies claim to enforce; it lists the
// others with the reason.
func TestVerdictParity(t *testing.T) {
	ctx := context.Background()
	var cases []*parityCase
	for _, c := range corpus.Cases {
		cases = append(cases, &parityCase{name: c.Name, source: "table", request: c.Request})
	}
	cases = append(cases, generatedCases(300, 14)...)
	var results []*result
	for n, c := range cases {
		r := replayCase(ctx, t, c, n)
		results = append(results, r)
		switch {
		case r.errWebhook != nil || r.errVAP != nil || r.errAlone != nil:
			t.Errorf("%s: replay failed: webhook side: %v; policies side: %v; webhook alone: %v", c.name, r.errWebhook, r.errVAP, r.errAlone)
		case r.class == classNotReplayed:
		default:
			// The webhook must decide as the core does, or the replay is
			// not the write the model describes.
			if r.webhook.allowed() != r.model.Allowed() || (len(r.webhook.guardWarnings()) > 0) != (r.model.Verdict == policy.Warn) {
				t.Errorf("%s: the webhook answered HTTP %d %q (warnings %q); the core decides %v %s %q for the replayed write",
					c.name, r.webhook.Code, r.webhook.Message, r.webhook.guardWarnings(), r.model.Verdict, r.model.Invariant, r.model.Message)
			}
			// As shipped, the MutatingAdmissionPolicy answers some writes
			// in the API server: every answer must be the webhook
			// alone's, whatever the policies support.
			if r.asShipped != "" {
				t.Errorf("%s: as shipped and the webhook alone differ: %s", c.name, r.asShipped)
			}
			if r.class == classSupported && !r.sameVerdict {
				t.Errorf("%s: verdicts differ: webhook HTTP %d %q (warnings %q), policies HTTP %d %q (warnings %q)",
					c.name, r.webhook.Code, r.webhook.Message, r.webhook.guardWarnings(), r.vap.Code, r.vap.Message, r.vap.guardWarnings())
			}
		}
	}
	report(t, results)

	// As shipped, the renewals policy decides in the API server what the
	// fail-open webhook decided before: the corpus must reach it (or the
	// comparison above could not fail for it), and the renewals webhook
	// must be called less than in the webhook-alone configuration.
	refusedInProcess := 0
	for _, r := range results {
		if r.webhook != nil && strings.Contains(r.webhook.Message, "ValidatingAdmissionPolicy 'leaseguard-renewals'") {
			refusedInProcess++
		}
	}
	shipped, err := renewalsWebhookCalls(ctx, webhookEnv)
	if err != nil {
		t.Fatal(err)
	}
	alone, err := renewalsWebhookCalls(ctx, aloneEnv)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the renewals policy, as shipped: %d refusals in the API server; calls to renewals.leases.leaseguard.io: %v as shipped, %v with the webhook alone", refusedInProcess, shipped, alone)
	if refusedInProcess == 0 {
		t.Error("no case was refused by the renewals policy as shipped: the corpus does not reach it")
	}
	if shipped >= alone {
		t.Errorf("as shipped the renewals webhook was called %v times, the webhook alone %v: the renewals policy took nothing", shipped, alone)
	}
}

// renewalsWebhookCalls is the API server's count of its calls to the
// fail-open renewals webhook.
func renewalsWebhookCalls(ctx context.Context, e *env) (float64, error) {
	raw, err := e.admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("scraping the %s API server: %w", e.name, err)
	}
	var calls float64
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_admission_webhook_admission_duration_seconds_count{") || !strings.Contains(line, `name="renewals.leases.leaseguard.io"`) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err != nil {
			return 0, fmt.Errorf("%s: %w", line, err)
		}
		calls += v
	}
	return calls, nil
}

// replayCase replays one case on both API servers at once, and classifies
// it by the core's decision for the write as replayed.
func replayCase(ctx context.Context, t *testing.T, c *parityCase, n int) *result {
	res := &result{c: c}
	req := &c.request
	if why := notReplayable(req); why != "" {
		res.class, res.why = classNotReplayed, why
		return res
	}
	// The instant the write is made for: shortly after now, when the old
	// object is stored and the write sent.
	at := time.Now().Add(150 * time.Millisecond)
	shift := at.Sub(req.Now)
	oldWrite, rewind := renewWrites(req, shift)

	type sideResult struct {
		out        *outcome
		st         *stored
		sent, done time.Time
		err        error
	}
	sides := map[*env]*sideResult{webhookEnv: {}, vapEnv: {}, aloneEnv: {}}
	var wg sync.WaitGroup
	for e, s := range sides {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.out, s.st, s.sent, s.done, s.err = replayOn(ctx, e, req, shift, oldWrite, rewind, n)
		}()
	}
	wg.Wait()
	res.webhook, res.errWebhook = sides[webhookEnv].out, sides[webhookEnv].err
	res.vap, res.errVAP = sides[vapEnv].out, sides[vapEnv].err
	res.alone, res.errAlone = sides[aloneEnv].out, sides[aloneEnv].err
	if res.errWebhook != nil || res.errVAP != nil || res.errAlone != nil {
		return res
	}
	created := at
	if st := sides[webhookEnv].st; st != nil {
		created = st.created
	}
	model := func(now time.Time) policy.Decision {
		return policy.Decide(pol, replayed(req, shift, created, oldWrite, rewind, now))
	}
	res.model = model(at)
	for _, s := range sides {
		if s.sent.Before(at.Add(-replayMargin/2)) || s.done.After(at.Add(replayMargin/2)) {
			res.class, res.why = classNotReplayed, fmt.Sprintf("the write was not answered within %v of the instant it was made for (a loaded machine)", replayMargin/2)
			return res
		}
	}
	orig := policy.Decide(pol, req)
	res.faithful = res.model.Verdict == orig.Verdict && res.model.Invariant == orig.Invariant
	// What the mutating side does (acknowledge or coalesce a renewal) has
	// time boundaries of its own, where the verdict stays "allow" but the
	// spec returned changes: the two configurations answer at instants a
	// loaded machine sets apart, so a case near one is not replayed either.
	mutation := func(now time.Time) string {
		r := replayed(req, shift, created, oldWrite, rewind, now)
		return fmt.Sprintf("acknowledged %v, coalesced %v", policy.Acknowledge(pol, r), policy.Coalesce(pol, r))
	}
	atMutation := mutation(at)
	for _, d := range []time.Duration{-replayMargin, -replayMargin / 2, replayMargin / 2, replayMargin} {
		if m := model(at.Add(d)); m.Verdict != res.model.Verdict || m.Invariant != res.model.Invariant {
			res.class, res.why = classNotReplayed, fmt.Sprintf("within %v of a time boundary (%v %s at %+v)", replayMargin, m.Verdict, m.Invariant, d)
			return res
		}
		if m := mutation(at.Add(d)); m != atMutation {
			res.class, res.why = classNotReplayed, fmt.Sprintf("within %v of a time boundary (%s at %+v)", replayMargin, m, d)
			return res
		}
	}
	fresh := replayed(req, shift, created, oldWrite, rewind, at)
	if fresh.Old != nil {
		fresh.Old.Spec.RenewTime, fresh.Old.Spec.LeaseDuration = at, time.Hour
	}
	res.class, res.why = classify(req, &res.model, fresh)
	res.asShipped = differs(res.webhook, res.alone)
	res.sameVerdict = res.webhook.allowed() == res.vap.allowed() &&
		(len(res.webhook.guardWarnings()) > 0) == (len(res.vap.guardWarnings()) > 0)
	res.differentCode = res.webhook.Code != res.vap.Code
	if !res.webhook.allowed() {
		res.sameMessage = res.webhook.refusal() == res.vap.refusal()
	} else if w, v := res.webhook.guardWarnings(), res.vap.guardWarnings(); len(w) > 0 && len(v) > 0 {
		_, vm, _ := strings.Cut(v[0], "': ")
		res.sameMessage = w[0] == vm
	}
	return res
}

// replayOn stores the case's old object as the fixture identity and makes
// the case's write as its caller.
func replayOn(ctx context.Context, e *env, req *leaseobject.Request, shift time.Duration, oldWrite, rewind time.Time, n int) (out *outcome, st *stored, sent, done time.Time, err error) {
	obj := objectOf(req)
	if err = e.remove(ctx, req.Resource, obj.Namespace, obj.Name); err != nil {
		return
	}
	if req.Old != nil {
		if st, err = e.store(ctx, req.Resource, req.Old, shift, oldWrite); err != nil {
			return
		}
	}
	sent = time.Now()
	if out, err = e.send(ctx, req, st, shift, n, rewind); err != nil {
		return
	}
	done = time.Now()
	err = e.remove(ctx, req.Resource, obj.Namespace, obj.Name)
	return
}

// notReplayable says why a case cannot be sent through the API server.
func notReplayable(req *leaseobject.Request) string {
	for _, o := range []*leaseobject.Object{req.Old, req.New} {
		if o != nil && len(o.Unreadable) > 0 {
			return "its " + o.Unreadable[0].Field + " (" + o.Unreadable[0].Raw + ") is refused by the API server's schema"
		}
		if o != nil && o.GenerateName != "" {
			return "generateName"
		}
	}
	if req.Resource == leaseobject.Leases && req.Subresource != "" {
		return "Leases have no " + req.Subresource + " subresource"
	}
	return ""
}

// renewWrites are the times of the last renewal's managedFields entry: on
// the stored object (what the case says, or, when it says nothing, its
// renewTime, so that a write is never judged as just after the fixture
// stored the object), and the rewound time a case writes itself.
func renewWrites(req *leaseobject.Request, shift time.Duration) (old, rewind time.Time) {
	if o := req.Old; o != nil {
		switch {
		case !o.RenewWrite.IsZero():
			old = o.RenewWrite.Add(shift)
		case !o.Spec.RenewTime.IsZero():
			old = o.Spec.RenewTime.Add(shift)
		}
	}
	if req.Old != nil && req.New != nil && !req.New.RenewWrite.IsZero() {
		stamp := req.Now.Truncate(time.Second)
		if req.New.Spec.RenewTime.Equal(req.Old.Spec.RenewTime) {
			stamp = req.Old.RenewWrite
		}
		if !req.New.RenewWrite.Equal(stamp) {
			rewind = req.New.RenewWrite.Add(shift)
		}
	}
	// The API server stamps its own clock: a stored lease was last written
	// before now, whatever renewTime it holds.
	if latest := req.Now.Add(shift).Add(-time.Second); old.After(latest) {
		old = latest
	}
	return old.Truncate(time.Second), rewind.Truncate(time.Second)
}

// replayed is the request the API server sends for the replayed write,
// decided at now: times moved by shift, the creation time and
// managedFields times the API server set, and the coalescing policy
// applied.
func replayed(req *leaseobject.Request, shift time.Duration, created, oldWrite, rewind, now time.Time) *leaseobject.Request {
	r := *req
	r.Now = now
	r.Old, r.New = moved(req.Resource, req.Old, shift), moved(req.Resource, req.New, shift)
	if r.Old != nil {
		r.Old.CreationTimestamp = created
		r.Old.RenewWrite = oldWrite
	}
	if r.New != nil {
		r.New.CreationTimestamp = created
		if r.Old != nil && r.Subresource == "" && labelled(req) {
			// The replayed UPDATE changes a label (written).
			r.New.Labels = r.Old.Labels + `{"` + parityLabel + `":"…"}`
		}
		switch {
		case r.Old == nil:
			r.New.CreationTimestamp = now.Truncate(time.Second)
			r.New.RenewWrite = stampIf(!r.New.Spec.RenewTime.IsZero(), now)
		case !rewind.IsZero():
			r.New.RenewWrite = rewind
		case r.New.Spec.RenewTime.IsZero():
			r.New.RenewWrite = time.Time{}
		case r.New.Spec.RenewTime.Equal(r.Old.Spec.RenewTime):
			r.New.RenewWrite = oldWrite
		default:
			r.New.RenewWrite = now.Truncate(time.Second)
		}
		if r.Subresource == "" && policy.Coalesce(pol, &r) {
			r.New.Spec.RenewTime = r.Old.Spec.RenewTime
			r.New.RenewWrite = oldWrite
		}
	}
	return &r
}

func stampIf(ok bool, now time.Time) time.Time {
	if !ok {
		return time.Time{}
	}
	return now.Truncate(time.Second)
}

func moved(res leaseobject.Resource, o *leaseobject.Object, shift time.Duration) *leaseobject.Object {
	if o == nil {
		return nil
	}
	c := *o
	// Only the fields the kind has reach the API server.
	if res == leaseobject.Leases {
		c.Spec.RenewDeadline, c.Spec.RetryPeriod = 0, 0
	} else {
		c.Spec.AcquireTime, c.Spec.Transitions, c.Spec.Strategy, c.Spec.PreferredHolder = time.Time{}, 0, "", ""
	}
	for _, t := range []*time.Time{&c.Spec.RenewTime, &c.Spec.AcquireTime} {
		if !t.IsZero() {
			*t = t.Add(shift)
		}
	}
	c.Spec.RenewTime = c.Spec.RenewTime.Truncate(time.Microsecond)
	c.Spec.AcquireTime = c.Spec.AcquireTime.Truncate(time.Microsecond)
	return &c
}

// classify says whether the policies claim to decide the write as the
// webhook does (docs/vap.md lists what they do not).
func classify(req *leaseobject.Request, d *policy.Decision, fresh *leaseobject.Request) (string, string) {
	if d.Invariant == policy.InvariantRenewalRate {
		return classUnsupported, "decided by I6 (minRenewInterval), which the policies do not enforce"
	}
	if req.Operation == leaseobject.Delete && d.Verdict == policy.Allow {
		// Admitted only because the stored lease is stale? The policies
		// cannot tell on a DELETE.
		fresh := *fresh
		if m := policy.Decide(pol, &fresh); m.Verdict != policy.Allow {
			return classUnsupported, "a DELETE admitted because the designation is stale or the lease expired: no server clock on DELETE"
		}
	}
	return classSupported, ""
}

func objectOf(req *leaseobject.Request) *leaseobject.Object {
	if req.New != nil {
		return req.New
	}
	return req.Old
}

// report logs the figures docs/vap.md quotes, and the cases left out.
func report(t *testing.T, results []*result) {
	t.Helper()
	count := map[string]map[string]int{}
	why := map[string]map[string][]string{}
	var supported, same, refused, sameMessage, codes, faithful, tableReplayed, hybridReplayed, hybridSame int
	for _, r := range results {
		if r.errWebhook != nil || r.errVAP != nil || r.errAlone != nil {
			continue
		}
		if r.class != classNotReplayed {
			hybridReplayed++
			if r.asShipped == "" {
				hybridSame++
			}
		}
		if count[r.c.source] == nil {
			count[r.c.source] = map[string]int{}
		}
		count[r.c.source][r.class]++
		if r.class != classSupported {
			if why[r.class] == nil {
				why[r.class] = map[string][]string{}
			}
			why[r.class][r.why] = append(why[r.class][r.why], r.c.name)
			continue
		}
		supported++
		if r.c.source == "table" {
			tableReplayed++
			if r.faithful {
				faithful++
			}
		}
		if r.sameVerdict {
			same++
		}
		if !r.webhook.allowed() || len(r.webhook.guardWarnings()) > 0 {
			refused++
			if r.sameMessage {
				sameMessage++
			}
		}
		if r.differentCode {
			codes++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "verdict parity through three real API servers (as shipped, the webhook alone, ValidatingAdmissionPolicies):\n")
	for _, src := range []string{"table", "generated"} {
		fmt.Fprintf(&b, "  %-9s cases: %d supported, %d unsupported, %d not replayed\n", src,
			count[src][classSupported], count[src][classUnsupported], count[src][classNotReplayed])
	}
	fmt.Fprintf(&b, "  identical verdicts on %d of %d supported cases (%.1f %%)\n", same, supported, 100*float64(same)/float64(max(supported, 1)))
	fmt.Fprintf(&b, "  as shipped (MutatingAdmissionPolicy + webhooks) vs the webhook alone: the same answer (verdict, code, message, spec and annotations returned) on %d of %d replayed cases\n", hybridSame, hybridReplayed)
	fmt.Fprintf(&b, "  table cases replayed as the table decides them: %d of %d\n", faithful, tableReplayed)
	fmt.Fprintf(&b, "  refusals and warnings with the same message: %d of %d; other HTTP code (429 vs 403, 400 vs 422): %d\n", sameMessage, refused, codes)
	for _, class := range []string{classUnsupported, classNotReplayed} {
		var reasons []string
		for r := range why[class] {
			reasons = append(reasons, r)
		}
		sort.Strings(reasons)
		for _, r := range reasons {
			names := why[class][r]
			fmt.Fprintf(&b, "  %s (%d): %s\n", class, len(names), r)
			for i, n := range names {
				if i == 3 && len(names) > 4 {
					fmt.Fprintf(&b, "      ... and %d more\n", len(names)-3)
					break
				}
				fmt.Fprintf(&b, "      %s\n", n)
			}
		}
	}
	for _, r := range results {
		if r.class == classSupported && r.c.source == "table" && !r.faithful {
			fmt.Fprintf(&b, "  replayed as a variant (%v %s; the API server set creationTimestamp or managedFields): %s\n", r.model.Verdict, r.model.Invariant, r.c.name)
		}
	}
	shown := 0
	for _, r := range results {
		if r.class == classSupported && !r.sameMessage && (!r.webhook.allowed() || len(r.webhook.guardWarnings()) > 0) && shown < 20 {
			if shown == 0 {
				fmt.Fprintf(&b, "  messages that differ:\n")
			}
			shown++
			fmt.Fprintf(&b, "    %s\n      webhook:  %q %q\n      policies: %q %q\n", r.c.name, r.webhook.refusal(), r.webhook.guardWarnings(), r.vap.refusal(), r.vap.guardWarnings())
		}
	}
	t.Log("\n" + b.String())
}

// differs says how two answers to one write differ, "" when they do not:
// the verdict, the HTTP code, the message, leaseguard's warnings, and for
// an admitted write the spec and annotations the API server returned (so
// an acknowledgement or a coalescing in one and a stored renewal in the
// other differ).
func differs(a, b *outcome) string {
	switch {
	case a.Code != b.Code:
		return fmt.Sprintf("HTTP %d %q against %d %q", a.Code, a.Message, b.Code, b.Message)
	case untimed(a.refusal()) != untimed(b.refusal()):
		return fmt.Sprintf("message %q against %q", a.refusal(), b.refusal())
	case !slices.EqualFunc(a.guardWarnings(), b.guardWarnings(), func(x, y string) bool { return untimed(x) == untimed(y) }):
		return fmt.Sprintf("warnings %q against %q", a.guardWarnings(), b.guardWarnings())
	}
	if !a.allowed() {
		return ""
	}
	if sa, sb := a.Body["spec"], b.Body["spec"]; !reflect.DeepEqual(sa, sb) {
		return fmt.Sprintf("spec returned %v against %v", sa, sb)
	}
	meta := func(o *outcome) any {
		m, _ := o.Body["metadata"].(map[string]any)
		return m["annotations"]
	}
	if ma, mb := meta(a), meta(b); !reflect.DeepEqual(ma, mb) {
		return fmt.Sprintf("annotations returned %v against %v", ma, mb)
	}
	return ""
}

// measured is a duration a message reports ("1.916s after the stored
// renewal", "1h0m0.114s ahead"): two API servers answer the same write
// milliseconds apart.
var measured = regexp.MustCompile(`\b[0-9]+(h[0-9]+)?(m[0-9]+)?(\.[0-9]+)?(ms|µs|s)\b`)

func untimed(s string) string { return measured.ReplaceAllString(s, "<duration>") }
