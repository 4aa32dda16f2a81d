package main

import (
	"fmt"
	"time"

	"github.com/leaseguard/leaseguard/webhook/policy"
	"github.com/leaseguard/leaseguard/webhook/policyfile"
)

// The namespace-mode shape of docs/design.md §1: every manager runs as its
// own service account, holds the Lease bound to it from its pod, and, as a
// Config Connector candidate, merge-patches the one shared MultiClusterLease
// with its cluster's identity.
const (
	simNamespace  = "cnrm-system"
	managerPrefix = "system:serviceaccount:cnrm-system:cnrm-controller-manager-"
	leasePrefix   = "kcc-leader-"
	sharedMCL     = "kcc-leader"
	clusterID     = "cluster-a"
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	// The client-go REST client retries a 429 with Retry-After this often.
	clientRetries = 10
)

func managerID(i int) string   { return fmt.Sprintf("team-%05d", i) }
func podName(id string) string { return "cnrm-controller-manager-" + id + "-0" }

// mode is one way of guarding the renewals.
type mode struct {
	name string
	// what says it in a table.
	what string
	// policy is the LeasePolicy; empty for no guard at all.
	policy string
}

// modes are measured side by side, in this order.
var modes = []mode{
	{name: "unguarded", what: "no admission"},
	{name: "limit", what: "leaseguard, minRenewInterval 5s (429 + Retry-After), losers 403",
		policy: modePolicy("minRenewInterval: 5s\n")},
	{name: "coalesce", what: "leaseguard, coalesceRenewals auto (7s), minRenewInterval auto, backOffLosers",
		policy: modePolicy("coalesceRenewals: auto\n  minRenewInterval: auto\n", "backOffLosers: true\n")},
}

// modePolicy is the sample policy's two rules with the given renewal
// settings (the second list only for the shared lease).
func modePolicy(renewals string, sharedOnly ...string) string {
	shared := ""
	for _, s := range sharedOnly {
		shared += "  " + s
	}
	return `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
clockSkew: 2s
rules:
- name: kcc-mcl
  resources: [multiclusterleases]
  namespaces: [` + simNamespace + `]
  managers: ["` + managerPrefix + `*"]
  designation: auto
  statusWriters: ["system:serviceaccount:multiclusterlease-system:default"]
  ` + renewals + shared + `- name: kcc-namespace-leases
  resources: [leases]
  namespaces: [` + simNamespace + `]
  bind:
    manager: "` + managerPrefix + `{ns}"
    lease: "` + leasePrefix + `{ns}"
  holderBinding: pod
  ` + renewals
}

func (m *mode) compile() (*policy.Policy, error) {
	if m.policy == "" {
		return nil, nil
	}
	p, err := policyfile.Parse([]byte(m.policy), policy.CompileOptions{OwnNamespace: "leaseguard-system"})
	if err != nil {
		return nil, fmt.Errorf("mode %s: %w", m.name, err)
	}
	return p, nil
}
