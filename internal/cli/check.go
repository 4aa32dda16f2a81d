package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/oneline"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
	"github.com/leaseguard/leaseguard/webhook/decision/policyfile"
)

// checkOptions are the flags of `leaseguard check`.
type checkOptions struct {
	configPath, user, operation, subresource, oldPath, newPath, podName, now, namespace, fieldManager, output string
	groups                                                                                                    []string
	dryRun                                                                                                    bool
	// errOut receives notes (the verdict goes to standard output).
	errOut io.Writer
}

// NewCheckCommand is `check`: one write decided offline by the webhook's
// decision core.
func NewCheckCommand() *cobra.Command {
	o := &checkOptions{}
	cmd := &cobra.Command{
		Use:   "check --config policy.yaml --as USER [--old old.yaml] [--new new.yaml] [-o text|json|yaml]",
		Short: "Decide one lease write offline, exactly as the webhook would; exit 1 on deny",
		Long: `check evaluates one write against a policy file with the webhook's decision
core, with no cluster. The operation defaults to CREATE with --new only,
DELETE with --old only and UPDATE with both. It prints the verdict and the
message (-o json or yaml: as an object, for scripts).

Exit status: 0 when the write is admitted (allow, warn, audit, coalesced or
acknowledged: answered success without being stored); 1 when it is denied;
2 for bad usage or unreadable input (flags, the policy or an object file).`,
		// Usage mistakes are bad input too: exit 2, so that exit 1 always
		// means "denied".
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.NoArgs(cmd, args); err != nil {
				return Usage(err)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.errOut = cmd.ErrOrStderr()
			return o.run(cmd.OutOrStdout())
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return Usage(err) })
	fs := cmd.Flags()
	fs.StringVar(&o.configPath, "config", "", "LeasePolicy file (required)")
	// --as and --as-group, as kubectl names the user a request is made as
	// (in the kubectl plugin, --user is kubeconfig's user, for top).
	fs.StringVar(&o.user, "as", "", "username of the caller (required)")
	fs.StringSliceVar(&o.groups, "as-group", nil, "group of the caller (repeatable)")
	fs.StringVarP(&o.output, "output", "o", "text", "output format: text, json or yaml")
	fs.StringVar(&o.podName, "pod-name", "", "the caller's "+leaseobject.PodNameExtra+" extra")
	fs.StringVar(&o.operation, "operation", "", "CREATE, UPDATE or DELETE (inferred from --old/--new when empty)")
	fs.StringVar(&o.subresource, "subresource", "", `"status" for a MultiClusterLease status write`)
	fs.StringVar(&o.oldPath, "old", "", "the stored object (YAML or JSON)")
	fs.StringVar(&o.newPath, "new", "", "the object as written (YAML or JSON)")
	fs.StringVar(&o.now, "now", "", "server time, RFC 3339 (default: the current time)")
	fs.StringVar(&o.namespace, "leaseguard-namespace", "leaseguard-system", "leaseguard's own namespace, for policy validation")
	fs.StringVar(&o.fieldManager, "field-manager", "", "the write's field manager (kubectl's start with \"kubectl\": such writes are never backed off)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "the write is a server-side dry run (never backed off)")
	return cmd
}

// bad marks bad input: exit status 2.
func bad(err error) error { return Usage(err) }

func (o *checkOptions) run(out io.Writer) error {
	if o.configPath == "" || o.user == "" {
		return bad(errors.New("check needs --config and --as"))
	}
	switch o.output {
	case "":
		o.output = "text"
	case "text", "json", "yaml":
	default:
		return bad(fmt.Errorf("--output %q: want text, json or yaml", o.output))
	}
	p, _, err := policyfile.Load(o.configPath, policy.CompileOptions{OwnNamespace: o.namespace})
	if err != nil {
		return bad(err)
	}
	// What the API server can route of it, as serve and manifests render it.
	if err := checkRoutable(p, o.namespace, o.configPath, o.errOut); err != nil {
		return bad(err)
	}
	req, err := o.request()
	if err != nil {
		return bad(err)
	}
	if req.Resource == leaseobject.MultiClusterLeases && o.errOut != nil {
		for _, n := range p.AcknowledgementNotes() {
			fmt.Fprintln(o.errOut, "leaseguard: note:", n)
		}
	}
	r := verdictOf(p, req)
	if err := r.print(out, o.output); err != nil {
		return err
	}
	if r.Verdict == policy.Deny.String() {
		return Refused(nil)
	}
	return nil
}

// checkResult is check's answer, printed as text or, with -o json|yaml, as
// this object.
type checkResult struct {
	// Verdict is allow, deny, warn or audit.
	Verdict string `json:"verdict"`
	// Outcome says what the API server does with the write: stored,
	// refused, or coalesced / acknowledged (answered success, not stored).
	Outcome   string `json:"outcome"`
	Rule      string `json:"rule,omitempty"`
	Invariant string `json:"invariant,omitempty"`
	// Code is the HTTP status of a refusal; RetryAfterSeconds its
	// Retry-After (a losing candidate's back-off).
	Code              int     `json:"code,omitempty"`
	RetryAfterSeconds float64 `json:"retryAfterSeconds,omitempty"`
	Message           string  `json:"message,omitempty"`
	// Warning is what the caller sees as a warning on an admitted write.
	Warning string `json:"warning,omitempty"`
	text    string
}

// verdictOf decides req as the webhook would: coalesced or acknowledged
// first (the mutating step), then validated.
func verdictOf(p *policy.Policy, req *leaseobject.Request) *checkResult {
	if policy.Coalesce(p, req) {
		rule := p.Select(req.Resource, req.New.Namespace, req.New.Name)
		msg := fmt.Sprintf("renewTime advances %s, less than coalesceRenewals %s: acknowledged, not stored",
			req.New.Spec.RenewTime.Sub(req.Old.Spec.RenewTime).Round(time.Millisecond), rule.CoalesceInterval())
		return &checkResult{Verdict: policy.Allow.String(), Outcome: "coalesced", Rule: rule.Name, Message: msg,
			text: "ALLOW (coalesced): rule " + rule.Name + ": " + msg}
	}
	if policy.Acknowledge(p, req) {
		rule := p.Select(req.Resource, req.New.Namespace, req.New.Name)
		msg := fmt.Sprintf("%s renews the shared holder's lease, which %s writes: acknowledged, not stored (by leaseguard's mutating webhook; without it, stored)",
			oneline.Clip(req.Caller.Username), oneline.Clip(rule.DesignatedWriter(req.Old)))
		return &checkResult{Verdict: policy.Allow.String(), Outcome: "acknowledged", Rule: rule.Name, Message: msg,
			text: "ALLOW (acknowledged): rule " + rule.Name + ": " + msg}
	}
	d := policy.Decide(p, req)
	r := &checkResult{Verdict: d.Verdict.String(), Outcome: "stored", Rule: d.Rule, Message: d.Message}
	if d.Invariant != policy.InvariantNone {
		r.Invariant = string(d.Invariant)
	}
	switch {
	case d.Rule == "":
		r.text = "ALLOW: no rule selects this object"
	case d.Verdict == policy.Allow:
		r.text = "ALLOW: rule " + d.Rule
		if d.Notice != "" {
			r.Warning = d.Notice
			r.text += "\nWarning: " + d.Notice
		}
	case d.Verdict == policy.Deny:
		r.Outcome, r.Code, r.RetryAfterSeconds = "refused", int(d.Code), d.RetryAfter.Seconds()
		r.text = fmt.Sprintf("DENY (%s, HTTP %d%s): %s", d.Invariant, d.Code, retryAfter(&d), d.Message)
	default:
		r.Warning = d.Message
		r.text = fmt.Sprintf("%s (%s, admitted): %s", strings.ToUpper(d.Verdict.String()), d.Invariant, d.Message)
	}
	return r
}

func (r *checkResult) print(out io.Writer, format string) error {
	switch format {
	case "json":
		data, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", data)
		return err
	case "yaml":
		data, err := yaml.Marshal(r)
		if err != nil {
			return err
		}
		_, err = out.Write(data)
		return err
	}
	_, err := fmt.Fprintln(out, r.text)
	return err
}

// request builds the decision core's request from the flags and files.
func (o *checkOptions) request() (*leaseobject.Request, error) {
	req := &leaseobject.Request{
		Subresource:  o.subresource,
		Caller:       leaseobject.Caller{Username: o.user, Groups: o.groups, PodName: o.podName},
		Now:          time.Now(),
		DryRun:       o.dryRun,
		FieldManager: o.fieldManager,
	}
	var err error
	if o.now != "" {
		if req.Now, err = time.Parse(time.RFC3339, o.now); err != nil {
			return nil, fmt.Errorf("--now %q is not an RFC 3339 time", o.now)
		}
	}
	var oldRes, newRes leaseobject.Resource
	if o.oldPath != "" {
		if oldRes, req.Old, err = readObject(o.oldPath); err != nil {
			return nil, err
		}
	}
	if o.newPath != "" {
		if newRes, req.New, err = readObject(o.newPath); err != nil {
			return nil, err
		}
	}
	switch {
	case req.Old == nil && req.New == nil:
		return nil, errors.New("check needs --old, --new or both")
	case req.Old != nil && req.New != nil && oldRes != newRes:
		return nil, fmt.Errorf("--old is a %s, --new a %s: both must be the same kind", kindOf(oldRes), kindOf(newRes))
	case req.New != nil:
		req.Resource = newRes
	default:
		req.Resource = oldRes
	}
	if req.Operation, err = checkOperation(o.operation, req); err != nil {
		return nil, err
	}
	if req.New != nil {
		if err := leaseobject.CheckWritten(req.Old, req.New); err != nil {
			return nil, fmt.Errorf("%s: %w", o.newPath, err)
		}
	}
	return req, nil
}

// maxObjectFileBytes bounds an object file `check` reads: more than any
// lease the API server stores.
const maxObjectFileBytes = 32 << 20

func readObject(path string) (leaseobject.Resource, *leaseobject.Object, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxObjectFileBytes+1))
	if err != nil {
		return "", nil, err
	}
	if len(data) > maxObjectFileBytes {
		return "", nil, fmt.Errorf("%s: larger than %d MiB: no lease the API server stores is", path, maxObjectFileBytes>>20)
	}
	res, obj, err := leaseobject.DecodeAnyLenient(data)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", path, err)
	}
	return res, obj, nil
}

