package policy

import "time"

// DesignationMode says how the designated manager of an object is chosen.
type DesignationMode uint8

// Designation modes (SPEC §3). DesignationNone is a rule without the field:
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

// Holder bindings (SPEC §3, I5).
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
	namespaces    globs
	names         globs
	managers      globs
	bind          *bind
	designation   DesignationMode
	fixedManager  string
	operators     globs
	statusWriters globs
	holderBinding HolderBinding
	// minRenewInterval is zero when renewals are not rate-limited.
	minRenewInterval time.Duration
	autoRenew        bool
	enforcement      Enforcement
}

func resourceIndex(r Resource) int {
	if r == MultiClusterLeases {
		return 1
	}
	return 0
}

func (r *Rule) selects(res Resource, namespace, name string) bool {
	if res != Leases && res != MultiClusterLeases {
		return false
	}
	return r.resources[resourceIndex(res)] && r.namespaces.matchesOrEmpty(namespace) && r.names.matchesOrEmpty(name)
}

// Select returns the first rule, in file order, that selects the object, or
// nil when none does.
func (p *Policy) Select(res Resource, namespace, name string) *Rule {
	for _, r := range p.Rules {
		if r.selects(res, namespace, name) {
			return r
		}
	}
	return nil
}

// renewInterval is the minimum renewal interval for the object.
func (r *Rule) renewInterval(o *Object) time.Duration {
	if !r.autoRenew {
		return r.minRenewInterval
	}
	return AutoRenewInterval(&o.Spec)
}

// AutoRenewInterval derives a minimum renewal interval from what the object
// declares: a third of its lease duration (5s for the 15s default). A client
// that renews at most that often and keeps retrying at its retry period still
// renews well before its renew deadline (two thirds of the lease duration in
// client-go's defaults), so throttling never costs it the lease.
func AutoRenewInterval(s *Spec) time.Duration {
	d := s.LeaseDuration
	if d <= 0 {
		d = DefaultLeaseDuration
	}
	return d / 3
}
