package leasetraffic

import (
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
)

// Report is a snapshot of the observed traffic: what `leaseguard top`
// renders and prints as JSON or YAML.
type Report struct {
	Time time.Time `json:"time"`
	// WindowSeconds is the sliding window; ObservedSeconds the time the
	// rates are averaged over (the window, or less just after the start).
	WindowSeconds   float64           `json:"windowSeconds"`
	ObservedSeconds float64           `json:"observedSeconds"`
	Cluster         Totals            `json:"cluster"`
	Namespaces      []NamespaceTotals `json:"namespaces"`
	Leases          []LeaseTraffic    `json:"leases"`
	// Policy is set when a policy is projected (leaseguard top --policy).
	Policy *PolicyReport `json:"policy,omitempty"`
	// WebhookSources are the webhook replicas whose /debug/leases filled
	// the leases' webhook fields (leaseguard top --webhook-stats).
	WebhookSources []string `json:"webhookSources,omitempty"`
	// AdmissionBypass is set while leaseguard's admission configuration is
	// bypassed by an operator (annotation leaseguard.io/bypass).
	AdmissionBypass *AdmissionBypass `json:"admissionBypass,omitempty"`
}

// AdmissionBypass is an operator's bypass of leaseguard's admission
// configuration: leaseguard does not keep it the rendering of its policy,
// whatever it is edited to.
type AdmissionBypass struct {
	// Configuration is the validating webhook configuration that carries
	// the annotation; Reason is its value.
	Configuration string `json:"configuration"`
	Reason        string `json:"reason"`
}

// Totals sum the leases of a namespace or of the cluster, within the window.
type Totals struct {
	Leases          int     `json:"leases"`
	WritesPerSecond float64 `json:"writesPerSecond"`
	Writes          int     `json:"writes"`
	Contested       int     `json:"contested"`
	// Projected is set with a policy: what it would do with these writes.
	Projected *Effects `json:"projected,omitempty"`
}

// NamespaceTotals are the totals of one namespace.
type NamespaceTotals struct {
	Namespace string `json:"namespace"`
	Totals    `json:",inline"`
}

// LeaseTraffic is the traffic of one lease within the window.
type LeaseTraffic struct {
	Resource          string `json:"resource"`
	Namespace         string `json:"namespace"`
	Name              string `json:"name"`
	Holder            string `json:"holder"`
	DesignatedManager string `json:"designatedManager,omitempty"`
	// WritesPerSecond counts the writes that changed the object (a new
	// resourceVersion) over the window.
	WritesPerSecond float64 `json:"writesPerSecond"`
	Writes          int     `json:"writes"`
	// RenewIntervalSeconds is the mean step between successive renewTimes
	// of one holder within the window; 0 when no renewal was seen.
	RenewIntervalSeconds float64 `json:"renewIntervalSeconds,omitempty"`
	LeaseDurationSeconds float64 `json:"leaseDurationSeconds"`
	// Transitions is spec.leaseTransitions of a Lease or
	// status.globalLeaseTransitions of a MultiClusterLease;
	// HolderChanges the holder changes seen within the window.
	Transitions   int32 `json:"transitions"`
	HolderChanges int   `json:"holderChanges"`
	// ExpiresInSeconds is renewTime + leaseDuration - now, by this
	// machine's clock; negative once expired.
	ExpiresInSeconds float64 `json:"expiresInSeconds"`
	// Writers are the field managers (metadata.managedFields) that wrote
	// within the window. They name programs, not users.
	Writers         []Writer `json:"writers,omitempty"`
	Contested       bool     `json:"contested"`
	ContestedReason string   `json:"contestedReason,omitempty"`
	// Projected is set with a policy: what it would do with these writes.
	Projected *Effects `json:"projected,omitempty"`
	// Webhook is what the webhook judged for this lease within the window,
	// from its /debug/leases (leaseguard top --webhook-stats).
	Webhook *WebhookTraffic `json:"webhook,omitempty"`
	// RatesTruncated says the lease was written more than MaxEvents times in
	// the window: its rate is estimated from the span of its last writes.
	RatesTruncated bool `json:"ratesTruncated,omitempty"`
}

