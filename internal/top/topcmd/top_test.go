package topcmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/leaseguard/leaseguard/internal/cli"
)

// newRootCommand is a root with top, prepared as the plugin prepares its
// own.
func newRootCommand() *cobra.Command {
	root := &cobra.Command{Use: "kubectl-leaseguard"}
	root.AddCommand(New("v0.0.0-test"))
	cli.Prepare(root)
	return root
}

// Bad flags and files are refused before any cluster is contacted, with a
// message naming what is wrong.
func TestTopRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	badPolicy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(badPolicy, []byte("apiVersion: leaseguard.io/v1alpha1\nkind: LeasePolicy\nrules: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Points at a server that does not exist: a test that got past the
	// flags would fail on it rather than touch a cluster.
	unreachable := filepath.Join("..", "..", "..", "hack", "unreachable-kubeconfig.yaml")
	// Exit status (the command's help): 2 for bad usage or unreadable
	// input, 1 when the cluster cannot serve the watch.
	cases := []struct {
		args []string
		want string
		code int
	}{
		{[]string{"-o", "xml"}, `-o "xml": want table, wide, json or yaml`, 2},
		{[]string{"--sort", "speed"}, `--sort "speed": want one of rate, name, expiry, writers, interval, projected`, 2},
		{[]string{"--resource", "pods"}, `--resource "pods": want leases, multiclusterleases or all`, 2},
		{[]string{"--window", "500ms"}, "--window 500ms: want at least 1s", 2},
		{[]string{"--interval", "0s"}, "--interval 0s: want a positive duration", 2},
		{[]string{"--limit", "-1"}, "--limit -1: want 0 (all) or more", 2},
		{[]string{"-A", "-n", "x"}, "-A and -n are exclusive: -A watches every namespace", 2},
		{[]string{"--policy", badPolicy}, "policy file " + badPolicy + ": ", 2},
		{[]string{"--policy", filepath.Join(dir, "missing.yaml")}, "policy file: open " + filepath.Join(dir, "missing.yaml"), 2},
		{[]string{"--kubeconfig", filepath.Join(dir, "nokubeconfig")}, "kubeconfig: ", 2},
		{[]string{"--bogus"}, "unknown flag: --bogus", 2},
		{[]string{"extra"}, `unknown command "extra"`, 2},
		{[]string{"--kubeconfig", unreachable, "-A", "--once", "--resource", "leases"}, "listing leases.coordination.k8s.io in all namespaces: ", 1},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cmd := newRootCommand()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs(append([]string{"top"}, tc.args...))
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
			if code := cli.ExitCode(err); code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			if out.Len() != 0 && !strings.HasPrefix(out.String(), "leaseguard top:") {
				t.Fatalf("printed %q", out.String())
			}
		})
	}
}
