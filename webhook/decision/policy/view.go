package policy

import (
	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"time"
)

// RuleView is a read-only description of a compiled rule, for the code that
// renders a policy into admission configuration (webhook/render/manifests): it
// expresses the same selection and identities in CEL.
type RuleView struct {
	Name          string
	Resources     []leaseobject.Resource
	Namespaces    []string // pattern.Globs; empty selects every namespace
	Names         []string // pattern.Globs; empty selects every name
	Managers      []string // username pattern.Globs
	Operators     []string // username-or-group pattern.Globs
	StatusWriters []string // username-or-group pattern.Globs
	// Bind is the bound-lease template, nil without one.
	Bind          *BindView
	Designation   DesignationMode
	FixedManager  string
	HolderBinding HolderBinding
	// CoalesceInterval is zero when the rule does not coalesce renewals.
	CoalesceInterval time.Duration

	MaxLeaseDuration time.Duration
	Enforcement      Enforcement
	// MinRenewInterval is the fixed minimum renewal interval (zero: no
	// limit); AutoRenewInterval says it is derived per object instead
	// (minRenewInterval: auto). BackOffLosers answers losing candidates
	// with 429. Generators that cannot enforce these say so.
	MinRenewInterval  time.Duration
	AutoRenewInterval bool
	BackOffLosers     bool
}

// BindView is a bind template split into its literals and captures:
// Lits[0] Caps[0] Lits[1] ... Caps[n-1] Lits[n], for the manager's username
// and for the lease name. LeaseCaps[i] is the index, among the manager's
// captures, of the lease template's i-th capture.
type BindView struct {
	ManagerText, LeaseText string
	ManagerLits, LeaseLits []string
	ManagerCaps            int
	LeaseCaps              []int
	// NamespaceText is the namespace template, "" when the rule's
	// namespaces select the lease; NamespaceLits and NamespaceCaps are
	// then nil.
	NamespaceText string
	NamespaceLits []string
	NamespaceCaps []int
	// Expressible: CEL can say which lease the bind binds a caller to
	// (celexpr.BoundLease).
	Expressible bool
}

// View describes the rule.
func (r *Rule) View() RuleView {
	v := RuleView{
		Name:             r.Name,
		Namespaces:       r.namespaces.Strings(),
		Names:            r.names.Strings(),
		Managers:         r.managers.Strings(),
		Operators:        r.operators.Strings(),
		StatusWriters:    r.statusWriters.Strings(),
		Designation:      r.designation,
		FixedManager:     r.fixedManager,
		HolderBinding:    r.holderBinding,
		CoalesceInterval: r.coalesceInterval,
		MaxLeaseDuration: r.maxLeaseDuration,
		Enforcement:      r.enforcement,

		MinRenewInterval:  r.minRenewInterval,
		AutoRenewInterval: r.autoRenew,
		BackOffLosers:     r.backOffLosers,
	}
	for _, res := range []leaseobject.Resource{leaseobject.Leases, leaseobject.MultiClusterLeases} {
		if r.resources[resourceIndex(res)] {
			v.Resources = append(v.Resources, res)
		}
	}
	if b := r.bind; b != nil {
		v.Bind = &BindView{
			ManagerText: b.Manager().Text(), LeaseText: b.Lease().Text(),
			ManagerLits: b.Manager().Lits(),
			LeaseLits:   b.Lease().Lits(),
			ManagerCaps: b.Manager().CaptureCount(),
			LeaseCaps:   b.LeaseCaps(),
			Expressible: b.Expressible(),
		}
		if n := b.Namespace(); n != nil {
			v.Bind.NamespaceText = n.Text()
			v.Bind.NamespaceLits = n.Lits()
			v.Bind.NamespaceCaps = b.NamespaceCaps()
		}
	}
	return v
}
