package topcmd

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
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
		{[]string{"-o", "xml"}, `-o "xml": want table, wide, json, yaml or one of go-template, go-template-file, jsonpath, jsonpath-as-json, jsonpath-file, template, templatefile`, 2},
		{[]string{"-o", "jsonpath={.leases[}"}, "-o jsonpath={.leases[}: error parsing jsonpath", 2},
		{[]string{"--template", "{{.leases"}, "-o go-template: error parsing template", 2},
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

// An error of the API server can quote what a client wrote; top prints it
// to the operator's terminal escaped, as it prints the leases, and keeps
// its exit status.
func TestTopEscapesTheAPIServersErrors(t *testing.T) {
	const hostile = "\x1b]0;pwned\x1b\\\x1b[2J \u009b2J evil\u202eredloh"
	status, err := json.Marshal(map[string]any{
		"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
		"message": `leases.coordination.k8s.io is forbidden: User "` + hostile + `" cannot list resource "leases"`,
	})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write(status)
	}))
	defer api.Close()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+api.URL+`"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := cli.RunCaptured(newRootCommand(), "top", "--kubeconfig", kubeconfig, "-n", "team-a", "--once", "--resource", "leases")
	// Escaped whole, as Go quotes it: the quotes too, so that a quote the
	// client wrote cannot pass for the message's own.
	want := `leaseguard: cannot list leases.coordination.k8s.io in namespace team-a: leaseguard top needs list and watch on it: ` +
		`leases.coordination.k8s.io is forbidden: User \"\x1b]0;pwned\x1b\\\x1b[2J \u009b2J evil\u202eredloh\" cannot list resource \"leases\"` + "\n"
	if code != cli.ExitRefused || stdout != "" || stderr != want {
		t.Fatalf("exit %d, stdout %q, stderr\n%q\nwant exit 1 and\n%q", code, stdout, stderr, want)
	}
}
