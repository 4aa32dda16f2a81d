// Package vap is the differential test of `leaseguard vap`: the same corpus
// of lease writes is sent through two real API servers, one guarded by
// leaseguard's webhook (the real `leaseguard serve` behind the webhook
// configurations `leaseguard manifests` renders), the other by the
// ValidatingAdmissionPolicies RenderVAP emits and nothing else, and the
// verdicts must be identical wherever the policies claim to enforce the
// policy (docs/vap.md).
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
	"github.com/leaseguard/leaseguard/webhook/manifests"
	"github.com/leaseguard/leaseguard/webhook/policy"
	"github.com/leaseguard/leaseguard/webhook/policyfile"
	"github.com/leaseguard/leaseguard/webhook/vap"
)

// Shared by the tests of this package.
var (
	corpus *corpusFile
	pol    *policy.Policy
	// webhookEnv is guarded by leaseguard's webhook, vapEnv by the emitted
	// policies only.
	webhookEnv, vapEnv *env
	rendered           *vap.Rendered
	guard              *controlplane.Leaseguard
)

func TestMain(m *testing.M) {
	code, err := run(m)
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
	wcp, err := controlplane.Start(controlplane.Options{Policy: policyPath})
	if err != nil {
		return 0, err
	}
	defer func() { _ = wcp.Stop() }()
	if guard, err = wcp.StartLeaseguard(binary, policyPath); err != nil {
		return 0, err
	}
	defer guard.Stop()

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
	for _, e := range []*env{webhookEnv, vapEnv} {
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
	}
	return code, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
