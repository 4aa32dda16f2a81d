package policy

import "time"

// RuleView is a read-only description of a compiled rule, for the code that
// renders a policy into admission configuration (webhook/render/manifests): it
// expresses the same selection and identities in CEL.
type RuleView struct {
	Name          string
	Resources     []Resource
	Namespaces    []string // globs; empty selects every namespace
	Names         []string // globs; empty selects every name
	Managers      []string // username globs
	Operators     []string // username-or-group globs
	StatusWriters []string // username-or-group globs
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
		Namespaces:       r.namespaces.strings(),
		Names:            r.names.strings(),
		Managers:         r.managers.strings(),
		Operators:        r.operators.strings(),
		StatusWriters:    r.statusWriters.strings(),
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
	for _, res := range []Resource{Leases, MultiClusterLeases} {
		if r.resources[resourceIndex(res)] {
			v.Resources = append(v.Resources, res)
		}
	}
	if r.bind != nil {
		v.Bind = &BindView{
			ManagerText: r.bind.manager.text, LeaseText: r.bind.lease.text,
			ManagerLits: append([]string(nil), r.bind.manager.lits...),
			LeaseLits:   append([]string(nil), r.bind.lease.lits...),
			ManagerCaps: len(r.bind.manager.caps),
			LeaseCaps:   append([]int(nil), r.bind.leaseCap...),
			Expressible: r.bind.expressible(),
		}
		if n := r.bind.namespace; n != nil {
			v.Bind.NamespaceText = n.text
			v.Bind.NamespaceLits = append([]string(nil), n.lits...)
			v.Bind.NamespaceCaps = append([]int(nil), r.bind.namespaceCap...)
		}
	}
	return v
}

func (gs globs) strings() []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = string(g)
	}
	return out
}
