package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
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
	// coalescing says what coalesces early renewals through the API server
	// (manifests.Options.Coalescing; empty: the default, the
	// MutatingAdmissionPolicy). The core has no API server, so a mode that
	// differs from another only here is measured through the API server
	// only.
	coalescing manifests.Coalescing
}

const coalescePolicy = "coalesceRenewals: auto\n  minRenewInterval: auto\n"

// allModes are the modes --modes chooses from; the first is the baseline
// every ratio is taken against.
var allModes = []mode{
	{name: "unguarded", what: "no admission"},
	{name: "limit", what: "leaseguard, minRenewInterval 5s (429 + Retry-After), losers 403",
		policy: modePolicy("minRenewInterval: 5s\n")},
	{name: "coalesce", what: "leaseguard, coalesceRenewals auto (7s), minRenewInterval auto, backOffLosers; early renewals coalesced by the MutatingAdmissionPolicy",
		policy: modePolicy(coalescePolicy, "backOffLosers: true\n")},
	{name: "coalesce-webhook", what: "as coalesce, with early renewals coalesced by leaseguard's mutating webhook instead (`leaseguard manifests --coalesce webhook`)",
		policy: modePolicy(coalescePolicy, "backOffLosers: true\n"), coalescing: manifests.CoalesceInWebhook},
}

// defaultModes are measured unless --modes says otherwise.
const defaultModes = "unguarded,limit,coalesce"

// modes are the modes of this run, in this order (set from --modes).
var modes []mode

// selectModes sets modes from a comma-separated list of names.
func selectModes(names string) error {
	modes = nil
	for _, name := range strings.Split(names, ",") {
		i := slices.IndexFunc(allModes, func(m mode) bool { return m.name == name })
		if i < 0 {
			return fmt.Errorf("--modes: unknown mode %q (want some of %s)", name, modeNames())
		}
		modes = append(modes, allModes[i])
	}
	if modes[0].name != allModes[0].name {
		return fmt.Errorf("--modes: the first mode must be %s, the baseline of every ratio", allModes[0].name)
	}
	return nil
}

func modeNames() string {
	names := make([]string, len(allModes))
	for i, m := range allModes {
		names[i] = m.name
	}
	return strings.Join(names, ", ")
}

// coreModes are the modes the core simulation tells apart.
func coreModes() []mode {
	var out []mode
	for _, m := range modes {
		if m.coalescing == "" {
			out = append(out, m)
		}
	}
	return out
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
