// Package vap is the differential test of `leaseguard vap`: the same corpus
// of lease writes is sent through three real API servers, one guarded by
// leaseguard as shipped (the real `leaseguard serve` behind the webhook
// configurations and the MutatingAdmissionPolicy `leaseguard manifests`
// renders: the renewals it answers never reach the webhook), one by the
// webhook alone (`--coalesce webhook`, as on clusters before 1.36), the
// third by the ValidatingAdmissionPolicies RenderVAP emits and nothing else.
// The first two must answer every case alike (verdict, code, message, what
// is stored); the policies must give the same verdicts wherever they claim
// to enforce the policy (docs/vap.md).
package vap

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/leaseguard/leaseguard/test/controlplane"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
	"github.com/leaseguard/leaseguard/webhook/render/vap"
)

// Shared by the tests of this package.
var (
	corpus *corpusFile
	pol    *policy.Policy
	// webhookEnv is guarded by leaseguard's webhook, vapEnv by the emitted
	// policies only.
	webhookEnv, vapEnv *env
	// aloneEnv is guarded by the webhook alone (--coalesce webhook).
	aloneEnv   *env
	rendered   *vap.Rendered
	guard      *controlplane.Leaseguard
	aloneGuard *controlplane.Leaseguard
)

func TestMain(m *testing.M) {
	reaped := controlplane.ReapChildrenOnExit()
	code, err := run(m)
	reaped()
	if err != nil {
		fmt.Fprintln(os.Stderr, "vap setup:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	ctx := context.Background()
	ctrllog.SetLogger(logr.Discard())
	var err error
	if corpus, err = loadCorpus("testdata/policy-cases.json"); err != nil {
		return 0, err
	}
	if pol, err = policyfile.Parse([]byte(corpus.Policy), policy.CompileOptions{OwnNamespace: manifests.Defaults().Namespace}); err != nil {
		return 0, fmt.Errorf("corpus policy: %w", err)
	}
	tmp, err := os.MkdirTemp("", "leaseguard-vap-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	policyPath := filepath.Join(tmp, "policy.yaml")
	if err := os.WriteFile(policyPath, []byte(corpus.Policy), 0o600); err != nil {
		return 0, err
	}
	binary, err := controlplane.BuildLeaseguard(tmp)
	if err != nil {
		return 0, err
	}

	// The webhook side: leaseguard's webhooks and coalescing policy, as
	// `leaseguard manifests` renders them, and `leaseguard serve`.
	wcp, g, stop, err := startGuarded(binary, policyPath)
	if err != nil {
		return 0, err
	}
	defer stop()
	guard = g

	// The webhook alone: the configuration rendered for clusters without
	// MutatingAdmissionPolicy, every acknowledgement and coalescing by
	// leaseguard's mutating webhook.
	acp, ag, stopAlone, err := startGuarded(binary, policyPath)
	if err != nil {
		return 0, err
	}
	defer stopAlone()
	aloneGuard = ag
	if err := acp.InstallAdmission(ctx, policyPath, manifests.Options{Coalescing: manifests.CoalesceInWebhook}); err != nil {
		return 0, err
	}

	// The VAP side: no webhook configuration at all, only what RenderVAP
	// emits (with the same coalescing policy).
	vcp, err := controlplane.StartWithoutWebhooks(controlplane.Options{})
	if err != nil {
		return 0, err
	}
	defer func() { _ = vcp.Stop() }()
	opts := vap.Defaults()
	opts.Coalescing = true
	if rendered, err = vap.Render(pol, opts); err != nil {
		return 0, err
	}
	if err := controlplane.InstallVAP(ctx, vcp.Config, rendered); err != nil {
		return 0, err
	}

	if webhookEnv, err = newEnv("webhook", wcp); err != nil {
		return 0, err
	}
	if vapEnv, err = newEnv("vap", vcp); err != nil {
		return 0, err
	}
	if aloneEnv, err = newEnv("webhook-alone", acp); err != nil {
		return 0, err
	}
	for _, e := range []*env{webhookEnv, vapEnv, aloneEnv} {
		if err := e.createNamespaces(ctx, corpusNamespaces()); err != nil {
			return 0, err
		}
	}
	if err := vapEnv.waitUntilEnforced(ctx); err != nil {
		return 0, err
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "--- leaseguard serve output (last 4 KiB) ---\n%s\n", tail(guard.Log(), 4096))
		fmt.Fprintf(os.Stderr, "--- leaseguard serve output, webhook alone (last 4 KiB) ---\n%s\n", tail(aloneGuard.Log(), 4096))
	}
	return code, nil
}

// startGuarded starts a control plane guarded by `leaseguard serve` behind
// the configuration `leaseguard manifests` renders by default; stop stops
// both.
func startGuarded(binary, policyPath string) (*controlplane.ControlPlane, *controlplane.Leaseguard, func(), error) {
	cp, err := controlplane.Start(controlplane.Options{Policy: policyPath})
	if err != nil {
		return nil, nil, nil, err
	}
	g, err := cp.StartLeaseguard(binary, policyPath)
	if err != nil {
		_ = cp.Stop()
		return nil, nil, nil, err
	}
	return cp, g, func() { g.Stop(); _ = cp.Stop() }, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
