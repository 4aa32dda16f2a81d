package policyfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaseguard/leaseguard/webhook/decision/leaseobject"
	"github.com/leaseguard/leaseguard/webhook/decision/policy"
)

var testOpts = policy.CompileOptions{OwnNamespace: "leaseguard-system"}

// validPolicy is a small valid file; its line numbers are referred to below.
const validPolicy = `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
clockSkew: 3s
rules:
- name: kcc-mcl
  resources: [multiclusterleases]
  namespaces: [cnrm-system]
  managers: ["system:serviceaccount:cnrm-system:cnrm-controller-manager-*"]
  designation: auto
  minRenewInterval: 5s
- name: kcc-namespace-leases
  resources: [leases]
  namespaces: [cnrm-system]
  bind:
    manager: "system:serviceaccount:cnrm-system:cnrm-controller-manager-{ns}"
    lease: "kcc-leader-{ns}"
  holderBinding: pod
  minRenewInterval: auto
  enforcement: warn
`

func TestParseValid(t *testing.T) {
	p, err := Parse([]byte(validPolicy), testOpts)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if p.ClockSkew != 3*time.Second {
		t.Errorf("ClockSkew = %v, want 3s", p.ClockSkew)
	}
	if len(p.Rules) != 2 {
		t.Fatalf("%d rules, want 2", len(p.Rules))
	}
	if p.Rules[0].Name != "kcc-mcl" || p.Rules[1].Name != "kcc-namespace-leases" {
		t.Errorf("rule names %q, %q", p.Rules[0].Name, p.Rules[1].Name)
	}
	if r := p.Select(leaseobject.Leases, "cnrm-system", "kcc-leader-a"); r == nil || r.Name != "kcc-namespace-leases" {
		t.Errorf("Select(lease cnrm-system/kcc-leader-a) = %v, want kcc-namespace-leases", r)
	}
}

func TestParseDefaultClockSkew(t *testing.T) {
	src := `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
rules:
- name: r
  resources: [leases]
  managers: [alice]
`
	p, err := Parse([]byte(src), testOpts)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if p.ClockSkew != policy.DefaultClockSkew {
		t.Errorf("ClockSkew = %v, want the default %v", p.ClockSkew, policy.DefaultClockSkew)
	}
}