// WebhookTraffic is what the webhook judged for one lease within the
// window: every request it saw (also those refused, or not stored), by
// verdict, and the users who sent them.
type WebhookTraffic struct {
	Requests int64           `json:"requests"`
	Verdicts WebhookVerdicts `json:"verdicts"`
	Users    []UserRequests  `json:"users,omitempty"`
}

// WebhookVerdicts count requests by verdict.
type WebhookVerdicts struct {
	Allow int64 `json:"allow"`
	Deny  int64 `json:"deny"`
	Warn  int64 `json:"warn"`
	Audit int64 `json:"audit"`
}

// UserRequests is one user's requests to a lease.
type UserRequests struct {
	User     string `json:"user"`
	Requests int64  `json:"requests"`
}

// Writer is a field manager and its writes within the window.
type Writer struct {
	Manager     string `json:"manager"`
	Subresource string `json:"subresource,omitempty"`
	Writes      int    `json:"writes"`
}

// Effects count what a policy would do with writes.
type Effects struct {
	// Refused: denied with 403. HeldBack: renewals denied with 429 and
	// Retry-After (client-go sends them again later). Warned and Audited
	// would be admitted and counted. Admitted passed every judged check.
	// Coalesced: early renewals acknowledged without being stored
	// (coalesceRenewals): the writes the policy saves the API server.
	Refused   int `json:"refused"`
	HeldBack  int `json:"heldBack"`
	Warned    int `json:"warned"`
	Audited   int `json:"audited"`
	Admitted  int `json:"admitted"`
	Coalesced int `json:"coalesced"`
	// NotJudged: no rule selects the lease, no writer can be assumed, or the
	// write was to the status.
	NotJudged int `json:"notJudged"`
}

func (e *Effects) add(o outcomeKey, judged bool, n int) {
	if !judged {
		e.NotJudged += n
		return
	}
	switch {
	case o.coalesced:
		e.Coalesced += n
	case o.verdict == policy.Deny && o.code == http.StatusTooManyRequests:
		e.HeldBack += n
	case o.verdict == policy.Deny:
		e.Refused += n
	case o.verdict == policy.Warn:
		e.Warned += n
	case o.verdict == policy.Audit:
		e.Audited += n
	default:
		e.Admitted += n
	}
}

func (e *Effects) plus(o *Effects) {
	e.Refused += o.Refused
	e.HeldBack += o.HeldBack
	e.Warned += o.Warned
	e.Audited += o.Audited
	e.Admitted += o.Admitted
	e.Coalesced += o.Coalesced
	e.NotJudged += o.NotJudged
}

// PolicyReport is what a policy would have done with every write observed
// since the start, by rule, verdict and invariant: the labels of the
// webhook's leaseguard_decisions_total.
type PolicyReport struct {
	Outcomes []ProjectedOutcome `json:"outcomes"`
	// Judged lists the invariants judged from what a watcher sees;
	// Assumed those it cannot see and assumes kept.
	Judged  []string `json:"judged"`
	Assumed []string `json:"assumed"`
	Note    string   `json:"note"`
}

// ProjectedOutcome counts the writes with one projected result.
type ProjectedOutcome struct {
	Rule      string `json:"rule"`
	Verdict   string `json:"verdict"`
	Invariant string `json:"invariant,omitempty"`
	Code      int32  `json:"code,omitempty"`
	// Effect is refuse, hold back, warn, audit, coalesce or admit.
	Effect string `json:"effect"`
	// WriterBasis is how the writer was assumed (WriterBasis).
	WriterBasis string `json:"writerBasis"`
	Writes      int64  `json:"writes"`
}

// What a watcher can and cannot judge (docs/top.md).
var (
	judgedInvariants  = []string{"I4 fencing", "I6 renewal rate", "I7 renewTime"}
	assumedInvariants = []string{"I1 manager", "I2 designated writer", "I3 designation change", "I5 holder binding", "I8 status", "I9 bound lease"}
)

