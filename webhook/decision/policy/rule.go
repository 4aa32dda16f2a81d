package policy

import (
	"strings"
	"time"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/pattern"
)

// DesignationMode says how the designated manager of an object is chosen.
type DesignationMode uint8

// Designation modes (docs/design.md §3). DesignationNone is a rule without the field:
// any manager the rule admits may write.
const (
	DesignationNone DesignationMode = iota
	// DesignationAuto: the first manager to write becomes designated; another
	// may take over once the lease is stale.
	DesignationAuto
	// DesignationByAnnotation: only an operator sets the designation.
	DesignationByAnnotation
	// DesignationFixed: one configured username.
	DesignationFixed
)

// HolderBinding ties the written holderIdentity to the caller.
type HolderBinding uint8

// Holder bindings (docs/design.md §3, I5).
const (
	HolderBindingNone HolderBinding = iota
	HolderBindingPod
	HolderBindingUsername
)

// Enforcement says what happens to a write a rule would deny.
type Enforcement uint8

// Enforcement modes.
const (
	EnforceDeny Enforcement = iota
	EnforceWarn
	EnforceAudit
)

// Policy is a compiled, validated rule set. It is immutable once built, so
// one value can be shared by every request and swapped whole on reload.
type Policy struct {
	ClockSkew time.Duration
	Rules     []*Rule
}

// Rule is a compiled rule. Build it with Compile.
type Rule struct {
	Name          string
	resources     [2]bool // indexed by resourceIndex
	namespaces    pattern.Globs
	names         pattern.Globs
	managers      pattern.Globs
	bind          *pattern.Bind
	designation   DesignationMode
	fixedManager  string
	operators     pattern.Globs
	statusWriters pattern.Globs
	holderBinding HolderBinding
	// minRenewInterval is zero when renewals are not rate-limited.
	minRenewInterval time.Duration
	autoRenew        bool
	// maxRenewInterval caps auto intervals: the most assumedClient survives.
	maxRenewInterval time.Duration
	// coalesceInterval is zero when early renewals are not coalesced
	// (docs/rate-limiting.md): a renewal by the holder that advances
	// renewTime by less is acknowledged without being stored.
	coalesceInterval time.Duration
	// maxLeaseDuration bounds the lease and renewal durations a write may
	// declare (I10).
	maxLeaseDuration time.Duration
	// backOffLosers answers a non-designated manager's write with 429 and a
	// Retry-After of the time until the designation goes stale, instead of
	// 403, so that client-go waits instead of retrying every retry period.
	backOffLosers bool
	enforcement   Enforcement
}

func resourceIndex(r leaseobject.Resource) int {
	if r == leaseobject.MultiClusterLeases {
		return 1
	}
	return 0
}

func (r *Rule) selects(res leaseobject.Resource, namespace, name string) bool {
	if res != leaseobject.Leases && res != leaseobject.MultiClusterLeases {
		return false
	}
	return r.resources[resourceIndex(res)] && r.namespaces.MatchesOrEmpty(namespace) && r.names.MatchesOrEmpty(name)
}

// Select returns the first rule, in file order, that selects the object, or
// nil when none does.
func (p *Policy) Select(res leaseobject.Resource, namespace, name string) *Rule {
	for _, r := range p.Rules {
		if r.selects(res, namespace, name) {
			return r
		}
	}
	return nil
}

// CoalesceInterval is the rule's coalescing interval, zero when it does not
// coalesce renewals.
func (r *Rule) CoalesceInterval() time.Duration { return r.coalesceInterval }

// Designation says how the rule designates the writer of its leases, and
// FixedManager is the writer a fixed designation names.
func (r *Rule) Designation() DesignationMode { return r.designation }

// FixedManager is the username of a fixed designation, "" otherwise.
func (r *Rule) FixedManager() string { return r.fixedManager }

// HolderBinding says whom the holder identity must name.
func (r *Rule) HolderBinding() HolderBinding { return r.holderBinding }

// BoundManager returns the manager whose bound lease is name under the
// rule's bind template; "" without one, or when name does not fit it.
func (r *Rule) BoundManager(name string) string {
	if r.bind == nil {
		return ""
	}
	return r.bind.BoundManager(name)
}

// FirstManager is the rule's first managers pattern, "" when it has none.
func (r *Rule) FirstManager() string {
	if len(r.managers) == 0 {
		return ""
	}
	return string(r.managers[0])
}

// renewInterval is the minimum renewal interval for the object.
func (r *Rule) renewInterval(o *leaseobject.Object) time.Duration {
	if !r.autoRenew {
		return r.minRenewInterval
	}
	// What the object declares, but never more than the rule's clients
	// survive: a Lease cannot declare its renew deadline.
	return min(AutoRenewInterval(&o.Spec), r.maxRenewInterval)
}

// AutoRenewInterval derives a minimum renewal interval from what the object
// declares: half its renew deadline. A MultiClusterLease may declare
// renewDeadlineSeconds; otherwise the deadline is taken as two thirds of the
// lease duration (client-go's 10s of 15s), and the lease duration as 15s when
// absent, so the default is 5s. A throttled renewal waits at most the
// interval (client-go retries after Retry-After), which is then half the time
// the client allows a renewal to take: it keeps its lease with a margin.
func AutoRenewInterval(s *leaseobject.Spec) time.Duration {
	return s.EffectiveRenewDeadline() / 2
}

