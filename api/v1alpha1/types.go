// Package v1alpha1 holds the LeasePolicy configuration file format
// (apiVersion leaseguard.io/v1alpha1, kind LeasePolicy). Field names are part of
// the product contract (docs/design.md §3); the file is decoded strictly, so the yaml tags
// here are the only accepted spellings.
package v1alpha1

import (
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

const (
	// APIVersion is the only apiVersion this package decodes.
	APIVersion = "leaseguard.io/v1alpha1"
	// Kind is the only kind this package decodes.
	Kind = "LeasePolicy"
)

// LeasePolicy is the whole configuration file.
type LeasePolicy struct {
	APIVersion string `yaml:"apiVersion" json:"apiVersion"`
	Kind       string `yaml:"kind" json:"kind"`
	// ClockSkew is the grace allowed for expiry and staleness, and how far a
	// renewTime may be ahead of the server clock. Default 2s.
	ClockSkew *Duration `yaml:"clockSkew,omitempty" json:"clockSkew,omitempty"`
	Rules     []Rule    `yaml:"rules" json:"rules"`
}

// Rule selects leases and says who may write them.
type Rule struct {
	Name             string         `yaml:"name" json:"name"`
	Resources        []string       `yaml:"resources" json:"resources"`
	Namespaces       []string       `yaml:"namespaces,omitempty" json:"namespaces,omitempty"`
	Names            []string       `yaml:"names,omitempty" json:"names,omitempty"`
	Managers         []string       `yaml:"managers,omitempty" json:"managers,omitempty"`
	Bind             *Bind          `yaml:"bind,omitempty" json:"bind,omitempty"`
	Designation      string         `yaml:"designation,omitempty" json:"designation,omitempty"`
	Operators        []string       `yaml:"operators,omitempty" json:"operators,omitempty"`
	StatusWriters    []string       `yaml:"statusWriters,omitempty" json:"statusWriters,omitempty"`
	HolderBinding    string         `yaml:"holderBinding,omitempty" json:"holderBinding,omitempty"`
	MinRenewInterval *RenewInterval `yaml:"minRenewInterval,omitempty" json:"minRenewInterval,omitempty"`
	// AssumedClient are the leader-election timings of the clients the rule
	// throttles; a fixed minRenewInterval is checked against them. Default:
	// client-go's 15s / 10s / 2s.
	AssumedClient *ClientTimings `yaml:"assumedClient,omitempty" json:"assumedClient,omitempty"`
	// CoalesceRenewals acknowledges, without storing it, a renewal by the
	// holder that comes sooner than this after the stored one: "auto" (the
	// longest the assumed clients and their followers survive) or a
	// duration. Off when absent.
	CoalesceRenewals *CoalesceInterval `yaml:"coalesceRenewals,omitempty" json:"coalesceRenewals,omitempty"`
	// MaxLeaseDuration bounds leaseDurationSeconds (and a MultiClusterLease's
	// renewDeadlineSeconds and retryPeriodSeconds). Default: four times the
	// assumed clients' lease duration.
	MaxLeaseDuration *Duration `yaml:"maxLeaseDuration,omitempty" json:"maxLeaseDuration,omitempty"`
	// BackOffLosers answers a non-designated manager with 429 and a
	// Retry-After until the designation goes stale, instead of 403.
	BackOffLosers bool   `yaml:"backOffLosers,omitempty" json:"backOffLosers,omitempty"`
	Enforcement   string `yaml:"enforcement,omitempty" json:"enforcement,omitempty"`
}

// Bind is a bound-lease template: a manager username pattern with {captures}
// and the lease name pattern each such manager may write; with Namespace,
// also the namespace that lease must be in (Config Connector's managers run
// in a ConfigConnectorContext's managerNamespace: "{managerNamespace}").
type Bind struct {
	Manager   string `yaml:"manager" json:"manager"`
	Lease     string `yaml:"lease" json:"lease"`
	Namespace string `yaml:"namespace,omitempty" json:"namespace,omitempty"`
}

// ClientTimings are a leader-election client's settings.
type ClientTimings struct {
	LeaseDuration *Duration `yaml:"leaseDuration,omitempty" json:"leaseDuration,omitempty"`
	RenewDeadline *Duration `yaml:"renewDeadline,omitempty" json:"renewDeadline,omitempty"`
	RetryPeriod   *Duration `yaml:"retryPeriod,omitempty" json:"retryPeriod,omitempty"`
}

// Duration is a Go duration string such as "5s" or "1m30s".
type Duration struct{ time.Duration }

// UnmarshalYAML accepts a Go duration string.
func (d *Duration) UnmarshalYAML(node *yaml.Node) error {
	var s string
	if err := node.Decode(&s); err != nil {
		return fmt.Errorf("line %d: want a duration such as \"5s\"", node.Line)
	}
	parsed, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (want e.g. \"5s\", \"1m\")", node.Line, s)
	}
	d.Duration = parsed
	return nil
}

// MarshalYAML writes the duration back as a string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// RenewInterval is minRenewInterval: a duration or the word "auto".
type RenewInterval AutoDuration

// UnmarshalYAML accepts "auto" or a Go duration string.
func (r *RenewInterval) UnmarshalYAML(node *yaml.Node) error {
	return (*AutoDuration)(r).decode(node, "minRenewInterval")
}

// MarshalYAML writes "auto" or the duration.
func (r RenewInterval) MarshalYAML() (any, error) { return AutoDuration(r).MarshalYAML() }

// CoalesceInterval is coalesceRenewals: a duration or the word "auto".
type CoalesceInterval AutoDuration

// UnmarshalYAML accepts "auto" or a Go duration string.
func (c *CoalesceInterval) UnmarshalYAML(node *yaml.Node) error {
	return (*AutoDuration)(c).decode(node, "coalesceRenewals")
}

// MarshalYAML writes "auto" or the duration.
func (c CoalesceInterval) MarshalYAML() (any, error) { return AutoDuration(c).MarshalYAML() }

// AutoDuration is either a duration or the word "auto".
type AutoDuration struct {
	Auto     bool
	Duration time.Duration
}

func (a *AutoDuration) decode(node *yaml.Node, field string) error {
	var s string
	if err := node.Decode(&s); err != nil {
		return fmt.Errorf("line %d: %s wants a duration such as \"5s\" or \"auto\"", node.Line, field)
	}
	if strings.EqualFold(strings.TrimSpace(s), "auto") {
		*a = AutoDuration{Auto: true}
		return nil
	}
	parsed, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %s %q is neither \"auto\" nor a duration such as \"5s\"", node.Line, field, s)
	}
	*a = AutoDuration{Duration: parsed}
	return nil
}

// MarshalYAML writes "auto" or the duration.
func (a AutoDuration) MarshalYAML() (any, error) {
	if a.Auto {
		return "auto", nil
	}
	return a.Duration.String(), nil
}