// ProjectionNote explains the limits of a projection, in the output and
// the docs.
const ProjectionNote = "a watcher does not see who wrote (managedFields name field managers, not users): " +
	"each write is judged as if written by the rule's assumed writer (designation annotation, fixed designation, " +
	"bind template, else the managers pattern), so identity invariants are assumed kept; timings are judged by " +
	"this machine's clock when the write was observed; status writes are not judged"

// SortKey orders the leases of a report.
type SortKey string

// Sort keys.
const (
	SortRate      SortKey = "rate"
	SortName      SortKey = "name"
	SortExpiry    SortKey = "expiry"
	SortWriters   SortKey = "writers"
	SortInterval  SortKey = "interval"
	SortProjected SortKey = "projected"
)

// SortKeys lists the valid sort keys.
var SortKeys = []SortKey{SortRate, SortName, SortExpiry, SortWriters, SortInterval, SortProjected}

// ParseSortKey checks a --sort value.
func ParseSortKey(s string) (SortKey, error) {
	for _, k := range SortKeys {
		if string(k) == s {
			return k, nil
		}
	}
	names := make([]string, len(SortKeys))
	for i, k := range SortKeys {
		names[i] = string(k)
	}
	return "", fmt.Errorf("--sort %q: want one of %s", s, strings.Join(names, ", "))
}

// ReportOptions select and order the leases of a report.
type ReportOptions struct {
	// Namespace and Resource filter; empty means all.
	Namespace string
	Resource  leaseobject.Resource
	Sort      SortKey
	// Limit caps the leases listed (not the totals); 0 lists all.
	Limit int
	// Webhook, when set, is what the webhook judged per lease within the
	// window (webhookstats.Tracker.Traffic).
	Webhook map[Key]*WebhookTraffic
}

// Report builds a snapshot at now.
func (a *Aggregator) Report(now time.Time, o ReportOptions) *Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	observed := a.window
	if !a.started.IsZero() && now.Sub(a.started) < observed {
		observed = now.Sub(a.started)
	}
	r := &Report{
		Time:            now,
		WindowSeconds:   a.window.Seconds(),
		ObservedSeconds: observed.Seconds(),
		Leases:          make([]LeaseTraffic, 0, len(a.leases)),
	}
	since := now.Add(-a.window).UnixNano()
	byNamespace := map[string]*Totals{}
	for k, l := range a.leases {
		if (o.Namespace != "" && k.Namespace != o.Namespace) || (o.Resource != "" && k.Resource != o.Resource) {
			continue
		}
		lt := a.leaseTraffic(k, l, now, since, observed, o.Webhook[k])
		r.Leases = append(r.Leases, lt)
		ns := byNamespace[k.Namespace]
		if ns == nil {
			ns = &Totals{}
			byNamespace[k.Namespace] = ns
		}
		ns.addLease(&lt)
		r.Cluster.addLease(&lt)
	}
	for ns, t := range byNamespace {
		r.Namespaces = append(r.Namespaces, NamespaceTotals{Namespace: ns, Totals: *t})
	}
	sort.Slice(r.Namespaces, func(i, j int) bool {
		a, b := &r.Namespaces[i], &r.Namespaces[j]
		if a.WritesPerSecond != b.WritesPerSecond {
			return a.WritesPerSecond > b.WritesPerSecond
		}
		return a.Namespace < b.Namespace
	})
	sortLeases(r.Leases, o.Sort)
	if o.Limit > 0 && len(r.Leases) > o.Limit {
		r.Leases = r.Leases[:o.Limit]
	}
	if a.projector != nil {
		r.Policy = a.policyReport()
	}
	return r
}

// roundTo rounds to 1/unit: rates to 4 decimals, intervals to milliseconds.
func roundTo(v, unit float64) float64 { return math.Round(v*unit) / unit }