func TestParseErrors(t *testing.T) {
	const head = "apiVersion: leaseguard.io/v1alpha1\nkind: LeasePolicy\n"
	tests := []struct {
		name string
		src  string
		// want are substrings of the error, in order; exact is the whole
		// error when set.
		want  []string
		exact string
	}{
		{
			name: "misspelt rule field",
			src: head + `rules:
- name: r
  resources: [leases]
  namespaces: [team-a]
  managerz: [alice]
`,
			exact: "1 problem(s):\n  line 7: field managerz not found in type v1alpha1.Rule",
		},
		{
			name: "misspelt top-level field",
			src: head + `clockskew: 2s
rules:
- name: r
  resources: [leases]
  managers: [alice]
`,
			exact: "1 problem(s):\n  line 3: field clockskew not found in type v1alpha1.LeasePolicy",
		},
		{
			name: "misspelt bind field",
			src: head + `rules:
- name: r
  resources: [leases]
  bind:
    manager: "m-{x}"
    leases: "l-{x}"
`,
			exact: "1 problem(s):\n  line 8: field leases not found in type v1alpha1.Bind",
		},
		{
			name: "several unknown fields all reported",
			src: head + `rules:
- name: r
  resources: [leases]
  managerz: [alice]
  namespace: [team-a]
- name: s
  resources: [leases]
  managers: [bob]
  enforce: warn
`,
			exact: "3 problem(s):\n" +
				"  line 6: field managerz not found in type v1alpha1.Rule\n" +
				"  line 7: field namespace not found in type v1alpha1.Rule\n" +
				"  line 11: field enforce not found in type v1alpha1.Rule",
		},
		{
			name: "bad clockSkew duration",
			src: head + `clockSkew: 5 seconds
rules:
- name: r
  resources: [leases]
  managers: [alice]
`,
			exact: `line 3: "5 seconds" is not a duration (want e.g. "5s", "1m")`,
		},
		{
			name: "bad minRenewInterval duration",
			src: head + `rules:
- name: r
  resources: [leases]
  managers: [alice]
  minRenewInterval: 5 seconds
`,
			exact: `line 7: minRenewInterval "5 seconds" is neither "auto" nor a duration such as "5s"`,
		},
		{
			name: "minRenewInterval not a scalar",
			src: head + `rules:
- name: r
  resources: [leases]
  managers: [alice]
  minRenewInterval: [5s]
`,
			exact: `line 7: minRenewInterval wants a duration such as "5s" or "auto"`,
		},
		{
			name: "second document",
			src: head + `rules:
- name: r
  resources: [leases]
  managers: [alice]
---
apiVersion: leaseguard.io/v1alpha1
`,
			exact: "line 7: a policy file holds one document; found another",
		},
		{
			name: "second document after a comment",
			src: head + `rules:
- name: r
  resources: [leases]
  managers: [alice]
# the next one
---
kind: LeasePolicy
`,
			exact: "line 8: a policy file holds one document; found another",
		},
		{
			name:  "empty file",
			src:   "",
			exact: "empty file: want apiVersion leaseguard.io/v1alpha1, kind LeasePolicy",
		},
		{
			name:  "blank file",
			src:   " \n\t\n\n",
			exact: "empty file: want apiVersion leaseguard.io/v1alpha1, kind LeasePolicy",
		},
		{
			name: "validation: one problem with its line",
			src: head + `rules:
- name: r
  resources: [leases]
  managers: [alice]
  minRenewInterval: -5s
`,
			exact: "1 problem(s):\n  line 7: rules[0].minRenewInterval: Invalid value: \"-5s\": must not be negative",
		},
		{
			name: "validation: all problems at once with lines and count",
			src: head + `rules:
- name: kcc-mcl
  resources: [multiclusterleases]
  namespaces: [cnrm-system]
  managers: [alice]
- name: kcc-mcl
  resources: [leasez]
  managers: [bob]
  minRenewInterval: -5s
`,
			want: []string{
				"3 problem(s):\n",
				"\n  line 9: rules[1].resources[0]: Unsupported value: \"leasez\"",
				"\n  line 11: rules[1].minRenewInterval: Invalid value: \"-5s\": must not be negative",
				"\n  line 8: rules[1].name: Duplicate value: \"kcc-mcl (also rules[0])\"",
			},
		},
		{
			name: "validation: minRenewInterval too long",
			src: head + `rules:
- name: a
  resources: [leases]
  managers: [alice]
- name: b
  resources: [multiclusterleases]
  managers: [alice]
  minRenewInterval: 15s
`,
			exact: "1 problem(s):\n  line 10: rules[1].minRenewInterval: Invalid value: \"15s\": clients with leaseDuration 15s, renewDeadline 10s, retryPeriod 2s" +
				" would lose their lease: a renewal held back that long misses the renew deadline (with clockSkew 2s); use at most 8s or \"auto\"," +
				" or, if the clients renew with longer timings, declare them in assumedClient",
		},
		{
			name: "validation: minRenewInterval too long for the clockSkew",
			src: head + `clockSkew: 3s
rules:
- name: a
  resources: [leases]
  managers: [alice]
  minRenewInterval: 7.5s
`,
			want: []string{"1 problem(s):\n  line 8: rules[0].minRenewInterval: Invalid value: \"7.5s\": clients with leaseDuration 15s", "(with clockSkew 3s); use at most 7s"},
		},
		{
			name: "validation: assumedClient leaves no room",
			src: head + `rules:
- name: a
  resources: [leases]
  managers: [alice]
  minRenewInterval: auto
  assumedClient: {leaseDuration: 5s, renewDeadline: 2s, retryPeriod: 1s}
`,
			exact: "1 problem(s):\n  line 8: rules[0].assumedClient: Invalid value: \"5s/2s/1s\": leaves no room for rate limiting with clockSkew 2s:" +
				" the longest interval these clients survive, min(renewDeadline + retryPeriod, leaseDuration) - 2s - clockSkew, is -1s; drop minRenewInterval or lower clockSkew",
		},
		{
			// Under a 2m skew client-go's default timings would leave no
			// room; the rule is judged with the default 2s instead.
			name: "validation: clockSkew out of range",
			src: head + `clockSkew: 2m
rules:
- name: r
  resources: [leases]
  managers: [alice]
  minRenewInterval: auto
`,
			exact: "1 problem(s):\n  line 3: clockSkew: Invalid value: \"2m0s\": must be between 0s and 1m",
		},
		{
			name: "validation: missing field falls back to the rule's line",
			src: head + `rules:
- name: r
  resources: [leases]
  managers: [alice]
- name: only-operators
  resources: [multiclusterleases]
  operators: [admin]
`,
			want: []string{"1 problem(s):\n  line 7: rules[1].managers: Required value: matches nothing"},
		},
		{
			name: "validation: shadowed rule",
			src: head + `rules:
- name: all
  resources: [leases]
  managers: [alice]
- name: team-a
  resources: [leases]
  namespaces: [team-a]
  managers: [bob]
`,
			want: []string{"1 problem(s):\n  line 7: rules[1]: Invalid value: \"team-a\": matches nothing: rule \"all\" (rules[0]) comes first"},
		},
		{
			name: "validation: wrong apiVersion and kind, no rules",
			src: `apiVersion: leaseguard.io/v1
kind: LeasePolicies
rules: []
`,
			want: []string{
				"3 problem(s):\n",
				"  line 1: apiVersion: Unsupported value: \"leaseguard.io/v1\"",
				"  line 2: kind: Unsupported value: \"LeasePolicies\"",
				"  line 3: rules: Required value: a policy needs at least one rule",
			},
		},
		{
			name: "validation: absent apiVersion has no line",
			src: `kind: LeasePolicy
rules:
- name: r
  resources: [leases]
  managers: [alice]
`,
			exact: "1 problem(s):\n  apiVersion: Unsupported value: \"\": supported values: \"leaseguard.io/v1alpha1\"",
		},
		{
			name: "wrong YAML type names the line",
			src: head + `rules:
- name: r
  resources: leases
  managers: [alice]
`,
			exact: "1 problem(s):\n  line 5: cannot unmarshal !!str `leases` into []string",
		},
		{
			name: "duplicate key",
			src: head + `rules:
- name: r
  resources: [leases]
  name: s
  managers: [alice]
`,
			exact: "1 problem(s):\n  line 6: mapping key \"name\" already defined at line 4",
		},
		{
			name: "YAML syntax error",
			src: head + `rules:
- name: r
  resources: [leases]
	managers: [alice]
`,
			exact: "yaml: line 6: found character that cannot start any token",
		},
		{
			name: "YAML syntax error: unterminated quote",
			src: head + `rules:
- name: "r
  resources: [leases]
`,
			want: []string{"yaml: line ", "found unexpected end of stream"},
		},
		{
			name: "not a mapping",
			src:  "- a\n- b\n",
			want: []string{"1 problem(s):\n  line 1: cannot unmarshal !!seq into v1alpha1.LeasePolicy"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.src), testOpts)
			if err == nil {
				t.Fatalf("Parse succeeded (%d rules), want an error", len(p.Rules))
			}
			if p != nil {
				t.Errorf("Parse returned a policy with its error")
			}
			msg := err.Error()
			if tc.exact != "" && msg != tc.exact {
				t.Fatalf("error:\n%s\nwant:\n%s", msg, tc.exact)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error:\n%s\ndoes not contain %q", msg, w)
				}
			}
		})
	}
}

