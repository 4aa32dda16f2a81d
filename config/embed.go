// Package config embeds the manifests under config/ that leaseguard itself
// installs (`leaseguard dev`) and the tests apply, so the binary and the
// tests use the very files that are deployed.
package config

import (
	"embed"
)

// Files holds the CRD, the webhook configurations and the samples.
//
//go:embed crd/bases/*.yaml webhook/manifests.yaml samples/*.yaml
var Files embed.FS

// Paths of the embedded manifests.
const (
	CRDPath          = "crd/bases/multicluster.core.cnrm.cloud.google.com_multiclusterleases.yaml"
	WebhooksPath     = "webhook/manifests.yaml"
	SamplePolicyPath = "samples/policy.yaml"
)
