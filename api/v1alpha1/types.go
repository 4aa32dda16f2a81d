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
	Enforcement   string         `yaml:"enforcement,omitempty" json:"enforcement,omitempty"`
}

// Bind is a bound-lease template: a manager username pattern with {captures}
// and the lease name pattern each such manager may write.
type Bind struct {
	Manager string `yaml:"manager" json:"manager"`
	Lease   string `yaml:"lease" json:"lease"`
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

// RenewInterval is either a duration or the word "auto".
type RenewInterval struct {
	Auto     bool
	Duration time.Duration
}

// UnmarshalYAML accepts "auto" or a Go duration string.
func (r *RenewInterval) UnmarshalYAML(node *yaml.Node) error {
	var s string
	if err := node.Decode(&s); err != nil {
		return fmt.Errorf("line %d: minRenewInterval wants a duration such as \"5s\" or \"auto\"", node.Line)
	}
	if strings.EqualFold(strings.TrimSpace(s), "auto") {
		*r = RenewInterval{Auto: true}
		return nil
	}
	parsed, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: minRenewInterval %q is neither \"auto\" nor a duration such as \"5s\"", node.Line, s)
	}
	*r = RenewInterval{Duration: parsed}
	return nil
}

// MarshalYAML writes "auto" or the duration.
func (r RenewInterval) MarshalYAML() (any, error) {
	if r.Auto {
		return "auto", nil
	}
	return r.Duration.String(), nil
}