func TestParseMinRenewIntervalAuto(t *testing.T) {
	// Values as written in the file.
	for _, v := range []string{"auto", "AUTO", `"auto"`, `" Auto "`} {
		src := `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
rules:
- name: r
  resources: [leases]
  managers: [alice]
  minRenewInterval: ` + v + "\n"
		p, err := Parse([]byte(src), testOpts)
		if err != nil {
			t.Errorf("minRenewInterval %s: %v", v, err)
			continue
		}
		if len(p.Rules) != 1 || p.Rules[0].Name != "r" {
			t.Errorf("minRenewInterval %s: rules %v", v, p.Rules)
		}
	}
}

// A second document is rejected even when it is not valid YAML: it must not
// be silently ignored.
func TestParseSecondDocumentWithSyntaxError(t *testing.T) {
	src := `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
rules:
- name: r
  resources: [leases]
  managers: [alice]
---
rules: [unterminated
`
	p, err := Parse([]byte(src), testOpts)
	if err == nil {
		t.Fatalf("Parse accepted a file with a broken second document (%d rules)", len(p.Rules))
	}
	if !strings.Contains(err.Error(), "line 7") && !strings.Contains(err.Error(), "line 8") {
		t.Errorf("error %q does not name line 7 or 8", err)
	}
}

// A file with only comments has no policy in it; the error should say so
// rather than a bare "EOF".
func TestParseCommentsOnly(t *testing.T) {
	_, err := Parse([]byte("# policy to come\n# later\n"), testOpts)
	if err == nil {
		t.Fatal("Parse accepted a file with only comments")
	}
	if msg := err.Error(); msg == "EOF" || !strings.Contains(msg, "empty") {
		t.Errorf("error %q, want one saying the file is empty", msg)
	}
}

