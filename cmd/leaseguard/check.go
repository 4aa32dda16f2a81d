package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leaseguard/leaseguard/webhook/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/policy"
	"github.com/leaseguard/leaseguard/webhook/policyfile"
)

func newCheckCommand() *cobra.Command {
	var (
		configPath, user, operation, subresource, oldPath, newPath, podName, now, namespace string
		groups                                                                              []string
	)
	cmd := &cobra.Command{
		Use:   "check --config policy.yaml --user USER [--old old.yaml] [--new new.yaml]",
		Short: "Decide one lease write offline, exactly as the webhook would; exit 1 on deny",
		Long: `check evaluates one write against a policy file with the webhook's decision
core, with no cluster. The operation defaults to CREATE with --new only,
DELETE with --old only and UPDATE with both. It prints the verdict and the
message and exits 0 when the write is admitted (allow, warn, audit), 1 when
it is denied and 2 when the input is bad.`,
		// Usage mistakes are bad input too: exit 2, so that exit 1 always
		// means "denied".
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.NoArgs(cmd, args); err != nil {
				return &exitError{code: 2, err: err}
			}
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: 2, err: err} })
	fs := cmd.Flags()
	fs.StringVar(&configPath, "config", "", "LeasePolicy file (required)")
	fs.StringVar(&user, "user", "", "username of the caller (required)")
	fs.StringSliceVar(&groups, "group", nil, "group of the caller (repeatable)")
	fs.StringVar(&podName, "pod-name", "", "the caller's "+policy.PodNameExtra+" extra")
	fs.StringVar(&operation, "operation", "", "CREATE, UPDATE or DELETE (inferred from --old/--new when empty)")
	fs.StringVar(&subresource, "subresource", "", `"status" for a MultiClusterLease status write`)
	fs.StringVar(&oldPath, "old", "", "the stored object (YAML or JSON)")
	fs.StringVar(&newPath, "new", "", "the object as written (YAML or JSON)")
	fs.StringVar(&now, "now", "", "server time, RFC 3339 (default: the current time)")
	fs.StringVar(&namespace, "namespace", "leaseguard-system", "leaseguard's own namespace, for policy validation")

	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		bad := func(err error) error { return &exitError{code: 2, err: err} }
		if configPath == "" || user == "" {
			return bad(errors.New("check needs --config and --user"))
		}
		p, _, err := policyfile.Load(configPath, policy.CompileOptions{OwnNamespace: namespace})
		if err != nil {
			return bad(err)
		}
		req := &policy.Request{
			Subresource: subresource,
			Caller:      policy.Caller{Username: user, Groups: groups, PodName: podName},
			Now:         time.Now(),
		}
		if now != "" {
			if req.Now, err = time.Parse(time.RFC3339, now); err != nil {
				return bad(fmt.Errorf("--now %q is not an RFC 3339 time", now))
			}
		}
		var oldRes, newRes policy.Resource
		if oldPath != "" {
			if oldRes, req.Old, err = readObject(oldPath); err != nil {
				return bad(err)
			}
		}
		if newPath != "" {
			if newRes, req.New, err = readObject(newPath); err != nil {
				return bad(err)
			}
		}
		switch {
		case req.Old == nil && req.New == nil:
			return bad(errors.New("check needs --old, --new or both"))
		case req.Old != nil && req.New != nil && oldRes != newRes:
			return bad(fmt.Errorf("--old is a %s, --new a %s: both must be the same kind", kindOf(oldRes), kindOf(newRes)))
		case req.New != nil:
			req.Resource = newRes
		default:
			req.Resource = oldRes
		}
		if req.Operation, err = checkOperation(operation, req); err != nil {
			return bad(err)
		}

		d := policy.Decide(p, req)
		out := cmd.OutOrStdout()
		switch {
		case d.Rule == "":
			fmt.Fprintln(out, "ALLOW: no rule selects this object")
		case d.Verdict == policy.Allow:
			fmt.Fprintf(out, "ALLOW: rule %s\n", d.Rule)
		case d.Verdict == policy.Deny:
			fmt.Fprintf(out, "DENY (%s, HTTP %d%s): %s\n", d.Invariant, d.Code, retryAfter(&d), d.Message)
			return &exitError{code: 1, err: errors.New("")}
		default:
			fmt.Fprintf(out, "%s (%s, admitted): %s\n", strings.ToUpper(d.Verdict.String()), d.Invariant, d.Message)
		}
		return nil
	}
	return cmd
}

func readObject(path string) (policy.Resource, *policy.Object, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	res, obj, err := leaseobject.DecodeAny(data)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", path, err)
	}
	return res, obj, nil
}

func checkOperation(op string, req *policy.Request) (policy.Operation, error) {
	want := policy.Update
	switch {
	case req.Old == nil:
		want = policy.Create
	case req.New == nil:
		want = policy.Delete
	}
	if op == "" {
		return want, nil
	}
	got := policy.Operation(strings.ToUpper(op))
	switch got {
	case "PATCH":
		got = policy.Update
	case policy.Create, policy.Update, policy.Delete:
	default:
		return "", fmt.Errorf("--operation %q is not CREATE, UPDATE (or PATCH) or DELETE", op)
	}
	if got != want {
		return "", fmt.Errorf("--operation %s does not fit the objects given (%s wants %s)", op, describeObjects(req), want)
	}
	return got, nil
}

func describeObjects(req *policy.Request) string {
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

func kindOf(r policy.Resource) string {
	_, kind, _ := leaseobject.Kind(r)
	return kind
}
