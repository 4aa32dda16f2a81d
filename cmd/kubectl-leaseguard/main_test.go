package main

import (
	"strings"
	"testing"

	"github.com/leaseguard/leaseguard/internal/cli"
)

// run runs `kubectl leaseguard args...` in process as main does.
func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return cli.RunCaptured(newRootCommand(), args...)
}

// top reaches the cluster with kubectl's own flags (genericclioptions),
// and its help and the plugin's say `kubectl leaseguard`.
func TestTopHasKubectlFlags(t *testing.T) {
	stdout, stderr, code := run(t, "top", "--help")
	if code != 0 {
		t.Fatalf("top --help: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"--kubeconfig string", "--context string", "-n, --namespace string", "--as string", "--as-group stringArray",
		"--as-uid string", "--cluster string", "--user string", "-s, --server string", "--token string", "--request-timeout string",
		"-A, --all-namespaces", "--policy string", "kubectl leaseguard top [-A | -n NAMESPACE]", "Exit status: 0 when it ran"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("top --help lacks %q:\n%s", want, stdout)
		}
	}
	stdout, _, _ = run(t, "--help")
	for _, cmd := range []string{"top", "check", "vap", "manifests", "version"} {
		if !strings.Contains(stdout, "\n  "+cmd+" ") {
			t.Errorf("--help does not list %s:\n%s", cmd, stdout)
		}
	}
	if !strings.Contains(stdout, "kubectl leaseguard [command]") {
		t.Errorf("--help does not call the plugin `kubectl leaseguard`:\n%s", stdout)
	}
}

// Every command documents its exit status in its help.
func TestHelpDocumentsExitStatus(t *testing.T) {
	for _, cmd := range []string{"top", "check", "vap", "manifests"} {
		stdout, _, code := run(t, cmd, "--help")
		stdout = strings.Join(strings.Fields(stdout), " ")
		if code != 0 || !strings.Contains(stdout, "Exit status: 0 ") || !strings.Contains(stdout, "; 1 ") ||
			!strings.Contains(stdout, "2 for bad usage or unreadable input") {
			t.Errorf("%s --help (exit %d) does not document the exit status:\n%s", cmd, code, stdout)
		}
	}
}

// `kubectl leaseguard version` and `kubectl leaseguard --version` print the
// version alone: the stamped one, else the one the build info gives.
func TestVersionCommand(t *testing.T) {
	stamped := version
	t.Cleanup(func() { version = stamped })
	for _, tc := range []struct{ stamped, want string }{{"v0.4.0", "v0.4.0"}, {"", cli.Version("")}} {
		version = tc.stamped
		for _, args := range [][]string{{"version"}, {"--version"}} {
			stdout, stderr, code := run(t, args...)
			if code != 0 || stdout != tc.want+"\n" || stderr != "" {
				t.Errorf("stamped %q, %v: exit %d, printed %q (stderr %q), want %q", tc.stamped, args, code, stdout, stderr, tc.want+"\n")
			}
		}
	}
}