func (t *Totals) addLease(l *LeaseTraffic) {
	t.Leases++
	t.WritesPerSecond += l.WritesPerSecond
	t.Writes += l.Writes
	if l.Contested {
		t.Contested++
	}
	if l.Projected != nil {
		if t.Projected == nil {
			t.Projected = &Effects{}
		}
		t.Projected.plus(l.Projected)
	}
}

func (a *Aggregator) leaseTraffic(k Key, l *lease, now time.Time, since int64, observed time.Duration, wh *WebhookTraffic) LeaseTraffic {
	lt := LeaseTraffic{
		Resource:    string(k.Resource),
		Namespace:   k.Namespace,
		Name:        k.Name,
		Holder:      l.obj.Spec.Holder,
		Transitions: l.transitions,
	}
	if wh != nil {
		c := *wh
		c.Users = append([]UserRequests(nil), wh.Users...)
		sort.Slice(c.Users, func(i, j int) bool {
			if c.Users[i].Requests != c.Users[j].Requests {
				return c.Users[i].Requests > c.Users[j].Requests
			}
			return c.Users[i].User < c.Users[j].User
		})
		lt.Webhook = &c
	}
	if l.obj.HasDesignation {
		lt.DesignatedManager = l.obj.Designated
	}
	duration := l.obj.Spec.LeaseDuration
	if duration <= 0 {
		duration = leaseobject.DefaultLeaseDuration
	}
	lt.LeaseDurationSeconds = duration.Seconds()
	ref := l.obj.Spec.RenewTime
	if ref.IsZero() {
		ref = l.obj.Spec.AcquireTime
	}
	if ref.IsZero() {
		ref = l.obj.CreationTimestamp
	}
	lt.ExpiresInSeconds = ref.Add(duration).Sub(now).Round(time.Millisecond).Seconds()

	var writerCounts [MaxWriters + 1]int
	var gapSum int64
	var gaps, backwards int
	var first, last int64
	var effects Effects
	lt.RatesTruncated = l.each(since, func(ev *event) {
		if lt.Writes == 0 {
			first = ev.at
		}
		last = ev.at
		lt.Writes++
		if ev.writer != noWriter {
			writerCounts[ev.writer]++
		}
		if ev.renewGap > 0 {
			gapSum += int64(ev.renewGap)
			gaps++
		}
		if ev.flags&flagHolderChanged != 0 {
			lt.HolderChanges++
		}
		if ev.flags&flagRenewBackwards != 0 {
			backwards++
		}
		if a.projector != nil {
			effects.add(a.outcomes[ev.outcome], ev.outcome != 0, 1)
		}
	})
	switch {
	case lt.RatesTruncated && last > first:
		lt.WritesPerSecond = float64(lt.Writes-1) / time.Duration(last-first).Seconds()
	case observed > 0:
		lt.WritesPerSecond = float64(lt.Writes) / observed.Seconds()
	}
	lt.WritesPerSecond = roundTo(lt.WritesPerSecond, 1e4)
	if gaps > 0 {
		lt.RenewIntervalSeconds = roundTo(float64(gapSum)/float64(gaps)/1000, 1e3)
	}
	for i := 0; i <= MaxWriters; i++ {
		if writerCounts[i] > 0 {
			lt.Writers = append(lt.Writers, Writer{Manager: l.writers[i].manager, Subresource: l.writers[i].subresource, Writes: writerCounts[i]})
		}
	}
	sort.Slice(lt.Writers, func(i, j int) bool {
		a, b := &lt.Writers[i], &lt.Writers[j]
		if a.Writes != b.Writes {
			return a.Writes > b.Writes
		}
		return a.Manager+"/"+a.Subresource < b.Manager+"/"+b.Subresource
	})
	lt.Contested, lt.ContestedReason = contested(&lt, backwards)
	if a.projector != nil {
		lt.Projected = &effects
	}
	return lt
}

