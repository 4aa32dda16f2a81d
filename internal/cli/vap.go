package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
	"github.com/leaseguard/leaseguard/webhook/render/manifests"
	"github.com/leaseguard/leaseguard/webhook/render/vap"
)

// NewVAPCommand is `vap`: the policy as ValidatingAdmissionPolicies, for
// clusters without the webhook.
func NewVAPCommand() *cobra.Command {
	o := vap.Defaults()
	coalesce := NewCoalesceFlag(manifests.CoalesceOff, manifests.CoalesceInAPIServer, manifests.CoalesceOff)
	var configPath string
	var output yamlOutput
	var strict bool
	cmd := &cobra.Command{
		Use:   "vap --config policy.yaml",
		Short: "Print ValidatingAdmissionPolicies that enforce a policy inside the API server, without the webhook",
		Long: `vap renders a policy as ValidatingAdmissionPolicies and bindings
(admissionregistration.k8s.io/v1): CEL the API server runs itself, with no
webhook call, one policy per rule and resource, its binding's
validationActions the rule's enforcement (deny: Deny, warn: Warn, audit:
Audit). What CEL cannot decide from the request alone (designation stamping,
429 answers with Retry-After, minRenewInterval, coalescing unless
--coalesce=policy, bind templates with several captures, staleness on
DELETE) is printed on standard error and in the output as LIMIT lines
(docs/vap.md).

--coalesce takes the values of manifests --coalesce that need no webhook:
policy renders the MutatingAdmissionPolicy that coalesces early renewals
(Kubernetes 1.36 and later), off (the default) does not. A bare --coalesce,
its old bool form, means --coalesce=policy.

Exit status: 0 when rendered; 1 with --strict when anything is limited;
2 for bad usage or unreadable input (flags, an unreadable or invalid policy).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.NoArgs(cmd, args); err != nil {
				return Usage(err)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&configPath, "config", "", "LeasePolicy file (required)")
	fs.StringVar(&o.Namespace, "leaseguard-namespace", o.Namespace, "leaseguard's namespace: never selected, as by the webhooks")
	fs.StringVar(&o.Prefix, "prefix", o.Prefix, "name prefix of the rendered objects")
	coalesce.add(fs)
	fs.BoolVar(&o.StaticMessages, "static-messages", false, "refuse with each rule's fixed message instead of the exact one: the same verdicts for about 40% less CEL per write (docs/vap.md)")
	output.add(fs)
	fs.BoolVar(&strict, "strict", false, "exit 1 when the policies do not enforce everything the policy asks for")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return Usage(err) })

	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if configPath == "" {
			return Usage(errors.New("vap needs --config"))
		}
		if err := output.check(); err != nil {
			return err
		}
		o.Coalescing = coalesce.Value() == manifests.CoalesceInAPIServer
		p, _, err := policyfile.Load(configPath, policy.CompileOptions{OwnNamespace: o.Namespace})
		if err != nil {
			return Usage(err)
		}
		r, err := vap.Render(p, o)
		if err != nil {
			return Usage(err)
		}
		data, err := r.YAML(vap.Header(vap.Args(configPath, o)))
		if err != nil {
			return err
		}
		for _, l := range r.Limits {
			fmt.Fprintln(cmd.ErrOrStderr(), "leaseguard: warning:", l.String())
		}
		for _, n := range r.Notes {
			fmt.Fprintln(cmd.ErrOrStderr(), "leaseguard: warning:", n)
		}
		if err := writeOutput(cmd, output.file, data); err != nil {
			return err
		}
		if strict && len(r.Limits)+len(r.Notes) > 0 {
			return Refused(fmt.Errorf("%d thing(s) the policies do not enforce as leaseguard's webhook does (--strict)", len(r.Limits)+len(r.Notes)))
		}
		return nil
	}
	return cmd
}