// ClientTimings are the leader-election settings of the clients a rule
// throttles: what a fixed minRenewInterval is checked against.
type ClientTimings struct {
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// String is the compact form used as a field value in errors: "15s/10s/2s".
func (t ClientTimings) String() string {
	return t.LeaseDuration.String() + "/" + t.RenewDeadline.String() + "/" + t.RetryPeriod.String()
}

// Describe names each timing, for messages.
func (t ClientTimings) Describe() string {
	return "leaseDuration " + t.LeaseDuration.String() + ", renewDeadline " + t.RenewDeadline.String() + ", retryPeriod " + t.RetryPeriod.String()
}

// DefaultClientTimings are client-go's and controller-runtime's defaults.
var DefaultClientTimings = ClientTimings{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}

// MaxRenewInterval is the longest minimum renewal interval that clients with
// these timings survive, given the clock-skew allowance. A renewal refused
// with 429 is retried by client-go after Retry-After (rounded up to a whole
// second), within a renew attempt that started a retry period after the last
// success and may last the renew deadline: so the interval must fit in
// deadline + retry period, less a second of rounding, a second for the round
// trip, and the skew by which a client clock ahead of the server's makes the
// stored renewTime look younger. Followers must also see a write before the
// lease duration runs out.
func (t ClientTimings) MaxRenewInterval(skew time.Duration) time.Duration {
	limit := t.RenewDeadline + t.RetryPeriod - 2*time.Second - skew
	if l := t.LeaseDuration - 2*time.Second - skew; l < limit {
		limit = l
	}
	return limit
}

// followerJitter is client-go's JitterFactor for followers: they poll every
// retry period plus up to 1.2 retry periods.
const followerJitter = 1.2

// MaxCoalesceInterval is the longest coalescing interval that clients with
// these timings and the readers of their leases survive
// (docs/rate-limiting.md derives it). With coalescing, the stored renewTime
// moves only when a renewal comes at least the interval after it; renewals
// come every retry period, so stored renewals are at most interval +
// retryPeriod apart. A client-go follower polls every retryPeriod to
// (1 + 1.2) retryPeriods and judges expiry by when it last saw the record
// change, so it may see two stored renewals up to interval + retryPeriod +
// 2.2 retryPeriods apart: that must stay under the lease duration, less a
// second for the round trips. A reader that judges expiry by the stored
// renewTime, with its clock up to clockSkew ahead, needs interval +
// retryPeriod + clockSkew + 1s under the lease duration.
func (t ClientTimings) MaxCoalesceInterval(skew time.Duration) time.Duration {
	followers := t.LeaseDuration - t.RetryPeriod - time.Duration(float64(t.RetryPeriod)*(1+followerJitter)) - time.Second
	readers := t.LeaseDuration - t.RetryPeriod - skew - time.Second
	return min(followers, readers)
}

// DefaultMaxLeaseDuration is how much longer than the assumed clients' own
// lease duration a write may declare by default: room for a client tuned a
// little differently, but a lease that runs out within minutes, never one a
// holder keeps for years.
const DefaultMaxLeaseDurationFactor = 4

// IsManager reports whether username counts as a manager under the rule,
// through the bind template, the managers patterns or a fixed designation.
func (r *Rule) IsManager(username string) bool {
	if r.bind != nil {
		if _, ok := r.bind.MatchManager(username); ok {
			return true
		}
	}
	return r.managers.Match(username) || (r.designation == DesignationFixed && username == r.fixedManager)
}

// DesignatedWriter is the username whose writes of o are stored while its
// lease is fresh: the fixed designation, else the recorded one; "" when the
// rule designates none.
func (r *Rule) DesignatedWriter(o *leaseobject.Object) string {
	switch r.designation {
	case DesignationNone:
		return ""
	case DesignationFixed:
		return r.fixedManager
	}
	if o.HasDesignation {
		return o.Designated
	}
	return ""
}

// SharesRenewal reports whether the caller may renew the stored
// MultiClusterLease with its holder, whoever is designated: a manager of
// the rule (of its bound lease, under a bind template) that holder binding
// lets hold it.
func (r *Rule) SharesRenewal(caller *leaseobject.Caller, old *leaseobject.Object) bool {
	if !r.IsManager(caller.Username) {
		return false
	}
	if r.bind != nil {
		vals, bound := r.bind.MatchManager(caller.Username)
		if !bound || !r.bind.BoundTo(old.Namespace, old.Name, &vals) {
			return false
		}
	}
	switch r.holderBinding {
	case HolderBindingPod:
		return caller.PodName != "" && holderIsPod(old.Spec.Holder, caller.PodName)
	case HolderBindingUsername:
		return old.Spec.Holder == caller.Username
	}
	return true
}

// IsStatusWriter reports whether the caller is one of the rule's status
// writers (I8).
func (r *Rule) IsStatusWriter(caller *leaseobject.Caller) bool {
	return r.statusWriters.MatchAny(caller.Username, caller.Groups)
}

// RightfulRenewer reports whether the caller is a manager the rule would let
// renew this lease as it stands: the designated manager when one is
// recorded (under designation by annotation, only then: until an operator
// records one, Decide refuses every spec write, I2), the holder's pod or
// user under a holder binding.
func (r *Rule) RightfulRenewer(caller *leaseobject.Caller, old *leaseobject.Object) bool {
	if old.HasDesignation && old.Designated != "" && old.Designated != caller.Username {
		return false
	}
	if r.designation == DesignationByAnnotation && (!old.HasDesignation || old.Designated != caller.Username) {
		return false
	}
	if r.designation == DesignationFixed && caller.Username != r.fixedManager {
		return false
	}
	return r.SharesRenewal(caller, old)
}

// RenewerExpressible reports whether the rule's rightful renewer can be
// written in CEL: a bind template with several captures can be only where
// the lease's name and namespace give them (bind.expressible).
func (r *Rule) RenewerExpressible() bool {
	return r.bind == nil || r.bind.Expressible()
}

func holderIsPod(holder, pod string) bool {
	return holder == pod || (strings.HasPrefix(holder, pod) && holder[len(pod)] == '_')
}