func checkOperation(op string, req *leaseobject.Request) (leaseobject.Operation, error) {
	want := leaseobject.Update
	switch {
	case req.Old == nil:
		want = leaseobject.Create
	case req.New == nil:
		want = leaseobject.Delete
	}
	if op == "" {
		return want, nil
	}
	got := leaseobject.Operation(strings.ToUpper(op))
	switch got {
	case "PATCH":
		got = leaseobject.Update
	case leaseobject.Create, leaseobject.Update, leaseobject.Delete:
	default:
		return "", fmt.Errorf("--operation %q is not CREATE, UPDATE (or PATCH) or DELETE", op)
	}
	if got != want {
		return "", fmt.Errorf("--operation %s does not fit the objects given (%s wants %s)", op, describeObjects(req), want)
	}
	return got, nil
}

func describeObjects(req *leaseobject.Request) string {
	switch {
	case req.Old == nil:
		return "--new only"
	case req.New == nil:
		return "--old only"
	}
	return "--old and --new"
}

func retryAfter(d *policy.Decision) string {
	if d.RetryAfter <= 0 {
		return ""
	}
	return ", retry after " + d.RetryAfter.Round(time.Millisecond).String()
}

func kindOf(r leaseobject.Resource) string {
	_, kind, _ := leaseobject.Kind(r)
	return kind
}
