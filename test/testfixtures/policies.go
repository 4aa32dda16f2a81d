// Package testfixtures holds the fixtures that several packages' tests
// share, so that each is written once: policies (Config Connector's
// namespace-mode rules, the hardening rules) and lease objects in the
// decision core's view (objects.go). Tests that need other values spell
// out only what differs.
package testfixtures

import (
	"strings"
)

// Identities of Config Connector in namespace mode, as the rules name them.
const (
	KCCNamespace     = "cnrm-system"
	KCCManagerPrefix = "system:serviceaccount:cnrm-system:cnrm-controller-manager-"
	KCCOperator      = "system:serviceaccount:configconnector-operator-system:configconnector-operator"
	MCLController    = "system:serviceaccount:multiclusterlease-system:default"
)

// Header starts every LeasePolicy file.
const Header = "apiVersion: leaseguard.io/v1alpha1\nkind: LeasePolicy\n"

// KCCOptions vary the two Config Connector rules between tests.
type KCCOptions struct {
	// ClockSkew is the file's clockSkew; "2s" when empty.
	ClockSkew string
	// SharedLease* shape rule kcc-mcl (the shared MultiClusterLease).
	SharedLeaseInterval    string // minRenewInterval; "5s" when empty
	SharedLeaseEnforcement string // "deny" when empty
	NoOperators            bool   // leave out the operator
	// BoundLease* shape rule kcc-namespace-leases (one Lease per manager).
	BoundLeaseInterval    string // minRenewInterval; "auto" when empty
	BoundLeaseEnforcement string // "warn" when empty
	// BoundLeaseManagers are extra managers globs of the bound-lease rule.
	BoundLeaseManagers []string
	// ExtraRules are appended, as YAML list items indented like the rules.
	ExtraRules string
}

// KCCPolicy renders a policy with the two rules of Config Connector's
// namespace mode (config/samples/policy.yaml in its shape), varied by o.
func KCCPolicy(o KCCOptions) string {
	or := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	var b strings.Builder
	b.WriteString(Header)
	b.WriteString("clockSkew: " + or(o.ClockSkew, "2s") + "\nrules:\n")
	b.WriteString(`- name: kcc-mcl
  resources: [multiclusterleases]
  namespaces: [cnrm-system]
  managers: ["` + KCCManagerPrefix + `*"]
  designation: auto
`)
	if !o.NoOperators {
		b.WriteString(`  operators: ["` + KCCOperator + `"]` + "\n")
	}
	b.WriteString(`  statusWriters: ["` + MCLController + `"]` + "\n")
	b.WriteString("  minRenewInterval: " + or(o.SharedLeaseInterval, "5s") + "\n")
	b.WriteString("  enforcement: " + or(o.SharedLeaseEnforcement, "deny") + "\n")
	b.WriteString(`- name: kcc-namespace-leases
  resources: [leases]
  namespaces: [cnrm-system]
`)
	if len(o.BoundLeaseManagers) > 0 {
		b.WriteString(`  managers: ["` + strings.Join(o.BoundLeaseManagers, `", "`) + `"]` + "\n")
	}
	b.WriteString(`  bind:
    manager: "` + KCCManagerPrefix + `{ns}"
    lease: "kcc-leader-{ns}"
  holderBinding: pod
`)
	b.WriteString("  minRenewInterval: " + or(o.BoundLeaseInterval, "auto") + "\n")
	b.WriteString("  enforcement: " + or(o.BoundLeaseEnforcement, "warn") + "\n")
	b.WriteString(o.ExtraRules)
	return b.String()
}
