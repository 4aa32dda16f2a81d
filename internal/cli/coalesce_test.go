package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// runArgs runs the test root on args as the binaries' main does
// (NormalizeArgs included) and returns what it printed and its exit status.
func runArgs(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	code = Run(root, args, &errOut)
	return out.String(), errOut.String(), code
}

// --coalesce is one flag type: the same values, spelt the same way, in
// manifests and vap; vap, which renders no webhook, takes policy and off.
// The bare form (vap's old bool) means policy.
func TestCoalesceMeansTheSameEverywhere(t *testing.T) {
	// The sample policy coalesces renewals (coalesceRenewals).
	sample := filepath.Join("..", "..", "config", "samples", "policy.yaml")
	const mapKind = "kind: MutatingAdmissionPolicy\n"
	vap := func(args ...string) (string, string, int) {
		return runArgs(t, append([]string{"vap", "--config", sample}, args...)...)
	}
	for name, tc := range map[string]struct {
		args      []string
		coalesces bool
	}{
		"default off":       {nil, false},
		"bare (old bool)":   {[]string{"--coalesce"}, true},
		"bare, then a flag": {[]string{"--coalesce", "--static-messages"}, true},
		"=policy":           {[]string{"--coalesce=policy"}, true},
		"policy":            {[]string{"--coalesce", "policy"}, true},
		"=off":              {[]string{"--coalesce=off"}, false},
		"off":               {[]string{"--coalesce", "off"}, false},
	} {
		t.Run("vap "+name, func(t *testing.T) {
			out, stderr, code := vap(tc.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			if got := strings.Contains(out, mapKind); got != tc.coalesces {
				t.Errorf("renders the coalescing policy: %v, want %v", got, tc.coalesces)
			}
		})
	}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"=true":   {[]string{"--coalesce=true"}, `--coalesce is no longer a bool; write --coalesce=policy for --coalesce=true, --coalesce=off for --coalesce=false`},
		"=false":  {[]string{"--coalesce=false"}, `write --coalesce=policy for --coalesce=true, --coalesce=off for --coalesce=false`},
		"webhook": {[]string{"--coalesce", "webhook"}, `invalid argument "webhook" for "--coalesce" flag: want policy or off`},
		"bogus":   {[]string{"--coalesce=bogus"}, `want policy or off`},
	} {
		t.Run("vap "+name, func(t *testing.T) {
			if _, stderr, code := vap(tc.args...); code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, want 2, stderr %q, want %q", code, stderr, tc.want)
			}
		})
	}

	manifests := func(args ...string) (string, string, int) {
		return runArgs(t, append([]string{"manifests", "--config", sample}, args...)...)
	}
	policyOut, _, code := manifests()
	if code != 0 || !strings.Contains(policyOut, mapKind) {
		t.Fatalf("manifests: exit %d; the default (policy) renders no MutatingAdmissionPolicy", code)
	}
	for _, args := range [][]string{{"--coalesce"}, {"--coalesce=policy"}, {"--coalesce", "policy"}} {
		if out, stderr, code := manifests(args...); code != 0 || out != policyOut {
			t.Errorf("manifests %v: exit %d (%s), or not the rendering of --coalesce=policy", args, code, stderr)
		}
	}
	for _, c := range []string{"webhook", "off"} {
		out, stderr, code := manifests("--coalesce", c)
		if code != 0 || strings.Contains(out, mapKind) {
			t.Errorf("manifests --coalesce %s: exit %d (%s), or renders a MutatingAdmissionPolicy", c, code, stderr)
		}
	}
	if _, stderr, code := manifests("--coalesce=true"); code != 2 || !strings.Contains(stderr, "want policy or webhook or off: --coalesce is no longer a bool") {
		t.Errorf("manifests --coalesce=true: exit %d, %q", code, stderr)
	}
}

// manifests exits as the other commands do: 2 for bad usage or input, 1
// only for --strict.
func TestManifestsExitStatus(t *testing.T) {
	f := newFiles(t)
	bad := f.write("bad.yaml", "apiVersion: leaseguard.io/v1alpha1\nkind: LeasePolicy\nrules:\n- name: r\n  resources: [leases]\n  bogus: 1\n")
	for name, args := range map[string][]string{
		"no config":       {},
		"missing file":    {"--config", f.dir + "/absent.yaml"},
		"invalid file":    {"--config", bad},
		"unknown flag":    {"--config", f.policy(), "--bogus"},
		"positional":      {"--config", f.policy(), "extra"},
		"timeout":         {"--config", f.policy(), "--timeout-seconds", "9"},
		"missing CA file": {"--config", f.policy(), "--ca-bundle-file", f.dir + "/absent.pem"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, stderr, code := runArgs(t, append([]string{"manifests"}, args...)...); code != 2 {
				t.Errorf("exit %d, want 2: %s", code, stderr)
			}
		})
	}
	if _, stderr, code := runArgs(t, "manifests", "--config", f.policy()); code != 0 {
		t.Errorf("exit %d: %s", code, stderr)
	}
}

func TestNormalizeArgs(t *testing.T) {
	for in, want := range map[string]string{
		"vap --coalesce":                  "vap --coalesce=policy",
		"vap --coalesce -o x":             "vap --coalesce=policy -o x",
		"vap --coalesce off":              "vap --coalesce off",
		"vap --coalesce=off":              "vap --coalesce=off",
		"manifests --config p --coalesce": "manifests --config p --coalesce=policy",
		"check -- --coalesce":             "check -- --coalesce",
	} {
		if got := strings.Join(NormalizeArgs(strings.Fields(in)), " "); got != want {
			t.Errorf("NormalizeArgs(%s) = %s, want %s", in, got, want)
		}
	}
}
