package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runVAP runs `leaseguard vap args...` in process and returns its standard
// output and error and the exit code main would use.
func runVAP(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append([]string{"vap"}, args...))
	if err := root.Execute(); err != nil {
		code = exitCode(err)
		errOut.WriteString(err.Error())
	}
	return out.String(), errOut.String(), code
}

const boundOnly = `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
rules:
- name: bound
  resources: [leases]
  namespaces: [apps]
  bind:
    manager: "system:serviceaccount:apps:elector-{id}"
    lease: "leader-{id}"
  holderBinding: pod
`

// What the policies cannot enforce is named on standard error and in the
// output, and makes --strict fail; a policy they enforce whole passes it.
func TestVAPCommandNamesItsLimits(t *testing.T) {
	f := newFiles(t)
	out, stderr, code := runVAP(t, "--config", f.policy())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"leaseguard: warning: rule kcc-mcl: unsupported (I6, minRenewInterval): ",
		"leaseguard: warning: rule kcc-mcl: unsupported (designation: auto): nothing stamps the designation",
		"leaseguard: warning: rule kcc-mcl: partial (I2, designation: auto): a DELETE carries no server clock",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("standard error lacks %q:\n%s", want, stderr)
		}
	}
	if !strings.Contains(out, "# LIMIT: rule kcc-mcl: unsupported (I6, minRenewInterval)") || !strings.Contains(out, "kind: ValidatingAdmissionPolicyBinding") {
		t.Errorf("output lacks the limits or the bindings")
	}
	if _, stderr, code := runVAP(t, "--config", f.policy(), "--strict"); code != 1 || !strings.Contains(stderr, "do not enforce as leaseguard's webhook does (--strict)") {
		t.Errorf("--strict with limits: exit %d, %s", code, stderr)
	}
	whole := f.write("bound.yaml", boundOnly)
	outPath := filepath.Join(f.dir, "vap.yaml")
	stdout, stderr, code := runVAP(t, "--config", whole, "--strict", "-o", outPath)
	if code != 0 || stdout != "" || strings.Contains(stderr, "warning") {
		t.Fatalf("--strict on a policy enforced whole: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	data, err := os.ReadFile(outPath)
	if err != nil || !strings.Contains(string(data), "name: leaseguard-bound-leases") {
		t.Errorf("-o wrote %q (%v)", data, err)
	}
}

func TestVAPCommandBadInputExits2(t *testing.T) {
	f := newFiles(t)
	bad := f.write("bad.yaml", "apiVersion: leaseguard.io/v1alpha1\nkind: LeasePolicy\nrules:\n- name: r\n  resources: [leases]\n  bogus: 1\n")
	for name, args := range map[string][]string{
		"no config":    {},
		"missing file": {"--config", filepath.Join(f.dir, "absent.yaml")},
		"invalid file": {"--config", bad},
		"unknown flag": {"--config", f.policy(), "--bogus"},
		"empty prefix": {"--config", f.policy(), "--prefix", ""},
		"positional":   {"--config", f.policy(), "extra"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, stderr, code := runVAP(t, args...); code != 2 {
				t.Errorf("exit %d, want 2: %s", code, stderr)
			}
		})
	}
}
