package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/leaseguard/leaseguard/webhook/manifests"
	"github.com/leaseguard/leaseguard/webhook/policy"
	"github.com/leaseguard/leaseguard/webhook/policyfile"
)

func newVAPCommand() *cobra.Command {
	o := manifests.VAPDefaults()
	var configPath, outPath string
	var strict bool
	cmd := &cobra.Command{
		Use:   "vap --config policy.yaml",
		Short: "Print ValidatingAdmissionPolicies that enforce a policy inside the API server, without the webhook",
		Long: `vap renders a policy as ValidatingAdmissionPolicies and bindings
(admissionregistration.k8s.io/v1): CEL the API server runs itself, with no
webhook call, one policy per rule and resource, its binding's
validationActions the rule's enforcement (deny: Deny, warn: Warn, audit:
Audit). What CEL cannot decide from the request alone (designation stamping,
429 answers with Retry-After, minRenewInterval, coalescing unless --coalesce,
bind templates with several captures, staleness on DELETE) is printed on
standard error and in the output as LIMIT lines (docs/vap.md).

Exit status: 0 when rendered, 1 with --strict when anything is limited,
2 for bad input (flags, an unreadable or invalid policy).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.NoArgs(cmd, args); err != nil {
				return &exitError{code: 2, err: err}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&configPath, "config", "", "LeasePolicy file (required)")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "leaseguard's namespace: never selected, as by the webhooks")
	fs.StringVar(&o.Prefix, "prefix", o.Prefix, "name prefix of the rendered objects")
	fs.BoolVar(&o.Coalescing, "coalesce", false, "also render the MutatingAdmissionPolicy that coalesces early renewals (Kubernetes 1.36 and later)")
	fs.BoolVar(&o.StaticMessages, "static-messages", false, "refuse with each rule's fixed message instead of the exact one: the same verdicts for about 40% less CEL per write (docs/vap.md)")
	fs.StringVarP(&outPath, "output", "o", "", "write to this file instead of standard output")
	fs.BoolVar(&strict, "strict", false, "exit 1 when the policies do not enforce everything the policy asks for")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: 2, err: err} })

	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if configPath == "" {
			return &exitError{code: 2, err: errors.New("vap needs --config")}
		}
		p, _, err := policyfile.Load(configPath, policy.CompileOptions{OwnNamespace: o.Namespace})
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		r, err := manifests.RenderVAP(p, o)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		data, err := r.YAML(manifests.VAPHeader(manifests.VAPArgs(configPath, o)))
		if err != nil {
			return err
		}
		for _, l := range r.Limits {
			fmt.Fprintln(cmd.ErrOrStderr(), "leaseguard: warning:", l.String())
		}
		for _, n := range r.Notes {
			fmt.Fprintln(cmd.ErrOrStderr(), "leaseguard: warning:", n)
		}
		if err := writeOutput(cmd, outPath, data); err != nil {
			return err
		}
		if strict && len(r.Limits)+len(r.Notes) > 0 {
			return &exitError{code: 1, err: fmt.Errorf("%d thing(s) the policies do not enforce as leaseguard's webhook does (--strict)", len(r.Limits)+len(r.Notes))}
		}
		return nil
	}
	return cmd
}
