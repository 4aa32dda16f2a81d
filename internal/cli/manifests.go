package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
)

// NewManifestsCommand is `manifests`: the webhook configurations (and
// coalescing policy) that send leaseguard the writes a policy selects.
func NewManifestsCommand() *cobra.Command {
	o := manifests.Defaults()
	coalesce := NewCoalesceFlag(manifests.CoalesceInAPIServer, manifests.CoalesceInAPIServer, manifests.CoalesceInWebhook, manifests.CoalesceOff)
	var configPath, caFile string
	var output yamlOutput
	var strict, kustomizePatch bool
	cmd := &cobra.Command{
		Use:   "manifests --config policy.yaml",
		Short: "Print the webhook configurations (and coalescing policy) that enforce a policy",
		Long: `manifests renders the admission configuration for a policy: a
ValidatingWebhookConfiguration whose rules, namespaceSelector and
matchConditions send leaseguard only the lease writes some rule selects
(split into a fail-closed webhook for identity changes and a fail-open one
for the holder's plain renewals), a MutatingWebhookConfiguration when a rule
needs the designation stamped, and a MutatingAdmissionPolicy when a rule
coalesces renewals. Where a selection cannot be said in CEL it falls back on
the broader match and says so on standard error and in the output.

Exit status: 0 when rendered; 1 with --strict when the rendering is broader
than the policy anywhere; 2 for bad usage or unreadable input (flags, an
unreadable or invalid policy, --ca-bundle-file).`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	fs.StringVar(&configPath, "config", "", "LeasePolicy file (required)")
	fs.StringVar(&o.Namespace, "leaseguard-namespace", o.Namespace, "leaseguard's namespace: never intercepted, and where its Service is")
	fs.StringVar(&o.ServiceName, "service-name", o.ServiceName, "the webhook Service")
	fs.StringVar(&o.URL, "url", "", "call the webhooks at this base URL instead of the Service (a server outside the cluster)")
	fs.StringVar(&caFile, "ca-bundle-file", "", "PEM CA bundle to put in the configurations (cert-manager or leaseguard's self-managed mode fill it otherwise)")
	fs.StringVar(&o.Prefix, "prefix", o.Prefix, "name prefix of the rendered objects")
	fs.Int32Var(&o.TimeoutSeconds, "timeout-seconds", 2, "webhook timeout (at most 3: lease clients renew with short timeouts)")
	fs.BoolVar(&o.FailOpen, "fail-open", false, "failurePolicy Ignore everywhere: identity changes pass too while leaseguard is down (docs/security.md)")
	coalesce.add(fs)
	output.add(fs)
	fs.BoolVar(&kustomizePatch, "kustomize-patch", false, "print strategic-merge patches for a kustomize overlay of config/default that swaps in this policy (config/e2e-policy is one)")
	fs.BoolVar(&strict, "strict", false, "exit 1 when the rendering is broader than the policy anywhere")

	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if configPath == "" {
			return Usage(errors.New("manifests needs --config"))
		}
		if err := output.check(); err != nil {
			return err
		}
		if o.TimeoutSeconds < 1 || o.TimeoutSeconds > 3 {
			return Usage(fmt.Errorf("--timeout-seconds %d: want 1 to 3 (docs/design.md §5)", o.TimeoutSeconds))
		}
		o.Coalescing = coalesce.Value()
		if caFile != "" {
			ca, err := os.ReadFile(caFile)
			if err != nil {
				return Usage(fmt.Errorf("--ca-bundle-file: %w", err))
			}
			o.CABundle = ca
		}
		p, _, err := policyfile.Load(configPath, policy.CompileOptions{OwnNamespace: o.Namespace})
		if err != nil {
			return Usage(err)
		}
		r, err := manifests.Render(p, o)
		if err != nil {
			return Usage(fmt.Errorf("policy file %s: %w", configPath, err))
		}
		var data []byte
		if kustomizePatch {
			data, err = r.KustomizePatch(manifests.PatchHeader(configPath))
		} else {
			data, err = r.YAML(manifests.Header(configPath))
		}
		if err != nil {
			return err
		}
		for _, n := range r.Notes {
			fmt.Fprintln(cmd.ErrOrStderr(), "leaseguard: warning:", n)
		}
		if err := writeOutput(cmd, output.file, data); err != nil {
			return err
		}
		if strict && len(r.Notes) > 0 {
			return Refused(fmt.Errorf("%d place(s) where the rendering is broader than the policy (--strict)", len(r.Notes)))
		}
		return nil
	}
	return cmd
}
