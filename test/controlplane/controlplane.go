// Package controlplane is the tests' harness around the local control
// plane that `leaseguard dev` runs (internal/controlplane: kube-apiserver
// and etcd with leaseguard's CRD and admission configuration): it adds what
// only tests need — building and starting the real leaseguard and plugin
// binaries, reading their metrics, cert-manager's CRDs — and names the
// product's parts, so that a test imports one package.
package controlplane

import (
	"github.com/leaseguard/leaseguard/internal/controlplane"
)

// ControlPlane is a running kube-apiserver and etcd (the product's), with
// the tests' methods (StartLeaseguard).
type ControlPlane struct{ *controlplane.ControlPlane }

// Options configure Start (internal/controlplane.Options).
type Options = controlplane.Options

// AdmissionClient is the API server's client certificate to webhooks.
type AdmissionClient = controlplane.AdmissionClient

// The product's names, as the tests use them.
const (
	KubernetesVersion   = controlplane.KubernetesVersion
	AdmissionClientName = controlplane.AdmissionClientName
	LeaseWritersRole    = controlplane.LeaseWritersRole
)

var (
	AssetsDir                   = controlplane.AssetsDir
	RepoRoot                    = controlplane.RepoRoot
	NewAdmissionClient          = controlplane.NewAdmissionClient
	WriteAdmissionConfiguration = controlplane.WriteAdmissionConfiguration
	InstallAdmissionPolicies    = controlplane.InstallAdmissionPolicies
	InstallVAP                  = controlplane.InstallVAP
	GrantLeaseAccess            = controlplane.GrantLeaseAccess
	SetCABundle                 = controlplane.SetCABundle
)

// Start starts kube-apiserver and etcd with leaseguard's admission
// configuration installed (internal/controlplane.Start).
func Start(o Options) (*ControlPlane, error) {
	return wrap(controlplane.Start(o))
}

// StartWithoutWebhooks starts them with no webhook configuration
// (internal/controlplane.StartWithoutWebhooks).
func StartWithoutWebhooks(o Options) (*ControlPlane, error) {
	return wrap(controlplane.StartWithoutWebhooks(o))
}

func wrap(c *controlplane.ControlPlane, err error) (*ControlPlane, error) {
	if err != nil {
		return nil, err
	}
	return &ControlPlane{c}, nil
}