// contested tells whether more than one party writes the lease: several
// spec writers, several users sending the webhook requests, a holder
// change, or a renewTime that went backwards (two clocks writing).
func contested(lt *LeaseTraffic, backwards int) (bool, string) {
	var reasons []string
	specWriters := 0
	for _, w := range lt.Writers {
		if w.Subresource == "" {
			specWriters++
		}
	}
	if specWriters > 1 {
		reasons = append(reasons, fmt.Sprintf("%d writers", specWriters))
	}
	if lt.Webhook != nil && len(lt.Webhook.Users) > 1 {
		reasons = append(reasons, fmt.Sprintf("%d users (webhook)", len(lt.Webhook.Users)))
	}
	if lt.HolderChanges > 0 {
		reasons = append(reasons, fmt.Sprintf("%d holder changes", lt.HolderChanges))
	}
	if backwards > 0 {
		reasons = append(reasons, fmt.Sprintf("renewTime went backwards %d times", backwards))
	}
	return len(reasons) > 0, strings.Join(reasons, ", ")
}

func (a *Aggregator) policyReport() *PolicyReport {
	pr := &PolicyReport{Judged: judgedInvariants, Assumed: assumedInvariants, Note: ProjectionNote, Outcomes: []ProjectedOutcome{}}
	for i := 1; i < len(a.outcomes); i++ {
		o := a.outcomes[i]
		var e Effects
		e.add(o, true, 1)
		pr.Outcomes = append(pr.Outcomes, ProjectedOutcome{
			Rule: o.rule, Verdict: o.verdict.String(), Invariant: string(o.invariant), Code: o.code,
			Effect: effectName(&e), WriterBasis: string(o.basis), Writes: a.projected[i],
		})
	}
	sort.Slice(pr.Outcomes, func(i, j int) bool {
		a, b := pr.Outcomes[i], pr.Outcomes[j]
		if a.Rule != b.Rule {
			return a.Rule < b.Rule
		}
		if a.Verdict != b.Verdict {
			return a.Verdict < b.Verdict
		}
		if a.Invariant != b.Invariant {
			return a.Invariant < b.Invariant
		}
		return a.WriterBasis < b.WriterBasis
	})
	return pr
}

func effectName(e *Effects) string {
	switch {
	case e.Refused > 0:
		return "refuse"
	case e.HeldBack > 0:
		return "hold back"
	case e.Warned > 0:
		return "warn"
	case e.Audited > 0:
		return "audit"
	case e.Coalesced > 0:
		return "coalesce"
	}
	return "admit"
}

func sortLeases(ls []LeaseTraffic, key SortKey) {
	less := func(a, b *LeaseTraffic) bool { return a.WritesPerSecond > b.WritesPerSecond }
	switch key {
	case SortName:
		less = func(a, b *LeaseTraffic) bool { return false }
	case SortExpiry:
		less = func(a, b *LeaseTraffic) bool { return a.ExpiresInSeconds < b.ExpiresInSeconds }
	case SortWriters:
		less = func(a, b *LeaseTraffic) bool { return len(a.Writers) > len(b.Writers) }
	case SortInterval:
		less = func(a, b *LeaseTraffic) bool { return positiveFirst(a.RenewIntervalSeconds, b.RenewIntervalSeconds) }
	case SortProjected:
		less = func(a, b *LeaseTraffic) bool { return stopped(a) > stopped(b) }
	}
	sort.Slice(ls, func(i, j int) bool {
		a, b := &ls[i], &ls[j]
		if less(a, b) {
			return true
		}
		if less(b, a) {
			return false
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Resource < b.Resource
	})
}

// positiveFirst orders the shortest positive renew intervals first and
// leases without renewals last.
func positiveFirst(a, b float64) bool {
	switch {
	case a > 0 && b > 0:
		return a < b
	default:
		return a > 0 && b == 0
	}
}

func stopped(l *LeaseTraffic) int {
	if l.Projected == nil {
		return 0
	}
	return l.Projected.Refused + l.Projected.HeldBack + l.Projected.Warned + l.Projected.Audited
}