func TestParseOwnNamespace(t *testing.T) {
	src := `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
rules:
- name: r
  resources: [leases]
  namespaces: [guard-ns, kube-system]
  managers: [alice]
`
	_, err := Parse([]byte(src), policy.CompileOptions{OwnNamespace: "guard-ns"})
	if err == nil {
		t.Fatal("Parse accepted a rule selecting only never-intercepted namespaces")
	}
	want := "1 problem(s):\n  line 6: rules[0].namespaces: Invalid value:"
	if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "matches nothing: leaseguard is never called for kube-system, kube-node-lease, guard-ns") {
		t.Errorf("error %q, want prefix %q and the namespaces listed", err, want)
	}
	// The same file is valid when leaseguard runs in another namespace: the
	// rule then selects guard-ns.
	if _, err := Parse([]byte(src), testOpts); err != nil {
		t.Errorf("with own namespace leaseguard-system: %v", err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()

	t.Run("valid", func(t *testing.T) {
		path := filepath.Join(dir, "policy.yaml")
		writeFile(t, path, validPolicy)
		p, data, err := Load(path, testOpts)
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		if string(data) != validPolicy {
			t.Errorf("Load returned data %q, want the file's content", data)
		}
		if len(p.Rules) != 2 || p.Rules[1].Name != "kcc-namespace-leases" {
			t.Errorf("rules %v", p.Rules)
		}
	})

	t.Run("missing file names the path", func(t *testing.T) {
		path := filepath.Join(dir, "nope.yaml")
		_, _, err := Load(path, testOpts)
		if err == nil {
			t.Fatal("Load of a missing file succeeded")
		}
		if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "no such file or directory") {
			t.Errorf("error %q does not name %s and the cause", err, path)
		}
		if !os.IsNotExist(unwrapAll(err)) {
			t.Errorf("error %q does not wrap a not-exist error", err)
		}
	})

	t.Run("invalid file names the path and the problem", func(t *testing.T) {
		path := filepath.Join(dir, "bad.yaml")
		writeFile(t, path, "apiVersion: leaseguard.io/v1alpha1\nkind: LeasePolicy\nrules:\n- name: r\n  resources: [leases]\n  managerz: [a]\n")
		p, data, err := Load(path, testOpts)
		if err == nil {
			t.Fatal("Load of an invalid file succeeded")
		}
		if p != nil {
			t.Error("Load returned a policy with its error")
		}
		if len(data) == 0 {
			t.Error("Load did not return the data of an invalid file")
		}
		want := "policy file " + path + ": 1 problem(s):\n  line 6: field managerz not found in type v1alpha1.Rule"
		if err.Error() != want {
			t.Errorf("error:\n%s\nwant:\n%s", err, want)
		}
	})

	t.Run("empty file names the path", func(t *testing.T) {
		path := filepath.Join(dir, "empty.yaml")
		writeFile(t, path, "")
		_, _, err := Load(path, testOpts)
		want := "policy file " + path + ": empty file: want apiVersion leaseguard.io/v1alpha1, kind LeasePolicy"
		if err == nil || err.Error() != want {
			t.Errorf("error %v, want %q", err, want)
		}
	})

	t.Run("larger than MaxFileSize", func(t *testing.T) {
		path := filepath.Join(dir, "huge.yaml")
		writeFile(t, path, validPolicy+"#"+strings.Repeat("x", MaxFileSize)+"\n")
		_, _, err := Load(path, testOpts)
		want := "policy file " + path + ": larger than 1048576 bytes"
		if err == nil || err.Error() != want {
			t.Errorf("error %v, want %q", err, want)
		}
	})

	t.Run("exactly MaxFileSize is read", func(t *testing.T) {
		path := filepath.Join(dir, "max.yaml")
		pad := MaxFileSize - len(validPolicy) - 2
		content := validPolicy + "#" + strings.Repeat("x", pad) + "\n"
		if len(content) != MaxFileSize {
			t.Fatalf("test content is %d bytes", len(content))
		}
		writeFile(t, path, content)
		p, _, err := Load(path, testOpts)
		if err != nil {
			t.Fatalf("Load of a %d-byte file: %v", MaxFileSize, err)
		}
		if len(p.Rules) != 2 {
			t.Errorf("%d rules, want 2", len(p.Rules))
		}
	})

	t.Run("directory", func(t *testing.T) {
		_, _, err := Load(dir, testOpts)
		if err == nil || !strings.Contains(err.Error(), dir) {
			t.Errorf("error %v, want one naming %s", err, dir)
		}
	})
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}
