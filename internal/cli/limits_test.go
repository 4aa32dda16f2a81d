package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// longPolicy lists n namespaces in a Lease rule followed by a rule over a
// glob: the namespaceSelector cannot list them, so past a few thousand
// they do not fit the API server's match conditions.
func longPolicy(n int) string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("apps-%05d", i)
	}
	return `apiVersion: leaseguard.io/v1alpha1
kind: LeasePolicy
rules:
- name: apps
  resources: [leases]
  namespaces: [` + strings.Join(names, ", ") + `]
  managers: ["system:serviceaccount:apps:*"]
- name: teams
  resources: [leases]
  namespaces: ["team-*"]
  managers: ["system:serviceaccount:teams:*"]
`
}

// A policy too large for the API server's match conditions is rendered
// broader, never refused by the API server: manifests says so in one line
// naming the rule and the limit (and --strict fails on it), and every
// condition it prints is within the limit; check says so too and still
// decides the write.
func TestLimitsAreSaidWhereThePolicyIsRendered(t *testing.T) {
	f := newFiles(t)
	path := f.write("long.yaml", longPolicy(10000))
	out, stderr, code := runArgs(t, "manifests", "--config", path)
	if code != 0 {
		t.Fatalf("manifests: exit %d: %s", code, stderr)
	}
	want := "leaseguard: warning: rule apps: the namespaces do not fit the API server's match conditions ("
	if !strings.Contains(stderr, want) || !strings.Contains(stderr, "the API server refuses more than 100000") {
		t.Errorf("manifests' standard error lacks %q and the limit:\n%.2000s", want, stderr)
	}
	for _, line := range strings.Split(out, "\n") {
		if n := utf8.RuneCountInString(line); n > 100000 {
			t.Errorf("an output line of %d code points: %.200s", n, line)
		}
	}
	if _, _, code := runArgs(t, "manifests", "--strict", "--config", path); code != 1 {
		t.Errorf("manifests --strict: exit %d, want 1", code)
	}

	newLease := f.write("new.yaml", `apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: leader, namespace: apps-00042}
spec: {holderIdentity: a}
`)
	var errOut strings.Builder
	o := &checkOptions{configPath: path, user: "stranger", newPath: newLease, namespace: "leaseguard-system", errOut: &errOut}
	var verdict strings.Builder
	err := o.run(&verdict)
	if ExitCode(err) != 1 || !strings.HasPrefix(verdict.String(), "DENY") {
		t.Errorf("check: %q, %v: want the stranger's create denied", verdict.String(), err)
	}
	if want := "leaseguard: note: routing broader than the policy: rule apps: the namespaces do not fit"; !strings.Contains(errOut.String(), want) {
		t.Errorf("check's standard error lacks %q:\n%.2000s", want, errOut.String())
	}

	// A policy that fits says nothing.
	errOut.Reset()
	verdict.Reset()
	small := f.write("small.yaml", longPolicy(100))
	o = &checkOptions{configPath: small, user: "stranger", newPath: newLease, namespace: "leaseguard-system", errOut: &errOut}
	_ = o.run(&verdict)
	if strings.Contains(errOut.String(), "routing broader") {
		t.Errorf("check of a policy that fits: %s", errOut.String())
	}
}

// The admission policies are never broadened: vap refuses, in one line
// naming the rule and the limit, what does not fit.
func TestVAPRefusesWhatDoesNotFit(t *testing.T) {
	f := newFiles(t)
	path := f.write("long.yaml", longPolicy(10000))
	_, stderr, code := runArgs(t, "vap", "--config", path)
	if code != 2 || !strings.Contains(stderr, "rule teams: validatingadmissionpolicy leaseguard-teams-leases does not fit the API server's limits") ||
		!strings.Contains(stderr, "100000") || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
		t.Errorf("vap: exit %d: %s", code, stderr)
	}
}

// -o is the output format in every command (yaml only here); a file is
// --output-file. A file name given to -o, as before, is refused with the
// flag to use.
func TestOutputFlagIsTheFormat(t *testing.T) {
	dir := t.TempDir()
	sample := "../../config/samples/policy.yaml"
	for _, cmd := range []string{"manifests", "vap"} {
		file := filepath.Join(dir, cmd+".yaml")
		if _, stderr, code := runArgs(t, cmd, "--config", sample, "-o", file); code != 2 ||
			!strings.Contains(stderr, `--output "`+file+`": the only output format is yaml; to write to a file, use --output-file `+file) {
			t.Errorf("%s -o FILE: exit %d, %s", cmd, code, stderr)
		}
		stdout, _, code := runArgs(t, cmd, "--config", sample, "-o", "yaml")
		if code != 0 || !strings.Contains(stdout, "apiVersion: admissionregistration.k8s.io/v1") {
			t.Errorf("%s -o yaml: exit %d", cmd, code)
		}
		if _, stderr, code := runArgs(t, cmd, "--config", sample, "--output-file", file); code != 0 {
			t.Errorf("%s --output-file: exit %d, %s", cmd, code, stderr)
		}
		written, err := os.ReadFile(file)
		if err != nil || string(written) != stdout {
			t.Errorf("%s --output-file wrote %d bytes (%v), standard output %d", cmd, len(written), err, len(stdout))
		}
	}
}
